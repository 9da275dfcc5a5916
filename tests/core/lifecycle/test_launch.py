"""Launch: the finalizer first, asynchronous launch, giving up on capacity, retry backoff."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from pydantic import ValidationError

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.api.nodeclaim import NodeClaim
from karpenter_capi.core.api.nodeclass import ClusterAPINodeClass
from karpenter_capi.core.errors import (
    InsufficientCapacityError,
    NodeClassNotReadyError,
    RetryableCreateError,
)
from karpenter_capi.core.instancetype import Offering
from karpenter_capi.core.kube.errors import (
    STORAGE_INITIALIZING,
    ServiceUnavailable,
    TooManyRequests,
)
from karpenter_capi.core.kube.resources import CLUSTER_API_NODE_CLASSES, NODECLAIMS, NODEPOOLS
from tests.core.lifecycle.harness import Env, condition, new_env


def test_finalizer_is_in_the_api_before_the_provider_is_called(env: Env) -> None:
    env.nodeclaim("nc")
    env.reconcile(env.lifecycle(), "nc")

    assert env.provider.finalizers_at_create["nc"] == [wellknown.FINALIZER_TERMINATION]
    assert env.get("nc")["metadata"]["finalizers"] == [wellknown.FINALIZER_TERMINATION]


def test_launch_is_unknown_while_the_provider_binds_then_true() -> None:
    env = new_env(bind_after_polls=2)
    env.nodeclaim("nc")
    controller = env.lifecycle(launch_poll_interval=5.0)

    result = env.reconcile(controller, "nc")

    claim = env.get("nc")
    launched = condition(claim, "Launched")
    assert (launched["status"], launched["reason"]) == ("Unknown", "Launching")
    assert "small" in launched["message"]
    assert condition(claim, "Ready")["status"] == "Unknown"
    assert "providerID" not in claim.get("status", {})
    # The offering is known at once, and so is the plugin's note to find its work again.
    labels = claim["metadata"]["labels"]
    assert labels[wellknown.LABEL_INSTANCE_TYPE] == "small"
    assert labels[wellknown.LABEL_TOPOLOGY_ZONE] == "zone-a"
    assert labels[wellknown.LABEL_CAPACITY_TYPE] == "on-demand"
    assert claim["metadata"]["annotations"]["fake.example.com/instance"] == "fake-1"
    assert result.requeue_after == pytest.approx(5.0)

    # Our own write wakes the controller early: the provider is not asked again before its time.
    env.reconcile(controller, "nc")
    assert env.provider.count("create", "nc") == 1

    env.clock.advance(5)
    env.reconcile(controller, "nc")
    assert condition(env.get("nc"), "Launched")["status"] == "Unknown"
    env.clock.advance(5)
    result = env.reconcile(controller, "nc")

    claim = env.get("nc")
    assert env.provider.count("create", "nc") == 3
    assert len(env.provider.instances) == 1, "polling must not launch a second machine"
    launched = condition(claim, "Launched")
    assert (launched["status"], launched["reason"]) == ("True", "Launched")
    assert launched["lastTransitionTime"] == "2026-01-01T00:00:10Z"
    status = claim["status"]
    assert status["providerID"] == "fake://zone-a/fake-1"
    assert status["imageID"] == "fake-image-1"
    assert status["capacity"] == {"cpu": "2", "memory": "4Gi", "pods": "110"}
    assert status["allocatable"] == status["capacity"]
    assert env.metrics.named("nodeclaim_launched") == [("general",)]
    assert ("Create", "fake", "nodeclaim.lifecycle") in env.metrics.named("cloudprovider_call")
    # Registration now waits for the Node (woken by Node events), liveness for its deadline.
    assert condition(claim, "Registered")["reason"] == "NodeNotFound"
    assert result.requeue_after == pytest.approx(15 * 60)


def test_a_launch_under_way_does_not_resolve_its_instance_types_again() -> None:
    # Each resolution is a fresh selection of the management cluster's resources (four lists
    # over a real API); the call that finds the Machine needs none of it.
    env = new_env(bind_after_polls=1)
    env.nodeclaim("nc")
    controller = env.lifecycle(launch_poll_interval=1.0)
    env.reconcile(controller, "nc")
    resolved = env.provider.count("instance_types")
    env.clock.advance(1)
    env.reconcile(controller, "nc")
    assert condition(env.get("nc"), "Launched")["status"] == "True"
    assert env.provider.count("create", "nc") == 2
    assert env.provider.count("instance_types") == resolved


def test_a_launch_under_way_resolves_again_when_its_nodepool_spec_changes() -> None:
    env = new_env(bind_after_polls=2)
    env.nodeclaim("nc")
    controller = env.lifecycle(launch_poll_interval=1.0)
    env.reconcile(controller, "nc")
    resolved = env.provider.count("instance_types")
    pool = env.api.get(NODEPOOLS, "general")
    pool["spec"]["weight"] = 7
    env.api.update(NODEPOOLS, pool)
    env.clock.advance(1)
    env.reconcile(controller, "nc")
    assert env.provider.count("instance_types") == resolved + 1


def test_a_provider_that_binds_at_once_launches_in_one_reconcile(env: Env) -> None:
    env.nodeclaim("nc")
    env.reconcile(env.lifecycle(), "nc")

    claim = env.get("nc")
    assert condition(claim, "Launched")["status"] == "True"
    assert claim["status"]["providerID"].startswith("fake://")
    # Conditions as upstream writes them: every known type, observedGeneration, Ready last.
    types = [c["type"] for c in claim["status"]["conditions"]]
    assert set(types) == {"Launched", "Registered", "Initialized", "Ready"}
    assert types[-1] == "Ready"
    assert all(c["observedGeneration"] == 1 for c in claim["status"]["conditions"])


def test_create_is_offered_only_compatible_types_and_offerings_cheapest_first(env: Env) -> None:
    env.nodeclaim("nc", instance_types=("small", "large"), capacity_types=("on-demand", "spot"))
    env.reconcile(env.lifecycle(), "nc")

    assert env.provider.offered["nc"] == ["small", "large"]
    claim = env.get("nc")
    # The spot offering in zone-b is the cheapest the requirements allow.
    assert claim["metadata"]["labels"][wellknown.LABEL_CAPACITY_TYPE] == "spot"
    assert claim["metadata"]["labels"][wellknown.LABEL_TOPOLOGY_ZONE] == "zone-b"


def test_insufficient_capacity_deletes_the_nodeclaim_with_an_event(env: Env) -> None:
    env.nodeclaim("nc")
    env.provider.create_errors.append(
        InsufficientCapacityError(
            "no small left", [("small", Offering("zone-a", "on-demand", 0.1))]
        )
    )

    result = env.reconcile(env.lifecycle(), "nc")

    claim = env.get("nc")
    assert claim["metadata"].get("deletionTimestamp"), "the NodeClaim is being deleted"
    assert claim["metadata"]["finalizers"] == [wellknown.FINALIZER_TERMINATION]
    (event,) = env.events("InsufficientCapacityError")
    assert event["type"] == "Warning"
    assert event["involvedObject"]["name"] == "nc"
    assert "no small left" in event["message"]
    assert env.metrics.named("nodeclaim_disrupted") == [("insufficient_capacity", "general", "")]
    assert result.requeue_after is None


def test_no_available_offering_is_insufficient_capacity_without_asking_to_create(
    env: Env,
) -> None:
    env.nodeclaim("nc", instance_types=("large",), capacity_types=("spot",))

    env.reconcile(env.lifecycle(), "nc")

    assert env.get("nc")["metadata"].get("deletionTimestamp")
    assert env.provider.count("create") == 0
    (event,) = env.events("InsufficientCapacityError")
    assert "no instance type" in event["message"]


def test_a_nodeclass_that_is_not_ready_deletes_the_nodeclaim(env: Env) -> None:
    env.nodeclaim("nc")
    env.provider.instance_types_error = NodeClassNotReadyError(
        "default", "selector matches nothing"
    )

    env.reconcile(env.lifecycle(), "nc")

    assert env.get("nc")["metadata"].get("deletionTimestamp")
    (event,) = env.events("NodeClassNotReady")
    assert "selector matches nothing" in event["message"]
    assert env.metrics.named("nodeclaim_disrupted") == [("nodeclass_not_ready", "general", "")]


def test_a_missing_nodeclass_deletes_the_nodeclaim(env: Env) -> None:
    env.api.delete(CLUSTER_API_NODE_CLASSES, "default")
    env.nodeclaim("nc")

    env.reconcile(env.lifecycle(), "nc")

    assert env.get("nc")["metadata"].get("deletionTimestamp")
    assert env.events("NodeClassNotReady")


def test_failed_creates_retry_after_1s_doubling_to_1min() -> None:
    env = new_env()
    env.nodeclaim("nc")
    env.provider.create_errors.extend(RetryableCreateError("throttled") for _ in range(9))
    controller = env.lifecycle()

    delays = []
    for _ in range(9):
        result = env.reconcile(controller, "nc")
        assert result.requeue_after is not None
        delays.append(result.requeue_after)
        # Woken early (by its own status write): waits for the rest, without calling.
        calls = env.provider.count("create")
        env.clock.advance(result.requeue_after / 2)
        early = env.reconcile(controller, "nc")
        assert env.provider.count("create") == calls
        assert early.requeue_after == pytest.approx(result.requeue_after / 2)
        env.clock.advance(result.requeue_after / 2)

    assert delays == [1, 2, 4, 8, 16, 32, 60, 60, 60]
    launched = condition(env.get("nc"), "Launched")
    assert (launched["status"], launched["reason"]) == ("Unknown", "LaunchFailed")
    assert "throttled" in launched["message"]

    env.reconcile(controller, "nc")
    assert condition(env.get("nc"), "Launched")["status"] == "True"
    assert not env.get("nc")["metadata"].get("deletionTimestamp")


def _outage(message: str = "cannot reach the management cluster") -> RetryableCreateError:
    """What a plugin raises when the API it needs is out of reach: its error, from the API's."""
    try:
        raise ServiceUnavailable(message)
    except ServiceUnavailable as cause:
        try:
            raise RetryableCreateError(f"wrapped: {message}") from cause
        except RetryableCreateError as wrapped:
            return wrapped


