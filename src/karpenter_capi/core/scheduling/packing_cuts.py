"""The re-packing's integer program over patterns, and caps on its node types.

Why it exists: ``packing.py`` solves an integer program over its patterns several times; here
it is built and solved, with caps on how many nodes of each type a plan may buy when the
cheapest plans strand pods. Without nominations a plan is weighed by its worst realization
(``realization.py``), which depends only on how many nodes of each type it buys (kube-scheduler
places the pods, not the plan). The program finds the cheapest plan; when that one may strand
pods, a plan a little dearer on other node types may strand less (seed 156 of
``benchmarks/packing.py``: four 2-CPU nodes and a 4-CPU one, $0.607/h but $0.716/h at worst,
where six 2-CPU nodes cost $0.655/h in every realization; seed 43: 31 8-CPU nodes refused, 21
of them with a 64-CPU and a 2-CPU node admitted, $9.617/h). So the search solves again with
one fewer node of a type the last plan bought, cheapest first (a best-first search over caps,
each solve's children one per type it bought), a counted number of times
(``packing._CUTS``). A cap is one row over the patterns of its type (no binaries: each solve
costs what the plain one does), which reaches fewer plans than the benchmark's no-good cuts
on every set of node types (``benchmarks/packing_exact.py``) but finds the ones that trade the
type whose nodes strand pods for others.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from karpenter_capi.core.scheduling.packing_problem import Bin, PackingProblem

if TYPE_CHECKING:
    import numpy as np

    from karpenter_capi.core.scheduling.highs import HiGHS


LEAN_COLUMNS: Final = 100
"""Past this many patterns the program is solved ``lean`` (``highs.LEAN_OPTIONS``): decided
from its size before solving, so the same problem gets the same solve on any machine.
HiGHS's sub-MIP heuristics, which no node limit bounds, took seconds over 200 patterns
(``benchmarks/packing.py`` seed 127, near the 5 s safety net) where they take well under a
second over the 61 of the ``consolidation`` scenario, whose $0.98 plan needs them."""

Caps = dict[int, int]
"""The most nodes of a type (the key) a plan may buy."""


def program_rows(
    problem: PackingProblem,
    columns: Sequence[Bin],
    limit_dims: Sequence[int],
    scale: Sequence[int],
    existing: Sequence[int],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Cost, and ``A @ x <= b`` for covering every pod, the NodePool's limits (the resources
    ``limit_dims``, scaled by ``scale``) and using each ``existing`` node at most once, over
    the patterns ``columns``: the relaxation's and the integer program's."""
    import numpy as np

    groups = len(problem.groups)
    nodes = groups + len(limit_dims)
    cost = np.array([problem.types[c.type].price for c in columns])
    rows = nodes + len(existing)
    matrix = np.zeros((rows, len(columns)))
    bound = np.zeros(rows)
    for j, column in enumerate(columns):
        for g, count in enumerate(column.counts):
            matrix[g, j] = -count
        for r, i in enumerate(limit_dims):
            matrix[groups + r, j] = problem.types[column.type].limit_use[i] / scale[i]
        if column.type in existing:
            matrix[nodes + existing.index(column.type), j] = 1
    for g, group in enumerate(problem.groups):
        bound[g] = -group.count
    if problem.limit is not None:
        for r, i in enumerate(limit_dims):
            bound[groups + r] = problem.limit[i] / scale[i]
    for r, t in enumerate(existing):
        bound[nodes + r] = problem.types[t].available or 0
    return cost, matrix, bound


def integer_program(
    problem: PackingProblem,
    columns: Sequence[Bin],
    rows: tuple[np.ndarray, np.ndarray, np.ndarray],
    backend: HiGHS,
    *,
    safety: float,
    nodes: int,
    gap: float,
    caps: Caps,
) -> tuple[str, np.ndarray | None]:
    """How many nodes of each pattern of ``columns`` to buy (cost, and ``A @ x <= b``:
    ``rows``), at most ``caps[t]`` nodes of type ``t``: the backend's status and solution, its
    first ``len(columns)`` values the patterns'. At most ``nodes`` branch-and-bound nodes,
    lean past ``LEAN_COLUMNS`` patterns; ``safety`` seconds (CPU) is the safety net."""
    import numpy as np

    cost, matrix, high = rows
    # No plan needs more of a pattern than it takes to cover the groups it holds.
    upper = np.array(
        [
            min(
                max(-(-g.count // n) for g, n in zip(problem.groups, c.counts, strict=True) if n),
                problem.types[c.type].available or math.inf,
            )
            for c in columns
        ],
        dtype=float,
    )
    if caps:
        capped = sorted(caps)
        extra = np.zeros((len(capped), len(columns)))
        for r, t in enumerate(capped):
            for j, column in enumerate(columns):
                if column.type == t:
                    extra[r, j] = 1.0
                    upper[j] = min(upper[j], caps[t])
        matrix = np.vstack([matrix, extra])
        high = np.concatenate([high, np.array([float(caps[t]) for t in capped])])
    return backend.milp(
        cost,
        matrix,
        np.full(len(high), -np.inf),
        high,
        bounds=(np.zeros(len(cost)), upper),
        time_limit=safety,
        node_limit=nodes,
        gap=gap,
        lean=len(columns) > LEAN_COLUMNS,
    )


def kinds(types: Sequence[int], chosen: Sequence[int]) -> Counter[int]:
    """The set of node types of a solution: how many nodes of each type it buys."""
    counts: Counter[int] = Counter()
    for t, n in zip(types, chosen, strict=True):
        if n:
            counts[t] += n
    return counts
