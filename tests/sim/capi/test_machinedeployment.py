"""MachineDeployments: scaling through the scale subresource, MachineSets, revisions, rollouts."""

from __future__ import annotations

import pytest

from karpenter_capi.core.api.wellknown import ANNOTATION_CAPI_DELETE_MACHINE
from karpenter_capi.core.kube import MACHINE_DEPLOYMENTS, MACHINE_SETS, MACHINES
from karpenter_capi.sim.capi import ANNOTATION_PROVISION_DELAY
from tests.sim.capi.harness import (
    NAMESPACE,
    SHAPES,
    Sim,
    at,
    deployment_labels,
    machine_deployment,
    new_sim,
)

REVISION = "machinedeployment.clusters.x-k8s.io/revision"
HASH = "machine-template-hash"


def _live(sim: Sim) -> list[str]:
    return sim.machine_names(live_only=True)


def _deleting(sim: Sim) -> list[str]:
    return sorted(set(sim.machine_names()) - set(_live(sim)))


def _set_template_version(sim: Sim, shape: str, version: str) -> None:
    md = sim.get(MACHINE_DEPLOYMENTS, "workers")
    md["spec"]["template"]["spec"]["version"] = version
    sim.api.update(at(MACHINE_DEPLOYMENTS, shape), md)


@pytest.mark.parametrize("shape", SHAPES)
def test_scale_0_to_3_to_1_through_the_scale_subresource(shape: str) -> None:
    sim = new_sim(provision_delay=30, delete_delay=5)
    sim.create(machine_deployment("workers", shape))
    sim.settle()
    assert sim.machines() == []

    sim.scale(MACHINE_DEPLOYMENTS, "workers", 3)
    sim.settle()
    names = sim.machine_names()
    assert len(names) == 3
    assert all(name.startswith("workers-") for name in names)

    # The last by name: the default (Random) order alone would delete the first two by name.
    victim = names[2]
    sim.annotate(MACHINES, victim, {ANNOTATION_CAPI_DELETE_MACHINE: "true"})
    sim.scale(MACHINE_DEPLOYMENTS, "workers", 1)
    sim.settle()
    assert _deleting(sim) == sorted([victim, names[0]])
    assert _live(sim) == [names[1]]

    sim.advance(5)
    assert sim.machine_names() == [names[1]]
    scale = sim.api.get(MACHINE_DEPLOYMENTS, "workers", NAMESPACE, subresource="scale")
    assert scale["spec"]["replicas"] == 1
    assert scale["status"]["replicas"] == 1


@pytest.mark.parametrize("shape", SHAPES)
def test_the_annotated_machine_is_the_one_removed_by_a_scale_down_of_one(shape: str) -> None:
    sim = new_sim(delete_delay=0)
    sim.create(machine_deployment("workers", shape, replicas=3))
    sim.settle()
    names = sim.machine_names()
    sim.annotate(MACHINES, names[1], {ANNOTATION_CAPI_DELETE_MACHINE: ""})
    sim.scale(MACHINE_DEPLOYMENTS, "workers", 2)
    sim.settle()
    assert sim.machine_names() == [names[0], names[2]]


@pytest.mark.parametrize("shape", SHAPES)
def test_provider_ids_appear_after_the_provision_delay(shape: str) -> None:
    sim = new_sim(provision_delay=30)
    sim.create(machine_deployment("workers", shape, replicas=2))
    sim.settle()
    assert [m["status"]["phase"] for m in sim.machines()] == ["Provisioning"] * 2
    sim.advance(29)
    assert [m["spec"].get("providerID") for m in sim.machines()] == [None, None]

    sim.advance(1)
    machines = sim.machines()
    assert [m["spec"]["providerID"] for m in machines] == [
        f"sim://{NAMESPACE}/{m['metadata']['name']}" for m in machines
    ]
    assert {m["status"]["phase"] for m in machines} == {"Provisioned"}


@pytest.mark.parametrize("shape", SHAPES)
def test_a_delay_annotated_on_the_deployment_wins_over_the_default(shape: str) -> None:
    sim = new_sim(provision_delay=10)
    annotations = {ANNOTATION_PROVISION_DELAY: "2m"}
    sim.create(machine_deployment("workers", shape, replicas=1, annotations=annotations))
    sim.advance(119)
    assert "providerID" not in sim.machines()[0]["spec"]
    sim.advance(1)
    assert sim.machines()[0]["spec"]["providerID"].startswith("sim://")


