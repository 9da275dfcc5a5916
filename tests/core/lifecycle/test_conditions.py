"""Conditions as upstream's operatorpkg writes them, and the writes that protect them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube.errors import Conflict
from karpenter_capi.core.kube.resources import NODECLAIMS
from karpenter_capi.core.lifecycle.conditions import ConditionSet
from karpenter_capi.core.observability.metrics import Metrics
from tests.core.lifecycle.harness import Env, condition, new_env

CREATED = datetime(2026, 1, 1, tzinfo=UTC)


def conditions(now: datetime, existing: list[dict[str, object]] | None = None) -> ConditionSet:
    return ConditionSet(
        existing or [],
        now=now,
        generation=2,
        created=CREATED,
        dependents=("Launched", "Registered"),
    )


def test_known_conditions_start_unknown_since_creation() -> None:
    later = CREATED + timedelta(minutes=3)
    found = conditions(later)

    launched = found.get("Launched")
    assert launched is not None
    assert (launched["status"], launched["reason"]) == ("Unknown", "AwaitingReconciliation")
    assert launched["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    ready = found.get("Ready")
    assert ready is not None
    assert (ready["status"], ready["reason"]) == ("Unknown", "ReconcilingDependents")
    assert ready["message"] == "Launched=Unknown, Registered=Unknown"


def test_ready_follows_the_dependents() -> None:
    now = CREATED + timedelta(minutes=1)
    found = conditions(now)

    found.set_true("Launched")
    assert found.status("Ready") == "Unknown"
    found.set_false("Registered", "MultipleNodesFound", "two nodes")
    assert (found.status("Ready"), found.reason("Ready")) == ("False", "UnhealthyDependents")
    assert found.message("Ready") == "Registered=False"
    found.set_true("Registered")
    assert (found.status("Ready"), found.reason("Ready")) == ("True", "Ready")
    assert [c["type"] for c in found.to_json()][-1] == "Ready"


def test_transition_time_moves_only_with_the_status() -> None:
    found = conditions(CREATED + timedelta(minutes=1))
    found.set_unknown("Launched", "Launching", "waiting")

    again = conditions(CREATED + timedelta(minutes=2), found.to_json())
    assert not again.set_unknown("Launched", "Launching", "waiting")
    again.set_unknown("Launched", "LaunchFailed", "boom")
    assert again.last_transition("Launched") == CREATED
    again.set_true("Launched")
    assert again.last_transition("Launched") == CREATED + timedelta(minutes=2)


def test_other_controllers_conditions_are_kept(env: Env) -> None:
    env.nodeclaim("nc")
    controller = env.lifecycle()
    env.reconcile(controller, "nc")
    env.node("node-1", env.get("nc")["status"]["providerID"])
    env.caches.sync()
    # The disruption controller writes Drifted; our cache has not seen it when we reconcile.
    drifted = {
        "type": "Drifted",
        "status": "True",
        "reason": "NodePoolDrifted",
        "message": "",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    env.api.patch(
        NODECLAIMS,
        "nc",
        {"status": {"conditions": [*env.get("nc")["status"]["conditions"], drifted]}},
        subresource="status",
    )

    # The resourceVersion precondition refuses our write rather than erase theirs...
    with pytest.raises(Conflict):
        controller.reconcile("nc")

    # ...and the retry, on the fresh object, keeps it.
    env.reconcile(controller, "nc")
    claim = env.get("nc")
    assert condition(claim, "Registered")["status"] == "True"
    assert condition(claim, "Drifted")["reason"] == "NodePoolDrifted"


def test_a_launch_is_counted_in_the_operators_metrics() -> None:
    registry = Metrics(FakeClock())
    env = new_env()
    env.ctx.metrics = registry
    env.nodeclaim("nc")

    env.reconcile(env.lifecycle(), "nc")

    assert condition(env.get("nc"), "Launched")["status"] == "True"
    text = registry.render().decode()
    assert 'karpenter_nodeclaims_launched_total{nodepool="general"} 1.0' in text
    assert "karpenter_cloudprovider_duration_seconds_count" in text
