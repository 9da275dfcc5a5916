"""What a packing plan costs once kube-scheduler has placed its pods: the plan's worst realization.

Why it exists: ``packing.py`` finds cheap plans and ``readiness.py`` says which pods some
realization of a plan strands; this module prices that. A plan's *worst realization cost* is
its own cost plus the cheapest nodes the pods stranded by its worst realization then force
(bought in the next round). The optimizer compares plans by it (greedy's included: greedy can
strand too), and repairs a plan that strands by buying up front the nodes its stranded pods
would force. With ``nominated`` (the controller nominates each planned pod's node, KEP-5278,
so kube-scheduler tries the planned node first) a plan is realized as planned: its worst
realization is the plan.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from karpenter_capi.core.scheduling.packing_problem import (
    Bin,
    PackingProblem,
    fit_count,
    launch_type,
    plan_cost,
)
from karpenter_capi.core.scheduling.readiness import (
    SchedulerView,
    Stranding,
    queue_runs,
    strandings,
)


@dataclass(frozen=True)
class Assessed:
    """A plan, its worst realization cost, and the stranding that costs it (``None``: none)."""

    bins: tuple[Bin, ...]
    cost: float
    worst: float
    stranding: Stranding | None

    def beats(self, other: Assessed) -> bool:
        """A cheaper worst realization, or as cheap a one (to within float rounding: a plan and
        the same plan repaired by buying the forced nodes up front sum the same prices in
        another order) for less when nothing strands."""
        if self.worst < other.worst * (1 - _TIE):
            return True
        return self.worst <= other.worst * (1 + _TIE) and self.cost < other.cost * (1 - _TIE)


_TIE = 1e-9
"""Relative: worst realization costs closer than this are equal."""


class Realizer:
    """Worst realizations of the plans of one ``PackingProblem``."""

    def __init__(self, problem: PackingProblem, *, nominated: bool, seed: int = 0) -> None:
        self.problem = problem
        self.nominated = nominated
        self.seed = seed
        self.view = SchedulerView(
            tuple(t.room for t in problem.types),
            tuple(g.vector for g in problem.groups),
            tuple(g.types for g in problem.groups),
            queue_runs(problem.queue),
            problem.daemon,
        )
        self._forced: dict[tuple[int, ...], tuple[float, Stranding | None]] = {}

    def assess(self, bins: Sequence[Bin]) -> Assessed:
        cost = plan_cost(self.problem, bins)
        if self.nominated:
            return Assessed(tuple(bins), cost, cost, None)
        # What strands depends on the nodes' types alone (kube-scheduler places the pods), so
        # plans on the same types in the same order (the sampled realizations follow it), which
        # the search meets often, are assessed once.
        kinds = tuple(b.type for b in bins)
        if kinds not in self._forced:
            forced, why = 0.0, None
            for found in strandings(self.view, list(kinds), seed=self.seed):
                extra = self.cover(found.left)
                more = math.inf if extra is None else plan_cost(self.problem, extra)
                if more > forced:
                    forced, why = more, found
            self._forced[kinds] = (forced, why)
        forced, why = self._forced[kinds]
        return Assessed(tuple(bins), cost, cost + forced, why)

    def best_of(self, bins: Sequence[Bin], ceiling: float, repairs: int) -> Assessed:
        """``bins`` or, when it strands, one of up to ``repairs`` repaired plans (each the last
        with nodes added up front for what its worst realization strands) costing under
        ``ceiling``: the one with the cheapest worst realization."""
        best = current = self.assess(bins)
        for _ in range(repairs):
            if current.stranding is None:
                break
            extra = self.cover(current.stranding.left)
            if extra is None:
                break
            repaired = self.launched(moved(current.bins, current.stranding.left) + extra)
            if plan_cost(self.problem, repaired) >= ceiling:
                break
            current = self.assess(repaired)
            if current.beats(best):
                best = current
        return best

    def launched(self, bins: Sequence[Bin]) -> list[Bin]:
        """Each node as the cheapest type that holds what is on it: what its NodeClaim lists
        first (slack from a larger type than its pods need would not survive the launch)."""
        return [Bin(launch_type(self.problem, node), node.counts) for node in bins]

    def cover(self, left: Sequence[int]) -> list[Bin] | None:
        """Nodes for the pods ``left``: each group on its cheapest type per pod."""
        problem = self.problem
        result = []
        for g, count in enumerate(left):
            group = problem.groups[g]
            while count > 0:
                options = [
                    (kind.price / min(count, fit), t, min(count, fit))
                    for t, kind in enumerate(problem.types)
                    if t in group.types
                    and kind.available is None
                    and (fit := fit_count(group.vector, kind.room)) > 0
                ]
                if not options:
                    return None
                _, t, n = min(options)
                counts = [0] * len(left)
                counts[g] = n
                result.append(Bin(t, tuple(counts)))
                count -= n
        return result


def moved(bins: Sequence[Bin], left: Sequence[int]) -> list[Bin]:
    """``bins`` without ``left`` pods of each group, taken where that group is most packed."""
    counts = [list(b.counts) for b in bins]
    for g, count in enumerate(left):
        while count > 0:
            fullest = max(range(len(counts)), key=lambda n: counts[n][g])
            take = min(count, counts[fullest][g])
            counts[fullest][g] -= take
            count -= take
    return [Bin(b.type, tuple(c)) for b, c in zip(bins, counts, strict=True) if any(c)]
