"""One metrics endpoint for the whole fleet, every series labelled with its ``cluster``.

Each served cluster's Operator keeps its own ``Metrics`` (its own registry, so one cluster's
counts never leak into another's and a rebuilt member starts clean). The fleet's endpoint
renders them through ``core.observability.fleet_metrics.ClusterLabelledRegistry`` (each family
once, every sample with ``cluster="namespace/name"``, the process's own metrics once), plus how
many clusters this replica serves. Single-cluster mode is untouched: its names and labels stay
upstream Karpenter's exactly.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from karpenter_capi.core.observability.fleet_metrics import CLUSTER, ClusterLabelledRegistry


class FleetMetrics(ClusterLabelledRegistry):
    """The served clusters' registries (``add``/``remove`` as members start and stop) and
    ``karpenter_fleet_clusters_served``."""

    def collect(self) -> Iterable[Metric]:
        yield from super().collect()
        served = GaugeMetricFamily(
            "karpenter_fleet_clusters_served",
            "Number of workload clusters this replica serves in fleet mode.",
        )
        served.add_metric([], float(len(self.clusters)))
        yield served


__all__ = ["CLUSTER", "FleetMetrics"]