def test_an_api_out_of_reach_is_retried_every_5s_at_most_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    env = new_env()
    env.nodeclaim("nc")
    env.provider.create_errors.extend(_outage() for _ in range(6))
    controller = env.lifecycle()

    delays = []
    for _ in range(6):
        result = env.reconcile(controller, "nc")
        assert result.requeue_after is not None
        delays.append(result.requeue_after)
        env.clock.advance(result.requeue_after)

    assert delays == [1, 2, 4, 5, 5, 5]
    failures = [r for r in caplog.records if r.getMessage().startswith("launching nodeclaim nc")]
    assert [r.levelno for r in failures] == [logging.WARNING] + [logging.DEBUG] * 5
    env.reconcile(controller, "nc")
    assert condition(env.get("nc"), "Launched")["status"] == "True"


def test_a_storage_initializing_server_waits_its_retry_after_but_no_backoff() -> None:
    env = new_env()
    env.nodeclaim("nc")
    initializing = TooManyRequests(STORAGE_INITIALIZING, retry_after_seconds=7)
    env.provider.create_errors.extend(initializing for _ in range(8))
    controller = env.lifecycle()

    delays = []
    for _ in range(8):
        result = env.reconcile(controller, "nc")
        assert result.requeue_after is not None
        delays.append(result.requeue_after)
        env.clock.advance(result.requeue_after)

    assert delays == [7] * 8  # the server's Retry-After is a floor; 5 s is the backoff's cap


