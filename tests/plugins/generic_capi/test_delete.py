"""Targeted deletes: mark the NodeClaim's Machine, lower the replicas, report it gone once it
is; never another NodeClaim's Machine, never below the min size, never a lost mark."""

from __future__ import annotations

import pytest

from karpenter_capi.core.api.nodeclaim import NodeClaim
from karpenter_capi.core.errors import InstanceNotFoundError
from karpenter_capi.core.hookspecs import Instance
from karpenter_capi.core.kube import MACHINE_DEPLOYMENTS, MACHINES, NODECLAIMS, Conflict
from karpenter_capi.core.lifecycle import orphan_nodeclaim
from karpenter_capi.core.plugin_host import NotHandledError
from karpenter_capi.plugins.generic_capi.binding import (
    ANNOTATION_DELETE_MACHINE,
    ANNOTATION_SCALABLE_RESOURCE,
)
from karpenter_capi.plugins.generic_capi.delete import DeleteFailedError, ScaleDownFailedError
from karpenter_capi.plugins.generic_capi.instances import LABEL_SCALE_DOWN_HEADROOM
from tests.plugins.generic_capi.env import SHAPES, Env, names, new_env

MIN_SIZE = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size"
MD_GROUP_RESOURCE = "machinedeployments.cluster.x-k8s.io"


def launched(env: Env, count: int, **deployment: object) -> dict[str, str]:
    """``count`` NodeClaims launched on md-a; NodeClaim -> its Machine."""
    env.deployment("md-a", **deployment)  # type: ignore[arg-type]
    claims = names("nc", count)
    for name in claims:
        env.nodeclaim(name)
    env.launch_all(claims)
    return {name: machines[0] for name, machines in env.bindings().items()}


def machine(env: Env, name: str) -> dict[str, object]:
    return env.api.get(MACHINES, name, "default")


def marked(env: Env, name: str) -> bool:
    return ANNOTATION_DELETE_MACHINE in (machine(env, name)["metadata"].get("annotations") or {})


def gone(env: Env, name: str) -> bool:
    return name not in {m["metadata"]["name"] for m in env.machines(live=False)}


