"""Liveness: NodeClaims that do not launch or register in time are deleted and reported."""

from __future__ import annotations

import pytest

from karpenter_capi.core.errors import RetryableCreateError
from karpenter_capi.core.kube.resources import NODEPOOLS
from tests.core.lifecycle.harness import Env, condition, new_env


def registration_health(env: Env) -> dict[str, str]:
    return condition(env.api.get(NODEPOOLS, "general"), "NodeRegistrationHealthy")


def test_a_nodeclaim_not_launched_in_5_minutes_is_deleted() -> None:
    env = new_env(bind_after_polls=1_000)
    env.nodeclaim("nc")
    controller = env.lifecycle(launch_poll_interval=60)

    env.reconcile(controller, "nc")
    env.clock.advance(4 * 60)
    result = env.reconcile(controller, "nc")
    assert not env.get("nc")["metadata"].get("deletionTimestamp")
    assert result.requeue_after == pytest.approx(60)

    env.clock.advance(60)
    env.reconcile(controller, "nc")

    assert env.get("nc")["metadata"].get("deletionTimestamp")
    (event,) = env.events("LaunchTimeout")
    assert "not launched within 5m0s" in event["message"]
    health = registration_health(env)
    assert (health["status"], health["reason"]) == ("False", "LaunchTimeout")
    assert health["lastTransitionTime"] == "2026-01-01T00:05:00Z"
    (pool_event,) = env.events("NodeRegistrationUnhealthy")
    assert pool_event["involvedObject"]["kind"] == "NodePool"
    assert env.metrics.named("nodeclaim_disrupted") == [("launch_timeout", "general", "on-demand")]


def test_the_launch_failure_is_the_nodepool_reason(env: Env) -> None:
    env.nodeclaim("nc")
    env.provider.create_errors.extend(RetryableCreateError("subnet full") for _ in range(100))
    controller = env.lifecycle()

    for _ in range(12):
        env.reconcile(controller, "nc")
        env.clock.advance(30)

    assert env.get("nc")["metadata"].get("deletionTimestamp")
    health = registration_health(env)
    assert (health["status"], health["reason"]) == ("False", "LaunchFailed")
    assert "subnet full" in health["message"]


def test_a_nodeclaim_not_registered_15_minutes_after_launch_is_deleted(env: Env) -> None:
    env.nodeclaim("nc")
    controller = env.lifecycle()
    env.clock.advance(60)
    env.reconcile(controller, "nc")  # launched at 00:01:00

    env.clock.advance(15 * 60 - 1)
    result = env.reconcile(controller, "nc")
    assert not env.get("nc")["metadata"].get("deletionTimestamp")
    assert result.requeue_after == pytest.approx(1)

    env.clock.advance(1)
    env.reconcile(controller, "nc")

    assert env.get("nc")["metadata"].get("deletionTimestamp")
    (event,) = env.events("RegistrationTimeout")
    assert "fake://" in event["message"]
    health = registration_health(env)
    assert (health["status"], health["reason"]) == ("False", "RegistrationFailed")
    assert env.metrics.named("nodeclaim_disrupted") == [
        ("registration_timeout", "general", "on-demand")
    ]


def test_timeouts_are_configurable(env: Env) -> None:
    env.nodeclaim("nc")
    controller = env.lifecycle(registration_timeout=60)
    env.reconcile(controller, "nc")

    env.clock.advance(60)
    env.reconcile(controller, "nc")

    assert env.get("nc")["metadata"].get("deletionTimestamp")


def test_a_later_registration_makes_the_nodepool_healthy_again(env: Env) -> None:
    controller = env.lifecycle(registration_timeout=60)
    env.nodeclaim("first")
    env.reconcile(controller, "first")
    env.clock.advance(60)
    env.reconcile(controller, "first")
    assert registration_health(env)["status"] == "False"

    env.nodeclaim("second")
    env.reconcile(controller, "second")
    env.node("node-2", env.get("second")["status"]["providerID"])
    env.clock.advance(10)
    env.reconcile(controller, "second")

    health = registration_health(env)
    assert (health["status"], health["reason"]) == ("True", "NodeRegistrationHealthy")
    assert health["lastTransitionTime"] == "2026-01-01T00:01:10Z"


def test_a_registered_nodeclaim_never_times_out(env: Env) -> None:
    env.nodeclaim("nc")
    controller = env.lifecycle()
    env.reconcile(controller, "nc")
    env.node("node-1", env.get("nc")["status"]["providerID"])
    env.reconcile(controller, "nc")

    env.clock.advance(24 * 3600)
    result = env.reconcile(controller, "nc")

    assert not env.get("nc")["metadata"].get("deletionTimestamp")
    assert result.requeue_after is None
