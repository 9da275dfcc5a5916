"""The outcome of a fleet scenario: per workload cluster, for the fleet, and per outage.

A fleet's operator asks two questions a single cluster's figures cannot answer: what each
cluster got (its pods bound, its nodes and their cost) and whether one cluster's trouble
reached the others. So the result has a row per cluster, the fleet's totals, and for each
outage what every cluster still had pending just before it ended (the others: nothing). The
summary prints them as aligned tables (``summary.table``); ``to_json`` carries the same
figures for machines.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from karpenter_capi.sim.scenario.summary import table


@dataclass(frozen=True)
class ClusterResult:
    """One workload cluster at the end of the run."""

    name: str
    group: str
    pods_bound: int
    pods_pending: int
    pods_stranded: int
    """Pending pods that had waited ``fleet.STRANDED_AFTER`` seconds or more at the end."""
    nodes: int
    nodeclaims: int
    cost_per_hour: float
    cost_per_hour_peak: float
    pod_bound_p50: float | None
    pod_bound_max: float | None
    unreachable_seconds: float
    refused: int
    """Requests of the controller its outage refused."""
    errors: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class OutageResult:
    """One cluster cut off from ``at`` to ``until``; every cluster's pending pods just before
    ``until``."""

    cluster: str
    at: float
    until: float
    pending_at_end: dict[str, int]

    @property
    def others_pending(self) -> int:
        return sum(n for name, n in self.pending_at_end.items() if name != self.cluster)


@dataclass
class FleetResult:
    scenario: str
    clusters: list[ClusterResult]
    outages: list[OutageResult]
    virtual_seconds: float
    wall_seconds: float
    errors: list[str] = field(default_factory=list)
    """ERROR log records of the run (each cluster's reconcile failures are in its row)."""

    def cluster(self, name: str) -> ClusterResult:
        return next(c for c in self.clusters if c.name == name)

    @property
    def pods_bound(self) -> int:
        return sum(c.pods_bound for c in self.clusters)

    @property
    def pods_pending(self) -> int:
        return sum(c.pods_pending for c in self.clusters)

    @property
    def pods_stranded(self) -> int:
        return sum(c.pods_stranded for c in self.clusters)

    @property
    def nodes(self) -> int:
        return sum(c.nodes for c in self.clusters)

    @property
    def nodeclaims(self) -> int:
        return sum(c.nodeclaims for c in self.clusters)

    @property
    def cost_per_hour(self) -> float:
        return round(sum(c.cost_per_hour for c in self.clusters), 6)

    def all_errors(self) -> list[str]:
        return self.errors + [f"{c.name}: {e}" for c in self.clusters for e in c.errors]

    def to_json(self) -> dict[str, Any]:
        """The figures as JSON-ready data; wall time is left out, so two runs compare equal."""
        return {
            "scenario": self.scenario,
            "virtual_seconds": self.virtual_seconds,
            "fleet": {
                "clusters": len(self.clusters),
                "pods_bound": self.pods_bound,
                "pods_pending": self.pods_pending,
                "pods_stranded": self.pods_stranded,
                "nodes": self.nodes,
                "nodeclaims": self.nodeclaims,
                "cost_per_hour": self.cost_per_hour,
            },
            "clusters": [asdict(c) for c in self.clusters],
            "outages": [{**asdict(o), "others_pending": o.others_pending} for o in self.outages],
            "errors": self.all_errors(),
        }

    def to_json_text(self) -> str:
        return json.dumps(self.to_json(), indent=2, sort_keys=True)

    def summary(self) -> str:
        rows = [
            [
                c.name,
                c.group,
                str(c.pods_bound),
                str(c.pods_pending),
                str(c.pods_stranded),
                str(c.nodes),
                f"${c.cost_per_hour:,.4f}",
                "-" if c.pod_bound_p50 is None else f"{c.pod_bound_p50:g} s",
                f"{c.unreachable_seconds:g} s" if c.unreachable_seconds else "",
            ]
            for c in self.clusters
        ]
        rows.append(
            [
                "fleet",
                f"{len(self.clusters)} clusters",
                str(self.pods_bound),
                str(self.pods_pending),
                str(self.pods_stranded),
                str(self.nodes),
                f"${self.cost_per_hour:,.4f}",
                "",
                "",
            ]
        )
        header = [
            "cluster",
            "group",
            "bound",
            "pending",
            "stranded",
            "nodes",
            "cost/h",
            "bind p50",
            "cut off",
        ]
        numeric = [False, False, True, True, True, True, True, True, True]
        lines = [
            f"fleet scenario {self.scenario}: {len(self.clusters)} workload clusters, one "
            f"controller, {self.virtual_seconds:g} s of virtual time "
            f"({self.wall_seconds:.1f} s wall)",
            "",
            table(header, rows, numeric),
        ]
        for outage in self.outages:
            lines += [
                "",
                f"outage: {outage.cluster} unreachable from {outage.at:g} s to {outage.until:g} s;"
                f" just before it ended it had {outage.pending_at_end.get(outage.cluster, 0)} "
                f"pods pending, the other clusters {outage.others_pending}",
            ]
        errors = self.all_errors()
        lines += ["", f"errors: {len(errors)}" if errors else "errors: none"]
        lines += [f"  {e}" for e in errors[:20]]
        return "\n".join(lines) + "\n"


__all__ = ["ClusterResult", "FleetResult", "OutageResult"]
