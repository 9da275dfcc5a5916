"""What a provider can launch: instance types and their offerings.

Plugins describe their inventory with these types (the ``karpenter_capi_instance_types`` hook),
the pricing hooks enrich them, and the solver packs pods onto them. They mirror Karpenter's
``cloudprovider.InstanceType`` and ``Offering``: an instance type is a node shape (capacity,
the overhead the kubelet and system keep for themselves, and the labels every such node has);
an offering is one way to buy it (zone x capacity type) with its price and availability.

Requirements here are the minimal form, ``label key -> allowed values``; the full requirement
algebra (operators, NotIn, Gt/Lt, minValues) lives in ``core.scheduling`` and builds on this.
Everything is frozen: inventories are shared between the solver's threads and cached between
rounds, and ``allocatable`` is computed once per instance type, not per fit check.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from karpenter_capi.core.api.wellknown import (
    LABEL_CAPACITY_TYPE,
    LABEL_INSTANCE_TYPE,
    LABEL_TOPOLOGY_ZONE,
)
from karpenter_capi.core.values.resources import ResourceList, empty
from karpenter_capi.core.values.taints import Taint

Requirements = Mapping[str, frozenset[str]]
"""Label key -> the values a node may have for it (minimal form; see module docstring)."""


def freeze_requirements(requirements: Mapping[str, Iterable[str]]) -> Requirements:
    """A read-only copy with every value set frozen (accepts lists, sets, tuples)."""
    return MappingProxyType({key: frozenset(values) for key, values in requirements.items()})


def requirements_compatible(a: Requirements, b: Requirements) -> bool:
    """True when some node could satisfy both: every key they share has a common value."""
    if len(b) < len(a):
        a, b = b, a
    for key, values in a.items():
        other = b.get(key)
        if other is not None and values.isdisjoint(other):
            return False
    return True


def requirements_allow(requirements: Requirements, key: str, value: str) -> bool:
    """True when ``key=value`` is allowed (a key without requirement allows anything)."""
    allowed = requirements.get(key)
    return allowed is None or value in allowed


@dataclass(frozen=True)
class Offering:
    """One way to buy an instance type: a zone and capacity type, a price, and availability.

    ``price`` is per hour in the provider's currency (only relative order matters to the solver).
    ``labels`` are extra node labels this offering adds (for example a reservation or a
    placement group); ``reservation_id`` names a capacity reservation when the capacity type is
    ``reserved``. ``price_source`` says where the price came from (``annotation``, ``AWS``,
    ``estimate``...) for people reading ``karpenter-capi instance-types``; it takes no part in
    equality or hashing.
    """

    zone: str
    capacity_type: str
    price: float
    available: bool = True
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    reservation_id: str | None = None
    price_source: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.labels, MappingProxyType):
            object.__setattr__(self, "labels", MappingProxyType(dict(self.labels)))

    def __hash__(self) -> int:
        return hash(
            (self.zone, self.capacity_type, self.price, self.available, self.reservation_id)
        )

    @property
    def requirements(self) -> Requirements:
        """The labels a node bought through this offering has, as single-value requirements."""
        result = {key: frozenset((value,)) for key, value in self.labels.items()}
        result[LABEL_TOPOLOGY_ZONE] = frozenset((self.zone,))
        result[LABEL_CAPACITY_TYPE] = frozenset((self.capacity_type,))
        return MappingProxyType(result)

    def compatible_with(self, requirements: Requirements) -> bool:
        """True when this offering's zone, capacity type and labels satisfy ``requirements``."""
        if not requirements_allow(requirements, LABEL_TOPOLOGY_ZONE, self.zone):
            return False
        if not requirements_allow(requirements, LABEL_CAPACITY_TYPE, self.capacity_type):
            return False
        return all(requirements_allow(requirements, k, v) for k, v in self.labels.items())


@dataclass(frozen=True)
class InstanceTypeOverhead:
    """What a node keeps for itself: ``kubeReserved``, ``systemReserved`` and the eviction
    threshold (the kubelet starts evicting before memory is exhausted).

    ``source`` says where the figures came from (``kubeadm default``, ``node worker-abc``,
    ``EKS``...), for people reading ``karpenter-capi instance-types``; it takes no part in
    equality.
    """

    kube_reserved: ResourceList = field(default_factory=empty)
    system_reserved: ResourceList = field(default_factory=empty)
    eviction_threshold: ResourceList = field(default_factory=empty)
    source: str = field(default="", compare=False)

    def total(self) -> ResourceList:
        return self.kube_reserved.add(self.system_reserved).add(self.eviction_threshold)


