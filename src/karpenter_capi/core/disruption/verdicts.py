"""Why each managed node goes or stays after a disruption pass, in words for a user.

The planner keeps, per candidate, why the consolidation methods kept it (``PassReport.kept``)
and, per other NodeClaim, why it is not a candidate (``PassReport.excluded``). This module joins
those with the cluster so that the two places showing them say the same thing: the
``Unconsolidatable`` Events the disruption controller records on a kept node and its NodeClaim,
and ``karpenter-capi explain``. Nothing here decides anything; a reason missing from the report
is said to be missing, never guessed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.api.duration import format_duration
from karpenter_capi.core.api.nodeclaim import NodeClaimConditionType
from karpenter_capi.core.api.nodepool import NodePool
from karpenter_capi.core.disruption.candidates import condition_true
from karpenter_capi.core.disruption.conditions import consolidatable_at
from karpenter_capi.core.disruption.planner import PassReport
from karpenter_capi.core.provisioning.state import ClusterSnapshot, has_disrupted_taint

DISRUPT: Final = "disrupt"
KEPT: Final = "kept"
NOT_A_CANDIDATE: Final = "not a candidate"
LEAVING: Final = "leaving"
NOT_EVALUATED: Final = "not evaluated"
"""A consolidatable candidate the pass never judged (it stopped at an earlier command)."""
UNCONSOLIDATABLE: Final = "Unconsolidatable"
"""The Event reason upstream Karpenter gives a consolidatable node it keeps."""


@dataclass(frozen=True)
class NodeVerdict:
    """One NodeClaim after a pass: its verdict and the reason, as the planner found it."""

    nodeclaim: str
    node: str
    nodepool: str
    verdict: str
    reason: str
    consolidatable: bool
    """The NodeClaim's ``Consolidatable`` condition is True: it has been quiet long enough."""
    claim_object: Mapping[str, Any] = field(compare=False, repr=False, default_factory=dict)
    node_object: Mapping[str, Any] | None = field(compare=False, repr=False, default=None)

    @property
    def unconsolidatable(self) -> bool:
        """A node disruption could consolidate by now, but keeps: worth an Event saying why."""
        return self.consolidatable and self.verdict in (KEPT, NOT_A_CANDIDATE)

    def as_dict(self) -> dict[str, Any]:
        return {
            "nodeclaim": self.nodeclaim,
            "node": self.node,
            "nodepool": self.nodepool,
            "verdict": self.verdict,
            "reason": self.reason,
            "consolidatable": self.consolidatable,
        }


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _not_consolidatable_yet(claim: Mapping[str, Any], pool: NodePool | None, now: datetime) -> str:
    """Why a candidate without the ``Consolidatable`` condition is not consolidated."""
    if pool is None:
        return "not consolidatable"
    if pool.is_static:
        return (
            f"NodePool {pool.name} is static (replicas {pool.spec.replicas}): "
            "its nodes are never consolidated"
        )
    after = pool.spec.disruption.consolidate_after
    if after.is_never:
        return "consolidateAfter is Never"
    ready = consolidatable_at(claim, pool, now=now)
    if ready is None or ready <= now:
        return "consolidateAfter has elapsed; waiting for the Consolidatable condition"
    # Whole seconds, rounded up: "0s left" would read as "now".
    left = format_duration(timedelta(seconds=math.ceil((ready - now).total_seconds())))
    return f"consolidateAfter {after} not elapsed yet: {left} left"


def node_verdicts(
    report: PassReport,
    snapshot: ClusterSnapshot,
    pools: Mapping[str, NodePool],
    now: datetime,
) -> list[NodeVerdict]:
    """Every NodeClaim of ``snapshot`` with what ``report`` decided for it, by name."""
    in_command = (
        {c.name: report.command for c in report.command.candidates} if report.command else {}
    )
    candidates = {c.name for c in report.candidates}
    nodes = {str(_meta(n).get("name")): n for n in snapshot.nodes}
    result = []
    for claim in sorted(snapshot.nodeclaims, key=lambda c: str(_meta(c).get("name"))):
        name = str(_meta(claim).get("name"))
        node_name = str((claim.get("status") or {}).get("nodeName") or "")
        node = nodes.get(node_name)
        pool_name = str((_meta(claim).get("labels") or {}).get(wellknown.LABEL_NODEPOOL, ""))
        consolidatable = condition_true(claim, NodeClaimConditionType.CONSOLIDATABLE)
        if name in in_command:
            verdict, reason = DISRUPT, in_command[name].describe()
        elif name in report.kept:
            verdict, reason = KEPT, report.kept[name]
        elif name in candidates:
            verdict = KEPT
            if not consolidatable:
                reason = _not_consolidatable_yet(claim, pools.get(pool_name), now)
            else:
                # No reason was recorded, so none is given: the next pass will judge it.
                verdict = NOT_EVALUATED
                reason = (
                    "the pass chose another command first"
                    if report.command is not None
                    else "no consolidation method judged it"
                )
        elif name in report.excluded:
            going = bool(
                _meta(claim).get("deletionTimestamp")
                or (node is not None and _meta(node).get("deletionTimestamp"))
                or (node is not None and has_disrupted_taint(node))
            )
            verdict = LEAVING if going else NOT_A_CANDIDATE
            reason = report.excluded[name]
        else:
            verdict, reason = NOT_A_CANDIDATE, "not seen by the pass"
        result.append(
            NodeVerdict(
                nodeclaim=name,
                node=node_name,
                nodepool=pool_name,
                verdict=verdict,
                reason=reason,
                consolidatable=consolidatable,
                claim_object=claim,
                node_object=node,
            )
        )
    return result
