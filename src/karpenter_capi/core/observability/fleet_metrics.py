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
from prometheus_client.metrics_core import Metric

from karpenter_capi.core.observability.exposition import (
    CLUSTER,
    Exposition,
    reference,
    reference_families,
)
from karpenter_capi.core.observability.metrics import Metrics


class ClusterLabelledRegistry:
    """A Prometheus collector over many clusters' ``Metrics``, and what the endpoint renders.

    ``add(cluster, metrics)`` starts exposing a cluster (replacing what was exposed under that
    name: a cluster whose operator was rebuilt keeps its label), ``remove(cluster)`` stops.
    Thread-safe: clusters come and go while Prometheus scrapes. ``render()`` goes through
    ``exposition.Exposition`` (the same bytes as ``generate_latest(self)``, for a fraction of
    the CPU: each series' label text is built once, and a series unchanged since the last
    scrape reuses its lines).
    """

    def __init__(self, *, process: bool = True) -> None:
        self._lock = threading.Lock()
        self._clusters: dict[str, Metrics] = {}
        self._process = CollectorRegistry()
        self._exposition = Exposition()
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

    def _sources(self) -> list[tuple[str | None, CollectorRegistry]]:
        with self._lock:
            return [
                (cluster, metrics.registry) for cluster, metrics in sorted(self._clusters.items())
            ]

    def trailer(self) -> list[CollectorRegistry | Metric]:
        """What follows the clusters' families, unlabelled: the process's metrics."""
        return [self._process]

    def collect(self) -> Iterable[Metric]:
        """Every cluster's families merged (each sample with its ``cluster``), then the
        trailer's; ``generate_latest(self)`` is the reference ``render()`` is held to."""
        return reference_families(self._sources(), self.trailer())

    def render(self) -> bytes:
        """Every cluster's metrics, then the process's, in the Prometheus text format."""
        return self._exposition.render(self._sources(), self.trailer())

    def reference(self) -> bytes:
        """``render()`` as prometheus_client's ``generate_latest`` writes it (for tests and
        the benchmark: slower, same bytes)."""
        return reference(self._sources(), self.trailer())


__all__ = ["CLUSTER", "ClusterLabelledRegistry"]
