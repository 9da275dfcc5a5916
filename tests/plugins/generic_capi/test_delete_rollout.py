"""The rollout guard: a MachineDeployment is scaled down only when CAPI will then remove the
marked Machines and no other."""

from __future__ import annotations

from typing import Any

import pytest

from karpenter_capi.core.kube import MACHINE_DEPLOYMENTS, MACHINE_SETS
from karpenter_capi.plugins.generic_capi.binding import (
    ANNOTATION_DELETE_MACHINE,
    machine_facts,
)
from karpenter_capi.plugins.generic_capi.scaling import (
    ANNOTATION_REVISION,
    rollout_in_progress,
    withdrawal_unsafe,
)
from tests.plugins.generic_capi.env import SHAPES, Env, names, new_env

# --- the rule, on hand-written objects ----------------------------------------------------------


def md(strategy: str = "RollingUpdate", revision: int = 1, **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {"annotations": {ANNOTATION_REVISION: str(revision)}, **meta},
        "spec": {"strategy": {"type": strategy}},
    }


def ms(name: str, replicas: int, revision: int, created: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "creationTimestamp": created,
            "annotations": {ANNOTATION_REVISION: str(revision)},
        },
        "spec": {"replicas": replicas},
        "status": {"replicas": replicas},
    }


def in_set(name: str, machine_set: str) -> Any:
    return machine_facts(
        {
            "metadata": {
                "name": name,
                "labels": {"cluster.x-k8s.io/set-name": machine_set},
                "annotations": {ANNOTATION_DELETE_MACHINE: "x"},
            }
        }
    )


OLD = ms("old", 2, 1, "2026-01-01T00:00:00Z")
NEW = ms("new", 1, 2, "2026-01-01T01:00:00Z")


def test_one_active_machine_set_is_safe() -> None:
    assert (
        rollout_in_progress(md(revision=2), [ms("old", 0, 1, "t"), NEW], [in_set("m", "new")])
        is None
    )


def test_a_rolling_update_in_progress_is_not() -> None:
    why = rollout_in_progress(md(revision=2), [OLD, NEW], [in_set("m", "old")])
    assert why is not None
    assert "rolling out" in why


def test_a_spec_the_controller_has_not_seen_is_not() -> None:
    deployment = md(generation=3)
    deployment["status"] = {"observedGeneration": 2}
    assert rollout_in_progress(deployment, [OLD], []) is not None


def test_a_revision_without_its_machine_set_is_not() -> None:
    why = rollout_in_progress(md(revision=3), [OLD, ms("new", 0, 2, "t2")], [])
    assert why is not None
    assert "revision 3" in why


def test_on_delete_is_safe_for_machines_of_the_oldest_active_set_only() -> None:
    deployment = md("OnDelete", revision=2)
    assert rollout_in_progress(deployment, [OLD, NEW], [in_set("a", "old")]) is None
    assert (
        rollout_in_progress(deployment, [OLD, NEW], [in_set("a", "old"), in_set("b", "old")])
        is None
    )
    assert rollout_in_progress(deployment, [OLD, NEW], [in_set("c", "new")]) is not None
    three = [in_set(n, "old") for n in "abc"]
    assert rollout_in_progress(deployment, [OLD, NEW], three) is not None


def test_withdrawing_a_replica_waits_only_while_two_machine_sets_have_replicas() -> None:
    assert withdrawal_unsafe(md("OnDelete", revision=2), [ms("old", 0, 1, "t"), NEW]) is None
    # A raise the controller has not seen yet is withdrawn before it acts: nothing is removed.
    unobserved = md(generation=3)
    unobserved["status"] = {"observedGeneration": 2}
    assert withdrawal_unsafe(unobserved, [OLD]) is None
    for strategy in ("OnDelete", "RollingUpdate"):
        why = withdrawal_unsafe(md(strategy, revision=2), [OLD, NEW])
        assert why is not None
        assert strategy in why
        assert "removing a running Machine" in why


# --- against the emulated MachineDeployment controller -----------------------------------------


def launched(env: Env, count: int, strategy: str) -> dict[str, str]:
    env.deployment("md-a", strategy=strategy)
    claims = names("nc", count)
    for name in claims:
        env.nodeclaim(name)
    env.launch_all(claims)
    return {name: machines[0] for name, machines in env.bindings().items()}


def change_template(env: Env) -> None:
    env.api.patch(
        env.res(MACHINE_DEPLOYMENTS),
        "md-a",
        {"spec": {"template": {"spec": {"version": "v1.32.0"}}}},
        "default",
    )
    env.driver.run_until_quiet()


def sets(env: Env) -> dict[str, int]:
    return {
        s["metadata"]["name"]: s["spec"]["replicas"]
        for s in env.api.list(env.res(MACHINE_SETS), "default").items
    }


