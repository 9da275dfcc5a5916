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

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.api.duration import DurationError, parse_duration
from karpenter_capi.core.api.nodeclaim import NodeClaimConditionType
from karpenter_capi.core.api.nodepool import NodePool
from karpenter_capi.core.clock import parse_timestamp
from karpenter_capi.core.instancetype import InstanceType
from karpenter_capi.core.provisioning.inventory import NodePoolInventory
from karpenter_capi.core.provisioning.state import (
    has_disrupted_taint,
    is_reschedulable,
)
from karpenter_capi.core.scheduling.podspec import PodObject, pod_key
from karpenter_capi.core.values.selectors import SelectorError, selector_matches

DELETION_COST_ANNOTATION: Final = "controller.kubernetes.io/pod-deletion-cost"
PER_NODE_DISRUPTION_COST: Final = 1.0
"""What disrupting a node costs before any pod moves (cordon, drain, a replacement's latency):
upstream's placeholder, which also keeps a move's disruption cost above zero."""


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _name(obj: Mapping[str, Any]) -> str:
    return str(_meta(obj).get("name", ""))


def condition_true(obj: Mapping[str, Any], condition_type: str) -> bool:
    """Whether ``obj`` has ``condition_type`` with status True."""
    return any(
        c.get("type") == condition_type and c.get("status") == "True"
        for c in (obj.get("status") or {}).get("conditions") or []
    )


def _is_active(pod: PodObject) -> bool:
    """Neither finished nor terminating (upstream's ``IsActive``)."""
    if _meta(pod).get("deletionTimestamp"):
        return False
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def _pod_started(pod: PodObject) -> datetime | None:
    raw = (pod.get("status") or {}).get("startTime") or _meta(pod).get("creationTimestamp")
    return parse_timestamp(str(raw)) if raw else None


def do_not_disrupt_until(pod: PodObject) -> datetime | bool | None:
    """``True`` when the pod forbids disruption outright, a time when it forbids it until
    then (a duration from its start), ``None`` when it does not forbid it."""
    value = (_meta(pod).get("annotations") or {}).get(wellknown.ANNOTATION_DO_NOT_DISRUPT)
    if value is None:
        return None
    if value == "true":
        return True
    try:
        duration = parse_duration(value)
    except DurationError:
        return None  # anything else is not "true": upstream ignores it
    started = _pod_started(pod)
    return None if started is None else started + duration


def pod_blocks(pod: PodObject, now: datetime) -> str | None:
    """Why this pod keeps its node from being disrupted voluntarily, or None."""
    until = do_not_disrupt_until(pod)
    if until is True:
        return f'pod {pod_key(pod)} has "{wellknown.ANNOTATION_DO_NOT_DISRUPT}: true"'
    if isinstance(until, datetime) and now < until:
        return f"pod {pod_key(pod)} may not be disrupted before {until.isoformat()}"
    return None


def rescheduling_cost(pod: PodObject) -> float:
    """Upstream's per-pod cost (``EvictionCost``): 1, plus the deletion cost over 2^27 and the
    priority over 2^25, within [-10, 10]: one pod never weighs more than ten default ones."""
    cost = 1.0
    raw = (_meta(pod).get("annotations") or {}).get(DELETION_COST_ANNOTATION)
    if raw is not None:
        with contextlib.suppress(ValueError):
            cost += float(raw) / 2.0**27
    priority = (pod.get("spec") or {}).get("priority")
    if isinstance(priority, int):
        cost += priority / 2.0**25
    return min(max(cost, -10.0), 10.0)


def move_cost(pods: Iterable[PodObject]) -> float:
    """What moving these pods off their node costs (``Balanced``'s disruption cost): the node's
    own cost plus each pod's, a pod that declared itself cheap to disrupt counting 0."""
    return _move_cost([rescheduling_cost(p) for p in pods])


def _move_cost(costs: Iterable[float]) -> float:
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

    def _covering_views(self, pod: PodObject) -> list[DisruptionBudgetView]:
        meta = _meta(pod)
        namespace = str(meta.get("namespace", ""))
        views = self._by_namespace.get(namespace)
        if not views:
            return []
        key = (namespace, tuple(sorted((meta.get("labels") or {}).items())))
        found = self._covering.get(key)
        if found is None:
            found = [v for v in views if v.covers(pod)]
            self._covering[key] = found
        return found

    def blocking(self, pods: Sequence[PodObject]) -> str | None:
        """Why evicting all of ``pods`` would be refused, or None."""
        views: dict[tuple[str, str], DisruptionBudgetView] = {}
        for pod in pods:
            covering = self._covering_views(pod)
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
    problems: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        """The NodeClaim's name."""
        return _name(self.nodeclaim)

    @property
    def node_name(self) -> str:
        return _name(self.node)

    @property
    def empty(self) -> bool:
        """No pod would cost anything to move: none at all, or only pods whose deletion cost or
        priority brings their cost to 0 or below (upstream's ``IsEmpty`` since ``Balanced``)."""
        return self.move_cost <= PER_NODE_DISRUPTION_COST

    @property
    def savings_ratio(self) -> float:
        """Price per unit of move cost: the higher, the more a move of this node is worth."""
        return self.price / self.move_cost


