"""No leaked Machine: a replica raised for a NodeClaim that goes away is given back, and a
Machine of an opted-in resource that no NodeClaim ever claimed is adopted or removed.

Each test is a path on which the old code left a Machine running with no NodeClaim claiming it
(issue 24, item 3), found by applying churn and malformed input to a running controller.
"""

from __future__ import annotations

import pytest

from karpenter_capi.core.errors import InstanceNotFoundError
from karpenter_capi.core.kube import EVENTS, MACHINE_DEPLOYMENTS, NODECLAIMS
from karpenter_capi.core.lifecycle.garbagecollection import (
    DEFAULT_ORPHAN_GRACE,
    NodeClaimGarbageCollector,
    orphan_nodeclaim,
)
from karpenter_capi.core.plugin_host import NotHandledError
from karpenter_capi.plugins.generic_capi.binding import ANNOTATION_DELETE_MACHINE
from karpenter_capi.plugins.generic_capi.delete import ScaleDownFailedError
from karpenter_capi.sim.invariants import check_invariants
from tests.plugins.generic_capi.env import NAMESPACE, Env, new_env

MIN_SIZE = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size"


def test_a_nodeclaim_deleted_before_the_core_recorded_its_intent_gives_its_replica_back(
    env: Env,
) -> None:
    env.deployment("md-a")
    env.nodeclaim("nc")
    env.launch("nc", record=False)  # the replica is raised; the core's write has not landed
    assert env.replicas("md-a") == 1

    with pytest.raises(InstanceNotFoundError, match="no Machine was bound"):
        env.delete("nc")

    assert env.replicas("md-a") == 0
    env.driver.advance(30)
    assert env.machines() == []


def test_a_nodeclaim_deleted_after_falling_back_gives_back_the_replica_it_asked_for_last(
    env: Env,
) -> None:
    env.deployment("md-a", price=0.1)
    env.deployment("md-b", price=0.2)
    env.nodeclaim("nc")
    env.launch("nc")  # md-a, recorded on the NodeClaim
    assert env.replicas("md-a") == 1
    env.clock.advance(180)  # md-a makes no Machine within machine_timeout
    env.launch("nc", record=False)  # falls back to md-b; the core has not written that yet
    assert (env.replicas("md-a"), env.replicas("md-b")) == (0, 1)

    with pytest.raises(InstanceNotFoundError):
        env.delete("nc")

    assert (env.replicas("md-a"), env.replicas("md-b")) == (0, 0)


def test_a_cancel_retried_after_a_conflict_storm_still_knows_the_unrecorded_intent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = new_env(monkeypatch=monkeypatch, options={"conflict_retries": "1"})
    env.deployment("md-a")
    env.nodeclaim("nc")
    env.launch("nc", record=False)
    # Somebody else writes the MachineDeployment between our read and our write, once.
    real_patch = env.plugin_management.inner.patch
    calls = {"scale": 0}

    def racing_patch(resource, name, patch, namespace=None, **kw):  # type: ignore[no-untyped-def]
        if kw.get("subresource") == "scale" and calls["scale"] == 0:
            calls["scale"] += 1
            env.api.patch(resource, name, {"metadata": {"labels": {"touched": "1"}}}, namespace)
        return real_patch(resource, name, patch, namespace, **kw)

    monkeypatch.setattr(env.plugin_management.inner, "patch", racing_patch)
    with pytest.raises(ScaleDownFailedError, match="conflicts in a row"):
        env.delete("nc")
    assert env.replicas("md-a") == 1

    with pytest.raises(InstanceNotFoundError):
        env.delete("nc")
    assert env.replicas("md-a") == 0


# --- the safety net: Machines no NodeClaim claims -----------------------------------------------

TTL = 15 * 60.0


def leak_one(env: Env) -> str:
    """A replica raised for NodeClaim ``nc`` by a process that then restarted, so nothing
    remembers whose it was; the NodeClaim is deleted and CAPI makes the Machine. Its name."""
    env.deployment("md-a")
    env.nodeclaim("nc")
    env.launch("nc", record=False)
    env.restart()
    with pytest.raises(NotHandledError):
        env.delete("nc")  # the core then removes the finalizer: nothing to give back from
    env.api.patch(NODECLAIMS, "nc", {"metadata": {"finalizers": None}})
    env.driver.advance(30)
    (machine,) = env.machines()
    assert machine["spec"].get("providerID")  # provisioned: paid for, and used by nobody
    return str(machine["metadata"]["name"])


def collect(env: Env) -> None:
    """Two passes of the core's garbage collector, its grace apart, then CAPI's work."""
    collector = NodeClaimGarbageCollector(env.manager.context(env.plugins))
    collector.run_once()
    env.driver.advance(DEFAULT_ORPHAN_GRACE + 1)
    collector.run_once()
    env.driver.advance(60)


