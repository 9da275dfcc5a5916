"""The kubelet stand-in's allocatable: what a kubeadm kubelet keeps, from the bootstrap config."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.kube.resources import Resource
from karpenter_capi.sim.capi.kubeletconfig import kubelet_status
from tests.sim.capi.harness import NAMESPACE, SHAPES, machine_deployment, machine_pool, new_sim

SHAPE = {
    wellknown.ANNOTATION_CAPACITY_CPU: "4",
    wellknown.ANNOTATION_CAPACITY_MEMORY: "16Gi",
    wellknown.ANNOTATION_CAPACITY_EPHEMERAL_DISK: "100Gi",
}
GI, MI = 1024**3, 1024**2


def _kubeadm(kind: str, shape: str, args: Any, name: str = "workers") -> dict[str, Any]:
    join = {"joinConfiguration": {"nodeRegistration": {"kubeletExtraArgs": args}}}
    spec = {"template": {"spec": join}} if kind == "KubeadmConfigTemplate" else join
    return {
        "apiVersion": f"bootstrap.cluster.x-k8s.io/{shape}",
        "kind": kind,
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    }


def _create_config(sim: Any, config: dict[str, Any]) -> None:
    kind = config["kind"]
    version = config["apiVersion"].rpartition("/")[2]
    resource = Resource("bootstrap.cluster.x-k8s.io", version, kind.lower() + "s", kind, True)
    sim.api.create(resource, config, NAMESPACE)


def test_without_a_bootstrap_config_a_node_keeps_kubeadms_eviction_thresholds() -> None:
    sim = new_sim(provision_delay=1, nodes=True)
    sim.create(machine_deployment("workers", "v1beta2", replicas=1, annotations=SHAPE))
    sim.advance(5)
    [node] = sim.nodes()
    assert node["status"]["capacity"] == {
        "cpu": "4",
        "memory": "16Gi",
        "ephemeral-storage": "100Gi",
        "pods": "110",
    }
    allocatable = node["status"]["allocatable"]
    assert allocatable["cpu"] == "4"  # nothing reserved: as reported
    assert int(allocatable["memory"]) == 16 * GI - 100 * MI
    assert int(allocatable["ephemeral-storage"]) == 90 * GI
    assert allocatable["pods"] == "110"


ARGS_MAP = {
    "kube-reserved": "cpu=250m,memory=1Gi,pid=100",
    "system-reserved": "cpu=250m,memory=512Mi,ephemeral-storage=5Gi",
    "eviction-hard": "memory.available<256Mi,imagefs.available<15%",
    "max-pods": "58",
}
ARGS_LIST = [{"name": key, "value": value} for key, value in ARGS_MAP.items()]


@pytest.mark.parametrize("shape", SHAPES)
def test_a_kubeadm_config_templates_kubelet_args_shrink_allocatable(shape: str) -> None:
    sim = new_sim(provision_delay=1, nodes=True)
    args = ARGS_MAP if shape == "v1beta1" else ARGS_LIST
    _create_config(sim, _kubeadm("KubeadmConfigTemplate", shape, args))
    sim.create(machine_deployment("workers", shape, replicas=1, annotations=SHAPE))
    sim.advance(5)
    [node] = sim.nodes()
    assert node["status"]["capacity"]["pods"] == "58"
    allocatable = node["status"]["allocatable"]
    assert allocatable["cpu"] == "3500m"
    assert int(allocatable["memory"]) == 16 * GI - (1024 + 512 + 256) * MI
    # eviction-hard given without nodefs: only system-reserved's 5Gi of disk is kept.
    assert int(allocatable["ephemeral-storage"]) == 95 * GI
    assert allocatable["pods"] == "58"


def test_a_machine_pools_kubeadm_config_counts_for_its_instances() -> None:
    sim = new_sim(provision_delay=1, nodes=True)
    _create_config(
        sim, _kubeadm("KubeadmConfig", "v1beta2", [{"name": "kube-reserved", "value": "cpu=1"}])
    )
    pool = machine_pool("pool", "v1beta2", replicas=1, annotations=SHAPE)
    pool["spec"]["template"]["spec"]["bootstrap"]["configRef"]["kind"] = "KubeadmConfig"
    sim.create(pool)
    sim.advance(5)
    [node] = sim.nodes()
    assert node["status"]["allocatable"]["cpu"] == "3000m"


def test_a_value_the_kubelet_would_refuse_is_logged_and_ignored(
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = _kubeadm(
        "KubeadmConfigTemplate",
        "v1beta1",
        {"kube-reserved": "cpu=lots", "eviction-hard": "memory.available>1Gi", "max-pods": "x"},
    )
    capacity = {"cpu": "2", "memory": "8Gi", "pods": "110"}
    with caplog.at_level(logging.WARNING):
        reported, allocatable = kubelet_status(capacity, config)
    assert reported == capacity
    assert allocatable["cpu"] == "2"
    assert int(allocatable["memory"]) == 8 * GI - 100 * MI  # the default threshold stands
    assert "kube-reserved='cpu=lots'" in caplog.text
    assert "max-pods='x'" in caplog.text
