"""``benchmarks/fleet_stats.py``: several runs' samples pooled per phase, and each cluster's
p99 set against its own in another phase (paired)."""

from __future__ import annotations

from typing import Any

from benchmarks import fleet_stats


def _phase(per_cluster: dict[str, list[float]], share: dict[str, list[float | None]]) -> Any:
    return {"latency": {"per_cluster_ms": per_cluster, "share_per_cluster_ms": share}}


def test_pooled_quantiles_are_read_from_every_runs_samples() -> None:
    runs = [
        {"fleet": _phase({"a": [100.0, 200.0], "b": [300.0, 400.0]}, {"a": [10.0, None]})},
        {"fleet": _phase({"a": [500.0, 600.0], "b": [700.0, 800.0]}, {"a": [30.0, 40.0]})},
    ]
    figures = fleet_stats.pooled(runs)
    assert figures["fleet"]["decision"] == {
        "samples": 8,
        "p50_ms": 500.0,
        "p90_ms": 700.0,
        "p99_ms": 800.0,
    }
    # A wave with no Unschedulable mark before its NodeClaim has no share sample.
    assert figures["fleet"]["share"]["samples"] == 3


def test_paired_sets_each_cluster_against_itself() -> None:
    # Cluster a is slower in the storm by 10%, b by 30%: the median is between, the max is b.
    fleet = _phase({"a": [1000.0, 900.0], "b": [2000.0, 1500.0]}, {})
    storm = _phase({"a": [1100.0, 950.0], "b": [2600.0, 1000.0]}, {})
    lone = _phase({"c-0": [500.0, 400.0, 450.0, 480.0]}, {})
    result = fleet_stats.paired([{"lone": lone, "fleet": fleet, "storm": storm}])
    assert result["storm_over_fleet"] == {
        "clusters": 2,
        "median": 1.2,
        "max": 1.3,
        "over_target": 1,
    }
    # a's p99 is exactly twice the lone cluster's (within the target), b's four times.
    assert result["fleet_over_lone"] == {"clusters": 2, "median": 3.0, "max": 4.0, "over_target": 1}
    assert "storm_over_control" not in result
