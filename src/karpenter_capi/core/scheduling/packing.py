"""Near-optimal re-packing of the solver's unconstrained NodeClaims, for small catalogs.

Why it exists: the solver is greedy, as upstream Karpenter's, and on the catalogs Cluster API
clusters usually have (a handful of MachineDeployments such as 2, 4, 4 and 16 CPUs) greedy
leaves 5-15% on the table: it fills a 16-CPU node and then buys a second one for the rest,
where one 16-CPU and three 4-CPU nodes cost less. Bin packing with a few node sizes is a
small integer program, so after the greedy solve the solver hands the NodeClaims it may
safely move pods between (no topology, no pod (anti-)affinity, no host ports, no hostname:
see ``repack.py``) to ``optimize`` here, which looks for a cheaper plan within a budget of
deterministic work and keeps greedy's whenever it does not find a strictly cheaper one.

The model is Gilmore and Gomory's: a *pattern* is one node of one instance type and how many
pods of each group (pods with the same requests and scheduling class) it holds; choose how many
nodes of each pattern to buy so every pod is covered at the least price. Its linear relaxation
is tight for bin packing, but it has a column per pattern, so patterns are first generated as
needed (column generation: the relaxation's duals price each pod group, and a knapsack per
instance type finds the pattern worth most at those prices) and an integer program over them
gives a first plan; then every maximal pattern whose reduced cost leaves it a chance to beat
that plan is listed (when there are few enough) and the integer program is solved again, exact
over all patterns that matter. When those are too many to list, the first plan's nearly full
nodes are kept and the rest of its pods re-packed on their own, a smaller problem whose
patterns can be listed. An existing node's free room (nomination mode, ``repack.py``) is a
node kind of price 0 usable once: a row of its own caps it, and its dual, the room's worth,
is charged to its patterns when pricing and listing them. Both run on HiGHS through
``scipy.optimize`` (``docs/scheduling.md`` says why HiGHS).

The work is counted, never timed (column generation rounds, branch-and-bound nodes, nodes of the
pattern listing's search), so the same cluster state gives the same plan on an idle machine and
on a loaded one, and a decision can be reproduced afterwards. A cap (``budget`` seconds of the
solving thread's CPU time on each solve, and HiGHS's own wall-clock time limit ``WALL_FACTOR``
times further: ``highs.py``) remains only as a safety net: reaching it keeps greedy's plan and
says so (``timed-out``) rather than use whatever the clock let it find.

kube-scheduler does not read the plan: it scores nodes LeastAllocated, and the new nodes become
Ready together or in any order, so small pods queued first may spread onto the node planned for
a big one and strand it (``readiness.py``). Plans are therefore weighed by their worst
realization: the plan plus the nodes the pods its worst realization strands would force
(``realization.py``). A cheaper plan replaces greedy's when its worst realization is cheaper
than greedy's (greedy's plan can strand pods too); a plan that strands is first repaired by
buying the forced nodes up front, and while the best plan may strand pods, each set of node
types assessed is cut off and the integer program solved again (``packing_cuts.py``); of the
plans found, the cheapest worst realization wins.
When the controller nominates the planned nodes (``plans_nominated``, KEP-5278), kube-scheduler
realizes the plan as made and no readiness model applies. See ``docs/scheduling.md``.
"""

from __future__ import annotations

import heapq
import logging
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from karpenter_capi.core.scheduling import pricing
from karpenter_capi.core.scheduling.highs import HiGHS, OutOfTime
from karpenter_capi.core.scheduling.packing_cuts import Caps, integer_program, kinds, program_rows
from karpenter_capi.core.scheduling.packing_patterns import maximal_patterns
from karpenter_capi.core.scheduling.packing_problem import (
    Bin,
    PackingOutcome,
    PackingProblem,
    fit_count,
    launch_type,
    load,
    plan_cost,
    sub_problem,
    trimmed,
)
from karpenter_capi.core.scheduling.realization import Assessed, Realizer

if TYPE_CHECKING:
    # NumPy and SciPy are imported where a solve needs them: a solver that never re-packs
    # (large catalogs, budget 0) does not pay their import time and memory.
    import numpy as np

log = logging.getLogger(__name__)

