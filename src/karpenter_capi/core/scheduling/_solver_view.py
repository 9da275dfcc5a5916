"""The solver's view of a round: the inputs turned into vectors, and its claims turned back.

Why a module of its own: the solve itself (``solver.py``) is the hot loop that places pods; what
happens once per round before it (indexing resources, pricing each NodePool's instance types,
the existing nodes' room and ports, the topology domains, the order pods are tried in) and after
it (a ``ProposedNodeClaim`` per claim) reads the inputs, not the loop's state, and is easier to
follow on its own. Vectors are integer milli-units in the order ``resource_names`` fixes.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.instancetype import InstanceType
from karpenter_capi.core.scheduling.claims import (
    ClaimState,
    PodClass,
    PoolState,
    RuledOut,
    TypeInfo,
    Vector,
    add,
    cheapest_price,
    limit_use,
    to_vector,
)
from karpenter_capi.core.scheduling.daemons import DaemonOverhead
from karpenter_capi.core.scheduling.existing_view import ExistingSubset
from karpenter_capi.core.scheduling.hostports import HostPortUsage
from karpenter_capi.core.scheduling.podspec import PodObject, PodSpec, PodSpecs
from karpenter_capi.core.scheduling.solver_io import (
    ExistingNode,
    NodePoolOption,
    ProposedNodeClaim,
    compatible_offerings,
)
from karpenter_capi.core.scheduling.topology import NodeInfo, Topology
from karpenter_capi.core.values.requirements import Requirement, Requirements
from karpenter_capi.core.values.resources import ResourceList


@dataclass(eq=False)
class SolverNode:
    """An existing node (registered, or a NodeClaim still launching) as the solve fills it."""

    index: int
    node: ExistingNode
    requirements: Requirements
    allocatable: Vector
    total: Vector
    ports: HostPortUsage
    placed: list[PodObject] = field(default_factory=list)

    @property
    def hostname(self) -> str:
        return self.node.labels.get(wellknown.LABEL_HOSTNAME, self.node.name)


def resource_names(
    options: Sequence[NodePoolOption], pods: Sequence[PodSpec], existing: Sequence[ExistingNode]
) -> tuple[str, ...]:
    """Every resource anything in the round names: cpu, memory, pods, then the rest by name."""
    names: set[str] = {"cpu", "memory", "pods"}
    for option in options:
        for instance_type in option.instance_types:
            names.update(instance_type.allocatable)
    for pod in pods:
        names.update(pod.requests)
    if isinstance(existing, ExistingSubset):
        names.update(existing.view.resource_names(existing.gone_nodes()))
    else:
        for node in existing:
            names.update(node.allocatable)
    first = ("cpu", "memory", "pods")
    return first + tuple(sorted(names - set(first)))


def build_pools(options: Sequence[NodePoolOption], names: Sequence[str]) -> list[PoolState]:
    """Each NodePool with the instance types it may launch, cheapest first, and its limits."""
    pools = []
    for option in options:
        base = option.requirements.merged(
            [Requirement.new(wellknown.LABEL_NODEPOOL, "In", [option.name])]
        )
        types = []
        for instance_type in option.instance_types:
            requirements = Requirements.from_value_sets(instance_type.requirements)
            if base.conflict_with(requirements) is not None:
                continue
            offerings = compatible_offerings(instance_type, base)
            if not offerings:
                continue
            types.append(
                TypeInfo(
                    instance_type,
                    to_vector(names, instance_type.allocatable),
                    to_vector(names, instance_type.capacity),
                    requirements,
                    min(o.price for o in offerings),
                )
            )
        types.sort(key=lambda t: (t.price, t.instance_type.name))
        remaining = None
        if option.limits is not None:
            limits = _limit_vector(names, option.limits)
            remaining = tuple(
                limit - used
                for limit, used in zip(limits, _limit_usage(names, option), strict=True)
            )
        pools.append(
            PoolState(
                option,
                base,
                types,
                remaining,
                any(r.min_values for r in base.values()),
                any(t.instance_type.taints for t in types),
                (
                    max((t.allocatable[0] for t in types), default=1) or 1,
                    max((t.allocatable[1] for t in types), default=1) or 1,
                ),
            )
        )
    return pools


def _limit_vector(names: Sequence[str], limits: ResourceList) -> Vector:
    # Resources the limits do not name are unlimited; "nodes" is counted in pods' place.
    unlimited = 1 << 62
    vector = [limits.milli(n) if n in limits else unlimited for n in names]
    pods_index = names.index("pods")
    vector[pods_index] = limits.milli("nodes") if "nodes" in limits else unlimited
    return tuple(vector)


def _limit_usage(names: Sequence[str], option: NodePoolOption) -> Vector:
    usage = [option.usage.milli(n) for n in names]
    usage[names.index("pods")] = option.usage.milli("nodes")
    return tuple(usage)


def limits_reason(names: Sequence[str], types: Sequence[TypeInfo], remaining: Vector) -> str:
    """Which limits even the smallest node would break ("nodes" in the pods slot)."""
    broken = [
        "nodes" if name == "pods" else name
        for index, name in enumerate(names)
        if all(limit_use(t.capacity)[index] > remaining[index] for t in types)
    ]
    return f"the NodePool's limits would be exceeded ({', '.join(broken) or 'together'})"


def build_nodes(
    existing: Sequence[ExistingNode],
    names: Sequence[str],
    daemons: DaemonOverhead,
    specs: PodSpecs,
) -> list[SolverNode]:
    """The existing nodes with what is on them (their bound pods read through ``specs``)."""
    if isinstance(existing, ExistingSubset):
        return _nodes_from_view(existing, names, daemons)
    nodes = []
    for index, node in enumerate(existing):
        ports = HostPortUsage()
        for pod in node.pods:
            ports.add(specs.get(pod).host_ports)
        requested = to_vector(names, node.requested)
        requirements = node.label_requirements
        if requirements is None or node.in_flight:
            requirements = Requirements.from_labels(node.labels)
        if node.in_flight:
            # What the claim may still become, not only what it already pins.
            requirements = requirements.merged(node.requirements)
            taints = tuple(node.taints)
            requested = add(requested, to_vector(names, daemons.for_node(requirements, taints)))
        nodes.append(
            SolverNode(
                index, node, requirements, to_vector(names, node.allocatable), requested, ports
            )
        )
    return nodes


def _nodes_from_view(
    existing: ExistingSubset, names: Sequence[str], daemons: DaemonOverhead
) -> list[SolverNode]:
    """``build_nodes`` from what the view built once; only the mutable parts are copied."""
    view = existing.view
    vectors = view.vectors(tuple(names))
    nodes = []
    for index, position in enumerate(existing.kept):
        node = view.nodes[position]
        allocatable, requested = vectors[position]
        requirements = view.requirements[position]
        if node.in_flight:
            requirements = requirements.merged(node.requirements)
            overhead = daemons.for_node(requirements, tuple(node.taints))
            requested = add(requested, to_vector(names, overhead))
        ports = view.ports[position].copy()
        nodes.append(SolverNode(index, node, requirements, allocatable, requested, ports))
    return nodes


def nominated_index(nodes: Sequence[SolverNode]) -> dict[str, list[SolverNode]]:
    """Pod key -> the nodes it is nominated to, in order: looked up per pod, not scanned."""
    index: dict[str, list[SolverNode]] = {}
    for node in nodes:
        for key in node.node.nominated:
            index.setdefault(key, []).append(node)
    return index


def node_window(
    nodes: Sequence[SolverNode], pod_class: PodClass, hosts: frozenset[str] | None
) -> Iterator[SolverNode]:
    """The nodes worth trying for a pod of ``pod_class``, in order (``hosts``: the only
    hostnames its pod affinity accepts, if known).

    The nodes a class can never use again (``rejected_nodes``) are passed over in one step
    wherever they are (``RuledOut``), not tested one by one for every pod, which over 10,000
    nodes was most of a consolidation simulation."""
    rejected = pod_class.rejected_nodes
    if hosts is not None:
        for node in nodes:
            if node.index not in rejected and node.hostname in hosts:
                yield node
        return
    index = rejected.next(0)
    while index < len(nodes):
        yield nodes[index]
        index = rejected.next(index + 1)


def build_topology(
    pools: Sequence[PoolState],
    existing: Sequence[ExistingNode],
    pods: Sequence[PodSpec],
    namespaces: Mapping[str, Mapping[str, str]],
    specs: PodSpecs,
) -> Topology:
    """Topology over every domain a pool or an existing node could put a pod in."""
    domains: dict[str, set[str]] = {}
    for pool in pools:
        for key, requirement in pool.requirements.items():
            if not requirement.complement:
                domains.setdefault(key, set()).update(requirement.values)
        for info in pool.types:
            for key, values in info.instance_type.requirements.items():
                domains.setdefault(key, set()).update(values)
            for offering in compatible_offerings(info.instance_type, pool.requirements):
                domains.setdefault(wellknown.LABEL_TOPOLOGY_ZONE, set()).add(offering.zone)
                domains.setdefault(wellknown.LABEL_CAPACITY_TYPE, set()).add(offering.capacity_type)
    if isinstance(existing, ExistingSubset):
        view = existing.view
        for key, kept in view.domains(existing.gone_nodes()).items():
            domains.setdefault(key, set()).update(kept)
        return Topology(
            domains=domains,
            existing_pods=view.pods,
            pending_pods=pods,
            namespaces=namespaces,
            excluded_nodes=existing.gone,
        )
    existing_pods: list[tuple[PodSpec, NodeInfo]] = []
    for node in existing:
        labels = dict(node.labels)
        labels.setdefault(wellknown.LABEL_HOSTNAME, node.name)
        for key, value in labels.items():
            domains.setdefault(key, set()).add(value)
        node_info = NodeInfo(node.name, labels, tuple(node.taints))
        existing_pods.extend((specs.get(pod), node_info) for pod in node.pods)
    return Topology(
        domains=domains,
        existing_pods=existing_pods,
        pending_pods=pods,
        namespaces=namespaces,
    )


# One pod as largest_first orders it: (negated dominant share, so an ascending sort puts the
# largest first; key; cpu share; memory share; the pod). A plain tuple: one is made per pod per
# round, and a frozen dataclass's __init__ cost more than the sort.
_Ordered = tuple[float, str, float, float, PodSpec]
_SIZE_THEN_KEY = operator.itemgetter(0, 1)


def largest_first(pods: Sequence[PodSpec], pools: Sequence[PoolState]) -> list[PodSpec]:
    """Largest first, interleaving CPU-heavy and memory-heavy pods.

    Karpenter sorts by CPU then memory, so a claim fills with the biggest pods of one shape
    and ends up CPU-bound or memory-bound, paying for what it does not use. Here pods are
    split by which resource they lean on (relative to the largest instance type's
    proportion), each side sorted by its dominant size, and merged so the running totals
    stay in that proportion: consecutive pods, which land on the same claim, then fill its
    CPU and memory together.
    """
    cpu_max = max((pool.largest[0] for pool in pools), default=1)
    memory_max = max((pool.largest[1] for pool in pools), default=1)
    sides: tuple[list[_Ordered], list[_Ordered]] = ([], [])  # CPU-heavy, memory-heavy
    for pod in pods:
        cpu = pod.requests.milli("cpu") / cpu_max
        memory = pod.requests.milli("memory") / memory_max
        sides[memory > cpu].append((-max(cpu, memory), pod.key, cpu, memory, pod))
    for side in sides:
        side.sort(key=_SIZE_THEN_KEY)
    cpu_heavy, memory_heavy = sides
    ordered: list[PodSpec] = []
    cpu_total = memory_total = 0.0
    i = j = 0
    while i < len(cpu_heavy) or j < len(memory_heavy):
        if j >= len(memory_heavy) or (i < len(cpu_heavy) and cpu_total <= memory_total):
            chosen = cpu_heavy[i]
            i += 1
        else:
            chosen = memory_heavy[j]
            j += 1
        cpu_total += chosen[2]
        memory_total += chosen[3]
        ordered.append(chosen[4])
    return ordered


# A window of a claim's types, by the list and where it starts: the window's smallest room in
# each resource, its instance types, and the instance-type requirement naming them.
_Window = tuple[list[TypeInfo], Vector, list[InstanceType], Requirement]


def proposed_claims(
    claims: Sequence[ClaimState], names: Sequence[str], max_instance_types: int
) -> list[ProposedNodeClaim]:
    """A ``ProposedNodeClaim`` per claim (``proposed_claim``), in order.

    Claims share their type lists (a pool's, or one narrowing's) and most start them at one of
    a few cut-offs, so the window of the first ``max_instance_types`` types from a cut-off is
    read once per list and cut-off, not once per claim."""
    windows: dict[tuple[int, int], _Window] = {}
    orders: dict[int, _Order] = {}
    return [proposed_claim(c, names, max_instance_types, windows, orders) for c in claims]


def proposed_claim(
    claim: ClaimState,
    names: Sequence[str],
    max_instance_types: int,
    windows: dict[tuple[int, int], _Window] | None = None,
    orders: dict[int, _Order] | None = None,
) -> ProposedNodeClaim:
    """The NodeClaim to create for ``claim``: every type that still holds its pods, cheapest
    first, at most ``max_instance_types`` of them.

    ``windows``: read windows of type lists (``proposed_claims``); when every type of the
    window holds the claim's total, the window is the answer without checking each type.
    ``orders``: type lists put in price order under the offerings some requirements allow
    (``_price_order``), for claims that narrowed their zone or capacity type."""
    total = add(claim.pods_total, claim.daemon)
    pool_requirements = claim.pool.requirements
    requirements = claim.requirements
    same_offerings = True
    for key in _OFFERING_KEYS:
        mine, pools = requirements.get(key), pool_requirements.get(key)
        if mine is not pools and mine != pools:
            same_offerings = False
            break
    le = operator.le  # fits() inlined: this loop sees up to every type of every claim
    window = None
    if same_offerings and windows is not None:
        window = _window(claim.types, claim.first, max_instance_types, windows)
    if window is not None and all(map(le, total, window[1])):
        # In pool price order and each holds the total: the first that hold it, as below.
        chosen, named = list(window[2]), window[3]
    else:
        types: list[TypeInfo] = []
        for info in claim.types[claim.first :]:
            if all(map(le, total, info.allocatable)):
                types.append(info)
                # In pool price order already unless the claim narrowed zone or capacity type.
                if same_offerings and len(types) == max_instance_types:
                    break
        if not same_offerings:
            types = _price_order(claim.pool, types, requirements, orders)
        chosen = [t.instance_type for t in types[:max_instance_types]]
        named = _instance_types_requirement(chosen)
    return ProposedNodeClaim(
        nodepool=claim.pool.option,
        hostname=claim.hostname,
        requirements=claim.requirements.with_requirement(named),
        instance_types=chosen,
        pods=claim.pods,
        requests=_resource_list(names, total),
        daemon_requests=_resource_list(names, claim.daemon),
    )


def _window(
    types: list[TypeInfo], first: int, size: int, windows: dict[tuple[int, int], _Window]
) -> _Window | None:
    """The (cached) window of ``size`` types of ``types`` from ``first``; ``None`` if empty."""
    key = (id(types), first)
    found = windows.get(key)
    if found is not None and found[0] is types:
        return found
    infos = types[first : first + size]
    if not infos:
        return None
    smallest = tuple(map(min, zip(*(t.allocatable for t in infos), strict=True)))
    chosen = [t.instance_type for t in infos]
    found = (types, smallest, chosen, _instance_types_requirement(chosen))
    windows[key] = found  # the list is kept too, so its id is not reused while cached
    return found


# Per pool: its offerings' own label keys, and per what some requirements say of the keys
# offerings are chosen by, each type's cheapest allowed price by the type's id.
_Order = tuple[PoolState, tuple[str, ...], dict[tuple[object, ...], dict[int, float]]]
_OFFERING_KEYS = (wellknown.LABEL_TOPOLOGY_ZONE, wellknown.LABEL_CAPACITY_TYPE)


def _price_order(
    pool: PoolState,
    types: Iterable[TypeInfo],
    requirements: Requirements,
    orders: dict[int, _Order] | None,
) -> list[TypeInfo]:
    """``types`` (of ``pool``) by their cheapest offering ``requirements`` allow, then name.

    A type's price depends only on what the requirements say of the keys offerings are chosen
    by (zone, capacity type, the offerings' own labels), so claims sharing those share each
    type's price (``orders``) instead of reading its offerings again."""
    found = orders.get(id(pool)) if orders is not None else None
    if found is None or found[0] is not pool:
        keys = {k for t in pool.types for o in t.instance_type.offerings for k in o.labels}
        found = (pool, (*_OFFERING_KEYS, *sorted(keys)), {})
        if orders is not None:
            orders[id(pool)] = found  # the pool is kept too, so its id is not reused
    chosen_by = tuple(requirements.get(k) for k in found[1])
    prices = found[2].get(chosen_by)
    if prices is None:
        prices = found[2][chosen_by] = {}

    def price(info: TypeInfo) -> tuple[float, str]:
        known = prices.get(id(info))
        if known is None:
            known = prices[id(info)] = cheapest_price(info, requirements)
        return known, info.instance_type.name

    return sorted(types, key=price)


def _instance_types_requirement(chosen: Sequence[InstanceType]) -> Requirement:
    # Built directly: the names are strings already and the key is normalized.
    return Requirement(wellknown.LABEL_INSTANCE_TYPE, False, frozenset(t.name for t in chosen))


def _resource_list(names: Sequence[str], vector: Vector) -> ResourceList:
    return ResourceList.from_milli({n: v for n, v in zip(names, vector, strict=True) if v})


def new_pod_class(
    pod: PodSpec,
    names: Sequence[str],
    topology: Topology,
    topology_rejections: dict[tuple[object, ...], RuledOut],
) -> PodClass:
    """What every pod with ``pod``'s scheduling spec (its ``class_key``) shares.

    Classes whose topology constraints are the same share one set of claims those constraints
    rule out, kept in ``topology_rejections`` by the constraints.
    """
    pod_class = PodClass(
        signature=pod.class_key,
        requests=pod.requests,
        vector=to_vector(names, pod.requests),
        requirements=pod.requirements,
        required=pod.required,
        tolerations=pod.tolerations,
        host_ports=pod.host_ports,
        topological=topology.has_constraints(pod),
    )
    if pod_class.topological:
        # Spreads may count only nodes the pod's affinity and tolerations allow, and the
        # topology narrows the pod's own node requirements: all of them are part of the key.
        constraints = (
            pod.topology_signature,
            pod.node_selector,
            pod.node_terms,
            pod.preferred_node_terms,
            pod.tolerations,
        )
        pod_class.topology_rejected = topology_rejections.setdefault(constraints, RuledOut())
    return pod_class
