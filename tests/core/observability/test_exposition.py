"""A scrape is what prometheus_client's ``generate_latest`` would write, whatever was cached.

The exposition keeps each series' text between scrapes (``exposition.py``); a dashboard or
alert must not tell: same families, names, help, types, labels and values, in the same order,
and a value recorded after a scrape is in the next one.
"""

from __future__ import annotations

import math
import urllib.request
from collections.abc import Iterable, Sequence

import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.fleet.metrics import FleetMetrics
from karpenter_capi.core.observability import Metrics, ObservabilityServer, exposition
from karpenter_capi.core.observability.exposition import Exposition


class _Merged:
    """The reference, written from the fleet's documented contract with prometheus_client
    only: each cluster's families merged by name, ``cluster`` on every sample (a sample's own
    ``cluster`` as ``exported_cluster``), no ``*_created``, then the unlabelled trailer."""

    def __init__(self, clusters: Sequence[tuple[str | None, Metrics]], trailer: Iterable[Metric]):
        self._clusters = clusters
        self._trailer = list(trailer)

    def collect(self) -> Iterable[Metric]:
        merged: dict[str, Metric] = {}
        for cluster, metrics in self._clusters:
            for family in metrics.registry.collect():
                out = merged.setdefault(
                    family.name,
                    Metric(family.name, family.documentation, family.type, family.unit),
                )
                for sample in family.samples:
                    if sample.name == family.name + "_created":
                        continue
                    labels = dict(sample.labels)
                    if cluster is not None:
                        if "cluster" in labels:
                            labels["exported_cluster"] = labels.pop("cluster")
                        labels = {"cluster": cluster, **labels}
                    out.samples.append(sample._replace(labels=labels))
        yield from merged.values()
        yield from self._trailer


def _parsed(text: bytes) -> list[tuple[str, str, str, list[tuple[str, dict[str, str], float]]]]:
    return [
        (
            family.name,
            family.documentation,
            family.type,
            [(s.name, s.labels, s.value) for s in family.samples],
        )
        for family in text_string_to_metric_families(text.decode())
    ]


def _assert_same(got: bytes, want: bytes) -> None:
    # Sample for sample through prometheus_client's own parser (NaN equals NaN here), then
    # byte for byte: the order of families and samples is the reference's too.
    def norm(parsed: list[tuple[str, str, str, list[tuple[str, dict[str, str], float]]]]) -> str:
        return repr(
            [
                (n, d, t, [(s, lab, "NaN" if math.isnan(v) else v) for s, lab, v in samples])
                for n, d, t, samples in parsed
            ]
        )

    assert norm(_parsed(got)) == norm(_parsed(want))
    assert got == want


def _busy(metrics: Metrics, seed: int) -> None:
    """A cluster's metrics with every kind of series: labelled and not, counters, gauges,
    histograms, summaries, values that need escaping, a plugin gauge with a ``cluster``."""
    for i in range(5 + seed):
        metrics.on_reconcile("provisioner", 0.01 * i, None)
        metrics.on_reconcile("disruption", 2.0 * i, RuntimeError("x") if i == 2 else None)
    metrics.observe_scheduling(0.3 + seed)
    metrics.nodeclaim_created("default")
    metrics.nodeclaim_terminated('pool "a"\\b\nc', duration_seconds=3.0)
    metrics.interruption_deleted(2)
    metrics.observe_pod_startup(40.0 + seed)
    metrics.set_nodepool_usage("default", {"cpu": 8.0, "memory": 3.4e10 * (seed + 1)})
    metrics.set_disruption_eligible("drifted", -0.0 if seed else 1e21)
    metrics.on_queue_depth("provisioner", seed)
    if seed % 2:
        metrics.plugin_gauge("acme_quota_left", "Quota\nleft \\ here.", ["cluster"]).labels(
            "mgmt"
        ).set(math.inf)


def _fleet(n: int = 3) -> tuple[FleetMetrics, dict[str, Metrics]]:
    fleet = FleetMetrics(process=False)
    members = {}
    for i in range(n):
        metrics = Metrics(FakeClock())
        _busy(metrics, i)
        fleet.add(f"ns/c{i}", metrics)
        members[f"ns/c{i}"] = metrics
    fleet.observe_shard_step(0.2)
    return fleet, members


