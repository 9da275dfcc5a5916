"""A round's plan, written where a restarted controller finds it and finishes it.

A round solves every pending pod at once, then creates its NodeClaims one after the other (or
``create_concurrency`` at a time). A process killed part way through leaves some of the plan's
NodeClaims created and the rest nowhere: the next process found the created ones (their
``nominated-pods``) but solved the pods of the missing ones afresh, apart from the pods they had
been planned with, and fragmented them. In the simulated 1,000-pod scale-up (137 NodeClaims in
one round) a kill after the 18th create cost 63 NodeClaims more than the uninterrupted run, and
one after the 59th cost 9: more nodes, then consolidation replacing them.

So every NodeClaim of a round of several carries ``karpenter.cluster.x-k8s.io/plan``
(``<plan id>/<index>/<count>``), and the round's first one, created before the others, also
carries the rest of the plan (``karpenter.cluster.x-k8s.io/plan-rest``: each later NodeClaim's
NodePool and pods). Whenever any NodeClaim of a round exists, so does its plan. A round that
finds a plan whose first NodeClaim is still launching (no Node yet) and a NodeClaim of it that
was never created, with every one of its pods still pending and planned nowhere else, creates
that NodeClaim for those pods (solved alone, so the same instance types come out) before
solving the other pending pods: the restarted process finishes the plan it interrupted. A plan
the cluster has moved away from (a pod bound, deleted or placed elsewhere since, a NodePool
gone, a solve that no longer gives one NodeClaim) is left alone, and its pods are solved with
the others, as before. Upstream Karpenter keeps no such record; its restarts re-solve.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.kube.client import JsonObject
from karpenter_capi.core.scheduling.podspec import PodObject, pod_key
from karpenter_capi.core.scheduling.solver_io import NodePoolOption, ProposedNodeClaim, SolveResult

log = logging.getLogger(__name__)

PLAN_REST_MAX_CHARS: Final = 128 * 1024
"""Past this the rest of a plan is not written (the API allows 256 KiB of annotations in all):
a restart inside that round's creation re-solves the missing NodeClaims' pods, as before."""


@dataclass(frozen=True)
class MissingClaim:
    """A NodeClaim of an earlier round's plan that was never created."""

    plan: str
    index: int
    count: int
    nodepool: str
    pods: tuple[str, ...]

    @property
    def stamp(self) -> str:
        """Its ``plan`` annotation, which it carries once created."""
        return f"{self.plan}/{self.index}/{self.count}"


def stamp_plan(accepted: Sequence[tuple[ProposedNodeClaim, JsonObject]], now: str) -> None:
    """Write the round's plan on the bodies of its NodeClaims (in creation order), the rest of
    it on the first. ``now`` tells apart two rounds that planned the same pods alike."""
    if len(accepted) < 2:
        return  # a single NodeClaim is created whole or not at all
    groups = [
        (claim.nodepool.name, ",".join(sorted(pod_key(p) for p in claim.pods)))
        for claim, _ in accepted
    ]
    rest = json.dumps([list(group) for group in groups[1:]], separators=(",", ":"))
    if len(rest) > PLAN_REST_MAX_CHARS:
        return
    digest = hashlib.sha256("\n".join([now, *(f"{n}:{p}" for n, p in groups)]).encode())
    plan = digest.hexdigest()[:16]
    for index, (_, body) in enumerate(accepted):
        annotations = body["metadata"]["annotations"]
        annotations[wellknown.ANNOTATION_PLAN] = f"{plan}/{index}/{len(accepted)}"
    accepted[0][1]["metadata"]["annotations"][wellknown.ANNOTATION_PLAN_REST] = rest


def _stamp(value: object) -> tuple[str, int, int] | None:
    if not isinstance(value, str):
        return None
    plan, _, place = value.partition("/")
    index, _, count = place.partition("/")
    if not plan or not index.isdigit() or not count.isdigit() or int(index) >= int(count):
        return None
    return plan, int(index), int(count)