@pytest.mark.parametrize("shape", SHAPES)
def test_no_scale_down_during_a_rolling_update(shape: str, monkeypatch: pytest.MonkeyPatch) -> None:
    env = new_env(shape, monkeypatch=monkeypatch, provision_delay=30)
    launched(env, 2, "RollingUpdate")
    change_template(env)
    assert len([r for r in sets(env).values() if r > 0]) == 2
    writes = len(env.plugin_management.writes)

    assert env.delete("nc-000") is True

    assert env.plugin_management.writes[writes:] == []
    assert env.replicas("md-a") == 2


@pytest.mark.parametrize("shape", SHAPES)
def test_on_delete_replaces_drifted_machines_one_by_one(
    shape: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = new_env(shape, monkeypatch=monkeypatch, delete_delay=5)
    bound = launched(env, 2, "OnDelete")
    change_template(env)
    # The replacement first: it goes to the new MachineSet.
    env.clock.advance(1)
    env.nodeclaim("nc-new")
    env.launch_all(["nc-new"])
    new_machine = env.bindings()["nc-new"][0]
    assert env.replicas("md-a") == 3
    assert len([r for r in sets(env).values() if r > 0]) == 2

    # A Machine of the new set cannot go while the old set has replicas: CAPI would take an
    # old one instead.
    writes = len(env.plugin_management.writes)
    assert env.delete("nc-new") is True
    assert env.plugin_management.writes[writes:] == []

    # A drifted Machine of the old set can.
    assert env.delete("nc-000") is True
    assert env.replicas("md-a") == 2
    env.driver.advance(30)
    live = sorted(m["metadata"]["name"] for m in env.machines())
    assert live == sorted([bound["nc-001"], new_machine])


# --- withdrawing a replica that has no Machine yet ---------------------------------------------


def stalled_replacement(env: Env) -> tuple[dict[str, str], str]:
    """Two NodeClaims on md-a's old MachineSet, an OnDelete template change, and a third
    NodeClaim whose replica lands in the new MachineSet, which makes no Machine (paused, as a
    stuck infrastructure provider would leave it)."""
    bound = launched(env, 2, "OnDelete")
    old_sets = {m["metadata"]["labels"]["cluster.x-k8s.io/set-name"] for m in env.machines()}
    change_template(env)
    (new_set,) = set(sets(env)) - old_sets
    env.api.patch(
        env.res(MACHINE_SETS),
        new_set,
        {"metadata": {"annotations": {"cluster.x-k8s.io/paused": "true"}}},
        "default",
    )
    env.clock.advance(1)
    env.nodeclaim("nc-new")
    env.launch("nc-new")
    env.driver.run_until_quiet()
    assert sets(env)[new_set] == 1
    return bound, new_set


@pytest.mark.parametrize("shape", SHAPES)
def test_a_launch_timing_out_during_an_on_delete_rollout_removes_no_running_machine(
    shape: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = new_env(shape, monkeypatch=monkeypatch, options={"machine_timeout": "30s"})
    bound, _ = stalled_replacement(env)
    assert env.replicas("md-a") == 3
    for _ in range(10):  # past the machine timeout, polling as the core does
        env.clock.advance(5)
        result = env.launch("nc-new")
        env.driver.run_until_quiet()

    # Giving the replica back would make CAPI scale the old MachineSet down and remove a
    # running node; the NodeClaim keeps waiting on the rollout instead.
    assert env.replicas("md-a") == 3
    live = {m["metadata"]["name"] for m in env.machines()}
    assert set(bound.values()) <= live
    assert result.provider_id is None
    assert result.annotations.get("karpenter.cluster.x-k8s.io/scalable-resource", "").endswith(
        "md-a"
    )


@pytest.mark.parametrize("shape", SHAPES)
def test_a_nodeclaim_deleted_during_an_on_delete_rollout_waits_to_withdraw_its_replica(
    shape: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = new_env(shape, monkeypatch=monkeypatch)
    bound, new_set = stalled_replacement(env)
    writes = len(env.plugin_management.writes)

    assert env.delete("nc-new") is True  # under way: not yet safe
    env.driver.run_until_quiet()
    assert env.replicas("md-a") == 3
    assert set(bound.values()) <= {m["metadata"]["name"] for m in env.machines()}
    assert env.plugin_management.writes[writes:] == []

    # Once the new set makes its Machine, that Machine is marked as the one to go; it goes when
    # the roll-out lets CAPI take it (the rule of the tests above), and no running node goes.
    env.api.patch(
        env.res(MACHINE_SETS),
        new_set,
        {"metadata": {"annotations": {"cluster.x-k8s.io/paused": None}}},
        "default",
    )
    env.driver.run_until_quiet()
    assert env.delete("nc-new") is True
    env.driver.advance(30)
    made = [m for m in env.machines() if m["metadata"]["name"] not in bound.values()]
    assert len(made) == 1
    assert ANNOTATION_DELETE_MACHINE in made[0]["metadata"]["annotations"]
    assert set(bound.values()) <= {m["metadata"]["name"] for m in env.machines()}
    assert env.replicas("md-a") == 3
