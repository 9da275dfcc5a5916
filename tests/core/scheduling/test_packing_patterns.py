"""``maximal_patterns`` counts the last group's non-maximal leaves instead of walking them: the
same patterns, the same nodes visited and the same stop as the plain depth-first walk, which
this test keeps as the reference (issue 25 item 5: the walk was most of a re-pack's CPU)."""

from __future__ import annotations

import random
from collections.abc import Sequence

from karpenter_capi.core.scheduling.packing_patterns import maximal_patterns
from karpenter_capi.core.scheduling.packing_problem import (
    Bin,
    BinType,
    PackingProblem,
    PodGroup,
    fit_count,
    fits,
)


class _Reference:
    """The walk before the shortcut, kept verbatim in what it counts and finds."""

    def __init__(
        self, problem: PackingProblem, prices: Sequence[float], gap: float, limits: dict[str, int]
    ) -> None:
        self.problem, self.prices, self.gap = problem, prices, gap
        self.visited, self.max_visits = limits["visited"], limits["max_visits"]
        self.max_patterns = limits["max_patterns"]
        self.found: list[Bin] = []

    def walk(self, t: int, g: int, room: list[int], counts: list[int], *, left: float) -> bool:
        groups = self.problem.groups
        self.visited += 1
        if self.visited > self.max_visits:
            return False
        if g == len(groups):
            full = all(
                counts[k] == group.count
                or t not in group.types
                or not fits(group.vector, tuple(room))
                for k, group in enumerate(groups)
            )
            if full and any(counts):
                self.found.append(Bin(t, tuple(counts)))
            return len(self.found) <= self.max_patterns
        hope = sum(
            self.prices[k] * min(groups[k].count, fit_count(groups[k].vector, tuple(room)))
            for k in range(g, len(groups))
            if t in groups[k].types
        )
        if left - hope > self.gap:
            return True
        group = groups[g]
        most = min(group.count, fit_count(group.vector, tuple(room))) if t in group.types else 0
        for n in range(most, -1, -1):
            counts[g] = n
            rest = [r - v * n for r, v in zip(room, group.vector, strict=True)]
            if not self.walk(t, g + 1, rest, counts, left=left - self.prices[g] * n):
                counts[g] = 0
                return False
        counts[g] = 0
        return True


def _reference(
    problem: PackingProblem,
    prices: Sequence[float],
    costs: Sequence[float],
    gap: float,
    *,
    visited: int,
    max_visits: int,
    max_patterns: int,
) -> tuple[list[Bin] | None, int]:
    limits = {"visited": visited, "max_visits": max_visits, "max_patterns": max_patterns}
    walk = _Reference(problem, prices, gap, limits)
    for t, kind in enumerate(problem.types):
        if not walk.walk(t, 0, list(kind.room), [0] * len(problem.groups), left=costs[t]):
            return None, walk.visited
    return walk.found, walk.visited


def _problem(rng: random.Random) -> PackingProblem:
    types = []
    for _ in range(rng.randint(1, 4)):
        cpu = rng.choice((2, 4, 8, 16, 32)) * 1000
        # An existing node may be over-committed in a dimension (negative room).
        memory = cpu * 4 - (rng.choice((0, 0, 0, 70000)) if rng.random() < 0.2 else 0)
        types.append(BinType((cpu, memory, 110), cpu / 10000, (cpu, memory)))
    groups = []
    for _ in range(rng.randint(1, 4)):
        cpu = rng.choice((0, 250, 500, 1000, 2000, 3000))
        memory = rng.choice((0, 512, 2048, 6144))
        allowed = frozenset(i for i in range(len(types)) if rng.random() < 0.8) or frozenset({0})
        groups.append(PodGroup((cpu, memory, 1), rng.randint(1, 60), allowed))
    return PackingProblem(tuple(types), tuple(groups), (), ())


def test_the_same_patterns_visits_and_stops_as_the_plain_walk() -> None:
    rng = random.Random(25)
    stopped = listed = 0
    for _ in range(400):
        problem = _problem(rng)
        prices = [rng.uniform(0.0, 0.4) for _ in problem.groups]
        costs = [kind.price + rng.uniform(0.0, 0.05) for kind in problem.types]
        gap = rng.choice((0.0, 0.05, 0.5, 10.0))
        limits = {
            "visited": rng.choice((0, 0, 50)),
            "max_visits": rng.choice((30, 300, 5000, 10**6)),
            "max_patterns": rng.choice((3, 40, 10**6)),
        }
        expected = _reference(problem, prices, costs, gap, **limits)
        assert maximal_patterns(problem, prices, costs, gap, **limits) == expected
        stopped += expected[0] is None
        listed += expected[0] is not None and len(expected[0]) > 0
    # Both ends exercised: walks that ran out of budget and walks that listed patterns.
    assert stopped > 20
    assert listed > 100
