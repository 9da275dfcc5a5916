"""How much of a node the kubelet keeps for itself, and which source says so.

The solver packs pods into ``capacity - overhead``; reserving more than the kubelet does buys
nodes nobody needs, reserving less overcommits them. Cluster API nodes are mostly kubeadm
nodes, which reserve nothing but the kubelet's hard eviction thresholds unless their bootstrap
config says otherwise, so that is the default here. Per scalable resource, strongest first:

1. ``explicit``: the NodeClass annotations ``karpenter.cluster.x-k8s.io/{kube-reserved,
   system-reserved,eviction-threshold}`` over the plugin options ``generic_capi.{kube_reserved,
   system_reserved,eviction_threshold}`` (per resource name), laid over the static base below
   (sources 3-5), so setting only ``cpu`` keeps the base's ``memory``;
2. ``learned``: ``status.capacity - status.allocatable`` of a real Node of the resource
   (``learned.NodeOverheads``), which is what the kubelet actually did;
3. the kubelet settings of the resource's kubeadm bootstrap config (``kubelet``): its
   kube-reserved, system-reserved and eviction-hard, kubeadm's defaults for what it leaves out;
4. a native plugin's platform formula (``MachineTemplateDescription.overhead``: EKS's on an EKS
   cluster);
5. kubeadm's defaults: no kube-reserved, no system-reserved, hard eviction at 100Mi of memory
   and 10% of the node filesystem (``ephemeral-storage``).

Every result carries its ``source`` (``annotation+kubeadm default``, ``node worker-abc``,
``kubeadm-config``, ``EKS``, ``kubeadm default``) for ``karpenter-capi instance-types``, and a
rank, so an instance type whose resources disagree takes its strongest member's (the largest
when they tie: overestimating only costs a little money). Nothing here does I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from types import MappingProxyType
from typing import Final

from karpenter_capi.plugin_api import InstanceTypeOverhead, ResourceList, parse_quantity
from karpenter_capi.plugin_api.karpenter import QuantityError

Reservation = Mapping[str, int | Fraction]
"""Resource name -> an absolute amount in milli-units (int) or a share of capacity (Fraction)."""

SOURCE_KUBEADM_DEFAULT: Final = "kubeadm default"
SOURCE_KUBEADM_CONFIG: Final = "kubeadm-config"
SOURCE_NODE: Final = "node"
SOURCE_ANNOTATION: Final = "annotation"
SOURCE_OPTION: Final = "plugin option"

# Ranks of the sources above (higher wins when an instance type's resources disagree).
RANK_DEFAULT: Final = 0
RANK_NATIVE: Final = 1
RANK_KUBEADM_CONFIG: Final = 2
RANK_NODE: Final = 3
RANK_EXPLICIT: Final = 4

_MIB: Final = 1024 * 1024

KUBEADM_EVICTION_HARD: Final[Reservation] = MappingProxyType(
    {"memory": 100 * _MIB * 1000, "ephemeral-storage": Fraction(10, 100)}
)
"""The kubelet's default hard eviction thresholds that shrink allocatable: ``memory.available``
100Mi and ``nodefs.available`` 10% (kubeadm does not change them)."""

_EMPTY: Final[Reservation] = MappingProxyType({})


class SettingsError(ValueError):
    """A malformed overhead or price-estimate setting; the message names where it came from."""


def parse_reservation(raw: str, where: str) -> dict[str, int | Fraction]:
    """Parse ``cpu=100m,memory=1Gi,ephemeral-storage=10%`` (``where`` names the source)."""
    result: dict[str, int | Fraction] = {}
    for item in filter(None, (part.strip() for part in raw.split(","))):
        name, sep, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name or not value:
            raise SettingsError(f"{where}: {item!r} is not resource=quantity or resource=N%")
        result[name] = parse_amount(value, f"{where}: {item!r}")
    return result


def parse_amount(value: str, where: str) -> int | Fraction:
    """``1Gi`` as milli-units, or ``10%`` as a share; ``SettingsError`` naming ``where``."""
    if value.endswith("%"):
        try:
            share = Fraction(value[:-1].strip())
        except (ValueError, ZeroDivisionError):
            raise SettingsError(f"{where}: {value!r} is not a percentage") from None
        if not 0 <= share <= 100:
            raise SettingsError(f"{where}: a percentage must be within 0-100")
        return share / 100
    try:
        quantity = parse_quantity(value)
    except QuantityError as exc:
        raise SettingsError(f"{where}: {exc}") from None
    if quantity.nanos < 0:
        raise SettingsError(f"{where}: must not be negative")
    return quantity.milli_value()


def amounts(reservation: Reservation, capacity: ResourceList) -> ResourceList:
    """Absolute amounts of ``reservation`` on a node of ``capacity`` (shares rounded up)."""
    milli: dict[str, int] = {}
    for name, amount in reservation.items():
        if isinstance(amount, Fraction):
            if name not in capacity:
                continue  # a share of nothing
            milli[name] = math.ceil(capacity.milli(name) * amount)
        else:
            milli[name] = amount
    return ResourceList.from_milli(milli)


@dataclass(frozen=True)
class Components:
    """kube-reserved, system-reserved and eviction threshold, before applying to a capacity."""

    kube_reserved: Reservation = field(default_factory=lambda: _EMPTY)
    system_reserved: Reservation = field(default_factory=lambda: _EMPTY)
    eviction_threshold: Reservation = field(default_factory=lambda: KUBEADM_EVICTION_HARD)

    @classmethod
    def of(cls, overhead: InstanceTypeOverhead) -> Components:
        def milli(resources: ResourceList) -> Reservation:
            return MappingProxyType({name: resources.milli(name) for name in resources})

        return cls(
            milli(overhead.kube_reserved),
            milli(overhead.system_reserved),
            milli(overhead.eviction_threshold),
        )

    def overhead(self, capacity: ResourceList, source: str) -> InstanceTypeOverhead:
        return InstanceTypeOverhead(
            kube_reserved=amounts(self.kube_reserved, capacity),
            system_reserved=amounts(self.system_reserved, capacity),
            eviction_threshold=amounts(self.eviction_threshold, capacity),
            source=source,
        )


@dataclass(frozen=True)
class OverheadPolicy:
    """The explicit overhead settings of a NodeClass (annotations over plugin options).

    Each maps resource names to amounts; shares (``10%``) are of the node's capacity of that
    resource. ``origin`` is ``annotation`` or ``plugin option`` (the strongest that said
    anything), empty when nothing was set: then ``overhead`` gives kubeadm's defaults.
    """

    kube_reserved: Reservation = field(default_factory=lambda: MappingProxyType({}))
    system_reserved: Reservation = field(default_factory=lambda: MappingProxyType({}))
    eviction_threshold: Reservation = field(default_factory=lambda: MappingProxyType({}))
    origin: str = field(default="", compare=False)

    @property
    def explicit(self) -> bool:
        return bool(self.kube_reserved or self.system_reserved or self.eviction_threshold)

    def over(self, base: Components) -> Components:
        """These settings laid over ``base``, per component and resource name."""
        return Components(
            {**base.kube_reserved, **self.kube_reserved},
            {**base.system_reserved, **self.system_reserved},
            {**base.eviction_threshold, **self.eviction_threshold},
        )

    def overhead(self, capacity: ResourceList) -> InstanceTypeOverhead:
        """These settings over kubeadm's defaults, for a node of ``capacity``."""
        source = f"{self.origin}+{SOURCE_KUBEADM_DEFAULT}" if self.explicit else ""
        return self.over(Components()).overhead(capacity, source or SOURCE_KUBEADM_DEFAULT)