def test_the_api_answering_again_ends_the_launch_backoff_at_once() -> None:
    env = new_env()
    env.nodeclaim("nc")
    env.provider.create_errors.extend(_outage() for _ in range(4))
    controller = env.lifecycle()
    for _ in range(4):
        result = env.reconcile(controller, "nc")
        assert result.requeue_after is not None
        env.clock.advance(result.requeue_after)
    env.provider.create_errors.append(_outage())
    assert env.reconcile(controller, "nc").requeue_after == 5
    env.reconcile(controller, "nc")  # early (its own write): waits
    calls = env.provider.count("create")

    assert controller.recovered() == ["nc"]

    env.reconcile(controller, "nc")
    assert env.provider.count("create") == calls + 1
    assert condition(env.get("nc"), "Launched")["status"] == "True"
    # Launched, not yet Ready: it still waits (for its Node), so it is woken again.
    assert controller.recovered() == ["nc"]


def test_a_retry_after_from_the_provider_is_honoured(env: Env) -> None:
    env.nodeclaim("nc")
    env.provider.create_errors.append(
        RetryableCreateError("quota", retry_after=timedelta(seconds=42))
    )

    result = env.reconcile(env.lifecycle(), "nc")

    assert result.requeue_after == pytest.approx(42)


def test_a_plugin_bug_is_retried_not_fatal(env: Env) -> None:
    env.nodeclaim("nc")
    env.provider.create_errors.append(KeyError("oops"))

    result = env.reconcile(env.lifecycle(), "nc")

    launched = condition(env.get("nc"), "Launched")
    assert launched["reason"] == "LaunchFailed"
    assert "plugin 'fake' failed in karpenter_capi_create" in launched["message"]
    assert result.requeue_after == pytest.approx(1)


