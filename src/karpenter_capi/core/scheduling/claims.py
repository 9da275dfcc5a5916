"""The solver's working state: instance types, NodePools and proposed NodeClaims as vectors.

Why a module of its own: the greedy pass (``solver.py``) builds and fills these, and the
re-packing stage (``repack.py``) reads them and builds claims of the same kind, so both share
one definition, and the questions asked of them that need no solver state (which type still
fits, which types a pod class tolerates) live with them. Resources are integer vectors
(milli-units) in the order ``_solver_view.resource_names`` fixes: cpu, memory, pods, then the
rest by name.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.instancetype import InstanceType
from karpenter_capi.core.scheduling.hostports import HostPort, HostPortUsage
from karpenter_capi.core.scheduling.podspec import PodObject
from karpenter_capi.core.scheduling.preferences import strictly_untolerated
from karpenter_capi.core.scheduling.solver_io import NodePoolOption, compatible_offerings
from karpenter_capi.core.values.refusal import Refusal
from karpenter_capi.core.values.requirements import Requirements
from karpenter_capi.core.values.resources import ResourceList
from karpenter_capi.core.values.taints import Taint, Toleration

Vector = tuple[int, ...]

HOSTNAME_PLACEHOLDER: Final = "hostname-placeholder-"
"""What a proposed claim's hostname starts with, until a node has a real one."""


def fits(total: Vector, allocatable: Vector) -> bool:
    # all() over map(operator.le): the hottest function of a solve, and about twice as fast as
    # a Python loop (no frame per element). Vectors of one solve have one length.
    return all(map(operator.le, total, allocatable))


def to_vector(names: Sequence[str], resources: ResourceList) -> Vector:
    return tuple(resources.milli(name) for name in names)


def add(a: Vector, b: Vector) -> Vector:
    # map over operator.add: about twice as fast as a generator, on the solver's hot path.
    # Vectors of one solve all have the length resource_names gives them.
    return tuple(map(operator.add, a, b))


@dataclass(eq=False, slots=True)
class TypeInfo:
    instance_type: InstanceType
    allocatable: Vector
    capacity: Vector
    requirements: Requirements
    price: float


@dataclass(eq=False, slots=True)
class PoolState:
    option: NodePoolOption
    requirements: Requirements
    types: list[TypeInfo]
    remaining: Vector | None  # limits minus usage minus proposed claims; None: unlimited
    min_values: bool
    tainted_types: bool
    largest: tuple[int, int]  # the most CPU and memory any of its types offers


class RuledOut:
    """Indexes (of claims or nodes) ruled out for good, skipped in one step.

    ``next(i)`` is the first index from ``i`` on not ruled out. A ruled-out index keeps a jump
    to a later index with every index in between ruled out too, and each lookup shortens the
    jumps it follows, so a pod walks past the claims its class ruled out anywhere in the list,
    not only a leading run of them, at a near-constant cost: without it every pod of a class
    tested each of them again (quadratic in the number of claims).
    """

    __slots__ = ("_jump",)

    def __init__(self) -> None:
        self._jump: dict[int, int] = {}

    def __contains__(self, index: int) -> bool:
        return index in self._jump

    def __len__(self) -> int:
        return len(self._jump)

    def add(self, index: int) -> None:
        jump = self._jump
        if index not in jump:
            jump[index] = index + 1

    def add_run(self, start: int, end: int) -> None:
        """Rule out ``start`` up to (not including) ``end``, known ruled out elsewhere."""
        if end > start:
            self._jump[start] = max(end, self._jump.get(start, end))

    def next(self, index: int) -> int:
        jump = self._jump
        target = jump.get(index)
        if target is None:
            return index
        path = [index]
        following = jump.get(target)
        while following is not None:
            path.append(target)
            target = following
            following = jump.get(target)
        for passed in path:
            jump[passed] = target
        return target


def next_allowed(index: int, *ruled: RuledOut) -> int:
    """The first index from ``index`` on that none of ``ruled`` rules out."""
    while True:
        start = index
        for each in ruled:
            index = each.next(index)
        if index == start:
            return index


@dataclass(eq=False, slots=True)
class PodClass:
    """What every pod with this scheduling spec shares."""

    signature: str
    requests: ResourceList
    vector: Vector
    requirements: Requirements | None
    required: Requirements  # without the preferred node-affinity term: what topology reads
    tolerations: Sequence[Toleration]
    host_ports: tuple[HostPort, ...]
    topological: bool
    pool_taint: dict[str, Taint | None] = field(default_factory=dict)
    # Nodes and claims that can never take this class again, by index.
    rejected_claims: RuledOut = field(default_factory=RuledOut)
    rejected_nodes: RuledOut = field(default_factory=RuledOut)
    # Claims that can never take a pod with these topology constraints, whatever its size:
    # shared by every class with the same constraints (see _solver_view.new_pod_class).
    topology_rejected: RuledOut = field(default_factory=RuledOut)
    # By the zones its zonal pod affinity accepts: the claims held to other zones. Claims only
    # narrow, so a claim held to other zones stays so while the zones accepted are the same.
    elsewhere: dict[frozenset[str], RuledOut] = field(default_factory=dict)
    # By the same zones (None: any zone), every claim one of the three above rules out, in
    # runs: a class's search crosses a run it saw before in one step (``claim_window``).
    passed: dict[frozenset[str] | None, RuledOut] = field(default_factory=dict)
    # Claims that refused it for what is on them alone, and their version at the time.
    unchanged_refusals: dict[int, int] = field(default_factory=dict)
    # A NodePool's requirements (by its name) merged with the class's.
    pool_requirements: dict[str, Requirements] = field(default_factory=dict)
    # A claim's requirements (by identity) merged with the class's, or why they conflict.
    merged: dict[int, tuple[Requirements, Requirements | Refusal]] = field(default_factory=dict)


