"""The kubelet stand-in, and what CAPI does with Nodes: nodeRef, Ready, deletion."""

from __future__ import annotations

import pytest

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube import MACHINE_DEPLOYMENTS, MACHINES, NODES
from karpenter_capi.core.runtime.manager import Manager
from karpenter_capi.core.runtime.stepped import SteppedDriver
from karpenter_capi.sim.capi import ANNOTATION_BOOT_DELAY, add_capi_emulation
from karpenter_capi.sim.cluster import new_cluster
from tests.sim.capi.harness import SHAPES, machine_deployment, machine_template, new_sim

SHAPE_ANNOTATIONS = {
    wellknown.ANNOTATION_CAPACITY_CPU: "4",
    wellknown.ANNOTATION_CAPACITY_MEMORY: "16Gi",
    wellknown.ANNOTATION_CAPACITY_MAX_PODS: "58",
    wellknown.ANNOTATION_CAPACITY_LABELS: "node.kubernetes.io/instance-type=m5.xlarge,"
    "kubernetes.io/arch=arm64",
    wellknown.ANNOTATION_CAPACITY_TAINTS: "dedicated=batch:NoSchedule",
}
MEMBER = {wellknown.LABEL_KARPENTER_MEMBER: ""}


def _ready(node: dict[str, object]) -> str:
    status = node["status"]
    assert isinstance(status, dict)
    return next(c["status"] for c in status["conditions"] if c["type"] == "Ready")


@pytest.mark.parametrize("shape", SHAPES)
def test_a_node_joins_for_each_provisioned_machine_and_turns_ready(shape: str) -> None:
    sim = new_sim(provision_delay=10, boot_delay=20, nodes=True)
    template = machine_template(shape, failure_domain="zone-b")
    sim.create(
        machine_deployment(
            "workers",
            shape,
            replicas=1,
            annotations=SHAPE_ANNOTATIONS,
            labels=MEMBER,
            template=template,
        )
    )
    sim.advance(10)
    [machine] = sim.machines()
    [node] = sim.nodes()
    name = machine["metadata"]["name"]
    assert node["metadata"]["name"] == name
    assert node["spec"]["providerID"] == machine["spec"]["providerID"]
    assert node["status"]["capacity"] == {"cpu": "4", "memory": "16Gi", "pods": "58"}
    labels = node["metadata"]["labels"]
    assert labels[wellknown.LABEL_INSTANCE_TYPE] == "m5.xlarge"
    assert labels[wellknown.LABEL_TOPOLOGY_ZONE] == "zone-b"
    assert labels[wellknown.LABEL_HOSTNAME] == name
    assert (labels[wellknown.LABEL_ARCH], labels[wellknown.LABEL_OS]) == ("arm64", "linux")
    assert node["spec"]["taints"] == [
        {"key": "dedicated", "value": "batch", "effect": "NoSchedule"},
        {"key": "karpenter.sh/unregistered", "effect": "NoExecute"},
    ]
    assert node["metadata"]["annotations"]["cluster.x-k8s.io/machine"] == name
    assert _ready(node) == "False"
    assert machine["status"]["phase"] == "Running"
    assert machine["status"]["nodeRef"]["name"] == name
    assert sim.get(MACHINE_DEPLOYMENTS, "workers")["status"]["readyReplicas"] == 0

    sim.advance(19)
    assert _ready(sim.nodes()[0]) == "False"
    sim.advance(1)
    assert _ready(sim.nodes()[0]) == "True"
    assert sim.get(MACHINE_DEPLOYMENTS, "workers")["status"]["readyReplicas"] == 1
    ready = [c for c in sim.machines()[0]["status"].get("conditions", []) if c["type"] == "Ready"]
    assert ready[0]["status"] == "True"


def test_only_karpenter_members_get_the_unregistered_taint() -> None:
    sim = new_sim(provision_delay=1, nodes=True)
    sim.create(machine_deployment("plain", "v1beta2", replicas=1))
    sim.create(machine_deployment("member", "v1beta2", replicas=1, labels=MEMBER))
    sim.advance(1)
    taints = {n["metadata"]["name"].split("-")[0]: n["spec"].get("taints") for n in sim.nodes()}
    assert taints == {
        "plain": None,
        "member": [{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}],
    }
    # Without scale-from-zero annotations a Node only says how many pods it takes.
    assert {n["status"]["capacity"]["pods"] for n in sim.nodes()} == {"110"}