def events(env: Env, reason: str) -> list[dict[str, object]]:
    return [e for e in env.api.list(EVENTS, NAMESPACE).items if e.get("reason") == reason]


def test_a_machine_no_nodeclaim_claims_is_removed_after_the_ttl(env: Env) -> None:
    name = leak_one(env)
    assert env.plugins.list_instances() == []
    env.driver.advance(TTL - 60)
    assert env.plugins.list_instances() == []  # not yet: a NodeClaim may still take it
    env.driver.advance(90)
    (instance,) = env.plugins.list_instances()
    assert instance.name == f"{NAMESPACE}/{name}"
    assert instance.nodeclaim_name is None
    assert instance.provider_id is None  # the collector leaves its Node to CAPI's drain

    collect(env)

    assert env.machines() == []
    assert env.replicas("md-a") == 0
    (on_machine,) = [
        e for e in events(env, "UnclaimedMachine") if e["involvedObject"]["kind"] == "Machine"
    ]
    assert on_machine["type"] == "Warning"
    assert on_machine["message"] == (
        f"Machine {NAMESPACE}/{name} of MachineDeployment {NAMESPACE}/md-a was claimed by no "
        "NodeClaim for 15m (its NodeClaim went before it was made); removing it with "
        "cluster.x-k8s.io/delete-machine and lowering the replicas"
    )
    kinds = sorted(e["involvedObject"]["kind"] for e in events(env, "UnclaimedMachine"))
    assert kinds == ["Machine", "MachineDeployment"]
    assert check_invariants(env.api, clock=env.clock) == []


def test_a_waiting_nodeclaim_adopts_an_unclaimed_machine(env: Env) -> None:
    name = leak_one(env)
    env.driver.advance(TTL)
    env.nodeclaim("nc-new")

    result = env.launch("nc-new")

    assert result.provider_id == f"sim://default/{name}"
    assert env.bindings() == {"nc-new": [name]}
    assert env.replicas("md-a") == 1
    assert env.plugins.list_instances()[0].nodeclaim_name == "nc-new"


def test_an_adopting_nodeclaim_gives_back_the_replica_it_had_asked_for(env: Env) -> None:
    name = leak_one(env)
    env.driver.advance(TTL - 60)
    env.nodeclaim("nc-new")
    env.launch("nc-new")  # the old Machine is not unclaimed yet: a new replica is asked for
    assert env.replicas("md-a") == 2
    env.clock.advance(120)  # CAPI has not made it yet

    env.launch("nc-new")

    assert env.bindings() == {"nc-new": [name]}
    assert env.replicas("md-a") == 1
    env.driver.advance(60)
    assert [m["metadata"]["name"] for m in env.machines()] == [name]


@pytest.mark.parametrize(("replicas", "removed"), [(1, 0), (2, 1)])
def test_the_min_size_keeps_its_machines(env: Env, replicas: int, removed: int) -> None:
    env.deployment("md-a", replicas=replicas, annotations={MIN_SIZE: "1"})
    env.driver.advance(TTL + 60)
    assert len(env.machines()) == replicas

    listed = env.plugins.list_instances()

    assert len(listed) == removed
    collect(env)
    assert len(env.machines()) == replicas - removed
    assert env.replicas("md-a") == replicas - removed


def test_a_machine_adopted_after_the_collector_listed_it_is_not_removed(env: Env) -> None:
    name = leak_one(env)
    env.driver.advance(TTL)
    (instance,) = env.plugins.list_instances()
    env.nodeclaim("nc-new")
    env.launch("nc-new")  # adopts it between the collector's list and its delete

    with pytest.raises(InstanceNotFoundError, match="claimed by NodeClaim nc-new now"):
        env.plugins.delete(orphan_nodeclaim(instance))

    assert env.bindings() == {"nc-new": [name]}
    assert not env.machines()[0]["metadata"].get("annotations", {}).get(ANNOTATION_DELETE_MACHINE)
    assert env.replicas("md-a") == 1


def test_a_machine_the_min_size_covers_by_the_time_of_the_delete_is_kept(env: Env) -> None:
    env.deployment("md-a", replicas=2, annotations={MIN_SIZE: "1"})
    env.driver.advance(TTL + 60)
    (instance,) = env.plugins.list_instances()
    env.api.patch(
        env.res(MACHINE_DEPLOYMENTS),
        "md-a",
        {"metadata": {"annotations": {MIN_SIZE: "2"}}},
        NAMESPACE,
    )

    with pytest.raises(
        InstanceNotFoundError, match="is kept: MachineDeployment default/md-a is at its min size"
    ):
        env.plugins.delete(orphan_nodeclaim(instance))

    assert env.replicas("md-a") == 2
    assert not any(
        ANNOTATION_DELETE_MACHINE in (m["metadata"].get("annotations") or {})
        for m in env.machines()
    )
    assert events(env, "UnclaimedMachine") == []
