"""One metrics endpoint for the whole fleet, every series labelled with its ``cluster``.

Each served cluster's Operator keeps its own ``Metrics`` (its own registry, so one cluster's
counts never leak into another's and a rebuilt member starts clean). The fleet's endpoint
renders them all as one exposition: each family once, each sample with one more label,
``cluster="namespace/name"``. Single-cluster mode is untouched: its names and labels stay
upstream Karpenter's exactly. Dashboards of a fleet add ``cluster`` to their ``by`` clauses.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Final

from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from karpenter_capi.core.observability.metrics import CONTENT_TYPE, Metrics

CLUSTER: Final = "cluster"
"""The label fleet mode adds to every series: the Cluster's ``namespace/name``."""


class FleetMetrics:
    """A Prometheus collector over the served clusters' registries, and what the endpoint
    renders. ``add(cluster, metrics)`` starts exposing a cluster (a rebuilt one replaces its
    old registry), ``remove(cluster)`` stops. Thread-safe: clusters come and go while
    Prometheus scrapes."""

    content_type: Final = CONTENT_TYPE

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._clusters: dict[str, Metrics] = {}

    def add(self, cluster: str, metrics: Metrics) -> None:
        with self._lock:
            self._clusters[cluster] = metrics

    def remove(self, cluster: str) -> None:
        with self._lock:
            self._clusters.pop(cluster, None)

    @property
    def clusters(self) -> list[str]:
        with self._lock:
            return sorted(self._clusters)

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            members = sorted(self._clusters.items())
        families: dict[str, Metric] = {}
        for key, metrics in members:
            for family in metrics.registry.collect():
                merged = families.get(family.name)
                if merged is None:
                    merged = Metric(family.name, family.documentation, family.type, family.unit)
                    families[family.name] = merged
                # Without the ``*_created`` series prometheus_client adds (as ``Metrics.render``).
                created = family.name + "_created"
                merged.samples.extend(
                    sample._replace(labels=_labelled(key, sample.labels))
                    for sample in family.samples
                    if sample.name != created
                )
        served = GaugeMetricFamily(
            "karpenter_fleet_clusters_served",
            "Number of workload clusters this replica serves in fleet mode.",
        )
        served.add_metric([], float(len(members)))
        return [*families.values(), served]

    def render(self) -> bytes:
        """Every member's metrics in the Prometheus text format, labelled by cluster."""
        return generate_latest(self)


def _labelled(cluster: str, labels: dict[str, str]) -> dict[str, str]:
    # A series with a ``cluster`` label of its own keeps it as ``exported_cluster``, as
    # Prometheus renames a scraped label that clashes with a target label.
    own = dict(labels)
    if CLUSTER in own:
        own[f"exported_{CLUSTER}"] = own.pop(CLUSTER)
    return {CLUSTER: cluster, **own}


__all__ = ["CLUSTER", "FleetMetrics"]
