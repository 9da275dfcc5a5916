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
offers less than it reported (its allocatable), pods of the round bound where they took room
the plan kept for others (more pods of a class on a Node than the plan put there:
``RoundView._pods_took_room``), and anything at all after a round that could not place every
pod. Those ask for a round at once, as every change did before. Whatever changed or not, pods
still pending get a round ``RECHECK_SECONDS`` after the last one (upstream Karpenter requeues a
pending pod's trigger every 10 s), so no misjudged change, nor one a round reads but this view
does not hold (a NodePool's limit raised, a NodeClass fixed, an offering available again), can
leave pods waiting for ever, and a node that pending pods are counted on has their nomination
renewed within disruption's 20 s window. New pending pods open the batch window themselves
(``batcher``), as upstream's pod events do.

A pod bound elsewhere than placed is not by itself a reason: kube-scheduler binds a
Deployment's replicas in its own order, filling the first Node to turn Ready with replicas the
round placed on NodeClaims still launching. Those are one class (``PodSpec.class_key``: equal
requests and every constraint the solver reads), so the pods still pending fit the room the
others left, as the plan had it. Under a fleet's load that Node is also often bound full before
the cache holds the NodeClaim naming it; it is judged against each NodeClaim it may be, and
once named, against its own (issue 28's 100-cluster fleet: about 1,400 relooks of 1,981 rounds
came from such bindings).
"""

from __future__ import annotations

from collections import Counter
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
    classes: Mapping[str, str] = field(default_factory=dict)
    """Pending pod key -> its class (``PodSpec.class_key``) as the round read it: pods the
    solver treats alike, so one may take the room the plan kept for another."""
    placed: Mapping[str, Counter[str]] = field(default_factory=dict)
    """Node or NodeClaim -> the classes of the pods the round placed on it (``planned``,
    counted once per round: every look that finds a change reads it)."""

    @classmethod
    def of(
        cls,
        snapshot: ClusterSnapshot,
        pending: Sequence[Mapping[str, Any]],
        keys: Sequence[str] | None = None,
    ) -> RoundView:
        """The view of ``snapshot`` with its ``pending`` pods (``keys``: their ``pod_key``s,
        when the caller has them)."""
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
            pending=frozenset(map(pod_key, pending) if keys is None else keys),
            nodes={str(n["metadata"]["name"]): _ready(n) for n in snapshot.nodes},
            claims=claims,
            allocatable=allocatable,
            node_allocatable={
                str(n["metadata"]["name"]): (n.get("status") or {}).get("allocatable") or {}
                for n in snapshot.nodes
            },
        )

    def after_round(
        self,
        launched: Sequence[str],
        planned: Mapping[str, str] | None,
        classes: Mapping[str, str] | None = None,
    ) -> RoundView:
        """This view with the round's own NodeClaims (``launched``) counted, its plan and the
        classes of its pending pods (``classes``)."""
        claims = {**self.claims, **{name: self.claims.get(name, "") for name in launched}}
        placed_all = planned is not None and all(key in planned for key in self.pending)
        return RoundView(
            pending=self.pending,
            nodes=self.nodes,
            claims=claims,
            allocatable=self.allocatable,
            node_allocatable=self.node_allocatable,
            planned=dict(planned) if placed_all and planned is not None else None,
            classes=dict(classes or {}),
            placed=_placed(planned, classes or {}) if placed_all and planned is not None else {},
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
        return self._pods_took_room(now, pod)

    def _pods_took_room(
        self, now: RoundView, pod: Callable[[str], Mapping[str, Any] | None]
    ) -> bool:
        """Whether pods of this round bound since took room its plan kept for others.

        kube-scheduler binds a Deployment's pending replicas in its own order, not to the
        NodeClaims launched for each: a replica on another's Node leaves that other the first
        one's room, equal in every request and constraint the solver reads (one class), so the
        plan still holds as long as no Node holds more pods of a class than the plan put there
        (on the Node itself or on the NodeClaim naming it). More took room the plan kept for
        something else, and a round looks again. A pod with no class is a class of its own: it
        holds only where it was placed.

        A Node no NodeClaim names (kube-scheduler fills a new Node before the registration
        that names it reaches the cache; under a fleet's load, by seconds, so the round may
        have seen the Node already, tainted unregistered, and counted its NodeClaim's room
        instead) may be the Node of any of the round's NodeClaims still without one. Its pods
        bring a round at once only when none of those could hold them; otherwise they are
        judged once a NodeClaim names the Node, against that NodeClaim's plan. A Node that
        turns out to be none of them held no room the plan counted on but what the plan put
        on it, and the ``RECHECK_SECONDS`` round looks at it."""
        assert self.planned is not None
        bound_on: dict[str, Counter[str]] = {}  # node -> classes of the round's pods bound there
        for key in self.pending - now.pending:
            found = pod(key)
            if found is None or (found.get("metadata") or {}).get("deletionTimestamp"):
                continue  # gone: it frees room, takes none
            bound = (found.get("spec") or {}).get("nodeName")
            if not bound:
                continue  # no longer provisionable, and on no node
            bound_on.setdefault(str(bound), Counter())[self._class_of(key)] += 1
        if not bound_on:
            return False
        # Node (or NodeClaim still without one) -> classes of the pods the plan put there.
        planned: dict[str, Counter[str]] = {}
        for target, classes in self.placed.items():
            where = target if target in now.nodes else (now.claims.get(target) or target)
            planned[where] = planned[where] + classes if where in planned else classes
        named = set(now.claims.values())
        unnamed = [planned.get(c) or Counter() for c, node in now.claims.items() if not node]
        for node, classes in bound_on.items():
            here = planned.get(node) or Counter()
            if node in named:
                if _more(classes, here):
                    return True
            elif all(_more(classes, here + claim) for claim in unnamed) and _more(classes, here):
                return True  # whichever NodeClaim's Node it is, it holds more than planned
        return False

    def _class_of(self, key: str) -> str:
        return _class_of(key, self.classes)


def _class_of(key: str, classes: Mapping[str, str]) -> str:
    """A pod's class; a pod with none is a class of its own."""
    return classes.get(key) or f"pod {key}"


def _placed(planned: Mapping[str, str], classes: Mapping[str, str]) -> dict[str, Counter[str]]:
    """Target -> the classes of the pods ``planned`` put on it."""
    placed: dict[str, Counter[str]] = {}
    for key, target in planned.items():
        placed.setdefault(target, Counter())[_class_of(key, classes)] += 1
    return placed


def _more(bound: Counter[str], planned: Counter[str]) -> bool:
    """Whether ``bound`` holds more pods of some class than ``planned``."""
    return any(count > planned[kind] for kind, count in bound.items())


def _offers_less(reported: Mapping[str, Any] | None, node_allocatable: Mapping[str, Any]) -> bool:
    """Whether a registered NodeClaim's Node offers less than the NodeClaim reported (what a
    round counted it as while it launched)."""
    if not reported:
        return True  # counted on its smallest instance type: nothing to compare, look again
    try:
        return not ResourceList.parse(reported).fits(ResourceList.parse(node_allocatable))
    except ResourceListError:
        return True