DEFAULT_BUDGET_SECONDS: Final = 5.0
"""The safety net of each HiGHS solve, in the solving thread's CPU seconds (HiGHS's own
wall-clock limit is ``highs.WALL_FACTOR`` times it); the work budget below ends nearly every
solve of the benchmark's seeds in well under a second of CPU, and CPU hogs beside the
controller do not bring it closer as they do wall time. HiGHS's sub-MIP heuristics and strong
branching, which no node limit bounds, took one solve over 202 patterns to the net (seed 127):
programs over ``packing_cuts.LEAN_COLUMNS`` patterns are solved without them."""
EPSILON: Final = 1e-6
"""Relative: a plan must be cheaper than greedy's by more than this share to replace it."""
FIRST_GAP: Final = 0.02
"""The first integer solve, over generated patterns, stops within 2% of their best plan."""
MIP_GAP: Final = 0.005
"""The second, over every pattern that matters, stops within 0.5% of the best plan."""
MAX_TYPES: Final = 32
MAX_GROUPS: Final = 24
MAX_PODS: Final = 5000
# The work budget, counted not timed (chosen on benchmarks/packing.py: docs/scheduling.md):
_MAX_ROUNDS: Final = 60  # column generation rounds
# pricing.KNAPSACK_NODES: branch-and-bound nodes of each round's pricing knapsacks
FIRST_NODES: Final = 100  # ... of the integer solve over the generated patterns
LISTED_NODES: Final = 300  # ... of the integer solve over every pattern that matters
LISTING_VISITS: Final = 50_000  # nodes of the depth-first search listing the patterns
_FIXED_FILL: Final = 0.97  # a node this full is kept when the rest is re-solved on its own
_RESIDUAL_DEPTH: Final = 1  # residual re-solves nested (each has the budgets above)
_DIVE_ROUNDS: Final = 120  # column generation rounds of the dive, all its steps together
DIVE_WORK: Final = 1000  # a family's work (``Work``) past which no dive goes on
_DIVE_GAP: Final = 0.005  # the dive runs when the first plan is this far above the relaxation
_REPAIRS: Final = 4  # rounds of nodes bought up front for what a plan's worst realization strands
# Beyond, the listed integer solve is skipped: HiGHS's root node (cuts, heuristics), which no
# node limit bounds, takes seconds over 500 patterns and tens of milliseconds under 300.
_MAX_PATTERNS: Final = 300
_CUTS: Final = 8  # integer solves capping node types for a plan stranding less (``packing_cuts``)
_NARROWER: Final = (1.0, 0.5, 0.25)  # shares of the gap listed in turn (``_list_promising``)


def optimize(
    problem: PackingProblem,
    *,
    budget: float = DEFAULT_BUDGET_SECONDS,
    backend: HiGHS | None = None,
    seed: int = 0,
    plans_nominated: bool = False,
    work: Work | None = None,
    known: float = math.inf,
) -> PackingOutcome:
    """A strictly cheaper plan whose worst realization beats greedy's, or why greedy's stays.

    Reads no clock: ``budget`` (seconds; 0 disables re-packing) is only each solve's safety
    net, and the outcome depends on ``problem`` alone. ``plans_nominated``: the controller
    writes each planned pod's ``status.nominatedNodeName`` (KEP-5278), so kube-scheduler
    realizes the plan as made and no readiness model applies. ``work``: the family's counted
    work so far, shared with its other solves; ``known``: the cost of a plan found otherwise
    (the family's other solve), so the search ends as soon as its relaxation says none is
    cheaper, and dives only for a cheaper one."""
    greedy_cost = plan_cost(problem, problem.greedy)
    if budget <= 0:
        return PackingOutcome("disabled", greedy_cost)
    pods = sum(g.count for g in problem.groups)
    if len(problem.types) > MAX_TYPES or len(problem.groups) > MAX_GROUPS or pods > MAX_PODS:
        return PackingOutcome("too-large", greedy_cost)
    realizer = Realizer(problem, nominated=plans_nominated, seed=seed)
    search = _Search(problem, backend or HiGHS(), budget, realizer, work=work or Work())
    try:
        outcome = search.run(greedy_cost, known)
    except OutOfTime as exc:
        global _warned
        if not _warned:
            log.warning(
                "re-packing kept the greedy plan: a solve reached its %gs safety net "
                "(%s); the machine may be overloaded",
                budget,
                exc,
            )
        _warned = True
        return PackingOutcome("timed-out", greedy_cost)
    _warned = False
    return outcome


_warned = False  # the safety net's warning is logged once until a solve finishes again


