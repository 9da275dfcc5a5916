"""MachinePools: instances in spec.providerIDList, status, MachinePool Machines, failures."""

from __future__ import annotations

import pytest

from karpenter_capi.core.api.wellknown import ANNOTATION_CAPI_DELETE_MACHINE
from karpenter_capi.core.kube import MACHINE_POOLS, MACHINES
from karpenter_capi.sim.capi import (
    ANNOTATION_MACHINE_POOL_MACHINES,
    ANNOTATION_NEVER_PROVISION,
    ANNOTATION_OUT_OF_CAPACITY,
)
from tests.sim.capi.harness import NAMESPACE, SHAPES, machine_pool, new_sim


def _ids(sim_get: dict[str, object]) -> list[str]:
    spec = sim_get["spec"]
    assert isinstance(spec, dict)
    return list(spec.get("providerIDList") or [])


@pytest.mark.parametrize("shape", SHAPES)
def test_replicas_become_provider_ids_after_the_delay(shape: str) -> None:
    sim = new_sim(provision_delay=20)
    sim.create(machine_pool("pool", shape, replicas=2))
    sim.advance(19)
    pool = sim.get(MACHINE_POOLS, "pool")
    assert _ids(pool) == []
    assert pool["status"]["replicas"] == 0

    sim.advance(1)
    pool = sim.get(MACHINE_POOLS, "pool")
    ids = _ids(pool)
    assert len(ids) == 2
    assert all(p.startswith(f"sim://{NAMESPACE}/pool-") for p in ids)
    assert pool["status"]["replicas"] == 2
    assert "machinepool.cluster.x-k8s.io" in pool["metadata"]["finalizers"]
    assert sim.machines() == []  # no MachinePool Machines unless asked for


@pytest.mark.parametrize("shape", SHAPES)
def test_nodes_ready_make_ready_replicas_and_scale_down_retires_the_newest(shape: str) -> None:
    sim = new_sim(provision_delay=10, boot_delay=5, nodes=True)
    sim.create(machine_pool("pool", shape, replicas=1))
    sim.advance(60)
    sim.scale(MACHINE_POOLS, "pool", 2)
    sim.advance(60)
    pool = sim.get(MACHINE_POOLS, "pool")
    first, second = _ids(pool)
    status = pool["status"]
    assert (status["readyReplicas"], status["availableReplicas"], status["phase"]) == (
        2,
        2,
        "Running",
    )
    assert sorted(ref["name"] for ref in status["nodeRefs"]) == sorted(
        [first.rpartition("/")[2], second.rpartition("/")[2]]
    )
    if shape == "v1beta2":
        assert status["upToDateReplicas"] == 2
    else:
        assert status.get("unavailableReplicas", 0) == 0  # omitempty in v1beta1

    sim.scale(MACHINE_POOLS, "pool", 1)
    sim.settle()
    assert _ids(sim.get(MACHINE_POOLS, "pool")) == [first]
    assert [n["spec"]["providerID"] for n in sim.nodes()] == [first]


@pytest.mark.parametrize("shape", SHAPES)
def test_machine_pool_machines_follow_instances_and_honour_delete_machine(shape: str) -> None:
    sim = new_sim(provision_delay=10, boot_delay=5, delete_delay=5, nodes=True)
    annotations = {ANNOTATION_MACHINE_POOL_MACHINES: "true"}
    pool = sim.create(machine_pool("pool", shape, replicas=3, annotations=annotations))
    sim.advance(30)
    machines = sim.machines()
    assert sorted(m["spec"]["providerID"] for m in machines) == sorted(
        _ids(sim.get(MACHINE_POOLS, "pool"))
    )
    for machine in machines:
        assert machine["metadata"]["labels"]["cluster.x-k8s.io/pool-name"] == "pool"
        assert machine["metadata"]["ownerReferences"][0]["uid"] == pool["metadata"]["uid"]
        assert machine["status"]["phase"] == "Running"

    victim = sorted(m["metadata"]["name"] for m in machines)[0]
    sim.annotate(MACHINES, victim, {ANNOTATION_CAPI_DELETE_MACHINE: "true"})
    sim.scale(MACHINE_POOLS, "pool", 2)
    sim.settle()
    assert f"sim://{NAMESPACE}/{victim}" not in _ids(sim.get(MACHINE_POOLS, "pool"))
    sim.advance(5)
    assert victim not in sim.machine_names()
    assert victim not in [n["metadata"]["name"] for n in sim.nodes()]
    assert len(_ids(sim.get(MACHINE_POOLS, "pool"))) == 2


@pytest.mark.parametrize("shape", SHAPES)
def test_a_never_provisioning_pool_lists_nothing(shape: str) -> None:
    sim = new_sim(provision_delay=1)
    annotations = {ANNOTATION_NEVER_PROVISION: "true"}
    sim.create(machine_pool("pool", shape, replicas=2, annotations=annotations))
    sim.advance(3600)
    pool = sim.get(MACHINE_POOLS, "pool")
    assert _ids(pool) == []
    assert (pool["status"]["replicas"], pool["status"]["phase"]) == (0, "Provisioning")


@pytest.mark.parametrize("shape", SHAPES)
def test_an_out_of_capacity_pool_reports_the_failure_in_its_layout(shape: str) -> None:
    sim = new_sim(provision_delay=1)
    annotations = {ANNOTATION_OUT_OF_CAPACITY: "true"}
    sim.create(machine_pool("pool", shape, replicas=2, annotations=annotations))
    sim.advance(60)
    pool = sim.get(MACHINE_POOLS, "pool")
    assert _ids(pool) == []
    status = pool["status"]
    failure = status if shape == "v1beta1" else status["deprecated"]["v1beta1"]
    assert failure["failureReason"] == "InsufficientResources"
    assert "out of capacity" in failure["failureMessage"]
    [infra] = [c for c in status["conditions"] if c["type"] == "InfrastructureReady"]
    assert (infra["status"], infra["reason"]) == ("False", "InsufficientResources")

    sim.annotate(MACHINE_POOLS, "pool", {ANNOTATION_OUT_OF_CAPACITY: None})
    sim.advance(2)
    pool = sim.get(MACHINE_POOLS, "pool")
    assert len(_ids(pool)) == 2
    failure = pool["status"] if shape == "v1beta1" else pool["status"]["deprecated"]["v1beta1"]
    assert "failureReason" not in failure


def test_deleting_a_pool_deletes_its_nodes() -> None:
    sim = new_sim(provision_delay=1, boot_delay=1, delete_delay=5, nodes=True)
    sim.create(machine_pool("pool", "v1beta2", replicas=2))
    sim.advance(10)
    assert len(sim.nodes()) == 2
    sim.api.delete(MACHINE_POOLS, "pool", NAMESPACE)
    sim.settle()
    assert sim.nodes() == []
    sim.advance(5)
    assert sim.api.list(MACHINE_POOLS, NAMESPACE).items == []
