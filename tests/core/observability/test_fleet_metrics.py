"""One endpoint for a fleet: every cluster's metrics under a ``cluster`` label, process once."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.observability import Metrics, ObservabilityServer
from karpenter_capi.core.observability.fleet_metrics import ClusterLabelledRegistry


def _fleet() -> tuple[ClusterLabelledRegistry, Metrics, Metrics]:
    a, b = Metrics(FakeClock()), Metrics(FakeClock())
    a.on_reconcile("provisioner", 0.2, None)
    b.on_reconcile("provisioner", 0.1, None)
    b.on_reconcile("provisioner", 0.1, RuntimeError("boom"))
    a.nodeclaim_created("general", reason="provisioned")
    fleet = ClusterLabelledRegistry()
    fleet.add("a", a)
    fleet.add("b", b)
    return fleet, a, b


def _samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {
        tuple(sorted(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    }


def test_every_cluster_has_its_series_of_the_same_metric() -> None:
    fleet, _, _ = _fleet()
    text = fleet.render().decode()
    totals = _samples(text, "controller_runtime_reconcile_total")
    assert totals == {
        (("cluster", "a"), ("controller", "provisioner"), ("result", "success")): 1.0,
        (("cluster", "b"), ("controller", "provisioner"), ("result", "error")): 1.0,
        (("cluster", "b"), ("controller", "provisioner"), ("result", "success")): 1.0,
    }
    assert 'karpenter_nodeclaims_created_total{cluster="a",' in text
    # One family per metric: HELP and TYPE once, whatever the number of clusters.
    assert text.count("# TYPE controller_runtime_reconcile_total counter") == 1
    assert "_created{" not in text


def test_process_metrics_appear_once_without_a_cluster() -> None:
    fleet, _, _ = _fleet()
    text = fleet.render().decode()
    resident = _samples(text, "process_resident_memory_bytes")
    assert list(resident) == [()]
    assert resident[()] > 0


def test_a_removed_cluster_leaves_the_scrape() -> None:
    fleet, _, b = _fleet()
    fleet.remove("b")
    assert fleet.clusters == ["a"]
    text = fleet.render().decode()
    assert 'cluster="b"' not in text
    assert 'cluster="a"' in text
    fleet.add("b", b)
    assert 'cluster="b"' in fleet.render().decode()


def test_a_single_clusters_exposition_is_unchanged() -> None:
    _, a, _ = _fleet()
    assert 'cluster="' not in a.render().decode()


def test_the_endpoint_serves_the_fleet() -> None:
    fleet, _, _ = _fleet()
    server = ObservabilityServer(fleet, port=0, ready=lambda: True).start()
    try:
        with urllib.request.urlopen(f"{server.url}/metrics", timeout=5) as response:
            text = response.read().decode()
    finally:
        server.close()
    assert 'controller_runtime_reconcile_total{cluster="a",' in text
    assert 'controller_runtime_reconcile_total{cluster="b",' in text
