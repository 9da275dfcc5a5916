"""What a Prometheus scrape shows after the controllers record: upstream names, labels, values."""

from __future__ import annotations

import math
from typing import Protocol, runtime_checkable

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.errors import (
    InstanceNotFoundError,
    InsufficientCapacityError,
    NodeClassNotReadyError,
)
from karpenter_capi.core.observability import Metrics
from karpenter_capi.core.observability.metrics import DURATION_BUCKETS, RECONCILE_BUCKETS


def samples(metrics: Metrics) -> list[Sample]:
    return [
        sample
        for family in text_string_to_metric_families(metrics.render().decode())
        for sample in family.samples
    ]


def value(metrics: Metrics, metric: str, /, **labels: str) -> float | None:
    """The value of the one sample named ``metric`` with exactly ``labels``, None if absent."""
    found = [s.value for s in samples(metrics) if s.name == metric and s.labels == labels]
    assert len(found) <= 1
    return found[0] if found else None


def series(metrics: Metrics, name: str) -> list[dict[str, str]]:
    return [s.labels for s in samples(metrics) if s.name == name]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def metrics(clock: FakeClock) -> Metrics:
    return Metrics(clock)


def test_nodeclaim_and_node_counters_carry_upstream_labels(metrics: Metrics) -> None:
    metrics.nodeclaim_created("default")
    metrics.nodeclaim_created("default")
    metrics.nodeclaim_created("gpu", reason="drifted", min_values_relaxed=True)
    metrics.nodeclaim_disrupted("gpu", reason="drifted", capacity_type="spot")
    metrics.nodeclaim_terminated("gpu", capacity_type="spot", zone="eu-1a", duration_seconds=95.0)
    metrics.node_created("default", zone="eu-1b")
    metrics.node_terminated("gpu", zone="eu-1a", duration_seconds=80.0)

    created = "karpenter_nodeclaims_created_total"
    assert (
        value(
            metrics, created, reason="provisioned", nodepool="default", min_values_relaxed="false"
        )
        == 2
    )
    assert value(metrics, created, reason="drifted", nodepool="gpu", min_values_relaxed="true") == 1
    assert (
        value(
            metrics,
            "karpenter_nodeclaims_disrupted_total",
            reason="drifted",
            nodepool="gpu",
            capacity_type="spot",
        )
        == 1
    )
    assert (
        value(
            metrics,
            "karpenter_nodeclaims_terminated_total",
            nodepool="gpu",
            capacity_type="spot",
            zone="eu-1a",
        )
        == 1
    )
    assert value(metrics, "karpenter_nodes_created_total", nodepool="default", zone="eu-1b") == 1
    assert value(metrics, "karpenter_nodes_terminated_total", nodepool="gpu", zone="eu-1a") == 1
    # 95 s falls in the 128 s bucket of ExponentialBuckets(1, 2, 12), not the 64 s one.
    hist = "karpenter_nodeclaims_termination_duration_seconds_bucket"
    assert value(metrics, hist, nodepool="gpu", le="64.0") == 0
    assert value(metrics, hist, nodepool="gpu", le="128.0") == 1
    assert value(metrics, hist, nodepool="gpu", le="2048.0") == 1
    assert (
        value(
            metrics, "karpenter_nodes_termination_duration_seconds", nodepool="gpu", quantile="0.5"
        )
        == 80.0
    )


def test_a_nodeclaim_that_never_launched_is_counted_without_zone(metrics: Metrics) -> None:
    metrics.nodeclaim_terminated("default")

    assert series(metrics, "karpenter_nodeclaims_terminated_total") == [
        {"nodepool": "default", "capacity_type": "", "zone": ""}
    ]
    # No duration given, no observation invented.
    assert series(metrics, "karpenter_nodeclaims_termination_duration_seconds_count") == []


def test_cloudprovider_call_times_on_the_injected_clock(metrics: Metrics, clock: FakeClock) -> None:
    with metrics.cloudprovider_call("Create", provider="generic_capi", controller="lifecycle"):
        clock.advance(0.3)

    labels = {"controller": "lifecycle", "method": "Create", "provider": "generic_capi"}
    assert value(metrics, "karpenter_cloudprovider_duration_seconds_count", **labels) == 1
    assert value(metrics, "karpenter_cloudprovider_duration_seconds_sum", **labels) == (
        pytest.approx(0.3)
    )
    assert (
        value(metrics, "karpenter_cloudprovider_duration_seconds_bucket", le="0.25", **labels) == 0
    )
    assert (
        value(metrics, "karpenter_cloudprovider_duration_seconds_bucket", le="0.5", **labels) == 1
    )
    assert series(metrics, "karpenter_cloudprovider_errors_total") == []


