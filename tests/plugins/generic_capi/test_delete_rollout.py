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
from karpenter_capi.plugins.generic_capi.scaling import ANNOTATION_REVISION, rollout_in_progress
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
