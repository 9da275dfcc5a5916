"""Node shapes from annotations and infrastructure templates, overhead, and price estimates."""

from __future__ import annotations

import pytest

from karpenter_capi.core.values.resources import ResourceList
from karpenter_capi.core.values.taints import Taint
from karpenter_capi.plugins.generic_capi.overhead import OverheadPolicy, SettingsError
from karpenter_capi.plugins.generic_capi.shape import (
    MissingShapeError,
    ShapeError,
    TemplateStatus,
    machine_taints,
    propagated_labels,
    resolve_shape,
    shape_from_annotations,
)
from karpenter_capi.plugins.generic_capi.shape_settings import PriceRates, settings_from

P = "capacity.cluster-autoscaler.kubernetes.io/"
DOCKER = "DockerMachineTemplate default/workers"


def test_full_shape_from_annotations() -> None:
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
    assert shape.labels == {
        "kubernetes.io/arch": "arm64",
        "kubernetes.io/os": "linux",
        "example.com/tier": "gold",
    }
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
    assert shape.labels == {"kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux"}
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
        ({P + "cpu": "0", P + "memory": "4Gi"}, "cpu='0': must be greater than zero"),
        ({P + "cpu": "2", P + "memory": "500mb"}, "memory='500mb'"),
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


def test_template_status_alone_gives_capacity_architecture_and_os() -> None:
    template = TemplateStatus.from_object(
        {
            "kind": "DockerMachineTemplate",
            "metadata": {"name": "workers", "namespace": "default"},
            "status": {
                "capacity": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": 2, "pods": "64"},
                "nodeInfo": {"architecture": "arm64", "operatingSystem": "linux"},
            },
        }
    )
    shape = resolve_shape({}, template=template)
    assert shape.capacity.to_dict() == {
        "cpu": "8",
        "memory": "32Gi",
        "nvidia.com/gpu": "2",
        "pods": "64",
    }
    assert shape.labels == {"kubernetes.io/arch": "arm64", "kubernetes.io/os": "linux"}


def test_annotations_take_precedence_over_the_template_per_resource_and_label() -> None:
    template = TemplateStatus(
        DOCKER,
        capacity={"cpu": "8", "memory": "32Gi", "ephemeral-storage": "50Gi"},
        architecture="arm64",
        operating_system="windows",
    )
    shape = resolve_shape(
        {P + "cpu": "4", P + "labels": "kubernetes.io/arch=amd64"}, template=template
    )
    # cpu from the annotation, memory and disk from the template; pods default.
    assert shape.capacity.to_dict() == {
        "cpu": "4",
        "memory": "32Gi",
        "ephemeral-storage": "50Gi",
        "pods": "110",
    }
    assert shape.labels == {"kubernetes.io/arch": "amd64", "kubernetes.io/os": "windows"}


def test_a_shape_missing_memory_names_both_places_it_could_come_from() -> None:
    with pytest.raises(MissingShapeError) as raised:
        resolve_shape({}, template=TemplateStatus(DOCKER, capacity={"cpu": "2"}))
    assert str(raised.value) == (
        "no memory capacity: annotation capacity.cluster-autoscaler.kubernetes.io/memory is "
        "required or status.capacity.memory on DockerMachineTemplate default/workers"
    )


def test_a_malformed_template_capacity_names_the_template() -> None:
    with pytest.raises(ShapeError, match=r"DockerMachineTemplate default/workers status\.capacity"):
        resolve_shape({}, template=TemplateStatus(DOCKER, capacity={"cpu": "x", "memory": "1Gi"}))
    with pytest.raises(ShapeError, match=r"status\.capacity is not a map"):
        TemplateStatus.from_object({"kind": "T", "status": {"capacity": "8 cores"}})


def test_machine_template_taints_follow_annotation_taints_which_win_per_key_and_effect() -> None:
    template_taints = machine_taints(
        [
            {"key": "dedicated", "value": "batch", "effect": "NoSchedule"},
            {"key": "gpu", "effect": "NoExecute", "propagation": "OnInitialization"},
        ]
    )
    shape = resolve_shape(
        {P + "cpu": "2", P + "memory": "4Gi", P + "taints": "dedicated=ml:NoSchedule"},
        template_taints=template_taints,
    )
    assert shape.taints == (Taint("dedicated", "NoSchedule", "ml"), Taint("gpu", "NoExecute"))
    with pytest.raises(ShapeError, match=r"spec.template.spec.taints\[0\]"):
        machine_taints([{"key": "a", "effect": "Sometimes"}])


