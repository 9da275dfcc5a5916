"""The instance types a ``CAPAFleet`` NodeClass offers: the region's EC2 catalog, priced.

There are no scalable resources behind such a NodeClass, so its inventory is what EC2 sells in
the region (``DescribeInstanceTypes`` and ``DescribeInstanceTypeOfferings`` for the whole
region, paged once and cached for 6 hours), in the zones the NodeClass has subnets in, as
on-demand and spot offerings priced from the same price book the ``capa`` plugin keeps for
AWSMachineTemplates. NodePool requirements narrow it down as for any provider.

A type with no on-demand price while prices are loaded is left out (AWS does not sell it as a
plain Linux instance there); a spot offering needs a spot price in its zone. Before any price
is loaded, on-demand offerings carry a shape-based estimate (``price_source`` ``estimate``) so
that a cluster without Pricing API access still launches, and no spot offering is made.
Offerings in the unavailable-offerings cache (a recent capacity error) are marked unavailable.
The overhead is kubeadm's default (hard eviction thresholds), as for any kubeadm node.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from karpenter_capi.plugin_api import InstanceType, Offering
from karpenter_capi.plugin_api.karpenter import wellknown
from karpenter_capi.plugins._cloud.metrics import CloudMetrics, timed
from karpenter_capi.plugins._cloud.pricebook import PriceSnapshot
from karpenter_capi.plugins._cloud.unavailable import UnavailableOfferings
from karpenter_capi.plugins.capa.catalog import InstanceTypeInfo, instance_type_info
from karpenter_capi.plugins.generic_capi.overhead import default_overhead

SOURCE: Final = "AWS"
_ESTIMATE_PER_VCPU: Final = 0.0425
_ESTIMATE_PER_GIB: Final = 0.0057


@dataclass(frozen=True)
class RegionCatalog:
    """Every instance type EC2 sells in a region that can be a node, and its zones."""

    region: str
    types: Mapping[str, InstanceTypeInfo]
    zones: Mapping[str, frozenset[str]]


def load_region_catalog(ec2: Any, region: str, metrics: CloudMetrics | None) -> RegionCatalog:
    """Page through the region's instance types and their zone offerings."""
    types: dict[str, InstanceTypeInfo] = {}
    with timed(metrics, "DescribeInstanceTypes"):
        for page in ec2.get_paginator("describe_instance_types").paginate():
            for raw in page.get("InstanceTypes") or []:
                info = instance_type_info(raw)
                if info is not None:
                    types[info.name] = info
    zones: dict[str, set[str]] = {}
    with timed(metrics, "DescribeInstanceTypeOfferings"):
        paginator = ec2.get_paginator("describe_instance_type_offerings")
        for page in paginator.paginate(LocationType="availability-zone"):
            for offering in page.get("InstanceTypeOfferings") or []:
                name = str(offering.get("InstanceType") or "")
                if name in types:
                    zones.setdefault(name, set()).add(str(offering["Location"]))
    return RegionCatalog(region, types, {name: frozenset(found) for name, found in zones.items()})


def _estimate(info: InstanceTypeInfo) -> float:
    return round(info.vcpus * _ESTIMATE_PER_VCPU + info.memory_mib / 1024 * _ESTIMATE_PER_GIB, 4)


def fleet_instance_types(
    catalog: RegionCatalog,
    zones: frozenset[str],
    snapshot: PriceSnapshot | None,
    unavailable: UnavailableOfferings,
    max_pods: int | None = None,
    *,
    arch: str | None = None,
) -> list[InstanceType]:
    """The inventory of a fleet NodeClass whose subnets are in ``zones`` (and whose image runs
    on ``arch``: an arm64 type offered to an x86_64 AMI would only fail at launch)."""
    result: list[InstanceType] = []
    for name in sorted(catalog.types):
        info = catalog.types[name]
        if arch is not None and info.arch != arch:
            continue
        where = sorted(catalog.zones.get(name, frozenset()) & zones)
        if not where:
            continue
        on_demand = snapshot.on_demand.get(name) if snapshot else _estimate(info)
        if snapshot is not None and on_demand is None:
            continue
        offerings: list[Offering] = []
        for zone in where:
            if on_demand is not None:
                offerings.append(
                    _offering(
                        unavailable,
                        name=name,
                        zone=zone,
                        capacity_type=wellknown.CAPACITY_TYPE_ON_DEMAND,
                        price=on_demand,
                        source=SOURCE if snapshot else "estimate",
                    )
                )
            spot = snapshot.spot.get((name, zone)) if snapshot else None
            if spot is not None:
                offerings.append(
                    _offering(
                        unavailable,
                        name=name,
                        zone=zone,
                        capacity_type=wellknown.CAPACITY_TYPE_SPOT,
                        price=spot,
                        source=SOURCE,
                    )
                )
        if not offerings:
            continue
        capacity = info.capacity(max_pods)
        result.append(
            InstanceType(
                name=name,
                capacity=capacity,
                offerings=tuple(offerings),
                requirements={
                    wellknown.LABEL_ARCH: frozenset((info.arch,)),
                    wellknown.LABEL_OS: frozenset(("linux",)),
                    wellknown.LABEL_TOPOLOGY_ZONE: frozenset(o.zone for o in offerings),
                    wellknown.LABEL_CAPACITY_TYPE: frozenset(o.capacity_type for o in offerings),
                },
                overhead=default_overhead(capacity),
                source=SOURCE,
            )
        )
    return result


def _offering(
    unavailable: UnavailableOfferings,
    *,
    name: str,
    zone: str,
    capacity_type: str,
    price: float,
    source: str,
) -> Offering:
    return Offering(
        zone=zone,
        capacity_type=capacity_type,
        price=price,
        available=not unavailable.is_unavailable(name, zone, capacity_type),
        price_source=source,
    )
