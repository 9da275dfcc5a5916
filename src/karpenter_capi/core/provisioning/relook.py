"""Whether pods a round left pending need another round now: what the round saw, and which
changes since can alter its decision.

A round places every pending pod on a node, a launching NodeClaim or a new NodeClaim; the pods
stay pending while those boot and register. Each step of that (the round's own NodeClaims
appearing, a kubelet's Node, the NodeClaim naming it, the Node turning Ready, kube-scheduler
binding the pods where they were placed) changes what a round reads, and looking again after
each ran about six rounds that launched nothing for every one that did (issue 28's fleet
benchmark: about 400 rounds a phase, 55-71 of them launching). None of those steps takes room
the plan counted on, so none can make a round launch. What can: a Node or NodeClaim gone (or
being deleted: a round counts no room on it), a Node no longer Ready, a NodeClaim whose Node
offers less than it reported (its allocatable), a pod bound somewhere other than where it was
placed (it took another pod's room), and anything at all after a round that could not place
every pod. Those ask for a round at once, as every change did before. Whatever changed or not,
pods still pending get a round ``RECHECK_SECONDS`` after the last one (upstream Karpenter
requeues a pending pod's trigger every 10 s), so no misjudged change, nor one a round reads but
this view does not hold (a NodePool's limit raised, a NodeClass fixed, an offering available
again), can leave pods waiting for ever, and a node that pending pods are counted on has their
nomination renewed within disruption's 20 s window. New pending pods open the batch window
themselves (``batcher``), as upstream's pod events do.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from karpenter_capi.core.provisioning.state import ClusterSnapshot
from karpenter_capi.core.scheduling.podspec import pod_key
from karpenter_capi.core.values.resources import ResourceList, ResourceListError

RECHECK_SECONDS: Final = 10.0
"""How long after a round a change judged harmless brings a round for pods still pending."""


def _ready(node: Mapping[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (node.get("status") or {}).get("conditions") or []
    )


@dataclass(frozen=True)
class RoundView:
    """What a round saw: the pending pods (by key), each Node's readiness, each NodeClaim's
    Node name ("" before it registers) and, once the round ran, where it placed each pod."""

    pending: frozenset[str]
    nodes: Mapping[str, bool]
    claims: Mapping[str, str]
    allocatable: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """NodeClaim -> its reported ``status.allocatable`` (what the round counted it as)."""
    node_allocatable: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    planned: Mapping[str, str] | None = None
    """Pending pod key -> the node or NodeClaim the round placed it on; ``None`` when a
    pending pod was left without a place (then any change asks for a round)."""

    @classmethod
    def of(cls, snapshot: ClusterSnapshot, pending: Sequence[Mapping[str, Any]]) -> RoundView:
        claims: dict[str, str] = {}
        allocatable: dict[str, Mapping[str, Any]] = {}
        for claim in snapshot.nodeclaims:
            if claim["metadata"].get("deletionTimestamp"):
                continue  # a round counts no room on it: for the pods placed there, it is gone
            name = str(claim["metadata"]["name"])
            status = claim.get("status") or {}
            claims[name] = str(status.get("nodeName") or "")
            if status.get("allocatable"):
                allocatable[name] = status["allocatable"]
        return cls(
            pending=frozenset(pod_key(p) for p in pending),
            nodes={str(n["metadata"]["name"]): _ready(n) for n in snapshot.nodes},
            claims=claims,
            allocatable=allocatable,
            node_allocatable={
                str(n["metadata"]["name"]): (n.get("status") or {}).get("allocatable") or {}
                for n in snapshot.nodes
            },
        )

    def after_round(self, launched: Sequence[str], planned: Mapping[str, str] | None) -> RoundView:
        """This view with the round's own NodeClaims (``launched``) counted and its plan."""
        claims = {**self.claims, **{name: self.claims.get(name, "") for name in launched}}
        placed_all = planned is not None and all(key in planned for key in self.pending)
        return RoundView(
            pending=self.pending,
            nodes=self.nodes,
            claims=claims,
            allocatable=self.allocatable,
            node_allocatable=self.node_allocatable,
            planned=dict(planned) if placed_all and planned is not None else None,
        )

    def same(self, other: RoundView) -> bool:
        """The same pods pending, Nodes (readiness) and NodeClaims (Node names)."""
        return (
            self.pending == other.pending
            and self.nodes == other.nodes
            and self.claims == other.claims
        )

    def may_change_decision(
        self, now: RoundView, pod: Callable[[str], Mapping[str, Any] | None]
    ) -> bool:
        """Whether what changed between this round's view and ``now`` can make a round decide
        differently (see the module's docstring); ``pod`` reads a pod by key from the cache."""
        if self.planned is None:
            return not self.same(now)
        for name, node_name in self.claims.items():
            if name not in now.claims:
                return True  # gone: pods placed on it need room elsewhere
            if node_name and now.claims[name] != node_name:
                return True
        for name, ready in self.nodes.items():
            if name not in now.nodes or (ready and not now.nodes[name]):
                return True
        for name, node_name in now.claims.items():
            if node_name and not self.claims.get(name) and node_name in now.nodes:
                # It registered: its Node now stands for it, with the Node's own allocatable.
                reported = now.allocatable.get(name) or self.allocatable.get(name)
                if _offers_less(reported, now.node_allocatable.get(node_name) or {}):
                    return True
        for key in self.pending - now.pending:
            found = pod(key)
            if found is None or (found.get("metadata") or {}).get("deletionTimestamp"):
                continue  # gone: it frees room, takes none
            bound = (found.get("spec") or {}).get("nodeName")
            if not bound:
                continue  # no longer provisionable, and on no node
            target = self.planned.get(key, "")
            if bound != (target if target in now.nodes else now.claims.get(target)):
                return True  # it took room the plan kept for another pod
        return False


def _offers_less(reported: Mapping[str, Any] | None, node_allocatable: Mapping[str, Any]) -> bool:
    """Whether a registered NodeClaim's Node offers less than the NodeClaim reported (what a
    round counted it as while it launched)."""
    if not reported:
        return True  # counted on its smallest instance type: nothing to compare, look again
    try:
        return not ResourceList.parse(reported).fits(ResourceList.parse(node_allocatable))
    except ResourceListError:
        return True