def _reference(fleet: FleetMetrics, members: dict[str, Metrics]) -> bytes:
    clusters = sorted((name, members[name]) for name in fleet.clusters)
    trailer: list[Metric] = []
    for item in fleet.trailer():
        if isinstance(item, CollectorRegistry):
            for family in item.collect():
                family.samples = [s for s in family.samples if s.name != family.name + "_created"]
                trailer.append(family)
        else:
            trailer.append(item)
    return generate_latest(_Merged(clusters, trailer))


def test_a_fleet_scrape_is_generate_latests_output() -> None:
    fleet, members = _fleet()
    _assert_same(fleet.render(), _reference(fleet, members))
    # And again from what the first render kept.
    _assert_same(fleet.render(), _reference(fleet, members))


def test_a_single_clusters_scrape_is_generate_latests_output() -> None:
    metrics = Metrics(FakeClock())
    _busy(metrics, 1)
    want = generate_latest(_Merged([(None, metrics)], []))
    _assert_same(metrics.render(), want)
    metrics.on_reconcile("provisioner", 0.5, None)
    _assert_same(metrics.render(), generate_latest(_Merged([(None, metrics)], [])))


def test_a_value_recorded_after_a_scrape_is_in_the_next() -> None:
    fleet, members = _fleet()
    before = fleet.render()
    c1 = members["ns/c1"]
    c1.on_reconcile("provisioner", 0.0, None)  # a zero: the sum stays, the count moves
    c1.nodeclaim_created("default")
    c1.set_nodepool_usage("default", {"cpu": 9.0})
    c1.clear_scheduler_queue_depth(scheduling_id="none")
    after = fleet.render()
    assert after != before
    _assert_same(after, _reference(fleet, members))
    count = (
        'controller_runtime_reconcile_time_seconds_count{cluster="ns/c1",controller="provisioner"}'
    )
    assert f"{count} 6.0\n" in before.decode()
    assert f"{count} 7.0\n" in after.decode()
    assert (
        'karpenter_nodepools_usage{cluster="ns/c1",nodepool="default",resource_type="memory"}'
        not in after.decode()
    )


def test_a_removed_cluster_leaves_the_scrape_and_a_rebuilt_one_starts_clean() -> None:
    fleet, members = _fleet()
    fleet.render()
    fleet.remove("ns/c1")
    text = fleet.render().decode()
    assert 'cluster="ns/c1"' not in text
    assert 'cluster="ns/c0"' in text
    del members["ns/c1"]
    _assert_same(fleet.render(), _reference(fleet, members))
    rebuilt = Metrics(FakeClock())
    rebuilt.on_reconcile("provisioner", 0.01, None)
    fleet.add("ns/c1", rebuilt)
    members["ns/c1"] = rebuilt
    _assert_same(fleet.render(), _reference(fleet, members))


def test_prometheus_clients_own_histogram_is_read_afresh_at_each_scrape() -> None:
    # A plugin's registry may hold histograms of prometheus_client's own class (no version
    # stamp), with negative buckets (no _sum): rendered from their values every time.
    registry = CollectorRegistry()
    histogram = Histogram("acme_skew", "Skew.", ["site"], buckets=(-1, 0, 1), registry=registry)
    histogram.labels("x").observe(-3)
    renderer = Exposition()
    want = generate_latest(_Merged([(None, _Registry(registry))], []))
    _assert_same(renderer.render([(None, registry)]), want)
    histogram.labels("x").observe(0.5)
    want = generate_latest(_Merged([(None, _Registry(registry))], []))
    _assert_same(renderer.render([(None, registry)]), want)


class _Registry(Metrics):
    """A ``Metrics`` stand-in over a given registry, for ``_Merged``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry


def test_without_prometheus_clients_internals_the_scrape_is_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fleet, members = _fleet()
    monkeypatch.setattr(exposition, "FAST", False)
    _assert_same(fleet.render(), _reference(fleet, members))


def test_the_endpoint_serves_the_same_scrape() -> None:
    fleet, members = _fleet()
    with ObservabilityServer(fleet, port=0, ready=lambda: True) as server:
        fleet.render()  # a cached render first
        members["ns/c2"].on_reconcile("provisioner", 0.4, None)
        with urllib.request.urlopen(f"{server.url}/metrics", timeout=5) as response:
            body = response.read()
    _assert_same(body, _reference(fleet, members))
