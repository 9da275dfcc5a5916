"""Figures over several runs of ``fleet.py``'s phases (``--repeat N``): pooled and paired.

Why: one phase gives 40 decisions (20 clusters x 2 waves) and its p99 is its slowest one. On
two cores shared by the controller, the emulated control plane and other work, that one
sample moves by a second between runs of the same code, many times the 10% the storm target
allows. Two things make the comparison steadier without changing what is measured:

* **pooled**: each phase's samples of every run together, so the p99 of N runs is read from
  40N decisions (the 0.99 quantile of 160 samples is the second slowest, not the slowest), and
  the p90 beside it;
* **paired**: each cluster against itself. The same cluster (same name, same place in the
  wave's spread) is measured in every phase, so each cluster's p99 over its runs in one phase
  is set against its p99 in the other: the median of those per-cluster ratios says what the
  phase did to a typical cluster's p99, and the largest says the worst-off cluster's (the
  issue's "each cluster's p99"). A stall of the whole machine lands on a few clusters of one
  phase, not on every cluster.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from karpenter_capi.sim.scenario.observer import percentile

PHASES = ("lone", "fleet", "control", "storm")
SERIES = (("", "per_cluster_ms"), ("share_", "share_per_cluster_ms"))
"""The end-to-end decision (a wave's first pod to its first NodeClaim) and the controller's
share (the last ``Unschedulable`` mark to that NodeClaim), per cluster and wave, in ms."""


def _samples(runs: Sequence[dict[str, Any]], phase: str, field: str) -> dict[str, list[float]]:
    """Cluster -> its samples over every run's ``phase``."""
    out: dict[str, list[float]] = {}
    for run in runs:
        per_cluster = ((run.get(phase) or {}).get("latency") or {}).get(field) or {}
        for name, values in per_cluster.items():
            out.setdefault(name, []).extend(v for v in values if v is not None)
    return out


def _quantiles(values: list[float]) -> dict[str, float | int | None]:
    if not values:
        return {"samples": 0}
    return {
        "samples": len(values),
        "p50_ms": round(percentile(values, 0.5), 1),
        "p90_ms": round(percentile(values, 0.9), 1),
        "p99_ms": round(percentile(values, 0.99), 1),
    }


def pooled(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Each phase's quantiles over every run's samples, and the targets' ratios on them."""
    out: dict[str, Any] = {}
    for phase in PHASES:
        figures = {}
        for prefix, field in SERIES:
            values = [v for vs in _samples(runs, phase, field).values() for v in vs]
            if values:
                figures[prefix.rstrip("_") or "decision"] = _quantiles(values)
        if figures:
            out[phase] = figures
    for name, field in (("decision", "p99_ms"), ("share", "p99_ms"), ("share_p90", "p90_ms")):
        series = "share" if name.startswith("share") else "decision"
        value = {phase: ((out.get(phase) or {}).get(series) or {}).get(field) for phase in PHASES}
        if value["lone"] and value["fleet"]:
            out[f"fleet_{name}_over_lone"] = round(value["fleet"] / value["lone"], 3)
        if value["fleet"] and value["storm"]:
            out[f"storm_{name}_change"] = round(value["storm"] / value["fleet"] - 1, 3)
        if value["control"] and value["storm"]:
            out[f"storm_{name}_over_control"] = round(value["storm"] / value["control"], 3)
    return out


def paired(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per cluster: its p99 over the runs in one phase against its p99 in another (the lone
    cluster's p99 for the fleet); the median and the largest of those ratios."""
    out: dict[str, Any] = {}
    for prefix, field in SERIES:
        lone = [v for vs in _samples(runs, "lone", field).values() for v in vs]
        lone_p99 = percentile(lone, 0.99) if lone else None
        by_phase = {phase: _samples(runs, phase, field) for phase in PHASES}
        comparisons: list[tuple[str, str, str]] = [
            ("fleet_over_lone", "lone", "fleet"),
            ("storm_over_fleet", "fleet", "storm"),
            ("storm_over_control", "control", "storm"),
        ]
        for label, base, other in comparisons:
            ratios = []
            for name, values in by_phase[other].items():
                if not values:
                    continue
                if base == "lone":
                    reference = lone_p99
                else:
                    base_values = by_phase[base].get(name) or []
                    reference = percentile(base_values, 0.99) if base_values else None
                if reference:
                    ratios.append(percentile(values, 0.99) / reference)
            if ratios:
                out[f"{prefix}{label}"] = {
                    "clusters": len(ratios),
                    "median": round(statistics.median(ratios), 3),
                    "max": round(max(ratios), 3),
                    "over_target": sum(1 for r in ratios if r > (2.0 if base == "lone" else 1.1)),
                }
    return out


__all__ = ["PHASES", "paired", "pooled"]
