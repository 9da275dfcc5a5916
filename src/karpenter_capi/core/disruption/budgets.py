"""How many more nodes of each NodePool may be disrupted now, for each reason.

A NodePool's ``spec.disruption.budgets`` cap the nodes disrupting at once: per reason
(``Empty``, ``Drifted``, ``Underutilized``; a budget without reasons caps them all), as a count
or a percentage of the NodePool's nodes (rounded up), each budget active always or for
``duration`` after every hit of its cron ``schedule`` (UTC). The most restrictive active budget
wins, and nodes already disrupting (deleting, or tainted by a command under way) count against
it, as upstream Karpenter's ``BuildDisruptionBudgetMapping``; so do nodes that are not
``Ready`` (they are disrupted already, in effect). Expiration ignores budgets.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from karpenter_capi.core.api.nodepool import DisruptionReason, NodePool
from karpenter_capi.core.disruption.passfacts import PassFacts


class BudgetLedger:
    """The allowance of every NodePool and reason for one pass, spent as commands are made."""

    def __init__(
        self,
        pools: Mapping[str, NodePool],
        nodeclaims: Iterable[Mapping[str, Any]],
        nodes: Iterable[Mapping[str, Any]],
        now: datetime,
        *,
        facts: PassFacts | None = None,
    ) -> None:
        """``facts``: what earlier passes read of each object version (``passfacts.PassFacts``)."""
        facts = facts if facts is not None else PassFacts()
        node_by_name = {str(n["metadata"]["name"]): f for n, f in facts.nodes(nodes)}
        total: dict[str, int] = {}
        disrupting: dict[str, int] = {}
        for _, claim in facts.claims(nodeclaims):
            if claim.nodepool not in pools:
                continue
            node = node_by_name.get(claim.node_name)
            if node is None or not claim.initialized:
                continue
            total[claim.nodepool] = total.get(claim.nodepool, 0) + 1
            if claim.deleting or node.deleting or node.disrupted or not node.ready:
                disrupting[claim.nodepool] = disrupting.get(claim.nodepool, 0) + 1
        self._allowed: dict[tuple[str, DisruptionReason], int] = {}
        for name, pool in pools.items():
            for reason in DisruptionReason:
                allowed = pool.spec.disruption.allowed_disruptions(now, total.get(name, 0), reason)
                self._allowed[(name, reason)] = max(0, allowed - disrupting.get(name, 0))

    def allowed(self, nodepool: str, reason: DisruptionReason) -> int:
        return self._allowed.get((nodepool, reason), 0)

    def spend(self, nodepool: str, count: int = 1) -> None:
        """Count ``count`` more nodes of ``nodepool`` as disrupting, for every reason."""
        for (pool, reason), allowed in list(self._allowed.items()):
            if pool == nodepool:
                self._allowed[(pool, reason)] = max(0, allowed - count)

    def snapshot(self) -> dict[str, dict[str, int]]:
        """``{nodepool: {reason: allowed}}`` for reports."""
        result: dict[str, dict[str, int]] = {}
        for (pool, reason), allowed in sorted(self._allowed.items()):
            result.setdefault(pool, {})[reason.value] = allowed
        return result
