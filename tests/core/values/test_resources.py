"""Resource lists: parsing the Kubernetes form, arithmetic, fits/exceeds semantics."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from karpenter_capi.core.values.quantity import Quantity, QuantityError
from karpenter_capi.core.values.resources import (
    CPU,
    MEMORY,
    ResourceList,
    ResourceListError,
    empty,
)


def rl(**values: str) -> ResourceList:
    return ResourceList.parse({name.replace("_", "-"): value for name, value in values.items()})


def test_parse_the_kubernetes_json_form() -> None:
    resources = ResourceList.parse({"cpu": "1500m", "memory": "1.5Gi", "pods": 110})
    assert resources.milli(CPU) == 1500
    assert resources.value(MEMORY) == 1610612736
    assert resources.value("pods") == 110
    assert resources["cpu"] == Quantity("1.5")
    assert resources.to_dict() == {"cpu": "1500m", "memory": "1536Mi", "pods": "110"}
    assert ResourceList.parse(None) == empty()


def test_malformed_values_name_the_resource() -> None:
    with pytest.raises(ResourceListError) as caught:
        ResourceList.parse({"cpu": "1", "memory": "1 Gi"})
    assert "memory" in str(caught.value)
    assert "'1 Gi'" in str(caught.value)
    assert isinstance(caught.value, QuantityError)
    with pytest.raises(ResourceListError, match="JSON object"):
        ResourceList.parse(["cpu"])  # type: ignore[arg-type]


def test_sub_milli_requests_round_up() -> None:
    # The scheduler rounds CPU up to the millicore: 1n still takes 1m.
    assert ResourceList.parse({"cpu": "1n"}).milli(CPU) == 1


def test_is_an_immutable_mapping() -> None:
    resources = rl(cpu="1", memory="1Gi")
    assert set(resources) == {"cpu", "memory"}
    assert len(resources) == 2
    assert "cpu" in resources
    assert "nvidia.com/gpu" not in resources
    assert resources.milli("nvidia.com/gpu") == 0
    with pytest.raises(TypeError):
        resources["cpu"] = Quantity("2")  # type: ignore[index]
    assert hash(resources) == hash(rl(cpu="1000m", memory="1024Mi"))
    assert resources == rl(cpu="1000m", memory="1024Mi")
    assert repr(resources) == "ResourceList({'cpu': '1', 'memory': '1Gi'})"


def test_add_subtract_and_max_merge() -> None:
    a = rl(cpu="1", memory="1Gi")
    b = rl(cpu="500m", nvidia_com_gpu="1")
    assert a + b == rl(cpu="1500m", memory="1Gi", nvidia_com_gpu="1")
    assert a.add(b) == a + b
    assert a - b == ResourceList.from_milli(
        {"cpu": 500, "memory": 2**30 * 1000, "nvidia-com-gpu": -1000}
    )
    assert (a - b).clamp_non_negative().milli("nvidia-com-gpu") == 0
    assert a.max_merge(b) == rl(cpu="1", memory="1Gi", nvidia_com_gpu="1")
    assert rl(cpu="250m").scaled(4) == rl(cpu="1")
    assert ResourceList.sum([a, b, b]) == rl(cpu="2", memory="1Gi", nvidia_com_gpu="2")
    assert ResourceList.sum([]) == empty()
    # Operands are untouched.
    assert a == rl(cpu="1", memory="1Gi")


def test_fits_treats_missing_capacity_as_zero() -> None:
    node = rl(cpu="4", memory="16Gi", pods="110")
    assert rl(cpu="4", memory="16Gi").fits(node)
    assert not rl(cpu="4001m").fits(node)
    assert not rl(nvidia_com_gpu="1").fits(node)
    assert ResourceList.parse({"nvidia.com/gpu": "0"}).fits(node)
    assert empty().fits(empty())
    assert rl(cpu="1").fits(node)


def test_exceeds_treats_missing_limits_as_unlimited() -> None:
    limits = rl(cpu="100")
    assert not rl(cpu="100", memory="1Ti").exceeds(limits)
    assert rl(cpu="100001m").exceeds(limits)
    assert rl(cpu="101", memory="1").exceeded_resources(rl(cpu="100", memory="0")) == [
        "cpu",
        "memory",
    ]
    assert not rl(cpu="1").exceeds(empty())


def test_is_zero() -> None:
    assert empty().is_zero()
    assert rl(cpu="0", memory="0").is_zero()
    assert not rl(cpu="1m").is_zero()


_NAMES = st.sampled_from(["cpu", "memory", "pods", "nvidia.com/gpu"])
_LISTS = st.dictionaries(_NAMES, st.integers(min_value=0, max_value=10**12)).map(
    ResourceList.from_milli
)


@given(requests=_LISTS, available=_LISTS)
def test_fits_agrees_with_per_resource_comparison(
    requests: ResourceList, available: ResourceList
) -> None:
    expected = all(requests.milli(name) <= available.milli(name) for name in requests)
    assert requests.fits(available) is expected
    # What fits leaves a non-negative remainder.
    if expected:
        remainder = available - requests
        assert all(remainder.milli(name) >= 0 for name in requests)


@given(a=_LISTS, b=_LISTS)
def test_addition_then_subtraction_round_trips(a: ResourceList, b: ResourceList) -> None:
    back = (a + b) - b
    assert all(back.milli(name) == a.milli(name) for name in set(a) | set(b))
    assert a.fits(a + b)
