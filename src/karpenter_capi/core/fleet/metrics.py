"""One metrics endpoint for the whole fleet, every series labelled with its ``cluster``.

Each served cluster's Operator keeps its own ``Metrics`` (its own registry, so one cluster's
counts never leak into another's and a rebuilt member starts clean). The fleet's endpoint
renders them through ``core.observability.fleet_metrics.ClusterLabelledRegistry`` (each family
once, every sample with ``cluster="namespace/name"``, the process's own metrics once), plus how
many clusters this replica serves and how long its shard steps take. Single-cluster mode is
untouched: its names and labels stay upstream Karpenter's exactly.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from karpenter_capi.core.observability.fleet_metrics import CLUSTER, ClusterLabelledRegistry
from karpenter_capi.core.observability.metrics import RECONCILE_BUCKETS

SHARD_STEP_DURATION = "karpenter_fleet_shard_step_duration_seconds"


class FleetMetrics(ClusterLabelledRegistry):
    """The served clusters' registries (``add``/``remove`` as members start and stop),
    ``karpenter_fleet_clusters_served`` and ``karpenter_fleet_shard_step_duration_seconds``."""

    def __init__(self, *, process: bool = True) -> None:
        super().__init__(process=process)
        self._own = CollectorRegistry(auto_describe=True)
        self._shard_step = Histogram(
            SHARD_STEP_DURATION,
            "Duration of one step of the shard coordinator in seconds: listing the shard "
            "Leases and writing those it renews, takes or releases. A step longer than the "
            "retry period delays renewals towards the renew deadline.",
            buckets=RECONCILE_BUCKETS,
            registry=self._own,
        )

    def observe_shard_step(self, seconds: float) -> None:
        """One shard step took ``seconds`` (``shardloop.ShardLoop``)."""
        self._shard_step.observe(seconds)

    def trailer(self) -> list[CollectorRegistry | Metric]:
        """The process's metrics, then the shard steps and how many clusters are served."""
        served = GaugeMetricFamily(
            "karpenter_fleet_clusters_served",
            "Number of workload clusters this replica serves in fleet mode.",
        )
        served.add_metric([], float(len(self.clusters)))
        return [*super().trailer(), self._own, served]


__all__ = ["CLUSTER", "SHARD_STEP_DURATION", "FleetMetrics"]