def _rest(value: object, count: int) -> list[tuple[str, tuple[str, ...]]] | None:
    """The later NodeClaims of a plan, or None when the annotation is not what was written."""
    try:
        groups = json.loads(value) if isinstance(value, str) else None
    except ValueError:
        return None
    if not isinstance(groups, list) or len(groups) != count - 1:
        return None
    rest = []
    for group in groups:
        if not (
            isinstance(group, list) and len(group) == 2 and all(isinstance(g, str) for g in group)
        ):
            return None
        rest.append((group[0], tuple(k for k in group[1].split(",") if k)))
    return rest


def missing_claims(nodeclaims: Iterable[Mapping[str, Any]]) -> list[MissingClaim]:
    """The never-created NodeClaims of plans whose first NodeClaim is still launching, in plan
    order (plans by id). A plan annotation that does not read as written is ignored."""
    created: set[tuple[str, int]] = set()
    first: list[tuple[str, int, object]] = []
    for claim in nodeclaims:
        meta = claim.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        stamp = _stamp(annotations.get(wellknown.ANNOTATION_PLAN))
        if stamp is None:
            continue
        plan, index, count = stamp
        created.add((plan, index))  # even deleting: it was created, never twice
        launching = not meta.get("deletionTimestamp") and not (claim.get("status") or {}).get(
            "nodeName"
        )
        if index == 0 and launching and wellknown.ANNOTATION_PLAN_REST in annotations:
            first.append((plan, count, annotations[wellknown.ANNOTATION_PLAN_REST]))
    missing: list[MissingClaim] = []
    for plan, count, value in sorted(first, key=lambda f: f[0]):
        rest = _rest(value, count)
        if rest is None:
            log.debug("plan %s: unreadable %s", plan, wellknown.ANNOTATION_PLAN_REST)
            continue
        missing.extend(
            MissingClaim(plan, index, count, nodepool, pods)
            for index, (nodepool, pods) in enumerate(rest, start=1)
            if (plan, index) not in created
        )
    return missing


def _topological(pod: PodObject) -> bool:
    """Whether where the pod may go depends on other pods: solved alone, its NodeClaim could
    come out in another zone than the plan had it, so it is solved with the others instead."""
    spec = pod.get("spec") or {}
    affinity = spec.get("affinity") or {}
    return bool(
        spec.get("topologySpreadConstraints")
        or affinity.get("podAffinity")
        or affinity.get("podAntiAffinity")
    )


def finish_plans(
    missing: Sequence[MissingClaim],
    pending: Mapping[str, PodObject],
    planned_elsewhere: frozenset[str],
    options: Sequence[NodePoolOption],
    solve_alone: Callable[[NodePoolOption, list[PodObject]], SolveResult],
) -> list[tuple[ProposedNodeClaim, str]]:
    """The missing NodeClaims to create now, each with its ``plan`` annotation.

    ``pending``: the round's pending pods by key; ``planned_elsewhere``: pods some NodeClaim
    or node already counts on. ``solve_alone`` solves pods on one NodePool, with no other
    node, as the round's solve would for a new NodeClaim."""
    by_name = {option.name: option for option in options}
    taken = set(planned_elsewhere)
    finished = []
    for claim in missing:
        pods = [pending[key] for key in claim.pods if key in pending]
        option = by_name.get(claim.nodepool)
        if (
            option is None
            or not pods
            or len(pods) != len(claim.pods)
            or taken.intersection(claim.pods)
            or any(_topological(p) for p in pods)
        ):
            continue
        solved = solve_alone(option, pods)
        if len(solved.new_nodeclaims) != 1 or solved.unschedulable or solved.existing:
            continue
        proposed = solved.new_nodeclaims[0]
        if {pod_key(p) for p in proposed.pods} != set(claim.pods):
            continue
        taken.update(claim.pods)
        finished.append((proposed, claim.stamp))
    return finished
