"""The solver's working state: instance types, NodePools and proposed NodeClaims as vectors.

Why a module of its own: the greedy pass (``solver.py``) builds and fills these, and the
re-packing stage (``repack.py``) reads them and builds claims of the same kind, so both share
one definition. Resources are integer vectors (milli-units) in the order
``Solver._index_resources`` fixes: cpu, memory, pods, then the rest by name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from karpenter_capi.core.instancetype import InstanceType
from karpenter_capi.core.scheduling.hostports import HostPort, HostPortUsage
from karpenter_capi.core.scheduling.model import NodePoolOption, Pod, compatible_offerings
from karpenter_capi.core.scheduling.requirements import Requirements
from karpenter_capi.core.scheduling.resources import ResourceList
from karpenter_capi.core.scheduling.taints import Taint

Vector = tuple[int, ...]

HOSTNAME_PLACEHOLDER: Final = "hostname-placeholder-"
"""What a proposed claim's hostname starts with, until a node has a real one."""


def fits(total: Vector, allocatable: Vector) -> bool:
    # A plain loop: the hottest function of a solve, and faster than all() over a generator.
    for used, available in zip(total, allocatable, strict=True):  # noqa: SIM110
        if used > available:
            return False
    return True


def add(a: Vector, b: Vector) -> Vector:
    return tuple(x + y for x, y in zip(a, b, strict=True))


@dataclass(eq=False)
class TypeInfo:
    instance_type: InstanceType
    allocatable: Vector
    capacity: Vector
    requirements: Requirements
    price: float


@dataclass(eq=False)
class PoolState:
    option: NodePoolOption
    requirements: Requirements
    types: list[TypeInfo]
    remaining: Vector | None  # limits minus usage minus proposed claims; None: unlimited
    min_values: bool
    tainted_types: bool
    largest: tuple[int, int]  # the most CPU and memory any of its types offers


@dataclass(eq=False)
class PodClass:
    """What every pod with this scheduling spec shares."""

    signature: str
    requests: ResourceList
    vector: Vector
    requirements: Requirements | None
    required: Requirements  # without the preferred node-affinity term: what topology reads
    tolerations: Sequence[Mapping[str, Any]]
    host_ports: tuple[HostPort, ...]
    topological: bool
    pool_taint: dict[str, Taint | None] = field(default_factory=dict)
    # Nodes and claims that can never take this class again, by index.
    rejected_claims: set[int] = field(default_factory=set)
    rejected_nodes: set[int] = field(default_factory=set)
    # Claims that can never take a pod with these topology constraints, whatever its size:
    # shared by every class with the same constraints (see Solver._class_of).
    topology_rejected: set[int] = field(default_factory=set)
    # Claims that refused it for what is on them alone, and their version at the time.
    unchanged_refusals: dict[int, int] = field(default_factory=dict)
    first_claim: int = 0


@dataclass(eq=False)
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
    pods: list[Pod] = field(default_factory=list)
    version: int = 0  # bumped whenever a pod is added


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
    # The resource index puts cpu, memory, pods first; see Solver._index_resources.
    return (*capacity[:2], 1000, *capacity[3:])