def test_a_machine_label_from_the_template_gives_the_instance_type_and_boot_delay() -> None:
    sim = new_sim(provision_delay=1, boot_delay=100, nodes=True)
    template = machine_template("v1beta2", labels={wellknown.LABEL_INSTANCE_TYPE: "small"})
    annotations = {ANNOTATION_BOOT_DELAY: "3s"}
    sim.create(
        machine_deployment(
            "workers", "v1beta2", replicas=1, template=template, annotations=annotations
        )
    )
    sim.advance(1)
    [node] = sim.nodes()
    assert node["metadata"]["labels"][wellknown.LABEL_INSTANCE_TYPE] == "small"
    sim.advance(3)
    assert _ready(sim.nodes()[0]) == "True"


@pytest.mark.parametrize("shape", SHAPES)
def test_a_deleted_machine_takes_its_node_after_the_delete_delay(shape: str) -> None:
    sim = new_sim(provision_delay=1, boot_delay=1, delete_delay=30, nodes=True)
    sim.create(machine_deployment("workers", shape, replicas=1))
    sim.advance(5)
    [machine] = sim.machine_names()
    sim.api.delete(MACHINES, machine, "default")
    sim.advance(29)
    assert sim.get(MACHINES, machine)["status"]["phase"] == "Deleting"
    assert len(sim.nodes()) == 1
    sim.advance(1)
    assert machine not in sim.machine_names()
    assert machine not in [n["metadata"]["name"] for n in sim.nodes()]


def test_a_node_deleted_under_a_running_machine_registers_again() -> None:
    sim = new_sim(provision_delay=1, boot_delay=1, nodes=True)
    sim.create(machine_deployment("workers", "v1beta2", replicas=1))
    sim.advance(5)
    [node] = sim.nodes()
    sim.api.delete(NODES, node["metadata"]["name"])
    sim.settle()
    [again] = sim.nodes()
    assert again["metadata"]["uid"] != node["metadata"]["uid"]
    assert sim.machines()[0]["status"]["nodeRef"]["name"] == again["metadata"]["name"]


def test_machines_in_the_management_cluster_nodes_in_the_workload_cluster() -> None:
    clock = FakeClock()
    management, workload = new_cluster(clock=clock), new_cluster(clock=clock)
    manager = Manager(workload, management, clock=clock)
    add_capi_emulation(manager, provision_delay=1, boot_delay=1, nodes=True)
    driver = SteppedDriver(manager)
    management.create(
        MACHINE_DEPLOYMENTS, machine_deployment("workers", "v1beta2", replicas=2), "default"
    )
    driver.advance(5)
    assert len(management.list(MACHINES).items) == 2
    assert len(workload.list(NODES).items) == 2
    assert management.list(NODES).items == []
    assert workload.list(MACHINES).items == []
    [machine, _] = management.list(MACHINES).items
    assert machine["status"]["phase"] == "Running"


def test_a_shape_changed_on_the_deployment_applies_to_the_next_nodes() -> None:
    sim = new_sim(provision_delay=1, nodes=True)
    sim.create(machine_deployment("workers", "v1beta2", replicas=1, annotations=SHAPE_ANNOTATIONS))
    sim.advance(1)
    sim.annotate(MACHINE_DEPLOYMENTS, "workers", {wellknown.ANNOTATION_CAPACITY_CPU: "8"})
    sim.scale(MACHINE_DEPLOYMENTS, "workers", 2)
    sim.advance(1)
    assert sorted(n["status"]["capacity"]["cpu"] for n in sim.nodes()) == ["4", "8"]
    [ms] = sim.machine_sets()  # CAPI copies the deployment's annotations onto its sets
    assert ms["metadata"]["annotations"][wellknown.ANNOTATION_CAPACITY_CPU] == "8"
