"""Listing every maximal pattern that could still beat the best plan (``packing``'s second stage).

Once column generation has priced each pod group (the relaxation's duals), a pattern whose
reduced cost exceeds the gap between the relaxation and the best plan cannot be in a cheaper
plan. This depth-first search lists every other pattern no pod could be added to, so the
integer program solved over them is exact over all the patterns that matter. It is kept apart
from ``packing._Search``, which decides when to list and what to do with the patterns, because
it reads nothing of the search but the prices and the gap: a pure, counted enumeration.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from karpenter_capi.core.scheduling.packing_problem import Bin, PackingProblem, fit_count, fits


def maximal_patterns(
    problem: PackingProblem,
    prices: Sequence[float],
    costs: Sequence[float],
    gap: float,
    *,
    visited: int,
    max_visits: int,
    max_patterns: int,
) -> tuple[list[Bin] | None, int]:
    """Every pattern no pod could be added to whose reduced cost may be within ``gap``, or
    ``None`` past ``max_patterns`` or ``max_visits``; and the search's nodes visited so far.

    ``prices``: each group's dual price; ``costs``: each type's price plus its rent (its share
    of the limits, an existing node's room); ``visited``: the nodes earlier listings visited,
    counted against ``max_visits``."""
    walk = _Walk(problem, prices, gap, visited, max_visits, max_patterns)
    for t, kind in enumerate(problem.types):
        counts = [0] * len(problem.groups)
        if not walk.walk(t, 0, list(kind.room), counts, left=costs[t]):
            return None, walk.visited
    return walk.found, walk.visited


@dataclass
class _Walk:
    problem: PackingProblem
    prices: Sequence[float]
    gap: float
    visited: int
    max_visits: int
    max_patterns: int
    found: list[Bin] = field(default_factory=list)

    def walk(self, t: int, g: int, room: list[int], counts: list[int], *, left: float) -> bool:
        """Depth first over how many pods of group ``g`` on; ``left``: the pattern's reduced
        cost so far (its price, less what the pods already on it are worth)."""
        groups = self.problem.groups
        found = self.found
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
                found.append(Bin(t, tuple(counts)))
            return len(found) <= self.max_patterns
        # Even filled with everything else at its dual price, could it get within the gap?
        hope = sum(
            self.prices[k] * min(groups[k].count, fit_count(groups[k].vector, tuple(room)))
            for k in range(g, len(groups))
            if t in groups[k].types
        )
        if left - hope > self.gap:
            return True
        group = groups[g]
        most = min(group.count, fit_count(group.vector, tuple(room))) if t in group.types else 0
        if g == len(groups) - 1 and most > 0 and min(room) >= 0:
            return self._last(t, g, room, counts, most, left=left)
        for n in range(most, -1, -1):
            counts[g] = n
            rest = [r - v * n for r, v in zip(room, group.vector, strict=True)]
            if not self.walk(t, g + 1, rest, counts, left=left - self.prices[g] * n):
                counts[g] = 0
                return False
        counts[g] = 0
        return True

    def _last(
        self, t: int, g: int, room: list[int], counts: list[int], most: int, *, left: float
    ) -> bool:
        """The last group's choices, the same as the loop in ``walk`` but cheaper: only
        ``most`` of it can make a maximal pattern (with fewer, one more of its pods still fits,
        room being nonnegative), so the ``most`` leaves below it are counted as visited, as
        the loop would have visited them one by one, without being walked."""
        group = self.problem.groups[g]
        counts[g] = most
        rest = [r - v * most for r, v in zip(room, group.vector, strict=True)]
        if not self.walk(t, g + 1, rest, counts, left=left - self.prices[g] * most):
            counts[g] = 0
            return False
        counts[g] = 0
        if self.visited + most > self.max_visits:
            self.visited = self.max_visits + 1  # where the loop would have stopped
            return False
        self.visited += most
        return True