def test_a_nodeclaim_without_its_nodepool_waits_and_says_why(env: Env) -> None:
    env.nodeclaim("nc", nodepool="missing")

    env.reconcile(env.lifecycle(), "nc")

    launched = condition(env.get("nc"), "Launched")
    assert (launched["status"], launched["reason"]) == ("Unknown", "NodePoolNotFound")
    assert env.provider.count("create") == 0


def test_a_stale_cache_never_launches_twice() -> None:
    env = new_env(bind_after_polls=1)
    env.nodeclaim("nc")
    controller = env.lifecycle(launch_poll_interval=1.0)
    env.reconcile(controller, "nc")
    env.clock.advance(1)

    # The status write is not in the cache yet, and the plugin only knows its work by the
    # annotation it asked us to record: the controller still shows it that annotation.
    env.provider.instances["fake-1"].nodeclaim_name = None
    env.caches.store(NODECLAIMS).upsert(
        "nc", {**env.get("nc"), "metadata": {**env.get("nc")["metadata"], "annotations": {}}}
    )
    controller.reconcile("nc")

    assert len(env.provider.instances) == 1


def test_dry_run_writes_nothing_and_launches_nothing(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="test.lifecycle")
    env = new_env(dry_run=True)
    created = env.nodeclaim("nc")

    env.reconcile(env.lifecycle(), "nc")

    assert env.get("nc")["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert env.provider.count("create") == 0
    assert "would launch NodeClaim nc" in caplog.text
    assert "would patch NodeClaim nc" in caplog.text


def test_a_fallback_after_a_recorded_result_relabels_the_offering() -> None:
    env = new_env(bind_after_polls=2)
    env.nodeclaim("nc")
    controller = env.lifecycle(launch_poll_interval=5.0)
    env.reconcile(controller, "nc")
    assert env.get("nc")["metadata"]["labels"][wellknown.LABEL_TOPOLOGY_ZONE] == "zone-a"
    # The plugin gave up on zone-a and now launches in zone-b (capz's pool fallback).
    [instance] = env.provider.instances.values()
    instance.zone = "zone-b"
    for _ in range(2):
        env.clock.advance(5)
        env.reconcile(controller, "nc")
    claim = env.get("nc")
    assert condition(claim, "Launched")["status"] == "True"
    assert claim["metadata"]["labels"][wellknown.LABEL_TOPOLOGY_ZONE] == "zone-b"


def test_create_receives_the_documented_frozen_models_read_once_per_version() -> None:
    env = new_env(bind_after_polls=3)
    env.nodeclaim("nc")
    controller = env.lifecycle(launch_poll_interval=5.0)
    env.reconcile(controller, "nc")  # creates; writes the plugin's labels and annotations
    env.clock.advance(5)
    env.reconcile(controller, "nc")  # polls the NodeClaim as written
    env.clock.advance(5)
    env.reconcile(controller, "nc")  # polls it again, unchanged

    (first, first_class), (polled, polled_class), (again, again_class) = env.provider.received
    for nodeclaim, nodeclass in env.provider.received:
        assert type(nodeclaim) is NodeClaim
        assert type(nodeclass) is ClusterAPINodeClass
    assert polled.metadata.annotations["fake.example.com/instance"] == "fake-1"
    # Unchanged objects are not validated again: the plugin sees the very same models.
    assert again is polled
    assert again_class is polled_class is first_class
    assert first is not polled  # the NodeClaim changed in between (our write)
    with pytest.raises(ValidationError, match="frozen"):
        polled.metadata.name = "other"  # type: ignore[misc]