@dataclass
class Work:
    """The counted work of one family's re-packing: the pricing knapsacks' variables, summed
    over every column generation round of every search (its first problem, the one with
    existing nodes' room, their residual re-solves and dives). The dives spend only what
    is left of ``DIVE_WORK`` (``_dive``)."""

    spent: int = 0


@dataclass(eq=False)
class _Search:
    problem: PackingProblem
    backend: HiGHS
    safety: float  # seconds: each solve's safety net (CPU time, ``highs.HiGHS``)
    realizer: Realizer
    depth: int = 0  # how deep in residual re-solves (``_residual``)
    greedy_cost: float = 0.0
    greedy_worst: float | None = None
    best: Assessed | None = None
    rejected: int = 0
    columns: list[Bin] = field(default_factory=list)
    seen: set[Bin] = field(default_factory=set)
    prices: list[float] = field(default_factory=list)  # the relaxation's duals per group
    limit_prices: list[float] = field(default_factory=list)
    node_prices: list[float] = field(default_factory=list)  # ... per existing node
    gap: float = math.inf  # reduced cost a pattern may have and still be worth listing
    visited: int = 0  # nodes of the pattern listing's search, against LISTING_VISITS
    exhausted: bool = False  # some stage stopped on its work budget
    primal: Sequence[float] = ()  # the last relaxation's solution, a value per column
    relaxed: float = math.inf  # ... and its value
    rounds: int = _MAX_ROUNDS  # column generation rounds left (the dive shares its budget)
    work: Work = field(default_factory=Work)  # the family's, shared by its searches
    limit: float = math.inf  # column generation stops once ``work`` has spent this
    solutions: list[Counter[int]] = field(default_factory=list)  # the integer solves' types

    def __post_init__(self) -> None:
        # Resources some pod asks for or a limit counts; the rest cannot bind.
        problem = self.problem
        self.dims = [
            i for i in range(len(problem.types[0].room)) if any(g.vector[i] for g in problem.groups)
        ]
        # Rows scaled to about 1, so bytes of memory and pod slots sit in one matrix.
        self.scale = [
            max(1, *(t.room[i] for t in problem.types)) for i in range(len(problem.types[0].room))
        ]
        self.limit_dims = (
            [
                i
                for i, value in enumerate(problem.limit)
                if value < (1 << 61) and any(t.limit_use[i] for t in problem.types)
            ]
            if problem.limit is not None
            else []
        )
        self.existing = [t for t, kind in enumerate(problem.types) if kind.available is not None]

    def add(self, column: Bin) -> bool:
        if column in self.seen or not any(column.counts):
            return False
        self.seen.add(column)
        self.columns.append(column)
        return True

    def _add_singles(self) -> None:
        """A pattern per type and group: as many pods of the group as one node holds."""
        problem = self.problem
        for index, kind in enumerate(problem.types):
            for g, group in enumerate(problem.groups):
                if index in group.types:
                    counts = [0] * len(problem.groups)
                    counts[g] = min(group.count, fit_count(group.vector, kind.room))
                    self.add(Bin(index, tuple(counts)))

    def run(self, greedy_cost: float, known: float = math.inf) -> PackingOutcome:
        """Patterns generated from greedy's, a first integer solve over them, then (when
        they are few enough to list) every pattern that could still beat the best plan.

        Plans are weighed by their worst realization (``realization.py``): one replaces
        greedy's only if it is cheaper and its worst realization is cheaper than greedy's
        worst; of those, the one with the cheapest worst realization wins."""
        problem = self.problem
        for column in problem.greedy:
            self.add(column)
        self._add_singles()
        bound = self._generate()
        if bound is not None and bound >= min(greedy_cost, known) * (1 - EPSILON):
            return PackingOutcome("not-cheaper", greedy_cost, lower_bound=bound)
        self.greedy_cost = greedy_cost
        # Plans between ``known`` and greedy's are still found as they would be without it:
        # a lower ceiling would list more patterns (a dearer integer solve) for a plan that
        # is then judged against ``known`` anyway.
        ceiling = greedy_cost * (1 - EPSILON)
        first_plan: list[Bin] | None = None
        listed = False  # every pattern that matters listed (and some new): solved exactly
        for stage in ("generated", "listed"):
            if stage == "listed":
                listed, some = self._list_promising(bound, ceiling)
                if not some:
                    break
            first = stage == "generated"
            status, bins = self._integer(
                ceiling,
                nodes=FIRST_NODES if first else LISTED_NODES,
                gap=FIRST_GAP if first else MIP_GAP,
            )
            if status == "budget-exhausted":
                self.exhausted = True
            if first:
                first_plan = bins
            # A plan the node limit cut short is still a plan, found within the budget (the
            # same one every time); it is judged like any other.
            ceiling = self._consider(bins, ceiling)
        if not listed and first_plan is not None and self.depth < _RESIDUAL_DEPTH:
            found = self._consider(self._residual(first_plan), ceiling)
            ceiling = min(found, known * (1 - EPSILON))
            if bound is None or ceiling > bound * (1 + _DIVE_GAP):
                self._consider(self._dive(ceiling), ceiling, dearer=False)
        if not self.realizer.nominated:
            self._cut_stranding()
        best = self.best
        if best is not None:
            return PackingOutcome(
                "improved", greedy_cost, best.bins, best.cost, self.rejected, bound, best.worst
            )
        if self.rejected:
            status = "not-robust"
        elif self.exhausted:
            status = "budget-exhausted"
        else:
            status = "not-cheaper"
        return PackingOutcome(status, greedy_cost, rejected=self.rejected, lower_bound=bound)

    def _consider(self, bins: list[Bin] | None, ceiling: float, *, dearer: bool = True) -> float:
        """Take ``bins`` as the best plan if its worst realization (or a repaired plan's) is
        the cheapest yet, below greedy's, and (not ``dearer``: the dive's) costs less than the
        best; the ceiling for the plans still to find."""
        problem = self.problem
        if bins is None or plan_cost(problem, bins) >= ceiling:
            return ceiling
        if self.best is not None and tuple(bins) == self.best.bins:
            return ceiling
        if self.greedy_worst is None:
            self.greedy_worst = self.realizer.assess(problem.greedy).worst
        found = self.realizer.best_of(bins, self.greedy_cost * (1 - EPSILON), _REPAIRS)
        if self.best is None and found.worst >= self.greedy_worst * (1 - EPSILON):
            self.rejected += 1
            return ceiling
        best = self.best
        if best is not None and not (found.beats(best) and (dearer or found.cost < best.cost)):
            return ceiling
        self.best = found
        return min(ceiling, found.worst * (1 - EPSILON))

    def _cut_stranding(self) -> None:
        """While the best plan (or, none taken, the cheapest refused) may strand pods, plans
        with fewer nodes of some type than the plans seen, cheapest first, that cost less than
        its worst realization (``packing_cuts``): at most ``_CUTS`` integer solves."""
        frontier: list[tuple[float, int, Caps]] = [(0.0, 0, {})]
        tried: set[tuple[tuple[int, int], ...]] = set()
        solves = 0
        while frontier and solves < _CUTS:
            best = self.best
            if best is None and not self.rejected:
                return
            if best is not None and best.worst <= best.cost * (1 + EPSILON):
                return  # nothing strands: no plan is cheaper at worst than at its cost
            target = self.greedy_worst if best is None else best.worst
            ceiling = min(self.greedy_cost, target or math.inf) * (1 - EPSILON)
            parent, _, caps = heapq.heappop(frontier)
            if parent >= ceiling:
                return  # the rest are capped plans' children: none costs less than its parent
            solves += 1
            _, bins = self._integer(ceiling, nodes=FIRST_NODES, gap=MIP_GAP, caps=caps)
            if bins is None:
                continue  # none under the ceiling with these caps, nor with tighter ones
            self._consider(bins, ceiling)
            cost = plan_cost(self.problem, bins)
            for t, n in sorted(self.solutions[-1].items()):
                child = {**caps, t: n - 1}
                key = tuple(sorted(child.items()))
                if key not in tried:
                    tried.add(key)
                    heapq.heappush(frontier, (cost, solves * len(self.problem.types) + t, child))

    def _dive(self, ceiling: float) -> list[Bin] | None:
        """A plan by rounding the relaxation a few nodes at a time (price and dive).

        When the patterns that matter are too many to list, the integer solve over the
        generated ones can stay 10% above the relaxation (32-64-CPU types): those patterns
        suit the fractional optimum, not an integer one. Each step buys the nodes the
        relaxation wants whole (or, wanting none whole, the one it wants most) and generates
        patterns again for the pods left, all steps within ``_DIVE_ROUNDS`` column generation
        rounds (counted work). It gives up once the nodes bought and the relaxation of the
        pods left cost ``ceiling`` (rounding only adds to that), so a dive that cannot beat the
        plans found spends little. Judged by cost alone, like ``_residual``."""
        problem = self.problem
        counts = [g.count for g in problem.groups]
        chosen: list[Bin] = []
        columns = list(self.columns)
        rounds = _DIVE_ROUNDS
        while rounds > 0 and self.work.spent < DIVE_WORK:
            keep = [i for i, c in enumerate(counts) if c > 0]
            if not keep:
                return chosen
            sub = sub_problem(self.problem, chosen, counts, keep, ())
            search = _Search(sub, self.backend, self.safety, Realizer(sub, nominated=True))
            search.depth, search.rounds, search.work = self.depth + 1, rounds, self.work
            search.limit = DIVE_WORK
            for column in columns:
                search.add(Bin(column.type, tuple(min(column.counts[i], counts[i]) for i in keep)))
            search._add_singles()
            bound = search._generate()  # None (rounds spent): its relaxation still guides
            rounds = search.rounds
            if (bound is not None and math.isinf(bound)) or not search.primal:
                return None
            if plan_cost(problem, chosen) + search.relaxed >= ceiling:
                return None
            picks = [
                (c, x) for c, x in zip(search.columns, search.primal, strict=False) if x > 1e-6
            ]
            whole = [(column, math.floor(x + 1e-6)) for column, x in picks if x >= 1 - 1e-6]
            if not whole:  # none wanted whole: buy the one wanted most (the first, on ties)
                whole = [(max(picks, key=lambda p: p[1])[0], 1)]
            for column, n in whole:
                for _ in range(n):
                    full = [0] * len(problem.groups)
                    for i, c in zip(keep, column.counts, strict=True):
                        full[i] = min(c, counts[i])
                        counts[i] -= full[i]
                    if any(full):
                        chosen.append(
                            Bin(launch_type(problem, Bin(column.type, tuple(full))), tuple(full))
                        )
            back = {i: k for k, i in enumerate(keep)}  # the sub-problem's groups, back in ours
            columns = [
                Bin(
                    c.type, tuple(c.counts[back[i]] if i in back else 0 for i in range(len(counts)))
                )
                for c in search.columns
            ]
        return chosen if not any(counts) else None

    def _residual(self, bins: Sequence[Bin]) -> list[Bin] | None:
        """``bins``' fullest nodes kept and the rest of the pods re-packed on their own.

        When the patterns that matter are too many to list, the first integer solve's plan
        can be well above the optimum with large node types; the pods off its nodes that are
        not nearly full make a smaller problem whose patterns can be listed. Its plan is
        judged by cost alone (no readiness model: that judges the whole plan, afterwards)."""
        problem = self.problem

        def fill(node: Bin) -> float:
            used = load(problem, node.counts)
            room = problem.types[node.type].room
            return max((u / r for u, r in zip(used, room, strict=True) if r > 0), default=1.0)

        fixed = [b for b in bins if fill(b) >= _FIXED_FILL]
        rest = [b for b in bins if fill(b) < _FIXED_FILL]
        if not fixed or not rest:
            return None
        counts = [g.count - sum(b.counts[i] for b in fixed) for i, g in enumerate(problem.groups)]
        keep = [i for i, c in enumerate(counts) if c > 0]
        sub = sub_problem(problem, fixed, counts, keep, rest)
        search = _Search(sub, self.backend, self.safety, Realizer(sub, nominated=True))
        search.depth, search.work = self.depth + 1, self.work
        outcome = search.run(plan_cost(sub, sub.greedy))
        if outcome.bins is None:
            return None
        repacked = []
        for node in outcome.bins:
            full = [0] * len(problem.groups)
            for i, n in zip(keep, node.counts, strict=True):
                full[i] = n
            repacked.append(Bin(node.type, tuple(full)))
        return [*fixed, *repacked]

    def _list_promising(self, bound: float | None, ceiling: float) -> tuple[bool, bool]:
        """Add every maximal pattern whose reduced cost leaves it a chance under ``ceiling``:
        whether that list was complete and added some, and whether any pattern was added.

        A pattern whose reduced cost (at the relaxation's optimal duals) exceeds
        ``ceiling - bound`` is in no plan cheaper than ``ceiling``, so leaving it out keeps the
        integer program exact over the patterns listed. When they are too many to list within
        the work budget, those within a share of that gap are (``_NARROWER``), a heuristic: a
        plan spreads its gap over its nodes, so with few large nodes each of its patterns is
        well inside it (seed 107: three nodes, 0.36 of a 0.69 gap)."""
        if bound is None:
            return False, False
        full = ceiling - bound + 1e-9
        for share in _NARROWER:
            self.gap = full * share
            self.visited = 0
            every = self._maximal_patterns()
            if every is None:
                continue
            added = 0
            for column in every:
                if self._reduced_cost(column) <= self.gap and self.add(column):
                    added += 1
            return share == 1.0 and added > 0, added > 0
        return False, False

    def _reduced_cost(self, column: Bin) -> float:
        kind = self.problem.types[column.type]
        worth = sum(p * n for p, n in zip(self.prices, column.counts, strict=True))
        return kind.price + self._rent(column.type) - worth

    def _rent(self, t: int) -> float:
        """What a node of type ``t`` costs beyond its price at the relaxation's duals: its
        share of the NodePool's limits, or the worth of an existing node's scarce room."""
        kind = self.problem.types[t]
        extra = sum(
            p * kind.limit_use[i] / self.scale[i]
            for p, i in zip(self.limit_prices, self.limit_dims, strict=True)
        )
        if t in self.existing and self.node_prices:
            extra += self.node_prices[self.existing.index(t)]
        return extra

    def _maximal_patterns(self) -> list[Bin] | None:
        """Every pattern no pod could be added to whose reduced cost may be within
        ``self.gap``, or ``None`` past ``_MAX_PATTERNS`` or ``LISTING_VISITS``
        (``packing_patterns``)."""
        problem = self.problem
        costs = [kind.price + self._rent(t) for t, kind in enumerate(problem.types)]
        found, self.visited = maximal_patterns(
            problem,
            self.prices,
            costs,
            self.gap,
            visited=self.visited,
            max_visits=LISTING_VISITS,
            max_patterns=_MAX_PATTERNS,
        )
        if self.visited > LISTING_VISITS:
            self.exhausted = True
        return found

    # -- column generation ------------------------------------------------------------------

    def _rows(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return program_rows(self.problem, self.columns, self.limit_dims, self.scale, self.existing)

    def _generate(self) -> float | None:
        """The relaxation's optimum once no pattern improves it (a lower bound on any plan).

        ``None`` when it had to stop first (``_MAX_ROUNDS`` spent): the patterns so far still
        make plans, but the value bounds nothing and the duals price nothing exactly.
        """
        problem = self.problem
        value = math.inf
        for _ in range(min(_MAX_ROUNDS, self.rounds)):
            if self.work.spent >= self.limit:
                break
            self.rounds -= 1
            cost, matrix, bound = self._rows()
            solved = self.backend.lp(cost, matrix, bound, time_limit=self.safety)
            if solved is None:
                return math.inf  # the limits leave no room for every pod
            value, duals, primal = solved
            self.primal, self.relaxed = [float(v) for v in primal], value
            prices = [-d for d in duals[: len(problem.groups)]]
            limits = len(problem.groups) + len(self.limit_dims)
            self.prices = prices
            self.limit_prices = [-d for d in duals[len(problem.groups) : limits]]
            self.node_prices = [-d for d in duals[limits:]]
            added = 0
            patterns, size = pricing.best_patterns(
                problem,
                prices,
                self.dims,
                self.scale,
                backend=self.backend,
                safety=self.safety,
                gap=MIP_GAP,
            )
            self.work.spent += size
            for column, worth in patterns:
                kind = problem.types[column.type]
                if kind.price + self._rent(column.type) - worth < -1e-9 and self.add(column):
                    added += 1
            if not added:
                return value
        self.exhausted = True
        return None

    # -- the integer program ----------------------------------------------------------------

    def _integer(
        self, ceiling: float, *, nodes: int, gap: float, caps: Caps | None = None
    ) -> tuple[str, list[Bin] | None]:
        """The cheapest plan over the patterns so far costing under ``ceiling``, exploring at
        most ``nodes`` branch-and-bound nodes, with at most ``caps[t]`` nodes of type ``t``."""
        status, x = integer_program(
            self.problem,
            self.columns,
            self._rows(),
            self.backend,
            safety=self.safety,
            nodes=nodes,
            gap=gap,
            caps=caps or {},
        )
        if x is None:
            return status, None
        chosen = [round(v) for v in x[: len(self.columns)]]
        self.solutions.append(kinds([c.type for c in self.columns], chosen))
        bins = trimmed(self.problem, self.columns, chosen)
        return status, bins if plan_cost(self.problem, bins) < ceiling else None
