"""Scale-from-zero annotations to node shapes, and clear errors for malformed ones."""

from __future__ import annotations

import pytest

from karpenter_capi.core.scheduling.taints import Taint
from karpenter_capi.plugins.generic_capi.shape import ShapeError, shape_from_annotations

P = "capacity.cluster-autoscaler.kubernetes.io/"


def test_full_shape() -> None:
    shape = shape_from_annotations(
        {
            P + "cpu": "4",
            P + "memory": "16Gi",
            P + "maxPods": "58",
            P + "ephemeral-disk": "100Gi",
            P + "gpu-count": "1",
            P + "gpu-type": "nvidia.com/gpu",
            P + "labels": "kubernetes.io/arch=arm64, example.com/tier=gold",
            P + "taints": "dedicated=ml:NoSchedule,spot:PreferNoSchedule",
            "karpenter.cluster.x-k8s.io/price": "0.154",
        }
    )
    assert shape is not None
    assert shape.capacity.to_dict() == {
        "cpu": "4",
        "memory": "16Gi",
        "pods": "58",
        "ephemeral-storage": "100Gi",
        "nvidia.com/gpu": "1",
    }
    assert shape.labels == {"kubernetes.io/arch": "arm64", "example.com/tier": "gold"}
    assert shape.taints == (
        Taint("dedicated", "NoSchedule", "ml"),
        Taint("spot", "PreferNoSchedule"),
    )
    assert shape.price == pytest.approx(0.154)


def test_no_annotations_means_no_shape_and_max_pods_defaults_to_110() -> None:
    assert shape_from_annotations({}) is None
    shape = shape_from_annotations({P + "cpu": "2", P + "memory": "4Gi"})
    assert shape is not None
    assert shape.capacity.value("pods") == 110
    assert shape.price is None


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        (
            {P + "cpu": "two", P + "memory": "4Gi"},
            "capacity.cluster-autoscaler.kubernetes.io/cpu='two'",
        ),
        ({P + "cpu": "2"}, "memory is required"),
        ({P + "cpu": "2", P + "memory": "-4Gi"}, "must not be negative"),
        ({P + "cpu": "2", P + "memory": "4Gi", P + "gpu-count": "1"}, "needs"),
        (
            {P + "cpu": "2", P + "memory": "4Gi", P + "labels": "novalue"},
            "'novalue' is not key=value",
        ),
        (
            {P + "cpu": "2", P + "memory": "4Gi", P + "taints": "a=b:Sometimes"},
            "effect 'Sometimes'",
        ),
        (
            {P + "cpu": "2", P + "memory": "4Gi", "karpenter.cluster.x-k8s.io/price": "cheap"},
            "not a decimal number",
        ),
        (
            {P + "cpu": "2", P + "memory": "4Gi", "karpenter.cluster.x-k8s.io/price": "nan"},
            "finite price",
        ),
    ],
)
def test_malformed_annotations_are_named(annotations: dict[str, str], message: str) -> None:
    with pytest.raises(ShapeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        shape_from_annotations(annotations)
