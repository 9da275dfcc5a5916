"""MachineSets on their own: replicas, adoption, and which Machine a scale-down deletes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from karpenter_capi.core.api.wellknown import ANNOTATION_CAPI_DELETE_MACHINE
from karpenter_capi.core.kube import MACHINE_SETS, MACHINES
from karpenter_capi.core.runtime.manager import Manager
from karpenter_capi.core.runtime.stepped import SteppedDriver
from karpenter_capi.sim.capi import ANNOTATION_NEVER_PROVISION, add_capi_emulation, delete_priority
from tests.sim.capi.harness import NAMESPACE, SHAPES, Sim, machine_set, new_sim


@pytest.mark.parametrize("shape", SHAPES)
def test_a_machine_set_without_owner_keeps_its_replicas(shape: str) -> None:
    sim = new_sim(provision_delay=10)
    sim.create(machine_set("pool-a", shape, replicas=2))
    sim.settle()
    machines = sim.machines()
    assert len(machines) == 2
    for machine in machines:
        assert machine["metadata"]["labels"]["cluster.x-k8s.io/set-name"] == "pool-a"
        assert machine["metadata"]["labels"]["pool"] == "pool-a"
        assert "cluster.x-k8s.io/deployment-name" not in machine["metadata"]["labels"]
    status = sim.get(MACHINE_SETS, "pool-a")["status"]
    assert (status["replicas"], status["selector"]) == (2, "pool=pool-a")

    sim.scale(MACHINE_SETS, "pool-a", 3)
    sim.advance(10)
    assert len(sim.machines()) == 3
    assert all(m["spec"]["providerID"].startswith("sim://") for m in sim.machines())


def _three_machines_of_different_ages(shape: str, order: str) -> tuple[Sim, list[str]]:
    """Three healthy Machines (a Ready Node each), created an hour apart; oldest first."""
    sim = new_sim(provision_delay=1, boot_delay=1, delete_delay=0, nodes=True)
    sim.create(machine_set("pool-a", shape, replicas=1, deletion_order=order))
    ages: list[str] = []
    for replicas in (1, 2, 3):
        sim.scale(MACHINE_SETS, "pool-a", replicas)
        sim.advance(3600)
        ages += [n for n in sim.machine_names() if n not in ages]
    assert sim.get(MACHINE_SETS, "pool-a")["status"]["readyReplicas"] == 3
    return sim, ages


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(
    ("order", "survivor"),
    [("Oldest", 2), ("Newest", 0)],
)
def test_deletion_order_oldest_and_newest(shape: str, order: str, survivor: int) -> None:
    sim, by_age = _three_machines_of_different_ages(shape, order)
    sim.scale(MACHINE_SETS, "pool-a", 1)
    sim.settle()
    assert sim.machine_names() == [by_age[survivor]]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("order", ["Random", None])
def test_deletion_order_random_is_by_name_among_equals(shape: str, order: str | None) -> None:
    sim, by_age = _three_machines_of_different_ages(shape, order or "")
    sim.scale(MACHINE_SETS, "pool-a", 1)
    sim.settle()
    assert sim.machine_names() == [max(by_age)]


@pytest.mark.parametrize("shape", SHAPES)
def test_the_annotated_machine_goes_first_whatever_the_order(shape: str) -> None:
    sim, by_age = _three_machines_of_different_ages(shape, "Oldest")
    sim.annotate(MACHINES, by_age[2], {ANNOTATION_CAPI_DELETE_MACHINE: "true"})
    sim.scale(MACHINE_SETS, "pool-a", 2)
    sim.settle()
    assert sim.machine_names() == sorted(by_age[:2])


@pytest.mark.parametrize("shape", SHAPES)
def test_an_unhealthy_machine_goes_before_healthy_ones(shape: str) -> None:
    sim, by_age = _three_machines_of_different_ages(shape, "Oldest")
    sim.scale(MACHINE_SETS, "pool-a", 4)
    sim.settle()
    [newest] = [n for n in sim.machine_names() if n not in by_age]
    sim.annotate(MACHINES, newest, {ANNOTATION_NEVER_PROVISION: "true"})  # never gets a Node
    sim.advance(3600)
    sim.scale(MACHINE_SETS, "pool-a", 3)
    sim.settle()
    assert sim.machine_names() == sorted(by_age)  # Oldest alone would have removed by_age[0]


@pytest.mark.parametrize("shape", SHAPES)
def test_a_machine_already_deleting_counts_towards_a_scale_down(shape: str) -> None:
    sim = new_sim(delete_delay=60)
    sim.create(machine_set("pool-a", shape, replicas=3))
    sim.settle()
    names = sim.machine_names()
    sim.api.delete(MACHINES, names[2], NAMESPACE)
    sim.settle()
    # Deleted by hand: the set waits for it to go before replacing it.
    assert sim.machine_names() == names
    sim.scale(MACHINE_SETS, "pool-a", 2)
    sim.settle()
    assert sim.machine_names(live_only=True) == names[:2]
    sim.advance(60)
    assert sim.machine_names() == names[:2]


@pytest.mark.parametrize("shape", SHAPES)
def test_an_unsupported_deletion_order_stops_scale_down(shape: str) -> None:
    sim = new_sim()
    sim.create(machine_set("pool-a", shape, replicas=2, deletion_order="Cheapest"))
    sim.settle()
    sim.scale(MACHINE_SETS, "pool-a", 1)
    sim.settle()
    assert len(sim.machine_names(live_only=True)) == 2


@pytest.mark.parametrize("shape", SHAPES)
def test_an_orphan_machine_matching_the_selector_is_adopted(shape: str) -> None:
    sim = new_sim()
    ms = sim.create(machine_set("pool-a", shape, replicas=0))
    sim.create(
        {
            "apiVersion": f"cluster.x-k8s.io/{shape}",
            "kind": "Machine",
            "metadata": {"name": "handmade", "namespace": NAMESPACE, "labels": {"pool": "pool-a"}},
            "spec": {"clusterName": "demo"},
        }
    )
    sim.scale(MACHINE_SETS, "pool-a", 1)
    sim.settle()
    assert sim.machine_names() == ["handmade"]
    [owner] = sim.get(MACHINES, "handmade")["metadata"]["ownerReferences"]
    assert (owner["uid"], owner["controller"]) == (ms["metadata"]["uid"], True)


def test_delete_priority_ranks_deleting_then_annotated_then_unhealthy_then_order() -> None:
    now = datetime(2026, 1, 2, tzinfo=UTC)

    def machine(**extra: object) -> dict[str, object]:
        created = (now - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
        meta: dict[str, object] = {"name": "m", "creationTimestamp": created}
        status: dict[str, object] = {"nodeRef": {"name": "n"}}
        if "deleting" in extra:
            meta["deletionTimestamp"] = created
        if "annotated" in extra:
            meta["annotations"] = {ANNOTATION_CAPI_DELETE_MACHINE: ""}
        if "failed" in extra:
            status["failureReason"] = "InsufficientResources"
        return {"metadata": meta, "status": status}

    ranks = [
        delete_priority(machine(deleting=True), "Oldest", now),
        delete_priority(machine(annotated=True), "Oldest", now),
        delete_priority(machine(failed=True), "Oldest", now),
        delete_priority(machine(), "Random", now),
    ]
    assert ranks == sorted(ranks, reverse=True)
    assert ranks[0] > ranks[1] > ranks[2] > ranks[3]
    healthy = machine()
    assert delete_priority(healthy, "Oldest", now) + delete_priority(
        healthy, "Newest", now
    ) == pytest.approx(50.0)


@pytest.mark.parametrize("shape", SHAPES)
def test_an_emulation_restarted_with_the_same_seed_still_scales_up(shape: str) -> None:
    # The chaos harness restarts the emulated cluster with the controller; a generator seeded
    # as before drew the names of the Machines it had already made, every create clashed, and
    # the set sat one Machine short until something else woke it.
    sim = new_sim(provision_delay=1, seed=7)
    sim.create(machine_set("pool-a", shape, replicas=30))
    sim.settle()
    before = set(sim.machine_names())
    assert len(before) == 30

    manager = Manager(sim.api, clock=sim.clock)  # the same cluster, a new process
    add_capi_emulation(manager, provision_delay=1, seed=7)
    driver = SteppedDriver(manager)
    driver.run_until_quiet()
    sim.scale(MACHINE_SETS, "pool-a", 31)
    driver.run_until_quiet()

    after = set(sim.machine_names())
    assert len(after) == 31
    assert before < after