def lifetime_remaining(nodeclaim: Mapping[str, Any], now: datetime) -> float:
    """Share of its ``expireAfter`` a NodeClaim has left, in [0, 1] (1 when it never expires)."""
    raw = (nodeclaim.get("spec") or {}).get("expireAfter")
    created = _meta(nodeclaim).get("creationTimestamp")
    if not raw or raw == "Never" or not created:
        return 1.0
    try:
        total = parse_duration(str(raw))
    except DurationError:
        return 1.0
    if total <= timedelta(0):
        return 0.0
    age = now - parse_timestamp(str(created))
    return min(1.0, max(0.0, 1.0 - age / total))


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
) -> CandidateSet:
    """Every candidate of the cluster, in NodeClaim name order.

    ``protected`` holds NodeClaim and Node names that must not be disrupted now (nominated for
    pending pods, replacements of a command under way).
    """
    result = CandidateSet()
    pools = {inv.nodepool: inv for inv in inventories if inv.model is not None}
    pods_by_node: dict[str, list[PodObject]] = {}
    for pod in pods:
        node_name = (pod.get("spec") or {}).get("nodeName")
        if node_name:
            pods_by_node.setdefault(str(node_name), []).append(pod)
    node_by_name = {_name(n): n for n in nodes}
    for claim in sorted(nodeclaims, key=_name):
        name = _name(claim)
        why = _not_a_candidate(claim, node_by_name, pools, protected)
        if why is not None:
            result.excluded[name] = why
            continue
        node = node_by_name[str((claim.get("status") or {}).get("nodeName"))]
        inventory = pools[str(_meta(claim).get("labels", {}).get(wellknown.LABEL_NODEPOOL))]
        assert inventory.model is not None
        node_pods = pods_by_node.get(_name(node), [])
        # Only active pods protect their node: a finished Job's do-not-disrupt no longer does.
        active = (p for p in node_pods if _is_active(p))
        blocked = next(filter(None, (pod_blocks(p, now) for p in active)), None)
        if blocked is not None:
            result.excluded[name] = blocked
            continue
        moving = [p for p in node_pods if is_reschedulable(p)]
        refused = budgets.blocking(moving)
        if refused is not None:
            result.excluded[name] = refused
            continue
        labels = _meta(node).get("labels") or {}
        type_name = str(labels.get(wellknown.LABEL_INSTANCE_TYPE, ""))
        zone = str(labels.get(wellknown.LABEL_TOPOLOGY_ZONE, ""))
        capacity_type = str(labels.get(wellknown.LABEL_CAPACITY_TYPE, ""))
        instance_type = next((it for it in inventory.instance_types if it.name == type_name), None)
        price = offering_price(instance_type, zone, capacity_type)
        costs = [rescheduling_cost(p) for p in moving]  # each pod's once, for both costs
        cost = sum(costs) * lifetime_remaining(claim, now)
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
                pods=moving,
                disruption_cost=cost,
                move_cost=_move_cost(costs),
                drifted=condition_true(claim, NodeClaimConditionType.DRIFTED),
                consolidatable=condition_true(claim, NodeClaimConditionType.CONSOLIDATABLE),
                problems=[] if price is not None else [f"no offering {type_name}/{zone}"],
            )
        )
    return result


def _not_a_candidate(
    claim: Mapping[str, Any],
    node_by_name: Mapping[str, Mapping[str, Any]],
    pools: Mapping[str, NodePoolInventory],
    protected: frozenset[str],
) -> str | None:
    why = _claim_not_a_candidate(claim, pools)
    if why is not None:
        return why
    node = node_by_name.get(str((claim.get("status") or {}).get("nodeName", "")))
    if node is None:
        return "has no Node"
    return _node_not_a_candidate(claim, node, protected)


def _claim_not_a_candidate(
    claim: Mapping[str, Any], pools: Mapping[str, NodePoolInventory]
) -> str | None:
    """Why the NodeClaim itself rules the node out: no usable NodePool, deleting, or not up."""
    meta = _meta(claim)
    pool = (meta.get("labels") or {}).get(wellknown.LABEL_NODEPOOL)
    if not pool:
        return "not managed by a NodePool"
    if pool not in pools:
        return f"NodePool {pool} is not usable"
    if meta.get("deletionTimestamp"):
        return "already deleting"
    if not condition_true(claim, NodeClaimConditionType.INITIALIZED):
        return "not initialized"
    return None


def _node_not_a_candidate(
    claim: Mapping[str, Any], node: Mapping[str, Any], protected: frozenset[str]
) -> str | None:
    """Why the claim's Node rules it out: going already, protected, or do-not-disrupt."""
    node_meta = _meta(node)
    if node_meta.get("deletionTimestamp"):
        return "Node already deleting"
    if has_disrupted_taint(node):
        return "already being disrupted"
    if str(_meta(claim).get("name", "")) in protected or str(node_meta.get("name")) in protected:
        return "nominated for pending pods or replacing another node"
    for obj, what in ((node, "Node"), (claim, "NodeClaim")):
        annotations = _meta(obj).get("annotations") or {}
        if annotations.get(wellknown.ANNOTATION_DO_NOT_DISRUPT) == "true":
            return f'{what} has "{wellknown.ANNOTATION_DO_NOT_DISRUPT}: true"'
    return None