@dataclass(frozen=True)
class InstanceType:
    """A node shape a provider can launch.

    ``requirements`` are the labels every node of this type has (at least
    ``node.kubernetes.io/instance-type``; typically arch, os, and the zones and capacity types
    of its offerings). ``taints`` are the taints every such node registers with (a Cluster API
    MachineDeployment can declare them for scale from zero). ``allocatable`` is
    ``capacity - overhead`` (never negative), computed once at construction. Equality and
    hashing go by value; two plugins describing the same type with different prices are
    different instance types. ``source`` says where the shape came from (``annotation``,
    ``AWS``, ``template status``...), for display only (not compared).
    """

    name: str
    capacity: ResourceList
    offerings: tuple[Offering, ...] = ()
    requirements: Requirements = field(default_factory=lambda: MappingProxyType({}))
    overhead: InstanceTypeOverhead = field(default_factory=InstanceTypeOverhead)
    taints: tuple[Taint, ...] = ()
    source: str = field(default="", compare=False)
    allocatable: ResourceList = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.offerings, tuple):
            object.__setattr__(self, "offerings", tuple(self.offerings))
        if not isinstance(self.taints, tuple):
            object.__setattr__(self, "taints", tuple(self.taints))
        requirements = dict(self.requirements)
        requirements.setdefault(LABEL_INSTANCE_TYPE, frozenset((self.name,)))
        object.__setattr__(self, "requirements", freeze_requirements(requirements))
        allocatable = self.capacity.subtract(self.overhead.total()).clamp_non_negative()
        object.__setattr__(self, "allocatable", allocatable)

    def __hash__(self) -> int:
        return hash((self.name, self.capacity, self.offerings))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, InstanceType):
            return NotImplemented
        return (
            self.name == other.name
            and self.capacity == other.capacity
            and self.offerings == other.offerings
            and dict(self.requirements) == dict(other.requirements)
            and self.overhead == other.overhead
            and self.taints == other.taints
        )

    def available_offerings(self) -> tuple[Offering, ...]:
        """Offerings that can be bought right now."""
        return tuple(offering for offering in self.offerings if offering.available)

    def offerings_for(
        self,
        *,
        zones: Iterable[str] | None = None,
        capacity_types: Iterable[str] | None = None,
        available_only: bool = True,
    ) -> tuple[Offering, ...]:
        """Offerings in the given zones and capacity types (``None`` = any)."""
        zone_set = None if zones is None else frozenset(zones)
        capacity_set = None if capacity_types is None else frozenset(capacity_types)
        return tuple(
            offering
            for offering in self.offerings
            if (offering.available or not available_only)
            and (zone_set is None or offering.zone in zone_set)
            and (capacity_set is None or offering.capacity_type in capacity_set)
        )

    def compatible_offerings(self, requirements: Requirements) -> tuple[Offering, ...]:
        """Available offerings whose zone, capacity type and labels satisfy ``requirements``."""
        return tuple(o for o in self.offerings if o.available and o.compatible_with(requirements))

    def cheapest_offering(
        self,
        *,
        zones: Iterable[str] | None = None,
        capacity_types: Iterable[str] | None = None,
    ) -> Offering | None:
        """The cheapest available offering (optionally within zones/capacity types), or None.

        Ties are broken by zone then capacity type so the choice is deterministic.
        """
        candidates = self.offerings_for(zones=zones, capacity_types=capacity_types)
        if not candidates:
            return None
        return min(candidates, key=lambda o: (o.price, o.zone, o.capacity_type))

    def compatible(self, requirements: Requirements) -> bool:
        """True when a node of this type can satisfy ``requirements`` with some offering."""
        if not requirements_compatible(self.requirements, requirements):
            return False
        return bool(self.compatible_offerings(requirements))

    def with_offerings(self, offerings: Iterable[Offering]) -> InstanceType:
        """A copy with other offerings (what a pricing plugin returns)."""
        return InstanceType(
            name=self.name,
            capacity=self.capacity,
            offerings=tuple(offerings),
            requirements=self.requirements,
            overhead=self.overhead,
            taints=self.taints,
            source=self.source,
        )
