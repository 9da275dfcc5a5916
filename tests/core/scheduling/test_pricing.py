"""Column generation's pricing step (``pricing.best_patterns``): where each type may take only
one pod group (a Deployment's replicas, the commonest case), the pattern is the group's bound
and no integer program is solved; elsewhere HiGHS solves the knapsacks. Both must give the
patterns the integer program gives."""

from __future__ import annotations

import random
from typing import Any

import pytest

from karpenter_capi.core.scheduling import pricing
from karpenter_capi.core.scheduling.highs import HiGHS
from karpenter_capi.core.scheduling.packing_problem import (
    Bin,
    BinType,
    PackingProblem,
    PodGroup,
    fit_count,
)

DIMS = (0, 1)
SCALE = (1000, 2**30)


class _Counting(HiGHS):
    """HiGHS, counting its integer solves."""

    def __init__(self) -> None:
        super().__init__()
        self.solves = 0

    def milp(self, *args: Any, **kwargs: Any) -> Any:
        self.solves += 1
        return super().milp(*args, **kwargs)


def _problem(rng: random.Random, *, one_group_a_type: bool) -> PackingProblem:
    types = tuple(
        BinType(
            room=(rng.choice((2000, 4000, 8000, 16000)), rng.choice((4, 8, 16, 32)) * 2**30),
            price=rng.uniform(0.05, 1.0),
            limit_use=(0, 0),
        )
        for _ in range(rng.randint(1, 4))
    )
    groups = []
    for g in range(rng.randint(1, 3)):
        if one_group_a_type:
            allowed = frozenset(t for t in range(len(types)) if t % 3 == g)
        else:
            allowed = frozenset(t for t in range(len(types)) if rng.random() < 0.8) or {0}
        vector = (rng.choice((100, 250, 500, 760, 1500)), rng.choice((1, 2, 3)) * 2**28)
        groups.append(PodGroup(vector, rng.randint(1, 300), frozenset(allowed)))
    return PackingProblem(types, tuple(groups), greedy=(), queue=())


def _solved(problem: PackingProblem, prices: list[float]) -> list[tuple[Bin, float]]:
    """The patterns the integer program finds, whatever the shape."""
    variables, upper = [], []
    for index, kind in enumerate(problem.types):
        for g, group in enumerate(problem.groups):
            if index in group.types and prices[g] > 1e-12:
                bound = min(group.count, fit_count(group.vector, kind.room))
                if bound:
                    variables.append((index, g))
                    upper.append(float(bound))
    x = pricing._solve(
        problem,
        prices,
        DIMS,
        SCALE,
        variables=variables,
        upper=upper,
        backend=HiGHS(),
        safety=5.0,
        gap=1e-6,
    )
    assert x is not None
    by_type: dict[int, list[int]] = {}
    for v, (t, g) in enumerate(variables):
        by_type.setdefault(t, [0] * len(problem.groups))[g] = round(x[v])
    return [
        (Bin(t, tuple(c)), sum(prices[g] * n for g, n in enumerate(c)))
        for t, c in ((t, pricing._shrink(problem, t, c)) for t, c in by_type.items())
    ]


@pytest.mark.parametrize("seed", range(40))
def test_one_group_a_type_needs_no_solve_and_gives_the_integer_programs_patterns(
    seed: int,
) -> None:
    rng = random.Random(seed)
    problem = _problem(rng, one_group_a_type=True)
    prices = [rng.uniform(0.0, 0.2) for _ in problem.groups]
    backend = _Counting()
    found, size = pricing.best_patterns(
        problem, prices, DIMS, SCALE, backend=backend, safety=5.0, gap=1e-6
    )
    assert backend.solves == 0
    assert sorted(found, key=lambda p: p[0].type) == sorted(
        _solved(problem, prices), key=lambda p: p[0].type
    )
    assert size == sum(
        1
        for t, kind in enumerate(problem.types)
        for g, group in enumerate(problem.groups)
        if t in group.types and prices[g] > 1e-12 and fit_count(group.vector, kind.room)
    )


def test_groups_sharing_a_type_are_solved_as_one_integer_program() -> None:
    rng = random.Random(7)
    problem = _problem(rng, one_group_a_type=False)
    problem = PackingProblem(
        problem.types[:1],
        (
            PodGroup((500, 2**28), 40, frozenset({0})),
            PodGroup((760, 2**29), 40, frozenset({0})),
        ),
        greedy=(),
        queue=(),
    )
    backend = _Counting()
    found, _ = pricing.best_patterns(
        problem, [0.05, 0.08], DIMS, SCALE, backend=backend, safety=5.0, gap=1e-6
    )
    assert backend.solves == 1
    assert found == _solved(problem, [0.05, 0.08])
