"""The solver's fast paths give the placements its slow paths give, on varied inputs.

Why a file of its own: ``test_solver_speed.py`` counts what a shortcut spares; these run the
same problems with a shortcut on and off and ask for the same answer, claim for claim, pod for
pod. The inputs are the random clusters of ``test_checker_random.py`` (tainted types, NodePool
limits and requirements, existing nodes, DaemonSets, spreads, (anti-)affinity, host ports,
preferences that get relaxed) and the benchmark's mixes, whose Deployments of many identical
pods are what the shortcuts are for.
"""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks import scheduling as bench
from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.scheduling.solver import Solver
from karpenter_capi.core.scheduling.solver_io import SolveResult
from karpenter_capi.core.scheduling.topology import Topology
from tests.core.scheduling.test_checker_random import Cluster


def _plan(result: SolveResult) -> tuple[Any, ...]:
    """Everything a placement decides: which pods go where, on what, and what is left."""
    claims = [
        (
            claim.hostname,
            str(claim.requirements),
            [t.name for t in claim.instance_types],
            [p["metadata"]["name"] for p in claim.pods],
            claim.requests,
            claim.daemon_requests,
        )
        for claim in result.new_nodeclaims
    ]
    existing = {
        node: [p["metadata"]["name"] for p in pods] for node, pods in result.existing.items()
    }
    return claims, existing, sorted(result.unschedulable.items()), result.timed_out


def _both(monkeypatch: pytest.MonkeyPatch, solve: Any) -> tuple[Any, Any, int, int]:
    """The plan with kept answers (a claim's per class, ``Solver.memo_fits``; the topology's
    per domains, ``Topology.memo_verdicts``) and the topology's hostname fast path
    (``Topology.hostname_fast_path``), and without, and how many claims were checked from
    scratch in each."""
    prepared = Solver._prepare_fit
    calls = {"n": 0}

    def counting(self: Solver, *args: Any) -> Any:
        calls["n"] += 1
        return prepared(self, *args)

    monkeypatch.setattr(Solver, "_prepare_fit", counting)
    fast = _plan(solve())
    fast_calls, calls["n"] = calls["n"], 0
    monkeypatch.setattr(Solver, "memo_fits", False)
    monkeypatch.setattr(Topology, "memo_verdicts", False)
    monkeypatch.setattr(Topology, "hostname_fast_path", False)
    slow = _plan(solve())
    monkeypatch.setattr(Solver, "memo_fits", True)
    monkeypatch.setattr(Topology, "memo_verdicts", True)
    monkeypatch.setattr(Topology, "hostname_fast_path", True)
    return fast, slow, fast_calls, calls["n"]


@pytest.mark.parametrize("seed", range(0, 160, 4))
def test_random_clusters_place_alike_with_and_without_kept_fits(
    monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    cluster = Cluster(seed)
    fast, slow, fast_calls, slow_calls = _both(monkeypatch, cluster.solve)
    assert fast == slow, f"seed {seed}"
    assert fast_calls <= slow_calls


@pytest.mark.parametrize(
    ("mix", "count", "seed"),
    [("diverse", 600, 1), ("diverse", 900, 7), ("upstream-diverse", 600, 2), ("generic", 600, 3)],
)
def test_benchmark_mixes_place_alike_with_and_without_kept_fits(
    monkeypatch: pytest.MonkeyPatch, mix: str, count: int, seed: int
) -> None:
    pool = bench.nodepool(bench.instance_types())
    pods = bench.make_pods(count, mix, seed)

    def solve() -> SolveResult:
        return Solver([pool], clock=FakeClock()).solve(pods)

    fast, slow, fast_calls, slow_calls = _both(monkeypatch, solve)
    assert fast == slow
    assert fast[0], "the mix proposes claims"
    # Replicas of one Deployment find claims as the last replica left them; in the generic
    # mix each pod lands on the claim the last one filled, so there is nothing to keep.
    assert fast_calls < slow_calls if mix != "generic" else fast_calls == slow_calls