@pytest.mark.parametrize("shape", SHAPES)
def test_machine_set_machines_labels_and_owners_as_capi_makes_them(shape: str) -> None:
    sim = new_sim()
    md = sim.create(machine_deployment("workers", shape, replicas=2))
    sim.settle()

    [ms] = sim.machine_sets()
    template_hash = ms["metadata"]["labels"][HASH]
    assert ms["metadata"]["name"] == f"workers-{template_hash}"
    assert ms["metadata"]["labels"]["cluster.x-k8s.io/deployment-name"] == "workers"
    assert ms["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"] == "demo"
    [owner] = ms["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "MachineDeployment",
        "workers",
        md["metadata"]["uid"],
        True,
    )
    # The deployment's selector (with the cluster-name label its defaulting webhook adds) and
    # the template hash.
    assert ms["spec"]["selector"]["matchLabels"] == {
        "cluster.x-k8s.io/cluster-name": "demo",
        "cluster.x-k8s.io/deployment-name": "workers",
        HASH: template_hash,
    }
    assert ms["metadata"]["annotations"][REVISION] == "1"
    assert sim.get(MACHINE_DEPLOYMENTS, "workers")["metadata"]["annotations"][REVISION] == "1"

    for machine in sim.machines():
        labels = machine["metadata"]["labels"]
        assert labels["cluster.x-k8s.io/set-name"] == ms["metadata"]["name"]
        assert labels["cluster.x-k8s.io/deployment-name"] == "workers"
        assert labels[HASH] == template_hash
        [owner] = machine["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["uid"], owner["controller"]) == (
            "MachineSet",
            ms["metadata"]["uid"],
            True,
        )
        assert machine["metadata"]["finalizers"] == ["machine.cluster.x-k8s.io"]
        assert machine["spec"]["clusterName"] == "demo"
        # A reference to the object CAPI clones from the template, in the owner's layout.
        ref = machine["spec"]["infrastructureRef"]
        assert (ref["kind"], ref["name"]) == ("DockerMachine", machine["metadata"]["name"])
        assert ("apiGroup" in ref) == (shape == "v1beta2")


@pytest.mark.parametrize("shape", SHAPES)
def test_deployment_status_and_scale_subresource_report_the_machines(shape: str) -> None:
    sim = new_sim(provision_delay=10, boot_delay=5, nodes=True)
    sim.create(machine_deployment("workers", shape, replicas=2))
    sim.settle()
    status = sim.get(MACHINE_DEPLOYMENTS, "workers")["status"]
    assert (status["replicas"], status["readyReplicas"], status["phase"]) == (2, 0, "ScalingUp")

    sim.advance(15)
    status = sim.get(MACHINE_DEPLOYMENTS, "workers")["status"]
    assert status["replicas"] == status["readyReplicas"] == status["availableReplicas"] == 2
    assert status["selector"] == (
        "cluster.x-k8s.io/cluster-name=demo,cluster.x-k8s.io/deployment-name=workers"
    )
    assert status["phase"] == "Running"
    if shape == "v1beta2":
        assert status["upToDateReplicas"] == 2
        assert status["deprecated"]["v1beta1"]["unavailableReplicas"] == 0
    else:
        assert status["updatedReplicas"] == 2
        assert status["unavailableReplicas"] == 0
        assert status["v1beta2"]["upToDateReplicas"] == 2
    scale = sim.api.get(MACHINE_DEPLOYMENTS, "workers", NAMESPACE, subresource="scale")
    assert scale["status"] == {
        "replicas": 2,
        "selector": "cluster.x-k8s.io/cluster-name=demo,cluster.x-k8s.io/deployment-name=workers",
    }


@pytest.mark.parametrize("shape", SHAPES)
def test_a_plain_scale_or_a_label_change_rolls_nothing(shape: str) -> None:
    sim = new_sim()
    sim.create(machine_deployment("workers", shape, replicas=1))
    sim.settle()
    sim.scale(MACHINE_DEPLOYMENTS, "workers", 3)
    md = sim.get(MACHINE_DEPLOYMENTS, "workers")
    md["spec"]["template"]["metadata"]["labels"]["team"] = "a"  # in place, no new template hash
    sim.api.update(at(MACHINE_DEPLOYMENTS, shape), md)
    sim.settle()
    assert len(sim.machine_sets()) == 1
    assert len(sim.machine_names()) == 3


