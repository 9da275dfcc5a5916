"""``benchmarks/controller_stages.py``: the stages of a decision, timed inside the controller.

A known recording splits into known stages; the wrappers, installed, leave a controller
deciding what it decides without them, and record what the stages need.
"""

from __future__ import annotations

import argparse
import gc
from pathlib import Path
from typing import Any

import pytest

from benchmarks.controller_stages import (
    StageRecorder,
    decision_stages,
    heap_now,
    installed,
    pool_and_collector,
    read_recording,
)
from benchmarks.fleet import EMULATION, _deployment, _scenario
from benchmarks.fleet_http import _stages
from karpenter_capi.core.kube.resources import NODECLAIMS, PODS
from karpenter_capi.core.operator import OperatorOptions
from karpenter_capi.core.provisioning.provisioner import Provisioner
from karpenter_capi.sim.scenario.fleet import FleetWorld


def _recording() -> dict[str, Any]:
    """Cluster ``ns/a``: two waves. The first's pods (created from 100.0) are seen from 100.1
    to 100.4 in two runs, the window due at 100.6; the round starts at 100.65 and its first
    create runs from 100.8 to 100.85. The second wave (from 200.0) has a round at 200.9 that
    creates nothing, then one at 201.0 creating from 201.1 to 201.2. A collector pause from
    100.7 for 0.2 s. Cluster ``ns/b``: a round with no pod seen before it (a recheck)."""
    return {
        "written_at": 300.0,
        "clusters": {
            "ns/a": {
                "seen": [
                    [99.0, 99.2, 99.4, 5],  # the wave before: left out
                    [100.1, 100.2, 100.5, 10],
                    [100.3, 100.4, 100.6, 8],
                    [100.9, 101.0, 101.2, 2],  # after the round: left out
                    [200.2, 200.3, 200.5, 4],
                ],
                "rounds": [
                    [99.5, 99.6, 0.01, 99.55, 99.58, 1],
                    [100.65, 100.95, 0.03, 100.8, 100.85, 3],
                    [200.9, 200.95, 0.005, None, None, 0],
                    [201.0, 201.3, 0.02, 201.1, 201.2, 1],
                ],
            },
            "ns/b": {"seen": [], "rounds": [[50.5, 50.6, 0.01, 50.52, 50.55, 1]]},
        },
        "pauses": [[100.7, 0.2, 2], [150.0, 1.0, 1]],
        "collections": {"0": [50, 0.5], "2": [2, 1.2]},
        "pool": {"provisioner": [10, 1.5, 4.0], "nodeclaim.lifecycle": [5, 0.004, 0.1]},
    }


def test_a_known_timeline_splits_into_its_stages() -> None:
    recording = _recording()
    first = decision_stages(recording, "ns/a", 100.0, 100.82)
    assert first is not None
    assert first == pytest.approx(
        {
            "to_first_seen": 0.1,
            "burst_seen": 0.3,
            "window": 0.2,
            "wake": 0.05,
            "round_wall": 0.15,
            "round_cpu": 0.03,
            "first_create": 0.05,
            "collector_paused": 0.12,  # 100.7-100.82 of the pause
        }
    )
    # The round that created nothing is not the decision's; the one after it is.
    second = decision_stages(recording, "ns/a", 200.0, 201.15)
    assert second is not None
    assert second["wake"] == pytest.approx(0.5)
    assert second["round_wall"] == pytest.approx(0.1)
    assert second["collector_paused"] == 0.0
    # No pod seen before the round, an unknown cluster, no round after the pods: not split.
    assert decision_stages(recording, "ns/b", 50.0, 50.53) is None
    assert decision_stages(recording, "ns/c", 100.0, 100.82) is None
    assert decision_stages(recording, "ns/a", 250.0, 260.0) is None


