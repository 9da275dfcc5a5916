"""Column generation's pricing step: for each node type, the pattern worth most at given prices.

Why apart from ``packing.py``: the optimizer's search (stages, repairs, the pattern listing)
and this one knapsack per type share nothing but the problem and the prices; kept here, each
module stays readable and under the size the layout test allows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from karpenter_capi.core.scheduling.highs import HiGHS
from karpenter_capi.core.scheduling.packing_problem import (
    Bin,
    PackingProblem,
    fit_count,
    fits,
    load,
)

KNAPSACK_NODES: Final = 200
"""Branch-and-bound nodes of each round's pricing knapsacks (counted work, not time)."""


def best_patterns(
    problem: PackingProblem,
    prices: Sequence[float],
    dims: Sequence[int],
    scale: Sequence[int],
    *,
    backend: HiGHS,
    safety: float,
    gap: float,
) -> tuple[list[tuple[Bin, float]], int]:
    """For every type, the pattern worth most at ``prices`` (one knapsack per type), with
    its worth; ``dims`` the resources that bind, ``scale`` each resource's row scale. Also
    the knapsacks' size (their variables), the work it counts as (``packing.Work``).

    Solved as one integer program: the types' knapsacks share no variable, so its optimum
    is each knapsack's optimum; none is needed when each type has one variable.
    """
    variables: list[tuple[int, int]] = []
    upper: list[float] = []
    for index, kind in enumerate(problem.types):
        for g, group in enumerate(problem.groups):
            if index in group.types and prices[g] > 1e-12:
                bound = min(group.count, fit_count(group.vector, kind.room))
                if bound:
                    variables.append((index, g))
                    upper.append(bound)
    if not variables:
        return [], 0
    if len({t for t, _ in variables}) == len(variables):
        # One variable a type (one pod group a type may take, the commonest: a Deployment's
        # replicas): each knapsack's optimum is its variable's bound, which already fits the
        # node (``fit_count``), so its relaxation is integral and no solve is needed (the
        # integer program took ~8 ms of CPU to say so, once a column generation round).
        x: Sequence[float] = upper
    else:
        solved = _solve(
            problem,
            prices,
            dims,
            scale,
            variables=variables,
            upper=upper,
            backend=backend,
            safety=safety,
            gap=gap,
        )
        if solved is None:
            return [], len(variables)
        x = solved
    by_type: dict[int, list[int]] = {}
    for v, (t, g) in enumerate(variables):
        counts = by_type.setdefault(t, [0] * len(problem.groups))
        counts[g] = round(x[v])
    found = []
    for t, counts in by_type.items():
        counts = _shrink(problem, t, counts)
        worth = sum(prices[g] * c for g, c in enumerate(counts))
        found.append((Bin(t, tuple(counts)), worth))
    return found, len(variables)


def _solve(
    problem: PackingProblem,
    prices: Sequence[float],
    dims: Sequence[int],
    scale: Sequence[int],
    *,
    variables: Sequence[tuple[int, int]],
    upper: Sequence[float],
    backend: HiGHS,
    safety: float,
    gap: float,
) -> Sequence[float] | None:
    """The types' knapsacks as one integer program: each variable's count, ``None`` if HiGHS
    found none."""
    import numpy as np

    type_rows = {t: n for n, t in enumerate(sorted({t for t, _ in variables}))}
    rows = len(type_rows) * len(dims)
    matrix = np.zeros((rows, len(variables)))
    high = np.zeros(rows)
    for t, base in type_rows.items():
        for d, i in enumerate(dims):
            high[base * len(dims) + d] = problem.types[t].room[i] / scale[i]
    for v, (t, g) in enumerate(variables):
        base = type_rows[t] * len(dims)
        for d, i in enumerate(dims):
            matrix[base + d, v] = problem.groups[g].vector[i] / scale[i]
    cost = np.array([-prices[g] for _, g in variables])
    _, x = backend.milp(
        cost,
        matrix,
        np.full(rows, -np.inf),
        high,
        bounds=(np.zeros(len(variables)), np.array(upper)),
        time_limit=safety,
        node_limit=KNAPSACK_NODES,
        gap=gap,
    )
    return None if x is None else [float(v) for v in x]


def _shrink(problem: PackingProblem, t: int, counts: list[int]) -> list[int]:
    """Drop pods until ``counts`` fit exactly (the scaled rows are only nearly exact)."""
    room = problem.types[t].room
    while any(counts) and not fits(load(problem, counts), room):
        g = max(range(len(counts)), key=lambda k: (counts[k] > 0, counts[k]))
        counts[g] -= 1
    return counts