def test_only_labels_capi_copies_to_the_node_count() -> None:
    labels = propagated_labels(
        {
            "node-role.kubernetes.io/worker": "",
            "node-restriction.kubernetes.io/pool": "a",
            "team.node-restriction.kubernetes.io/x": "b",
            "node.cluster.x-k8s.io/tier": "gold",
            "cluster.x-k8s.io/deployment-name": "md",
            "evilnode-role.kubernetes.io/worker": "",
            "example.com/team": "infra",
            "plain": "x",
        }
    )
    assert labels == {
        "node-role.kubernetes.io/worker": "",
        "node-restriction.kubernetes.io/pool": "a",
        "team.node-restriction.kubernetes.io/x": "b",
        "node.cluster.x-k8s.io/tier": "gold",
    }


def test_default_overhead_is_kubeadms_only_the_hard_eviction_thresholds() -> None:
    capacity = ResourceList.parse(
        {"cpu": "2", "memory": "8Gi", "pods": "29", "ephemeral-storage": "100Gi"}
    )
    overhead = OverheadPolicy().overhead(capacity)
    assert overhead.kube_reserved.to_dict() == {}
    assert overhead.system_reserved.to_dict() == {}
    assert overhead.eviction_threshold.to_dict() == {
        "memory": "100Mi",
        "ephemeral-storage": "10Gi",  # 10% of the disk
    }
    assert overhead.source == "kubeadm default"


def test_overhead_settings_layer_options_under_nodeclass_annotations_per_resource() -> None:
    settings = settings_from(
        {
            "karpenter.cluster.x-k8s.io/kube-reserved": "memory=1Gi",
            "karpenter.cluster.x-k8s.io/eviction-threshold": "memory=5%",
        },
        {"kube_reserved": "cpu=200m,memory=2Gi", "system_reserved": "cpu=100m"},
    )
    overhead = settings.overhead.overhead(ResourceList.parse({"cpu": "4", "memory": "16Gi"}))
    assert overhead.kube_reserved.to_dict() == {"cpu": "200m", "memory": "1Gi"}
    assert overhead.system_reserved.to_dict() == {"cpu": "100m"}
    assert overhead.eviction_threshold.milli("memory") == 16 * 1024**3 * 1000 // 20  # 5%
    assert overhead.eviction_threshold.milli("ephemeral-storage") == 0  # no disk, no share
    assert overhead.source == "annotation+kubeadm default"


@pytest.mark.parametrize(
    ("annotations", "options", "message"),
    [
        (
            {"karpenter.cluster.x-k8s.io/kube-reserved": "cpu"},
            {},
            "annotation karpenter.cluster.x-k8s.io/kube-reserved: 'cpu' is not",
        ),
        ({}, {"system_reserved": "memory=lots"}, "plugin option system_reserved: 'memory=lots'"),
        ({}, {"eviction_threshold": "memory=150%"}, "within 0-100"),
        ({}, {"estimated_price_per_cpu": "free"}, "estimated_price_per_cpu='free'"),
    ],
)
def test_malformed_settings_name_their_source(
    annotations: dict[str, str], options: dict[str, str], message: str
) -> None:
    with pytest.raises(SettingsError, match=message):
        settings_from(annotations, options)


def test_the_price_estimate_grows_with_the_node_and_its_gpus() -> None:
    rates = PriceRates()
    small = rates.estimate(ResourceList.parse({"cpu": "2", "memory": "8Gi"}))
    large = rates.estimate(ResourceList.parse({"cpu": "8", "memory": "32Gi"}))
    gpu = rates.estimate(ResourceList.parse({"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": 1}))
    assert small == pytest.approx(0.097118)  # on the scale of an m5.large's $0.096
    assert small < large < gpu
    assert gpu - large == pytest.approx(0.35)
    custom = settings_from({}, {"estimated_price_per_cpu": "1", "estimated_price_per_gib": "0"})
    assert custom.rates.estimate(ResourceList.parse({"cpu": "2", "memory": "8Gi"})) == 2.0