class FleetCapacityError(InsufficientCapacityError):
    """A plugin's own flavour of a well-known core error."""


@pytest.mark.parametrize(
    ("error", "category"),
    [
        (InsufficientCapacityError("no m5.large"), "InsufficientCapacityError"),
        (FleetCapacityError("fleet said no"), "InsufficientCapacityError"),
        (NodeClassNotReadyError("default", "selector matches nothing"), "NodeClassNotReadyError"),
        (InstanceNotFoundError("capi://m-1"), "NodeClaimNotFoundError"),
        (ValueError("bug"), "ValueError"),
    ],
)
def test_cloudprovider_errors_are_counted_by_category_and_propagate(
    metrics: Metrics, clock: FakeClock, error: Exception, category: str
) -> None:
    def failing_call() -> None:
        with metrics.cloudprovider_call("Delete", provider="capa", controller="termination"):
            clock.advance(2)
            raise error

    with pytest.raises(type(error)) as raised:
        failing_call()

    assert raised.value is error
    labels = {"controller": "termination", "method": "Delete", "provider": "capa"}
    assert value(metrics, "karpenter_cloudprovider_errors_total", error=category, **labels) == 1
    # A failed call still took time, and upstream measures it too.
    assert value(metrics, "karpenter_cloudprovider_duration_seconds_sum", **labels) == 2


def test_nodepool_usage_replaces_what_was_reported(metrics: Metrics) -> None:
    metrics.set_nodepool_usage("default", {"cpu": 4.5, "memory": 8e9, "ephemeral-storage": 1e10})
    metrics.set_nodepool_limits("default", {"cpu": 100})
    metrics.set_nodepool_usage("gpu", {"cpu": 1})

    usage = "karpenter_nodepools_usage"
    assert value(metrics, usage, nodepool="default", resource_type="cpu") == 4.5
    # Upstream lowercases and swaps dashes for underscores.
    assert value(metrics, usage, nodepool="default", resource_type="ephemeral_storage") == 1e10
    assert (
        value(metrics, "karpenter_nodepools_limit", nodepool="default", resource_type="cpu") == 100
    )

    metrics.set_nodepool_usage("default", {"cpu": 2})
    assert sorted(
        s["resource_type"] for s in series(metrics, usage) if s["nodepool"] == "default"
    ) == ["cpu"]
    assert value(metrics, usage, nodepool="default", resource_type="cpu") == 2

    metrics.forget_nodepool("default")
    assert series(metrics, usage) == [{"nodepool": "gpu", "resource_type": "cpu"}]
    assert series(metrics, "karpenter_nodepools_limit") == []


def test_scheduling_duration_and_queue_depth(metrics: Metrics) -> None:
    metrics.observe_scheduling(0.42)
    metrics.observe_scheduling(200, controller="disruption")
    metrics.set_scheduler_queue_depth(17, scheduling_id="run-1")

    hist = "karpenter_scheduler_scheduling_duration_seconds_bucket"
    assert value(metrics, hist, controller="provisioner", le="0.45") == 1
    assert value(metrics, hist, controller="provisioner", le="0.4") == 0
    # Karpenter's buckets go past controller-runtime's 60 s for long simulations.
    assert value(metrics, hist, controller="disruption", le="300.0") == 1
    assert value(metrics, hist, controller="disruption", le="150.0") == 0
    depth = "karpenter_scheduler_queue_depth"
    assert value(metrics, depth, controller="provisioner", scheduling_id="run-1") == 17

    metrics.clear_scheduler_queue_depth(scheduling_id="run-1")
    assert series(metrics, depth) == []
    metrics.clear_scheduler_queue_depth(scheduling_id="never-started")  # harmless


def test_pod_startup_summary_has_upstream_quantiles_over_a_sliding_window(
    metrics: Metrics, clock: FakeClock
) -> None:
    name = "karpenter_pods_startup_duration_seconds"
    # Exposed before any pod started, as client_golang does for an unlabelled summary.
    assert value(metrics, name + "_count") == 0
    assert math.isnan(value(metrics, name, quantile="0.5") or 0.0)

    for seconds in range(1, 101):
        metrics.observe_pod_startup(float(seconds))

    assert value(metrics, name, quantile="0") == 1
    assert value(metrics, name, quantile="0.5") == 50
    assert value(metrics, name, quantile="0.9") == 90
    assert value(metrics, name, quantile="0.99") == 99
    assert value(metrics, name, quantile="1") == 100
    assert value(metrics, name + "_count") == 100
    assert value(metrics, name + "_sum") == 5050

    clock.advance(601)
    metrics.observe_pod_startup(7.0)

    # Quantiles describe the last ten minutes; count and sum stay cumulative.
    assert value(metrics, name, quantile="0") == 7
    assert value(metrics, name, quantile="1") == 7
    assert value(metrics, name + "_count") == 101
    assert value(metrics, name + "_sum") == 5057