def default_overhead(capacity: ResourceList) -> InstanceTypeOverhead:
    """kubeadm's overhead on a node of ``capacity``: only the hard eviction thresholds."""
    return Components().overhead(capacity, SOURCE_KUBEADM_DEFAULT)


@dataclass(frozen=True)
class LearnedOverhead:
    """``status.capacity - status.allocatable`` of Node ``node`` (absolute amounts)."""

    node: str
    reserved: ResourceList


@dataclass(frozen=True)
class ResolvedOverhead:
    """One scalable resource's overhead, and how strong its source is (``RANK_*``)."""

    overhead: InstanceTypeOverhead
    rank: int


def resolve_overhead(
    capacity: ResourceList,
    *,
    policy: OverheadPolicy | None = None,
    learned: LearnedOverhead | None = None,
    kubeadm_config: Components | None = None,
    kubeadm_source: str = SOURCE_KUBEADM_CONFIG,
    native: InstanceTypeOverhead | None = None,
) -> ResolvedOverhead:
    """The overhead of a node of ``capacity`` from the strongest source (module docstring).

    ``kubeadm_config`` is what the bootstrap config declares (``None`` when it declares
    nothing or could not be read); ``native`` a native plugin's platform formula.
    """
    if kubeadm_config is not None:
        base, base_source, rank = kubeadm_config, kubeadm_source, RANK_KUBEADM_CONFIG
    elif native is not None:
        base = Components.of(native)
        base_source, rank = native.source or "native", RANK_NATIVE
    else:
        base, base_source, rank = Components(), SOURCE_KUBEADM_DEFAULT, RANK_DEFAULT
    if policy is not None and policy.explicit:
        source = f"{policy.origin or SOURCE_ANNOTATION}+{base_source}"
        return ResolvedOverhead(policy.over(base).overhead(capacity, source), RANK_EXPLICIT)
    if learned is not None:
        overhead = InstanceTypeOverhead(
            kube_reserved=learned.reserved, source=f"{SOURCE_NODE} {learned.node}"
        )
        return ResolvedOverhead(overhead, RANK_NODE)
    return ResolvedOverhead(base.overhead(capacity, base_source), rank)


def strongest(resolved: Iterable[ResolvedOverhead]) -> InstanceTypeOverhead:
    """The overhead of an instance type from its resources': the strongest source, then the
    largest total reservation (compared per resource, summed in milli-units)."""

    def order(item: ResolvedOverhead) -> tuple[int, int, str]:
        total = item.overhead.total()
        return item.rank, sum(total.milli(name) for name in total), item.overhead.source

    items = list(resolved)
    if len(items) == 1:
        return items[0].overhead  # the usual case, on every launch call: nothing to compare
    return max(items, key=order).overhead
