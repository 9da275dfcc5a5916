"""One scrape for a fleet: every workload cluster's metrics, told apart by a ``cluster`` label.

In fleet mode one process serves many workload clusters, each with its own ``Metrics`` (its own
registry, so one cluster's counts never leak into another's). Prometheus scrapes one endpoint,
so this collector merges those registries into one exposition: each family once (one ``HELP``
and ``TYPE``), with every sample carrying ``cluster="<name>"``. Dashboards written for one
cluster keep working with a ``cluster`` selector or a ``sum by``. Process metrics (memory, CPU,
file descriptors) describe the one process, so they appear once, unlabelled. A single-cluster
controller never uses this: its exposition is exactly ``Metrics.render()``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import Metric

from karpenter_capi.core.observability._collectors import WithoutCreated
from karpenter_capi.core.observability.metrics import Metrics

CLUSTER = "cluster"
"""The label every sample of a cluster's metrics gets."""

_EXPORTED = "exported_" + CLUSTER
"""Where a sample's own ``cluster`` label goes, as Prometheus does with clashing target labels."""


class ClusterLabelledRegistry:
    """A Prometheus collector over many clusters' ``Metrics``, and what the endpoint renders.

    ``add(cluster, metrics)`` starts exposing a cluster (replacing what was exposed under that
    name: a cluster whose operator was rebuilt keeps its label), ``remove(cluster)`` stops.
    Thread-safe: clusters come and go while Prometheus scrapes.
    """

    def __init__(self, *, process: bool = True) -> None:
        self._lock = threading.Lock()
        self._clusters: dict[str, Metrics] = {}
        self._process = CollectorRegistry()
        if process:
            ProcessCollector(registry=self._process)
            PlatformCollector(registry=self._process)
            GCCollector(registry=self._process)

    def add(self, cluster: str, metrics: Metrics) -> None:
        if not cluster:
            raise ValueError("a cluster's metrics need a non-empty cluster name")
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
            clusters = sorted(self._clusters.items())
        families: dict[str, Metric] = {}
        for cluster, metrics in clusters:
            for family in WithoutCreated(metrics.registry).collect():
                merged = families.get(family.name)
                if merged is None:
                    merged = Metric(family.name, family.documentation, family.type, family.unit)
                    families[family.name] = merged
                merged.samples.extend(
                    sample._replace(labels=_labelled(cluster, sample.labels))
                    for sample in family.samples
                )
        yield from families.values()
        yield from self._process.collect()

    def render(self) -> bytes:
        """Every cluster's metrics, then the process's, in the Prometheus text format."""
        return generate_latest(self)


def _labelled(cluster: str, labels: dict[str, str]) -> dict[str, str]:
    own = dict(labels)
    if CLUSTER in own:
        own[_EXPORTED] = own.pop(CLUSTER)
    return {CLUSTER: cluster, **own}


__all__ = ["CLUSTER", "ClusterLabelledRegistry"]