# The checks of a claim for a pod class that read nothing else (claim_fit._prepare_fit): the
# claim's requirements merged with the class's, the pods' total with it, that plus the
# DaemonSets, the first type that holds it, whether the class tolerates every type, and the
# answer when the topology leaves the claim's requirements as they are, once found.
Prepared = tuple[Requirements, Vector, Vector, int, bool, "Fit | Refusal | None"]


@dataclass(eq=False, slots=True)
class Fit:
    """A claim as it would be with one more pod (see ``Solver._fit_claim``)."""

    claim: ClaimState
    requirements: Requirements
    types: list[TypeInfo]
    first: int
    pods_total: Vector
    daemon: Vector
    total: Vector  # pods_total + daemon, what the claim's type must hold


@dataclass(eq=False, slots=True)
class ClaimState:
    index: int
    pool: PoolState
    hostname: str
    requirements: Requirements
    taints: tuple[Taint, ...]
    types: list[TypeInfo]
    first: int  # types[:first] cannot hold the pods any more
    pods_total: Vector
    daemon: Vector
    ports: HostPortUsage
    reserved: Vector  # what it counts against the NodePool's limits
    pods: list[PodObject] = field(default_factory=list)
    version: int = 0  # bumped whenever a pod is added
    # Per pod class, what the solver found on the claim as it is (Solver._fit_claim): emptied
    # whenever a pod is added.
    seen: dict[PodClass, Prepared | Fit | Refusal] = field(default_factory=dict)


def cheapest_price(info: TypeInfo, requirements: Requirements) -> float:
    offerings = compatible_offerings(info.instance_type, requirements)
    return min((o.price for o in offerings), default=float("inf"))


def max_capacity(types: Iterable[TypeInfo]) -> Vector:
    result: Vector | None = None
    for info in types:
        result = (
            info.capacity
            if result is None
            else tuple(max(a, b) for a, b in zip(result, info.capacity, strict=True))
        )
    assert result is not None
    return result


def limit_use(capacity: Vector) -> Vector:
    """A node's capacity as it counts against limits: the ``pods`` slot counts one node."""
    # The resource index puts cpu, memory, pods first; see _solver_view.resource_names.
    return (*capacity[:2], 1000, *capacity[3:])


def type_tolerated(info: TypeInfo, pod_class: PodClass) -> bool:
    """Whether the pod class tolerates every taint of the instance type."""
    taints = info.instance_type.taints
    return not taints or strictly_untolerated(pod_class.tolerations, taints) is None


def first_fit(
    types: list[TypeInfo],
    first: int,
    total: Vector,
    pod_class: PodClass,
    *,
    tolerated: bool = False,
) -> int | None:
    """Index of the cheapest type from ``first`` on that holds ``total``.

    ``tolerated``: the pod class is known to tolerate every type (``tolerates_every_type``),
    so only room is checked.
    """
    le = operator.le
    for index in range(first, len(types)):
        info = types[index]
        if all(map(le, total, info.allocatable)) and (tolerated or type_tolerated(info, pod_class)):
            return index
    return None


def untolerated_pool_taint(pod_class: PodClass, pool: PoolState) -> Taint | None:
    """The NodePool's first taint the pod class does not tolerate (cached per class)."""
    name = pool.option.name
    if name not in pod_class.pool_taint:
        pod_class.pool_taint[name] = strictly_untolerated(pod_class.tolerations, pool.option.taints)
    return pod_class.pool_taint[name]


def tolerates_every_type(pod_class: PodClass, pool: PoolState) -> bool:
    """Whether no instance type of the pool has a taint this pod class does not tolerate."""
    if not pool.tainted_types:
        return True
    key = f"types:{pool.option.name}"
    if key not in pod_class.pool_taint:
        pod_class.pool_taint[key] = next(
            (
                taint
                for info in pool.types
                if (taint := strictly_untolerated(pod_class.tolerations, info.instance_type.taints))
            ),
            None,
        )
    return pod_class.pool_taint[key] is None


