"""Which nodes disruption may touch, and what touching each one would cost and save.

A *candidate* is a node this controller launched (a Node with its NodeClaim) that is
initialized, not already going away, and that nothing protects: no
``karpenter.sh/do-not-disrupt`` on the Node, the NodeClaim or an active pod (``"true"``, or a
duration counted from the pod's start), no PodDisruptionBudget that would refuse an eviction,
no pending pod nominated to it in the last window, and not the replacement of a command still
under way. Upstream Karpenter's rules (``disruption.NewCandidate``), kept as pure functions over
the objects already cached, so one pass over 1,000 nodes costs milliseconds.

Every candidate carries what the methods rank and budget by: its NodePool, its price (from the
offering its instance type, zone and capacity type name), the pods that would have to move
(DaemonSet and mirror pods stay with the node), and two disruption costs: upstream's
``ReschedulingCost`` times the share of life the node has left (drift's order), and the
*move* cost ``Balanced`` consolidation weighs against savings: 1 for the node itself plus each
pod's cost, negative ones counted as 0 (upstream's ``RescheduleDisruptionCost``). Consolidation
ranks candidates by price per unit of that move cost, so expensive nodes cheap to empty go first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import compress
from operator import attrgetter, is_
from typing import Any, Final

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.api.nodepool import NodePool
from karpenter_capi.core.disruption.facts import (
    DELETION_COST_ANNOTATION,
    ClaimFacts,
    NodeFacts,
    PodFacts,
    condition_true,
    do_not_disrupt_until,
    lifetime_remaining,
    rescheduling_cost,
)
from karpenter_capi.core.disruption.passfacts import PassFacts
from karpenter_capi.core.instancetype import InstanceType
from karpenter_capi.core.provisioning.inventory import NodePoolInventory
from karpenter_capi.core.scheduling.podspec import PodObject, pod_key
from karpenter_capi.core.values.selectors import SelectorError, selector_matches

__all__ = [
    "DELETION_COST_ANNOTATION",
    "Candidate",
    "CandidateSet",
    "DisruptionBudgets",
    "bound_pods",
    "condition_true",
    "do_not_disrupt_until",
    "find_candidates",
    "lifetime_remaining",
    "move_cost",
    "pod_blocks",
    "rescheduling_cost",
    "summed_move_cost",
]

PER_NODE_DISRUPTION_COST: Final = 1.0
"""What disrupting a node costs before any pod moves (cordon, drain, a replacement's latency):
upstream's placeholder, which also keeps a move's disruption cost above zero."""


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _name(obj: Mapping[str, Any]) -> str:
    return str(_meta(obj).get("name", ""))


def pod_blocks(pod: PodObject, now: datetime) -> str | None:
    """Why this pod keeps its node from being disrupted voluntarily, or None."""
    return _blocks(pod_key(pod), do_not_disrupt_until(pod), now)


def _blocks(key: str, until: datetime | bool | None, now: datetime) -> str | None:
    if until is True:
        return f'pod {key} has "{wellknown.ANNOTATION_DO_NOT_DISRUPT}: true"'
    if isinstance(until, datetime) and now < until:
        return f"pod {key} may not be disrupted before {until.isoformat()}"
    return None


def move_cost(pods: Iterable[PodObject]) -> float:
    """What moving these pods off their node costs (``Balanced``'s disruption cost): the node's
    own cost plus each pod's, a pod that declared itself cheap to disrupt counting 0."""
    return summed_move_cost([rescheduling_cost(p) for p in pods])


def summed_move_cost(costs: Iterable[float]) -> float:
    """``move_cost`` of pods whose ``rescheduling_cost`` is known."""
    return PER_NODE_DISRUPTION_COST + sum(max(0.0, cost) for cost in costs)


@dataclass(frozen=True)
class DisruptionBudgetView:
    """One PodDisruptionBudget: which pods it covers and whether it allows an eviction now."""

    namespace: str
    name: str
    selector: Mapping[str, Any] | None
    """policy/v1: a null selector selects no pod, an empty one every pod of the namespace."""
    disruptions_allowed: int

    @classmethod
    def from_object(cls, pdb: Mapping[str, Any]) -> DisruptionBudgetView:
        meta = _meta(pdb)
        selector = (pdb.get("spec") or {}).get("selector")
        status = pdb.get("status") or {}
        return cls(
            namespace=str(meta.get("namespace", "")),
            name=str(meta.get("name", "")),
            selector=selector if isinstance(selector, Mapping) else None,
            disruptions_allowed=int(status.get("disruptionsAllowed") or 0),
        )

    def covers(self, pod: PodObject) -> bool:
        meta = _meta(pod)
        if self.selector is None or meta.get("namespace") != self.namespace:
            return False
        try:
            return selector_matches(self.selector, meta.get("labels") or {}, nil_matches=False)
        except SelectorError:
            return False


class DisruptionBudgets:
    """Every PDB of the cluster by namespace: would evicting these pods be refused?"""

    def __init__(self, pdbs: Iterable[Mapping[str, Any]]) -> None:
        self._by_namespace: dict[str, list[DisruptionBudgetView]] = {}
        for pdb in pdbs:
            view = DisruptionBudgetView.from_object(pdb)
            self._by_namespace.setdefault(view.namespace, []).append(view)
        # Pods of one Deployment share their labels: match each label set once, not each pod.
        self._covering: dict[tuple[str, tuple[tuple[str, str], ...]], list[DisruptionBudgetView]]
        self._covering = {}

    def _covering_views(
        self, pod: PodObject, facts: PodFacts | None = None
    ) -> list[DisruptionBudgetView]:
        if facts is None:
            meta = _meta(pod)
            namespace = str(meta.get("namespace", ""))
            labels = tuple(sorted((meta.get("labels") or {}).items()))
        else:
            namespace, labels = facts.namespace, facts.labels
        views = self._by_namespace.get(namespace)
        if not views:
            return []
        key = (namespace, labels)
        found = self._covering.get(key)
        if found is None:
            found = [v for v in views if v.covers(pod)]
            self._covering[key] = found
        return found

    def blocking(
        self, pods: Sequence[PodObject], facts: Sequence[PodFacts] | None = None
    ) -> str | None:
        """Why evicting all of ``pods`` would be refused, or None. ``facts``: the pods' own, in
        the same order, when already read."""
        if not self._by_namespace:
            return None
        views: dict[tuple[str, str], DisruptionBudgetView] = {}
        for index, pod in enumerate(pods):
            covering = self._covering_views(pod, facts[index] if facts is not None else None)
            if len(covering) > 1:
                names = ", ".join(sorted(v.name for v in covering))
                return f"pod {pod_key(pod)} is covered by several PDBs ({names})"
            for view in covering:
                views[(view.namespace, view.name)] = view
        # As upstream: a PDB that allows one eviction now lets the drain proceed pod by pod.
        for (namespace, name), view in sorted(views.items()):
            if view.disruptions_allowed < 1:
                return f"PDB {namespace}/{name} allows no disruption now"
        return None


@dataclass
class Candidate:
    """A node disruption may remove, with everything the methods weigh."""

    nodeclaim: Mapping[str, Any]
    node: Mapping[str, Any]
    nodepool: str
    pool: NodePool
    instance_type: InstanceType | None
    zone: str
    capacity_type: str
    price: float
    pods: list[PodObject]
    disruption_cost: float
    move_cost: float
    """``move_cost(pods)``: what ``Balanced`` weighs, and what consolidation ranks by."""
    drifted: bool = False
    consolidatable: bool = False
    problems: tuple[str, ...] = ()

    name: str = field(init=False)
    """The NodeClaim's name."""
    node_name: str = field(init=False)

    def __post_init__(self) -> None:
        # Read once here: a ``cached_property``'s lock made the first reads of 10,000
        # candidates' names (a sort) cost more than the sort.
        self.name = _name(self.nodeclaim)
        self.node_name = _name(self.node)

    @property
    def empty(self) -> bool:
        """No pod would cost anything to move: none at all, or only pods whose deletion cost or
        priority brings their cost to 0 or below (upstream's ``IsEmpty`` since ``Balanced``)."""
        return self.move_cost <= PER_NODE_DISRUPTION_COST

    @property
    def savings_ratio(self) -> float:
        """Price per unit of move cost: the higher, the more a move of this node is worth."""
        return self.price / self.move_cost


def offering_price(
    instance_type: InstanceType | None, zone: str, capacity_type: str
) -> float | None:
    """What a node of this type, zone and capacity type costs per hour, None when unknown."""
    if instance_type is None:
        return None
    prices = [
        o.price
        for o in instance_type.offerings
        if o.zone == zone and o.capacity_type == capacity_type
    ]
    return min(prices) if prices else None


@dataclass
class CandidateSet:
    """The candidates of one pass, and why the other managed nodes are not candidates."""

    candidates: list[Candidate] = field(default_factory=list)
    excluded: dict[str, str] = field(default_factory=dict)  # NodeClaim name -> why


def find_candidates(
    *,
    nodes: Iterable[Mapping[str, Any]],
    nodeclaims: Iterable[Mapping[str, Any]],
    pods: Iterable[PodObject],
    inventories: Sequence[NodePoolInventory],
    budgets: DisruptionBudgets,
    now: datetime,
    protected: frozenset[str] = frozenset(),
    facts: PassFacts | None = None,
) -> CandidateSet:
    """Every candidate of the cluster, in NodeClaim name order.

    ``protected`` holds NodeClaim and Node names that must not be disrupted now (nominated for
    pending pods, replacements of a command under way). ``facts``: what earlier passes read of
    each object version (``passfacts.PassFacts``).
    """
    facts = facts if facts is not None else PassFacts()
    result = CandidateSet()
    pools = {inv.nodepool: inv for inv in inventories if inv.model is not None}
    pods_by_node = bound_pods(pods, facts)
    unchanged = facts.versions_of(pods, nodes, nodeclaims)
    node_by_name, node_facts_by_name = facts.remember(
        "node_by_name", unchanged, lambda: _nodes(nodes, facts)
    )
    types: dict[str, dict[str, InstanceType]] = {}
    for inventory in pools.values():
        by_name = types[inventory.nodepool] = {}
        for offered in inventory.instance_types:
            by_name.setdefault(offered.name, offered)
    claims, claims_facts = facts.remember("claims", unchanged, lambda: _claims(nodeclaims, facts))
    for claim, claim_facts in zip(claims, claims_facts, strict=True):
        name = claim_facts.name
        why = _not_a_candidate(claim_facts, node_facts_by_name, pools, protected)
        if why is not None:
            result.excluded[name] = why
            continue
        node = node_by_name[claim_facts.node_name]
        node_facts = node_facts_by_name[claim_facts.node_name]
        inventory = pools[claim_facts.nodepool]
        assert inventory.model is not None
        node_pods = pods_by_node.get(node_facts.name, _NO_PODS)
        # Only active pods protect their node: a finished Job's do-not-disrupt no longer does.
        blocked = _first_blocker(node_pods, now)
        if blocked is not None:
            result.excluded[name] = blocked
            continue
        refused = budgets.blocking(node_pods.moving, node_pods.moving_facts)
        if refused is not None:
            result.excluded[name] = refused
            continue
        labels = node_facts.labels
        type_name = str(labels.get(wellknown.LABEL_INSTANCE_TYPE, ""))
        zone = str(labels.get(wellknown.LABEL_TOPOLOGY_ZONE, ""))
        capacity_type = str(labels.get(wellknown.LABEL_CAPACITY_TYPE, ""))
        instance_type = types[inventory.nodepool].get(type_name)
        price = offering_price(instance_type, zone, capacity_type)
        cost = node_pods.cost * claim_facts.lifetime_remaining(now)
        result.candidates.append(
            Candidate(
                nodeclaim=claim,
                node=node,
                nodepool=inventory.nodepool,
                pool=inventory.model,
                instance_type=instance_type,
                zone=zone,
                capacity_type=capacity_type,
                # A node whose offering is gone can still be deleted, never "replaced cheaper".
                price=price if price is not None else 0.0,
                # Not copied (nothing changes a candidate's pods): one list fewer per node.
                pods=node_pods.moving,
                disruption_cost=cost,
                move_cost=node_pods.move_cost,
                drifted=claim_facts.drifted,
                consolidatable=claim_facts.consolidatable,
                problems=() if price is not None else (f"no offering {type_name}/{zone}",),
            )
        )
    return result


def _nodes(
    nodes: Iterable[Mapping[str, Any]], facts: PassFacts
) -> tuple[dict[str, Mapping[str, Any]], dict[str, NodeFacts]]:
    """The Nodes and their facts by name: two dicts, not a pair per Node (an object the
    collector walks)."""
    node_by_name: dict[str, Mapping[str, Any]] = {}
    facts_by_name: dict[str, NodeFacts] = {}
    for node, node_facts in facts.nodes(nodes):
        node_by_name[node_facts.name] = node
        facts_by_name[node_facts.name] = node_facts
    return node_by_name, facts_by_name


def _claims(
    nodeclaims: Iterable[Mapping[str, Any]], facts: PassFacts
) -> tuple[list[Mapping[str, Any]], list[ClaimFacts]]:
    """The NodeClaims and their facts in name order, as two lists (see ``_nodes``)."""
    claims: list[Mapping[str, Any]] = []
    claims_facts: list[ClaimFacts] = []
    for claim, claim_facts in facts.claims(nodeclaims):
        claims.append(claim)
        claims_facts.append(claim_facts)
    order = sorted(range(len(claims)), key=lambda index: claims_facts[index].name)
    return [claims[index] for index in order], [claims_facts[index] for index in order]


def _first_blocker(node_pods: _NodePods, now: datetime) -> str | None:
    """Why the first of the node's active pods that forbids disruption now does, or None."""
    for key, until in node_pods.blockers:
        why = _blocks(key, until, now)
        if why is not None:
            return why
    return None


class _NodePods:
    """What the candidate checks read of one node's bound pods, summed once per cluster.

    The pods and their facts are two lists, not a list of pairs: a pair per pod was 70,000
    more objects for the collector to walk after a first pass over 10,000 nodes. A filtered
    list that would keep every pod is the node's own (they are read, never changed)."""

    __slots__ = (
        "blockers",
        "bound",
        "cost",
        "facts",
        "move_cost",
        "moving",
        "moving_facts",
        "pods",
    )

    def __init__(self, pods: list[PodObject], facts: list[PodFacts]) -> None:
        self.pods = pods
        self.facts = facts
        # The unfinished ones, what the node's requests count (``state.existing_nodes``): the
        # very list while the node's pods stay the same, so its ``ExistingNode`` is kept.
        self.bound = (
            [p for p, f in zip(pods, facts, strict=True) if not f.finished]
            if any(f.finished for f in facts)
            else pods
        )
        self.blockers = tuple(
            (f.key, f.do_not_disrupt) for f in facts if f.active and f.do_not_disrupt is not None
        )
        self.moving, self.moving_facts = pods, facts
        if not all(f.reschedulable for f in facts):
            self.moving = [p for p, f in zip(pods, facts, strict=True) if f.reschedulable]
            self.moving_facts = [f for f in facts if f.reschedulable]
        costs = [f.cost for f in self.moving_facts]  # each pod's once, for both costs
        self.cost = sum(costs)
        self.move_cost = summed_move_cost(costs)

    def same(self, pods: list[PodObject], facts: list[PodFacts]) -> bool:
        """Whether ``pods`` are the very pods it read, with the very same facts."""
        return (
            len(self.pods) == len(pods)
            and all(map(is_, self.pods, pods))
            and all(map(is_, self.facts, facts))
        )


_NO_PODS = _NodePods([], [])

_Grouped = dict[str, tuple[list[PodObject], list[PodFacts]]]
"""Pods and their facts by the name of the node they are bound to, in their order."""


def _group(pods: Iterable[tuple[PodObject, PodFacts]], grouped: _Grouped) -> None:
    for pod, pod_facts in pods:
        name = pod_facts.node_name
        if name:
            found = grouped.get(name)
            if found is None:
                found = grouped[name] = ([], [])
            found[0].append(pod)
            found[1].append(pod_facts)


def bound_pods(pods: Iterable[PodObject], facts: PassFacts) -> Mapping[str, _NodePods]:
    """``pods`` bound to each node by its name, read once per pass (``_by_node``): what the
    candidate checks and ``balanced.pool_totals`` read of them."""
    previous = facts.last("pods_by_node")
    changes = facts.pod_changes(pods, facts.last_key("pods_by_node"))
    if changes is not None and isinstance(previous, dict):
        kept: dict[str, _NodePods] = previous
        return facts.remember(
            "pods_by_node",
            facts.versions_of(pods),
            lambda: _patched(pods, facts, kept, changes),
        )
    return facts.remember(
        "pods_by_node", facts.versions_of(pods), lambda: _by_node(pods, facts, previous)
    )


def _patched(
    pods: Iterable[PodObject],
    facts: PassFacts,
    previous: dict[str, _NodePods],
    changes: tuple[list[int], list[PodFacts]],
) -> dict[str, _NodePods]:
    """The last pass's pods by node (``previous``) with only the nodes the changed pods were
    or are bound to read again: the others hold the very same pods, in the same order."""
    new, gone = changes
    every = facts.pod_facts()
    touched = {every[index].node_name for index in new}
    touched.update(f.node_name for f in gone)
    touched.discard("")
    if not touched:
        return previous
    listed = pods if isinstance(pods, list) else list(pods)
    names = list(map(attrgetter("node_name"), every))
    regrouped: _Grouped = {}
    _group(
        (
            (listed[index], every[index])
            for index in compress(range(len(names)), map(touched.__contains__, names))
        ),
        regrouped,
    )
    result = dict(previous)
    for name in touched:
        node_pods = regrouped.get(name)
        if node_pods is None:
            result.pop(name, None)
            continue
        old = previous.get(name)
        result[name] = old if old is not None and old.same(*node_pods) else _NodePods(*node_pods)
    return result


def _by_node(
    pods: Iterable[PodObject], facts: PassFacts, previous: object = None
) -> dict[str, _NodePods]:
    """The bound pods by node name, read; a node's as ``previous`` (the last pass's) read
    them while they are the very same pods with the very same facts."""
    kept: Mapping[str, _NodePods] = previous if isinstance(previous, dict) else {}
    grouped: _Grouped = {}
    _group(facts.pods(pods), grouped)
    result = {}
    for name, node_pods in grouped.items():
        old = kept.get(name)
        if old is None or not old.same(*node_pods):
            old = _NodePods(*node_pods)
        result[name] = old
    return result


def _not_a_candidate(
    claim: ClaimFacts,
    node_facts_by_name: Mapping[str, NodeFacts],
    pools: Mapping[str, NodePoolInventory],
    protected: frozenset[str],
) -> str | None:
    why = _claim_not_a_candidate(claim, pools)
    if why is not None:
        return why
    found = node_facts_by_name.get(claim.node_name)
    if found is None:
        return "has no Node"
    return _node_not_a_candidate(claim, found, protected)


def _claim_not_a_candidate(claim: ClaimFacts, pools: Mapping[str, NodePoolInventory]) -> str | None:
    """Why the NodeClaim itself rules the node out: no usable NodePool, deleting, or not up."""
    if not claim.nodepool:
        return "not managed by a NodePool"
    if claim.nodepool not in pools:
        return f"NodePool {claim.nodepool} is not usable"
    if claim.deleting:
        return "already deleting"
    if not claim.initialized:
        return "not initialized"
    return None


def _node_not_a_candidate(
    claim: ClaimFacts, node: NodeFacts, protected: frozenset[str]
) -> str | None:
    """Why the claim's Node rules it out: going already, protected, or do-not-disrupt."""
    if node.deleting:
        return "Node already deleting"
    if node.disrupted:
        return "already being disrupted"
    if claim.name in protected or node.name in protected:
        return "nominated for pending pods or replacing another node"
    for do_not_disrupt, what in (
        (node.do_not_disrupt, "Node"),
        (claim.do_not_disrupt, "NodeClaim"),
    ):
        if do_not_disrupt:
            return f'{what} has "{wellknown.ANNOTATION_DO_NOT_DISRUPT}: true"'
    return None