@pytest.mark.parametrize("shape", SHAPES)
def test_delete_lowers_exactly_one_replica_and_removes_the_marked_machine(
    shape: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = new_env(shape, monkeypatch=monkeypatch, delete_delay=5)
    bound = launched(env, 3)
    writes = len(env.plugin_management.writes)

    assert env.delete("nc-001") is True

    assert env.replicas("md-a") == 2
    assert marked(env, bound["nc-001"])
    assert not marked(env, bound["nc-000"])
    assert not marked(env, bound["nc-002"])
    assert env.plugin_management.writes[writes:] == [
        ("patch", "machines", ""),
        ("patch", "machinedeployments", "scale"),
    ]
    env.driver.advance(1)
    assert machine(env, bound["nc-001"])["metadata"].get("deletionTimestamp")
    assert env.delete("nc-001") is True  # still going: nothing more to write
    assert len(env.plugin_management.writes) == writes + 2

    env.driver.advance(10)
    assert gone(env, bound["nc-001"])
    with pytest.raises(InstanceNotFoundError):
        env.delete("nc-001")
    assert sorted(m["metadata"]["name"] for m in env.machines()) == sorted(
        [bound["nc-000"], bound["nc-002"]]
    )
    assert env.replicas("md-a") == 2


def test_marks_left_by_a_crash_are_covered_by_one_batched_scale_down(
    env: Env,
) -> None:
    bound = launched(env, 4)
    # Two earlier calls marked their Machines and died before lowering the replicas.
    for claim in ("nc-001", "nc-002"):
        env.api.patch(
            MACHINES,
            bound[claim],
            {"metadata": {"annotations": {ANNOTATION_DELETE_MACHINE: "x"}}},
            "default",
        )
        env.api.delete(NODECLAIMS, claim)
    writes = len(env.plugin_management.writes)

    assert env.delete("nc-001") is True
    assert env.replicas("md-a") == 2
    assert env.plugin_management.writes[writes:] == [("patch", "machinedeployments", "scale")]
    assert env.delete("nc-002") is True  # already covered
    assert len(env.plugin_management.writes) == writes + 1

    env.driver.advance(30)
    assert gone(env, bound["nc-001"])
    assert gone(env, bound["nc-002"])
    assert not gone(env, bound["nc-000"])
    assert not gone(env, bound["nc-003"])


def test_a_failed_scale_down_removes_the_mark_again(env: Env) -> None:
    bound = launched(env, 2)
    env.api.faults.internal_error("patch", MD_GROUP_RESOURCE)

    with pytest.raises(DeleteFailedError, match="removing the Machine of NodeClaim nc-000"):
        env.delete("nc-000")

    assert not marked(env, bound["nc-000"])
    assert env.replicas("md-a") == 2
    # The next call starts over and succeeds.
    assert env.delete("nc-000") is True
    assert marked(env, bound["nc-000"])
    assert env.replicas("md-a") == 1


def test_a_conflict_storm_gives_up_and_removes_the_mark(monkeypatch: pytest.MonkeyPatch) -> None:
    env = new_env(monkeypatch=monkeypatch, options={"conflict_retries": "3"})
    bound = launched(env, 2)
    rule = env.api.faults.fail("patch", MD_GROUP_RESOURCE, Conflict("busy"), times=None)

    with pytest.raises(ScaleDownFailedError, match="3 conflicts"):
        env.delete("nc-000")

    assert rule.hits == 3
    assert not marked(env, bound["nc-000"])
    assert env.replicas("md-a") == 2


def test_min_size_replaces_the_machine_instead_of_scaling_below_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = new_env(monkeypatch=monkeypatch, delete_delay=5)
    bound = launched(env, 2, annotations={MIN_SIZE: "2"})
    provider_id = env.provider_id("nc-000")
    instance: Instance = env.get(provider_id)
    assert instance.labels[LABEL_SCALE_DOWN_HEADROOM] == "0"

    assert env.delete("nc-000") is True

    assert env.replicas("md-a") == 2
    assert machine(env, bound["nc-000"])["metadata"].get("deletionTimestamp")
    assert not marked(env, bound["nc-000"])
    env.driver.advance(30)
    assert gone(env, bound["nc-000"])
    with pytest.raises(InstanceNotFoundError):
        env.delete("nc-000")
    # CAPI made a new Machine; it belongs to nobody.
    live = {m["metadata"]["name"] for m in env.machines()}
    assert len(live) == 2
    assert bound["nc-001"] in live
    assert env.bindings() == {"nc-001": [bound["nc-001"]]}


def test_a_waiting_nodeclaim_withdraws_its_in_flight_replica(
    env: Env,
) -> None:
    bound = launched(env, 2)
    env.nodeclaim("nc-late")
    env.launch("nc-late")
    assert env.replicas("md-a") == 3
    writes = len(env.plugin_management.writes)

    with pytest.raises(InstanceNotFoundError, match="no Machine was bound"):
        env.delete("nc-late")

    assert env.replicas("md-a") == 2
    assert env.plugin_management.writes[writes:] == [("patch", "machinedeployments", "scale")]
    env.driver.advance(30)
    assert sorted(m["metadata"]["name"] for m in env.machines()) == sorted(bound.values())


def test_a_waiting_nodeclaim_removes_the_machine_made_for_it_and_nobody_elses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = new_env(monkeypatch=monkeypatch, delete_delay=5)
    env.deployment("md-a")
    for name in ("nc-0", "nc-1", "nc-2"):
        env.nodeclaim(name)
        env.launch(name)
    env.driver.advance(5)  # three free Machines
    env.launch("nc-0")  # binds one
    assert list(env.bindings()) == ["nc-0"]
    kept = env.bindings()["nc-0"][0]

    assert env.delete("nc-2") is True

    assert env.replicas("md-a") == 2
    doomed = env.bindings()["nc-2"][0]
    assert marked(env, doomed)
    env.driver.advance(30)
    with pytest.raises(InstanceNotFoundError):
        env.delete("nc-2")
    assert not gone(env, kept)
    env.launch_all(["nc-0", "nc-1"])
    assert env.replicas("md-a") == 2
    assert sorted(env.bindings()) == ["nc-0", "nc-1"]


def test_a_nodeclaim_that_never_asked_for_anything_is_not_ours(
    env: Env,
) -> None:
    env.deployment("md-a")
    env.nodeclaim("nc")

    with pytest.raises(NotHandledError):
        env.delete("nc")


def test_an_orphan_from_the_garbage_collector_is_deleted_by_its_machine(
    env: Env,
) -> None:
    bound = launched(env, 2)
    (instance,) = [i for i in env.plugins.list_instances() if i.nodeclaim_name == "nc-001"]
    orphan = NodeClaim.model_validate(orphan_nodeclaim(instance))

    assert env.plugins.delete(orphan) == "generic_capi"

    assert marked(env, bound["nc-001"])
    assert env.replicas("md-a") == 1


def test_a_scale_up_waits_for_a_pending_scale_down(monkeypatch: pytest.MonkeyPatch) -> None:
    # CAPI cannot remove a marked Machine and add one in the same replica change: the
    # scale-down goes first, then the new NodeClaim's replica.
    env = new_env(monkeypatch=monkeypatch, delete_delay=5)
    bound = launched(env, 2)
    env.delete("nc-000")
    env.clock.advance(1)
    env.nodeclaim("nc-new")

    first = env.launch("nc-new")

    assert first.annotations[ANNOTATION_SCALABLE_RESOURCE].endswith("md-a")
    assert env.replicas("md-a") == 1
    env.launch_all(["nc-new"])
    assert env.replicas("md-a") == 2
    assert gone(env, bound["nc-000"]) or machine(env, bound["nc-000"])["metadata"].get(
        "deletionTimestamp"
    )
    assert env.bindings()["nc-001"] == [bound["nc-001"]]
    assert len(env.bindings()["nc-new"]) == 1


def test_a_mark_written_then_blocked_by_min_size_is_removed(
    env: Env,
) -> None:
    bound = launched(env, 3)
    # Another NodeClaim's Machine is already marked and accounted for.
    assert env.delete("nc-000") is True
    env.api.patch(
        env.res(MACHINE_DEPLOYMENTS),
        "md-a",
        {"metadata": {"annotations": {MIN_SIZE: "2"}}},
        "default",
    )

    assert env.delete("nc-001") is True

    # At the min size: nc-001's Machine is replaced, not scaled away, and carries no mark.
    assert env.replicas("md-a") == 2
    assert not marked(env, bound["nc-001"])
    assert machine(env, bound["nc-001"])["metadata"].get("deletionTimestamp")