def test_reconcile_observer_feeds_controller_runtime_metrics(metrics: Metrics) -> None:
    metrics.on_reconcile("nodeclaim.lifecycle", 0.02, None)
    metrics.on_reconcile("nodeclaim.lifecycle", 0.2, None)
    metrics.on_reconcile("nodeclaim.lifecycle", 1.1, RuntimeError("conflict"))
    metrics.on_queue_depth("nodeclaim.lifecycle", 4)
    metrics.on_queue_depth("nodeclaim.lifecycle", 1)

    controller = {"controller": "nodeclaim.lifecycle"}
    assert value(metrics, "controller_runtime_reconcile_total", result="success", **controller) == 2
    assert value(metrics, "controller_runtime_reconcile_total", result="error", **controller) == 1
    assert value(metrics, "controller_runtime_reconcile_errors_total", **controller) == 1
    assert value(metrics, "controller_runtime_reconcile_time_seconds_count", **controller) == 3
    assert (
        value(metrics, "controller_runtime_reconcile_time_seconds_bucket", le="0.025", **controller)
        == 1
    )
    assert value(metrics, "workqueue_depth", name="nodeclaim.lifecycle", **controller) == 1


@runtime_checkable
class ReconcileObserver(Protocol):
    """The runtime's observer contract (core/runtime/manager.py): exactly these two methods."""

    def on_reconcile(
        self, controller: str, seconds: float, error: BaseException | None
    ) -> None: ...

    def on_queue_depth(self, controller: str, depth: int) -> None: ...


def test_metrics_is_a_reconcile_observer(metrics: Metrics) -> None:
    observer: ReconcileObserver = metrics
    assert isinstance(observer, ReconcileObserver)


def test_buckets_match_upstream() -> None:
    assert RECONCILE_BUCKETS[0] == 0.005
    assert RECONCILE_BUCKETS[-1] == 60
    assert len(RECONCILE_BUCKETS) == 40
    assert DURATION_BUCKETS[-5:] == (120, 150, 300, 450, 600)


def test_two_instances_do_not_share_counts() -> None:
    first, second = Metrics(FakeClock()), Metrics(FakeClock())

    first.nodeclaim_created("default")
    first.on_reconcile("provisioner", 0.1, None)

    labels = {"reason": "provisioned", "nodepool": "default", "min_values_relaxed": "false"}
    assert value(first, "karpenter_nodeclaims_created_total", **labels) == 1
    assert value(second, "karpenter_nodeclaims_created_total", **labels) is None
    assert series(second, "controller_runtime_reconcile_total") == []


def test_render_has_no_created_series(metrics: Metrics) -> None:
    metrics.nodeclaim_created("default")
    metrics.observe_scheduling(1)

    text = metrics.render().decode()

    assert not [s.name for s in samples(metrics) if s.name.endswith("_created")]
    assert "# TYPE karpenter_nodeclaims_created_total counter" in text


def test_an_unscraped_summary_keeps_only_its_window_of_observations(
    metrics: Metrics, clock: FakeClock
) -> None:
    # A day of pods starting, one a minute, and nothing scraping: the quantile window is ten
    # minutes, so that is all that may be kept, not the last 4,096 observations.
    for _ in range(24 * 60):
        metrics.observe_pod_startup(5.0)
        clock.advance(60)
    kept = sum(len(window._recent) for window in metrics._pods_startup_duration._series.values())
    assert kept <= 11
    name = "karpenter_pods_startup_duration_seconds"
    assert value(metrics, name + "_count") == 24 * 60


def test_interruption_counters_carry_upstream_names(metrics: Metrics) -> None:
    metrics.interruption_received("spot_interrupted")
    metrics.interruption_deleted(2)
    text = metrics.render().decode()
    assert (
        'karpenter_interruption_received_messages_total{message_type="spot_interrupted"} 1.0'
        in text
    )
    assert "karpenter_interruption_deleted_messages_total 2.0" in text


def test_a_plugin_gauge_is_registered_once_per_registry_and_checked() -> None:
    metrics = Metrics()
    gauge = metrics.plugin_gauge("acme_quota_left", "Quota left.", ["region"])
    # A second plugin (or a second cluster's plugins) asking gets the same gauge, no error.
    assert metrics.plugin_gauge("acme_quota_left", "Quota left.", ["region"]) is gauge
    assert Metrics().plugin_gauge("acme_quota_left", "Quota left.", ["region"]) is not gauge
    with pytest.raises(ValueError, match="acme_quota_left has labels region"):
        metrics.plugin_gauge("acme_quota_left", "Quota left.", ["zone"])
