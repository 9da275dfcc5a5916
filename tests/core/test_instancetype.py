"""Instance types, offerings, allocatable and the offering helpers; provider errors."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest

from karpenter_capi.core.api.wellknown import (
    CAPACITY_TYPE_ON_DEMAND,
    CAPACITY_TYPE_SPOT,
    LABEL_ARCH,
    LABEL_CAPACITY_TYPE,
    LABEL_INSTANCE_TYPE,
)
from karpenter_capi.core.api.wellknown import LABEL_TOPOLOGY_ZONE as LABEL_ZONE
from karpenter_capi.core.errors import (
    InstanceNotFoundError,
    InsufficientCapacityError,
    NodeClassNotReadyError,
    ProviderError,
    RetryableCreateError,
)
from karpenter_capi.core.instancetype import (
    InstanceType,
    InstanceTypeOverhead,
    Offering,
    freeze_requirements,
    requirements_compatible,
)
from karpenter_capi.core.values.resources import ResourceList
from karpenter_capi.core.values.taints import Taint


def rl(**values: str) -> ResourceList:
    return ResourceList.parse(values)


OFFERINGS = (
    Offering("zone-a", CAPACITY_TYPE_ON_DEMAND, 0.20),
    Offering("zone-b", CAPACITY_TYPE_ON_DEMAND, 0.21),
    Offering("zone-a", CAPACITY_TYPE_SPOT, 0.07),
    Offering("zone-b", CAPACITY_TYPE_SPOT, 0.05, available=False),
)


def m5_large(**changes: Any) -> InstanceType:
    instance_type = InstanceType(
        name="m5.large",
        capacity=rl(cpu="2", memory="8Gi", pods="29"),
        offerings=OFFERINGS,
        requirements=freeze_requirements({LABEL_ARCH: ["amd64"]}),
        overhead=InstanceTypeOverhead(
            kube_reserved=rl(cpu="70m", memory="574Mi"),
            system_reserved=rl(cpu="10m", memory="100Mi"),
            eviction_threshold=rl(memory="100Mi"),
        ),
    )
    return dataclasses.replace(instance_type, **changes) if changes else instance_type


def test_allocatable_is_capacity_minus_every_overhead() -> None:
    instance_type = m5_large()
    assert instance_type.allocatable == rl(cpu="1920m", memory="7418Mi", pods="29")
    assert rl(cpu="1920m", memory="7418Mi").fits(instance_type.allocatable)
    assert not rl(cpu="2").fits(instance_type.allocatable)


def test_allocatable_is_computed_once_and_never_negative() -> None:
    instance_type = InstanceType(
        name="tiny",
        capacity=rl(cpu="100m", memory="256Mi"),
        overhead=InstanceTypeOverhead(kube_reserved=rl(cpu="200m")),
    )
    assert instance_type.allocatable is instance_type.allocatable
    assert instance_type.allocatable == rl(cpu="0", memory="256Mi")


def test_instance_types_are_frozen_and_hashable_values() -> None:
    a, b = m5_large(), m5_large()
    assert a == b
    assert hash(a) == hash(b)
    assert len({a, b}) == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.name = "other"  # type: ignore[misc]
    assert a != m5_large(offerings=OFFERINGS[:1])


def test_the_instance_type_label_is_always_a_requirement() -> None:
    instance_type = m5_large()
    assert instance_type.requirements[LABEL_INSTANCE_TYPE] == frozenset({"m5.large"})
    assert instance_type.requirements[LABEL_ARCH] == frozenset({"amd64"})


def test_cheapest_available_offering() -> None:
    instance_type = m5_large()
    # The 0.05 spot offering in zone-b is unavailable.
    assert instance_type.cheapest_offering() == OFFERINGS[2]
    assert (
        instance_type.cheapest_offering(capacity_types=[CAPACITY_TYPE_ON_DEMAND]) == (OFFERINGS[0])
    )
    assert instance_type.cheapest_offering(zones=["zone-b"]) == OFFERINGS[1]
    assert instance_type.cheapest_offering(zones=["zone-c"]) is None
    assert m5_large(offerings=()).cheapest_offering() is None


def test_offering_filters() -> None:
    instance_type = m5_large()
    assert instance_type.available_offerings() == OFFERINGS[:3]
    assert instance_type.offerings_for(zones=["zone-b"]) == (OFFERINGS[1],)
    assert instance_type.offerings_for(zones=["zone-b"], available_only=False) == (
        OFFERINGS[1],
        OFFERINGS[3],
    )
    assert instance_type.offerings_for(capacity_types=[CAPACITY_TYPE_SPOT]) == (OFFERINGS[2],)


def test_compatibility_with_requirements() -> None:
    instance_type = m5_large()
    assert instance_type.compatible({LABEL_ARCH: frozenset({"amd64", "arm64"})})
    assert not instance_type.compatible({LABEL_ARCH: frozenset({"arm64"})})
    # zone-b spot exists but is unavailable.
    assert not instance_type.compatible(
        {LABEL_ZONE: frozenset({"zone-b"}), LABEL_CAPACITY_TYPE: frozenset({CAPACITY_TYPE_SPOT})}
    )
    assert instance_type.compatible_offerings({LABEL_ZONE: frozenset({"zone-a"})}) == (
        OFFERINGS[0],
        OFFERINGS[2],
    )
    assert requirements_compatible({"a": frozenset({"1"})}, {"b": frozenset({"2"})})
    assert not requirements_compatible({"a": frozenset({"1"})}, {"a": frozenset({"2"})})


def test_offering_requirements_include_its_labels() -> None:
    offering = Offering(
        "zone-a",
        "reserved",
        0.0,
        labels={"karpenter.k8s.aws/capacity-reservation-id": "cr-1"},
        reservation_id="cr-1",
    )
    assert offering.requirements == {
        LABEL_ZONE: frozenset({"zone-a"}),
        LABEL_CAPACITY_TYPE: frozenset({"reserved"}),
        "karpenter.k8s.aws/capacity-reservation-id": frozenset({"cr-1"}),
    }
    assert not offering.compatible_with(
        {"karpenter.k8s.aws/capacity-reservation-id": frozenset({"cr-2"})}
    )
    with pytest.raises(TypeError):
        offering.labels["x"] = "y"  # type: ignore[index]


def test_with_offerings_keeps_the_shape() -> None:
    cheaper = m5_large().with_offerings([Offering("zone-a", CAPACITY_TYPE_ON_DEMAND, 0.1)])
    assert cheaper.allocatable == m5_large().allocatable
    assert cheaper.cheapest_offering() == Offering("zone-a", CAPACITY_TYPE_ON_DEMAND, 0.1)


def test_provider_errors_explain_themselves() -> None:
    failed = [("m5.large", OFFERINGS[2])]
    capacity = InsufficientCapacityError("fleet returned no instances", failed)
    assert isinstance(capacity, ProviderError)
    assert capacity.offerings == tuple(failed)
    assert "m5.large/zone-a/spot" in str(capacity)
    assert "insufficient capacity" in str(capacity)
    assert str(InsufficientCapacityError("no capacity")) == "insufficient capacity: no capacity"

    not_ready = NodeClassNotReadyError("default", "selector matches no MachineDeployment")
    assert "'default'" in str(not_ready)
    assert "selector matches no MachineDeployment" in str(not_ready)

    gone = InstanceNotFoundError("aws:///zone-a/i-123", "terminated")
    assert str(gone) == "instance 'aws:///zone-a/i-123' not found: terminated"

    retry = RetryableCreateError("throttled", retry_after=timedelta(seconds=30))
    assert retry.retry_after == timedelta(seconds=30)
    assert "retry after 30s" in str(retry)
    assert RetryableCreateError("conflict").retry_after is None


def test_taints_are_part_of_the_shape() -> None:
    gpu_taint = Taint("nvidia.com/gpu", "NoSchedule", "true")
    tainted = m5_large(taints=[gpu_taint])
    assert tainted.taints == (gpu_taint,)
    assert tainted != m5_large()
    assert tainted.with_offerings(OFFERINGS[:1]).taints == (gpu_taint,)