@pytest.mark.parametrize("shape", SHAPES)
def test_rolling_update_surges_by_one_and_keeps_every_replica_available(shape: str) -> None:
    sim = new_sim(provision_delay=10, boot_delay=5, delete_delay=5, nodes=True)
    sim.create(machine_deployment("workers", shape, replicas=2, max_surge=1, max_unavailable=0))
    sim.advance(20)
    [old] = sim.machine_sets()

    _set_template_version(sim, shape, "v1.32.0")
    most_live, fewest_ready = 0, 2
    for _ in range(90):
        sim.advance(1)
        live = [m for m in sim.machines() if not m["metadata"].get("deletionTimestamp")]
        ready = sim.get(MACHINE_DEPLOYMENTS, "workers")["status"]["availableReplicas"]
        most_live, fewest_ready = max(most_live, len(live)), min(fewest_ready, ready)
    assert most_live == 3  # replicas + maxSurge
    assert fewest_ready == 2  # replicas - maxUnavailable

    machines = sim.machines()
    assert [m["spec"]["version"] for m in machines] == ["v1.32.0", "v1.32.0"]
    sets = {ms["metadata"]["name"]: ms for ms in sim.machine_sets()}
    new = next(ms for name, ms in sets.items() if name != old["metadata"]["name"])
    assert new["metadata"]["annotations"][REVISION] == "2"
    assert sim.get(MACHINE_DEPLOYMENTS, "workers")["metadata"]["annotations"][REVISION] == "2"
    # No revision history: v1beta2 has no revisionHistoryLimit, and CAPI's conversion webhook
    # drops the one a v1beta1 client sets.
    assert old["metadata"]["name"] not in sets


@pytest.mark.parametrize("shape", SHAPES)
def test_rolling_update_with_max_unavailable_replaces_without_surge(shape: str) -> None:
    sim = new_sim(provision_delay=10, boot_delay=5, delete_delay=5, nodes=True)
    sim.create(machine_deployment("workers", shape, replicas=2, max_surge=0, max_unavailable=1))
    sim.advance(20)
    _set_template_version(sim, shape, "v1.32.0")
    most_live = 0
    for _ in range(90):
        sim.advance(1)
        live = [m for m in sim.machines() if not m["metadata"].get("deletionTimestamp")]
        most_live = max(most_live, len(live))
    assert most_live == 2
    assert [m["spec"]["version"] for m in sim.machines()] == ["v1.32.0", "v1.32.0"]


@pytest.mark.parametrize("shape", SHAPES)
def test_on_delete_replaces_a_machine_only_when_someone_deletes_it(shape: str) -> None:
    sim = new_sim(provision_delay=10, boot_delay=5, delete_delay=5, nodes=True)
    sim.create(machine_deployment("workers", shape, replicas=2, strategy="OnDelete"))
    sim.advance(20)
    before = sim.machine_names()

    _set_template_version(sim, shape, "v1.32.0")
    sim.advance(120)
    assert sim.machine_names() == before  # nothing replaced on its own
    old = next(ms for ms in sim.machine_sets() if ms["metadata"]["annotations"][REVISION] == "1")
    assert (
        old["metadata"]["annotations"]["machinedeployment.clusters.x-k8s.io/disable-machine-create"]
        == "true"
    )

    sim.api.delete(MACHINES, before[0], NAMESPACE)
    sim.advance(30)
    versions = sorted(m["spec"]["version"] for m in sim.machines())
    assert versions == ["v1.31.0", "v1.32.0"]
    assert before[1] in sim.machine_names()

    sim.api.delete(MACHINES, before[1], NAMESPACE)
    sim.advance(30)
    assert [m["spec"]["version"] for m in sim.machines()] == ["v1.32.0", "v1.32.0"]


@pytest.mark.parametrize("shape", SHAPES)
def test_deleting_the_deployment_takes_its_sets_and_machines(shape: str) -> None:
    sim = new_sim(delete_delay=5)
    sim.create(machine_deployment("workers", shape, replicas=2))
    sim.settle()
    sim.api.delete(MACHINE_DEPLOYMENTS, "workers", NAMESPACE)
    sim.settle()
    assert sim.machine_sets() == []
    assert _live(sim) == []
    sim.advance(5)
    assert sim.machines() == []


def test_machines_of_a_deployment_are_found_by_its_label() -> None:
    sim = new_sim()
    sim.create(machine_deployment("a", "v1beta2", replicas=1))
    sim.create(machine_deployment("b", "v1beta1", replicas=2))
    sim.settle()
    assert len(sim.machine_names(**deployment_labels("a"))) == 1
    assert len(sim.machine_names(**deployment_labels("b"))) == 2
    assert len(sim.api.list(MACHINE_SETS, NAMESPACE).items) == 2
