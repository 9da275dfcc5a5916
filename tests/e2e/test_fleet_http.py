"""``benchmarks/fleet.py --mode http`` at a small size: ``karpenter-capi run --fleet`` in its
own process, reaching the management cluster and each workload cluster over HTTP through the
kubeconfig Secrets the benchmark writes, one workload cluster storming 429s.

The figures are wall-clock and not asserted; what a user would notice is: every pod of the
healthy clusters bound on as many nodes as they need (none bought twice), while the storming
cluster's API server kept answering the controller 429s.
"""

from __future__ import annotations

import argparse

import pytest

from benchmarks import fleet_http


@pytest.mark.slow
def test_a_fleet_over_http_binds_every_pod_beside_a_storming_cluster() -> None:
    args = argparse.Namespace(
        nodes=2,
        pods=10,
        waves=1,
        spread=0.0,
        timeout=90.0,
        workers=2,
        fleet_workers=8,
        emulators=0,
        idle_seconds=0.0,
    )
    figures = fleet_http.run_phase(args, 2, storm=True)
    assert figures["all_served"]
    assert figures["storm_429s"] > 0
    claims = figures["nodeclaims_classified"]
    assert claims["pods_pending"] == 0
    assert claims["created"] == claims["needed"] == 2 * 2
    assert figures["latency"]["samples"] == 2
    assert figures["controller_threads"] > 0
