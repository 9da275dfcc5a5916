"""One metrics endpoint for the whole fleet, every series labelled with its ``cluster``.

Each served cluster's Operator keeps its own ``Metrics`` (its own registry, so one cluster's
counts never leak into another's and a rebuilt member starts clean). The fleet's endpoint
renders them all as one exposition: each family once, each sample with one more label,
``cluster="namespace/name"``. Single-cluster mode is untouched: its names and labels stay
upstream Karpenter's exactly. Dashboards of a fleet add ``cluster`` to their ``by`` clauses.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Final

from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from karpenter_capi.core.observability._collectors import WithoutCreated
from karpenter_capi.core.observability.metrics import CONTENT_TYPE, Metrics

CLUSTER: Final = "cluster"
"""The label fleet mode adds to every series: the Cluster's ``namespace/name``."""


class FleetMetrics:
    """A Prometheus collector over the members' registries (``members()`` at each scrape)."""

    content_type: Final = CONTENT_TYPE

    def __init__(self, members: Callable[[], Mapping[str, Metrics]]) -> None:
        self._members = members

    def collect(self) -> Iterable[Metric]:
        families: dict[str, Metric] = {}
        members = dict(self._members())
        for key, metrics in sorted(members.items()):
            for family in WithoutCreated(metrics.registry).collect():
                merged = families.get(family.name)
                if merged is None:
                    merged = Metric(family.name, family.documentation, family.type, family.unit)
                    families[family.name] = merged
                merged.samples.extend(
                    sample._replace(labels={**sample.labels, CLUSTER: key})
                    for sample in family.samples
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


__all__ = ["CLUSTER", "FleetMetrics"]
