"""Seeds of ``benchmarks/packing.py`` the re-packing once missed, solved as provisioning does.

Each instance is the benchmark's own (catalog, workload, DaemonSets, zones, existing nodes), so
a user's cluster of that shape gets the plan asserted here.
"""

from __future__ import annotations

import random

import pytest

from benchmarks import packing as bench
from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.scheduling.solver import Solver
from karpenter_capi.core.scheduling.solver_io import NodePoolOption, SolveResult


def _solve(seed: int, *, nominated: bool) -> tuple[Solver, SolveResult]:
    rng = random.Random(seed)
    base = bench.catalog(rng)
    pods = bench.workload(rng, base)
    types, _ = bench.widen(seed, base)
    extras = bench.extras_for(seed, types)
    solver = Solver(
        [NodePoolOption(name="default", instance_types=tuple(types))],
        clock=FakeClock(),
        packing_budget=30.0,
        plans_nominated=nominated,
        existing_nodes=extras.existing,
        daemonsets=extras.daemonsets,
    )
    return solver, solver.solve(pods)


def test_few_large_nodes_reach_the_optimum_by_a_narrower_listing() -> None:
    # Seed 107: 200 pods on 8-64-CPU types. The patterns within the first plan's gap to the
    # relaxation (0.69) are too many to list; the optimum's three nodes are within 0.36 of it,
    # so listing those within half the gap finds it: $4.0896/h (the exact program's, proven)
    # where the first plan cost $4.4225/h.
    _, result = _solve(107, nominated=True)
    assert result.price == pytest.approx(4.08958, abs=1e-5)
    assert not result.unschedulable


def test_of_two_plans_as_dear_at_worst_the_cheaper_is_bought() -> None:
    # Seed 57, readiness model: five 8-CPU nodes ($2.2319/h) may strand two pods (one node
    # more: $2.6783/h at worst); repairing that up front buys the six nodes at once for the
    # same worst. The sums differ by float rounding only; the five nodes are bought.
    solver, result = _solve(57, nominated=False)
    assert result.price == pytest.approx(2.2319, abs=1e-5)
    [outcome] = solver.packing_outcomes
    assert outcome.worst == pytest.approx(2.67828, abs=1e-5)


def test_a_plan_on_other_node_types_that_strands_nothing_beats_a_cheaper_one_that_may() -> None:
    # Seed 156, readiness model, 31 small pods: four 2-CPU nodes and a 4-CPU one cost $0.607/h
    # but may strand pods (one 2-CPU node more, $0.716/h, at worst); six 2-CPU nodes cost
    # $0.655/h in every realization, the cheapest worst realization of any plan (the
    # benchmark's rule-obeying reference, proven). Cutting off the first plan's node types
    # finds them.
    solver, result = _solve(156, nominated=False)
    assert result.price == pytest.approx(0.65478, abs=1e-5)
    [outcome] = solver.packing_outcomes
    assert outcome.worst == pytest.approx(0.65478, abs=1e-5)
    assert [c.cheapest()[0].name for c in result.new_nodeclaims] == ["c2-m16"] * 6
    assert not result.unschedulable
