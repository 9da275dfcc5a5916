"""Re-packing on large node types, where the patterns that matter are too many to list.

Seed 14 of ``benchmarks/packing.py``: 32-64-CPU types and memory-heavy pods. The integer solve
over the generated patterns stopped 10% above the optimum, and nothing after it got closer;
diving on the relaxation (``packing._Search._dive``) finds the optimum the benchmark's exact
integer program proves.
"""

from __future__ import annotations

import pytest

from karpenter_capi.core.scheduling import packing
from karpenter_capi.core.scheduling.packing_problem import (
    Bin,
    BinType,
    PackingProblem,
    PodGroup,
    fits,
    load,
    plan_cost,
)

GI = (1 << 30) * 1000  # memory in the problem's milli-units
EVERY = frozenset({0, 1, 2, 3})


def _type(cpu: int, room_gi: float, price: float, memory_gi: int) -> BinType:
    return BinType(
        room=(cpu * 1000 - 100, round(room_gi * GI), 110_000),
        price=price,
        limit_use=(cpu * 1000, memory_gi * GI, 1000),
    )


# Allocatable: 100m CPU and 5% of memory kube-reserved.
TYPES = (
    _type(32, 121.6, 1.75341, 128),
    _type(48, 182.4, 2.16368, 192),
    _type(48, 364.8, 2.9003, 384),
    _type(64, 243.2, 3.31511, 256),
)
GROUPS = (
    PodGroup((2000, 8 * GI, 1000), 90, EVERY),
    PodGroup((1000, 8 * GI, 1000), 28, EVERY),
    PodGroup((1000, GI // 2, 1000), 26, EVERY),
)
GREEDY = (
    Bin(2, (13, 20, 1)),
    Bin(3, (22, 8, 6)),
    Bin(3, (30, 0, 3)),
    Bin(3, (25, 0, 13)),
    Bin(0, (0, 0, 3)),
)
OPTIMUM = 11.55502  # the benchmark's compact integer program, proven


def test_large_types_are_packed_at_the_optimum_when_patterns_are_too_many_to_list() -> None:
    problem = PackingProblem(TYPES, GROUPS, GREEDY, (2,) * 26 + (0,) * 90 + (1,) * 28)

    outcome = packing.optimize(problem, plans_nominated=True)

    assert outcome.status == "improved"
    assert outcome.bins is not None
    assert outcome.cost is not None
    assert round(outcome.cost, 5) == OPTIMUM
    assert round(plan_cost(problem, outcome.bins), 5) == OPTIMUM
    for node in outcome.bins:  # every node holds what it is given
        assert fits(load(problem, node.counts), TYPES[node.type].room)
    for g, group in enumerate(GROUPS):  # and every pod has a node
        assert sum(node.counts[g] for node in outcome.bins) == group.count


def test_the_dive_stops_once_the_family_has_spent_its_work(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The dive is the costliest stage on large catalogs (seed 98: 2.6 of 4 CPU seconds, for
    no cheaper plan); a family whose other searches already spent ``DIVE_WORK`` keeps what
    they found, and says how much it spent. (A narrower listing finds this optimum too: off
    here, so that only the dive can.)"""
    monkeypatch.setattr(packing, "_NARROWER", (1.0,))
    problem = PackingProblem(TYPES, GROUPS, GREEDY, (2,) * 26 + (0,) * 90 + (1,) * 28)
    spent = packing.Work(spent=packing.DIVE_WORK)

    outcome = packing.optimize(problem, plans_nominated=True, work=spent)

    assert outcome.cost is not None
    assert round(outcome.cost, 5) > OPTIMUM
    fresh = packing.Work()
    dived = packing.optimize(problem, plans_nominated=True, work=fresh)
    assert dived.cost is not None
    assert round(dived.cost, 5) == OPTIMUM
    assert 0 < fresh.spent < packing.DIVE_WORK


def test_a_known_cheaper_plan_ends_the_search_at_the_relaxation() -> None:
    """``known`` (the family's other solve found a plan that cheap): when the relaxation
    cannot beat it, nothing more is searched and greedy's plan is not replaced here."""
    problem = PackingProblem(TYPES, GROUPS, GREEDY, (2,) * 26 + (0,) * 90 + (1,) * 28)
    work = packing.Work()

    outcome = packing.optimize(problem, plans_nominated=True, work=work, known=OPTIMUM * 0.9)

    assert outcome.status == "not-cheaper"
    assert outcome.bins is None
    assert outcome.lower_bound is not None
    assert outcome.lower_bound > OPTIMUM * 0.9
