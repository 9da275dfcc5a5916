"""A second exact reference for ``benchmarks/packing.py``: the pattern (configuration) model.

Why: the compact program of ``packing_exact`` (one variable per pod group and candidate node)
has a weak relaxation, so on about a third of the seeds HiGHS stops at a lower bound far below
the best plan known, and the benchmark's target could not be judged there. Here a variable
counts the nodes bought of one *pattern*: a node type (or an existing node's free room) with how
many pods of each shape it holds. Its relaxation (Gilmore-Gomory) is far tighter. Written apart
from the controller's solver on purpose (it imports nothing of ``core/scheduling/packing*``):
a reference that shared the solver's code would share its mistakes.

How the optimum is proven:

1. Column generation solves the relaxation: the restricted master (SciPy's HiGHS LP) gives
   duals, and an exact pricing search per node type (a bounded knapsack over the 1-6 shapes, by
   branch and bound) adds the pattern of most negative reduced cost, until no pattern has one.
   The duals then give a lower bound ``LB`` on every packing.
2. An integer solve over the patterns generated gives a plan, so an upper bound ``UB``.
3. For any packing ``x``: ``cost(x) >= LB + sum(reduced cost of each pattern * its count)``
   (every reduced cost is >= 0 at the end of step 1), so a packing cheaper than ``UB`` uses only
   patterns whose reduced cost is below ``UB - LB``. Those are listed (maximal ones only: a
   pattern that can take one more pod is never better than the one that does), and the integer
   solve over them is the optimum. When they are too many to list, ``LB`` stands as the bound.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, linprog, milp
from scipy.sparse import csr_matrix

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root
from benchmarks.packing_exact import NAMES, Extras, _groups, _quiet_stdout
from karpenter_capi.core.instancetype import InstanceType

Pod = dict[str, Any]
Vector = tuple[int, ...]
TOLERANCE = 1e-9
MAX_COLUMNS = 60_000
"""Patterns listed in step 3 before giving up on a proof (the bound of step 1 then stands)."""


@dataclass
class Instance:
    """The packing problem as the pattern model reads it: bins (node types, then existing
    nodes' free room, free and outside the limit), pod shapes and how many of each."""

    rooms: list[Vector]
    prices: list[float]
    cpus: list[int]  # capacity, milli, counted against the NodePool's CPU limit
    existing: int  # the last ``existing`` bins are existing nodes: one pattern each at most
    shapes: list[Vector]
    demand: list[int]
    cpu_limit: int | None = None

    @classmethod
    def of(cls, types: Sequence[InstanceType], pods: Sequence[Pod], extras: Extras) -> Instance:
        daemon = extras.daemon_vector()
        rooms = [
            tuple(t.allocatable.milli(n) - d for n, d in zip(NAMES, daemon, strict=True))
            for t in types
        ]
        prices = [min(o.price for o in t.offerings if o.available) for t in types]
        cpus = [t.capacity.milli("cpu") for t in types]
        groups = _groups(pods)
        free = [tuple(room) for room in extras.free_rooms]
        return cls(
            rooms + free,
            prices + [0.0] * len(free),
            cpus + [0] * len(free),
            len(free),
            [vector for vector, _ in groups],
            [count for _, count in groups],
            extras.cpu_limit,
        )

    def is_existing(self, b: int) -> bool:
        return b >= len(self.rooms) - self.existing


@dataclass
class PatternResult:
    """The pattern model's answer: ``value`` the optimum when ``proven``, else ``bound`` (a
    lower bound) and ``upper`` (the cheapest plan it found) bracket it."""

    value: float
    proven: bool
    bound: float
    upper: float
    columns: int  # patterns in the last integer solve
    rounds: int  # column generation rounds
    note: str = ""
    plan: list[tuple[int, Vector, int]] = field(default_factory=list)  # bin, counts, how many


def pattern_exact(
    instance: Instance,
    upper: float = math.inf,
    *,
    time_limit: float | None = None,
    max_columns: int = MAX_COLUMNS,
) -> PatternResult:
    """The cheapest packing of ``instance`` (module docstring); ``upper``: the cost of a plan
    known elsewhere, which only narrows what step 3 lists (a plan cheaper than the model's
    optimum would mean the two disagree, and is reported so, not proven)."""
    if not instance.shapes:
        return PatternResult(0.0, True, 0.0, 0.0, 0, 0)
    columns, duals, rounds = _generate(instance)
    bound = duals.bound(instance)
    ours = _integer(instance, {b: sorted(c) for b, c in enumerate(columns)}, time_limit)
    slack = 1e-7 * max(1.0, bound)
    if ours.value <= bound + slack:
        return PatternResult(
            ours.value, True, bound, ours.value, ours.columns, rounds, "", ours.plan
        )
    if upper < bound - slack:
        note = f"a plan at {upper:.5f} is cheaper than every packing of the model"
        return PatternResult(bound, False, bound, ours.value, ours.columns, rounds, note)
    best_upper = min(ours.value, upper)
    if math.isinf(best_upper):  # under a tight limit the columns so far may hold no plan
        note = "no plan known to list patterns against"
        return PatternResult(bound, False, bound, math.inf, ours.columns, rounds, note)
    delta = (best_upper - bound) / 16
    floor, found = bound, ours.value
    while True:
        # Patterns within ``delta`` of reduced cost hold every packing cheaper than
        # ``bound + delta``: the optimum is often that close, and those are far fewer.
        delta = min(delta, best_upper - bound)
        whole = delta >= best_upper - bound - slack
        listed, most = _listed(instance, duals, delta + slack, max_columns)
        if listed is None:
            note = f"over {max_columns} patterns within {delta:.5f} of reduced cost"
            return PatternResult(floor, False, floor, found, max_columns, rounds, note)
        final = _integer(instance, listed, time_limit, most)
        found = min(found, final.value)
        if final.optimal and final.value <= bound + delta + slack:
            return PatternResult(
                final.value, True, bound, final.value, len(most), rounds, "", final.plan
            )
        floor = max(floor, min(final.bound, bound + delta))
        best_upper = min(best_upper, final.value)
        if whole:
            note = "integer solve stopped"
            if final.optimal:
                note = f"a plan at {upper:.5f} is cheaper than every packing of the model"
            return PatternResult(floor, False, floor, found, len(most), rounds, note)
        delta *= 4


def _listed(
    instance: Instance, duals: _Duals, within: float, max_columns: int
) -> tuple[dict[int, list[Vector]] | None, list[float]]:
    """The maximal patterns of reduced cost at most ``within``, and how many of each a packing
    that spends at most ``within`` in reduced cost can hold (None: more than ``max_columns``)."""
    listed: dict[int, list[Vector]] = {}
    most: list[float] = []
    for b in range(len(instance.rooms)):
        target = _target(instance, duals, b)
        for pattern, value in _patterns(instance, b, duals.values, target - within):
            listed.setdefault(b, []).append(pattern)
            reduced = target - value
            most.append(math.floor(within / reduced) if reduced > 1e-12 else math.inf)
            if len(most) > max_columns:
                return None, most
    return listed, most


def _generate(instance: Instance) -> tuple[list[set[Vector]], _Duals, int]:
    """Column generation (step 1): the patterns generated, the final duals, the rounds."""
    columns = _initial(instance)
    rounds = 0
    while True:
        rounds += 1
        duals = _relaxation(instance, columns)
        added = False
        for b in range(len(instance.rooms)):
            best = _best(instance, b, duals.values, _target(instance, duals, b))
            if best is not None and best not in columns[b]:
                columns[b].add(best)
                added = True
        if not added:
            return columns, duals, rounds


@dataclass
class _Duals:
    values: list[float]  # per shape, >= 0
    existing: dict[int, float]  # per existing node's bin, <= 0
    limit: float  # the CPU limit's, <= 0

    def bound(self, instance: Instance) -> float:
        """The relaxation's value from the duals alone (every reduced cost >= 0)."""
        value = sum(v * d for v, d in zip(self.values, instance.demand, strict=True))
        value += sum(self.existing.values())
        if instance.cpu_limit is not None:
            value += self.limit * instance.cpu_limit
        return value


def _target(instance: Instance, duals: _Duals, b: int) -> float:
    """The value (duals of the pods a pattern holds) above which a pattern of bin ``b`` has a
    negative reduced cost."""
    return (
        instance.prices[b]
        - duals.limit * instance.cpus[b]
        - duals.existing.get(b, 0.0)
        + TOLERANCE * max(1.0, instance.prices[b])
    )


def _fits(room: Vector, vector: Vector) -> int:
    return min(r // v for r, v in zip(room, vector, strict=True))


def _initial(instance: Instance) -> list[set[Vector]]:
    """Each bin full of one shape, so the first relaxation has something to price."""
    columns: list[set[Vector]] = []
    for room in instance.rooms:
        mine = set()
        for s, vector in enumerate(instance.shapes):
            count = min(_fits(room, vector), instance.demand[s])
            if count > 0:
                mine.add(tuple(count if i == s else 0 for i in range(len(instance.shapes))))
        columns.append(mine)
    return columns


def _rows(
    instance: Instance, columns: dict[int, list[Vector]]
) -> tuple[list[tuple[int, Vector]], csr_matrix, np.ndarray, np.ndarray]:
    """The master's ``A x <= b`` over ``columns``: covers (negated), existing nodes, limit."""
    flat = [(b, pattern) for b, patterns in columns.items() for pattern in patterns]
    shapes = len(instance.shapes)
    existing = [b for b in range(len(instance.rooms)) if instance.is_existing(b)]
    limit = 1 if instance.cpu_limit is not None else 0
    data: list[float] = []
    rows: list[int] = []
    cols: list[int] = []
    for j, (b, pattern) in enumerate(flat):
        for s, count in enumerate(pattern):
            if count:
                rows.append(s)
                cols.append(j)
                data.append(-count)
        if instance.is_existing(b):
            rows.append(shapes + existing.index(b))
            cols.append(j)
            data.append(1.0)
        elif limit and instance.cpus[b]:
            rows.append(shapes + len(existing))
            cols.append(j)
            data.append(instance.cpus[b] / 1000)
    matrix = csr_matrix((data, (rows, cols)), shape=(shapes + len(existing) + limit, len(flat)))
    high = [-float(d) for d in instance.demand] + [1.0] * len(existing)
    if limit:
        high.append((instance.cpu_limit or 0) / 1000)
    cost = np.array([instance.prices[b] for b, _ in flat])
    return flat, matrix, np.array(high), cost


def _relaxation(instance: Instance, columns: list[set[Vector]]) -> _Duals:
    """The restricted master's relaxation, with an artificial column per shape (dearer than
    any node) so it is feasible from the first round."""
    _, matrix, high, cost = _rows(instance, {b: sorted(c) for b, c in enumerate(columns)})
    shapes = len(instance.shapes)
    penalty = 1000.0 * max(1.0, *instance.prices)
    artificial = np.zeros((matrix.shape[0], shapes))
    for s in range(shapes):
        artificial[s, s] = -1.0
    full = np.hstack([matrix.toarray(), artificial])
    result = linprog(
        np.concatenate([cost, np.full(shapes, penalty)]),
        A_ub=full,
        b_ub=high,
        bounds=(0, None),
        method="highs",
    )
    if result.status != 0:
        raise RuntimeError(f"the pattern relaxation failed: {result.message}")
    marginals = result.ineqlin.marginals
    existing = [b for b in range(len(instance.rooms)) if instance.is_existing(b)]
    return _Duals(
        [max(0.0, -float(m)) for m in marginals[:shapes]],
        {b: min(0.0, float(marginals[shapes + e])) for e, b in enumerate(existing)},
        # per millicore: the row is written in cores
        min(0.0, float(marginals[-1])) / 1000 if instance.cpu_limit is not None else 0.0,
    )


@dataclass
class _Integer:
    value: float
    optimal: bool
    bound: float
    columns: int
    plan: list[tuple[int, Vector, int]]


def _integer(
    instance: Instance,
    columns: dict[int, list[Vector]],
    time_limit: float | None,
    most: Sequence[float] | None = None,
) -> _Integer:
    """The integer master over ``columns``; ``most``: an upper bound on each column's count
    (in ``columns``' order)."""
    flat, matrix, high, cost = _rows(instance, columns)
    if not flat:
        return _Integer(math.inf, False, math.inf, 0, [])
    options: dict[str, Any] = {"disp": False, "mip_rel_gap": 0.0}
    if time_limit is not None:
        options["time_limit"] = time_limit
    with _quiet_stdout():  # HiGHS's debug lines would break the rows on stdout
        result = _milp(cost, matrix, high, most, options)
    bound = float(getattr(result, "mip_dual_bound", 0.0) or 0.0)
    if result.x is None:
        infeasible = result.status == 2  # no packing of these patterns
        return _Integer(math.inf, False, math.inf if infeasible else bound, len(flat), [])
    plan = [
        (b, pattern, round(x)) for (b, pattern), x in zip(flat, result.x, strict=True) if x > 0.5
    ]
    value = sum(instance.prices[b] * n for b, _, n in plan)
    optimal = result.status == 0
    return _Integer(value, optimal, value if optimal else bound, len(flat), plan)


def _milp(
    cost: np.ndarray,
    matrix: csr_matrix,
    high: np.ndarray,
    most: Sequence[float] | None,
    options: dict[str, Any],
) -> Any:
    count = len(cost)
    return milp(
        cost,
        constraints=LinearConstraint(matrix, -np.inf, high),
        integrality=np.ones(count),
        bounds=Bounds(np.zeros(count), np.full(count, np.inf) if most is None else most),
        options=options,
    )


def _best(instance: Instance, b: int, values: Sequence[float], floor: float) -> Vector | None:
    """Pricing: the pattern of bin ``b`` of largest dual value above ``floor``, if any."""
    best: Vector | None = None
    for pattern, value in _search(instance, b, values, floor, maximal=False, improving=True):
        best, floor = pattern, value
    return best


def _patterns(
    instance: Instance, b: int, values: Sequence[float], floor: float
) -> Iterator[tuple[Vector, float]]:
    """Every maximal pattern of bin ``b`` whose dual value is above ``floor``, with its value."""
    return _search(instance, b, values, floor, maximal=True, improving=False)


def _search(
    instance: Instance,
    b: int,
    values: Sequence[float],
    floor: float,
    *,
    maximal: bool,
    improving: bool,
) -> Iterator[tuple[Vector, float]]:
    """Branch and bound over the count of each shape (most valuable per pod slot first):
    patterns above ``floor``; ``improving`` raises the floor to each one found (pricing)."""
    shapes = instance.shapes
    order = sorted(range(len(shapes)), key=lambda s: -values[s])
    caps = instance.demand
    counts = [0] * len(shapes)
    state = [floor]

    def ceiling(room: Vector, k: int) -> float:
        rest = order[k:]
        if not rest:
            return 0.0
        by_count = sum(values[s] * min(caps[s], _fits(room, shapes[s])) for s in rest)
        by_room = min(
            room[i] * max(values[s] / shapes[s][i] for s in rest) for i in range(len(room))
        )
        return min(by_count, by_room)

    def visit(room: Vector, k: int, value: float) -> Iterator[tuple[Vector, float]]:
        if value + ceiling(room, k) <= state[0]:
            return
        if k == len(order):
            if maximal and any(
                counts[s] < caps[s] and _fits(room, shapes[s]) > 0 for s in range(len(shapes))
            ):
                return
            if value > state[0]:
                if improving:
                    state[0] = value
                yield tuple(counts), value
            return
        s = order[k]
        vector = shapes[s]
        for count in range(min(caps[s], _fits(room, vector)), -1, -1):
            counts[s] = count
            left = tuple(r - count * v for r, v in zip(room, vector, strict=True))
            yield from visit(left, k + 1, value + count * values[s])
        counts[s] = 0

    yield from visit(instance.rooms[b], 0, 0.0)


def _known_plans(paths: Sequence[str]) -> dict[int, float]:
    """The cheapest plan of each seed in earlier runs' ``--verbose`` rows (any of the three)."""
    best: dict[int, float] = {}
    for path in paths:
        with open(path) as rows:
            for line in rows:
                row = json.loads(line)
                costs = [row[k] for k in ("cost", "greedy", "nominated_cost") if k in row]
                best[row["seed"]] = min(best.get(row["seed"], math.inf), *costs)
    return best


def judge(rows: Sequence[dict[str, Any]], references: dict[int, dict[str, Any]]) -> list[Any]:
    """A run's ``--verbose`` rows measured again against ``references`` (``load_references``)
    instead of the optima they were measured against: the plans do not change, so re-judging
    them needs no new run of the controller."""
    from benchmarks import packing as bench

    judged = []
    for row in rows:
        known = references.get(row["seed"])
        if known is None or "optimum" not in known:
            judged.append(row)
            continue
        if known["instance"] != bench._instance_key(row):
            raise SystemExit(f"seed {row['seed']}: the references are of another instance")
        optimum, proven = float(known["optimum"]), bool(known["proven"])
        if proven:
            optimum = min(optimum, row["best_known"])
        else:
            optimum = max(optimum, row["optimum"]) if not row["proven"] else row["optimum"]
            proven = bool(row["proven"])
        judged.append(
            {
                **row,
                "optimum": round(optimum, 5),
                "proven": proven,
                "ratio": bench._ratio(row["cost"], optimum),
                "nominated_ratio": bench._ratio(row["nominated_cost"], optimum),
                "greedy_ratio": bench._ratio(row["greedy"], optimum),
            }
        )
    return judged


def main(argv: Sequence[str] | None = None) -> int:
    """Rows ``benchmarks/packing.py --references`` reads: the pattern model's optimum (or its
    bound) for each seed, one JSON line each."""
    from benchmarks import packing as bench  # the instances; it does not import this module

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--seeds", type=int, default=200)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--only", type=int, action="append", default=[], help="this seed only")
    parser.add_argument("--time-limit", type=float, default=60.0, help="per integer solve, s")
    parser.add_argument(
        "--plans",
        action="append",
        default=[],
        help="earlier runs' --verbose rows: their cheapest plans narrow what is listed",
    )
    parser.add_argument(
        "--judge",
        default=None,
        help="a packing.py --verbose run's rows: its summary against --references, no solve",
    )
    parser.add_argument("--references", action="append", default=[], help="with --judge")
    args = parser.parse_args(argv)
    if args.judge:
        with open(args.judge) as lines:
            rows = [json.loads(line) for line in lines if line.startswith("{")]
        summary = bench.summary(judge(rows, bench.load_references(args.references)))
        print(json.dumps(summary))
        return 0
    known = _known_plans(args.plans)
    seeds = args.only or range(args.first_seed, args.first_seed + args.seeds)
    for seed in seeds:
        types, pods, extras = bench.build(seed)
        greedy = bench._solver(types, extras, 0).solve(pods).price
        start = time.process_time()
        result = pattern_exact(
            Instance.of(types, pods, extras),
            known.get(seed, greedy),
            time_limit=args.time_limit,
        )
        row = {
            "seed": seed,
            "types": len(types),
            "extras": extras.describe(),
            "pods": len(pods),
            "greedy": round(greedy, 5),
            # Rounded down when only a bound: it must stay below the optimum.
            "optimum": round(result.value, 5)
            if result.proven
            else math.floor(result.value * 1e5) / 1e5,
            "proven": result.proven,
            "model": "patterns",
            "bound": round(result.bound, 5),
            "upper": round(result.upper, 5),
            "columns": result.columns,
            "rounds": result.rounds,
            "note": result.note,
            "cpu_seconds": round(time.process_time() - start, 3),
        }
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