def imbalance(claim: ClaimState, total: Vector) -> float:
    """How lopsided a claim's CPU and memory would be with ``total`` (pods and DaemonSets) on
    it, relative to its pool's largest type.

    0 when both are used in the proportion the largest type offers them.
    """
    cpu_max, memory_max = claim.pool.largest
    return abs(total[0] / cpu_max - total[1] / memory_max)


def min_values_problem(
    requirements: Requirements, types: Sequence[TypeInfo], total: Vector
) -> Refusal | None:
    """Why the types that hold ``total`` would not meet the requirements' minValues."""
    values: dict[str, set[str]] = {}
    for info in types:
        if not fits(total, info.allocatable):
            continue
        for key, allowed in info.instance_type.requirements.items():
            values.setdefault(key, set()).update(allowed)
    return requirements.min_values_problem(values)


def claim_window(
    claims: Sequence[ClaimState],
    by_host: Mapping[str, ClaimState],
    pod_class: PodClass,
    hosts: Iterable[str] | None,
    zones: frozenset[str] | None = None,
) -> Iterator[ClaimState]:
    """The proposed claims a pod of ``pod_class`` may go to, in order.

    With ``hosts`` (the hostnames its pod affinity needs it next to), only the claims holding
    one. Otherwise every claim but those this class, or its topology constraints, ruled out
    for good, each passed over in one step (``RuledOut``) wherever it is in the list; and
    those in the class's ``elsewhere`` for ``zones``, the only zones its zonal pod affinity
    accepts (the claims held to others).
    """
    rejected = pod_class.rejected_claims
    by_topology = pod_class.topology_rejected
    if hosts is not None:
        near = sorted((by_host[h] for h in hosts if h in by_host), key=lambda c: c.index)
        for claim in near:
            if claim.index not in rejected and claim.index not in by_topology:
                yield claim
        return
    elsewhere = None if zones is None else pod_class.elsewhere.get(zones)
    ruled = (rejected, by_topology) if elsewhere is None else (rejected, by_topology, elsewhere)
    # Most claims are ruled out by none: a lookup in each tells, before any jump is followed.
    own, shared = rejected._jump, by_topology._jump
    other = elsewhere._jump if elsewhere is not None else {}
    # What the three ruled out, as this class's earlier searches with these zones found it: a
    # run of claims ruled out by turns by each (full for the class, then holding a pod its
    # anti-affinity repels, then full again) is crossed in one jump instead of one per source.
    # Claims are never let back in, so what was found stays true.
    passed = pod_class.passed.get(zones)
    if passed is None:
        passed = pod_class.passed[zones] = RuledOut()
    runs = passed._jump
    index = passed.next(0)
    # Claims are only appended during a solve, so the length is read again each step.
    while index < len(claims):
        if index in own or index in shared or index in other:
            start = index
            index = next_allowed(index, *ruled)
            passed.add_run(start, index)
            continue
        yield claims[index]
        index += 1
        if index in runs:
            index = passed.next(index)


def merged_requirements(pod_class: PodClass, requirements: Requirements) -> Requirements | Refusal:
    """A claim's requirements with the pod class's, or why they conflict (cached per class)."""
    assert pod_class.requirements is not None
    if not pod_class.requirements:
        return requirements  # nothing asked: no conflict, and merging adds nothing
    cache = pod_class.merged
    cached = cache.get(id(requirements))
    if cached is not None and cached[0] is requirements:
        return cached[1]
    why = requirements.incompatibility(pod_class.requirements)
    merged: Requirements | Refusal
    if why is not None:
        merged = why
    else:
        merged = requirements.merged(pod_class.requirements)
        if merged == requirements:
            merged = requirements  # keep identity: the claim's fast path relies on it
    cache[id(requirements)] = (requirements, merged)
    return merged


class CompatibleTypes:
    """A pool's types (price order) that some requirements and a pod's tolerations allow.

    Cached by the requirements without the hostname, which every claim has its own of and no
    instance type speaks about; the list is shared, so callers never change it.
    """

    __slots__ = ("_cache",)

    def __init__(self) -> None:
        self._cache: dict[tuple[int, Requirements, str], list[TypeInfo]] = {}

    def __call__(
        self, pool: PoolState, requirements: Requirements, pod_class: PodClass
    ) -> list[TypeInfo]:
        relevant = Requirements(
            r for key, r in requirements.items() if key != wellknown.LABEL_HOSTNAME
        )
        return self.by_relevant(pool, relevant, pod_class)

    def by_relevant(
        self, pool: PoolState, relevant: Requirements, pod_class: PodClass
    ) -> list[TypeInfo]:
        """The same for requirements known to say nothing of the hostname."""
        tolerations = pod_class.signature if pool.tainted_types else ""
        cache_key = (id(pool), relevant, tolerations)
        cached = self._cache.get(cache_key)
        if cached is None:
            cached = [
                t
                for t in pool.types
                if relevant.conflict_with(t.requirements) is None
                and compatible_offerings(t.instance_type, relevant)
                and type_tolerated(t, pod_class)
            ]
            self._cache[cache_key] = cached
        return cached