def test_the_phase_figures_spread_stages_over_decisions_and_diff_pool_and_collector() -> None:
    before = {
        "pool": {"provisioner": [4, 0.5, 1.0]},
        "collections": {"0": [20, 0.2]},
        "pauses": [],
    }
    decisions = [("a", 100.0, 100.82), ("a", 200.0, 201.15), ("b", 50.0, 50.53)]
    figures = _stages(before, _recording(), decisions, {"a": "ns/a", "b": "ns/b"}, 90.0)
    assert (figures["decisions"], figures["unmatched"]) == (2, 1)
    assert figures["window"]["max_ms"] == 200.0
    assert set(figures["wake"]) == {"p50_ms", "p90_ms", "p99_ms", "max_ms"}
    assert figures["slowest"][0]["total_ms"] == pytest.approx(1150.0)
    assert figures["pool"] == {"provisioner": {"runs": 6, "cpu_s": 1.0, "wall_s": 3.0}}
    collector = figures["collector"]
    assert (collector["pauses"], collector["pause_seconds"], collector["longest_ms"]) == (
        2,
        1.2,
        1000.0,
    )
    assert collector["seconds_by_generation"] == {"0": 0.3, "2": 1.2}
    # Recordings of before CPU and freed objects were counted read as none of either.
    assert collector["by_generation"]["0"] == {
        "count": 30,
        "wall_s": 0.3,
        "cpu_s": 0.0,
        "collected": 0,
        "uncollectable": 0,
    }
    assert pool_and_collector({}, _recording(), 120.0, 300.0)["collector"]["pauses"] == 1
    assert _stages(before, {}, decisions, {}, 90.0) == {}


def _one_cluster_scale_up(recorder: StageRecorder | None = None) -> tuple[list[str], int, float]:
    """A fleet of one cluster on a fake clock (as ``run --fleet`` sets its batch window),
    scaled from 0 to 20 pods: its NodeClaims, pods bound and when the scale-up began."""
    args = argparse.Namespace(pods=20, nodes=2)
    world = FleetWorld(
        _scenario(args, 1),
        operator_options=OperatorOptions(
            leader_elect=False,
            metrics_port=None,
            workers=1,
            wake_on_pods=True,
            batch_complete_idle=0.2,
            create_concurrency=8,
        ),
    )
    world.emulation = dict(EMULATION)
    if recorder is not None:
        recorder.clock = world.clock.monotonic
    driver = world.stepped()
    driver.run_until_quiet()
    [cluster] = world.clusters.values()
    began = world.clock.monotonic()
    cluster.server.apply_manifests([_deployment(world, cluster.name, 20)])
    for _ in range(30):
        driver.run_until_quiet()
        driver.advance(0.5)
    claims = sorted(c["metadata"]["name"] for c in cluster.server.list(NODECLAIMS).items)
    pods = cluster.server.list(PODS).items
    return claims, sum(1 for p in pods if (p.get("spec") or {}).get("nodeName")), began


def test_the_wrapped_controller_decides_as_before_and_records_its_stages(
    tmp_path: Path,
) -> None:
    claims, bound, _ = _one_cluster_scale_up()
    original = Provisioner.__dict__["reconcile"]
    recorder = StageRecorder()
    with installed(recorder):
        assert Provisioner.__dict__["reconcile"] is not original
        wrapped = _one_cluster_scale_up(recorder)
    assert Provisioner.__dict__["reconcile"] is original  # uninstalled
    assert wrapped[:2] == (claims, bound)
    assert bound == 20
    recorder.write(tmp_path / "stages.json")
    recording = read_recording(tmp_path / "stages.json")
    [(key, cluster)] = recording["clusters"].items()
    assert key == "c/c"  # the member's cluster key
    assert sum(run[3] for run in cluster["seen"]) == 20  # every new pending pod, once
    [decided] = [r for r in cluster["rounds"] if r[5]]
    assert decided[5] == len(claims)
    stages = decision_stages(recording, key, wrapped[2], decided[3])
    assert stages is not None
    # On the fake clock: the window closes 0.2 s after the ReplicaSet's last pod.
    assert stages["window"] == pytest.approx(0.2, abs=1e-6)
    assert read_recording(tmp_path / "missing.json") == {}


def test_each_collection_counts_its_cpu_and_what_it_freed_and_the_heap_is_recorded() -> None:
    recorder = StageRecorder(clock=iter([10.0, 10.5]).__next__)
    recorder.on_collection("start", {"generation": 2})
    recorder.on_collection("stop", {"generation": 2, "collected": 7, "uncollectable": 1})
    count, wall, cpu, collected, uncollectable = recorder._collections[2]
    assert (count, wall, collected, uncollectable) == (1, 0.5, 7, 1)
    assert cpu >= 0.0
    assert [p[1:] for p in recorder._pauses] == [(0.5, 2)]
    heap = heap_now()
    assert len(heap["tracked"]) == 3
    assert heap["frozen"] >= 0
    assert heap["threshold"] == list(gc.get_threshold())
