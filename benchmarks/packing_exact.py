"""The exact optimum ``benchmarks/packing.py`` measures the controller against, with and without
the readiness rule.

Why a module of its own: the benchmark's instances and its report live in ``packing.py``; the
reference they are measured against is a model written apart from the solver's (a compact
integer program), and under the readiness rule it also needs the rule's own oracle. Kept here,
``packing.py`` stays a driver.

Two references per seed:

- ``exact``: the cheapest packing, full stop (the *rule-free* optimum). Without nominations
  the controller may not take it: kube-scheduler does not read the plan, and the readiness rule
  (``docs/scheduling.md``, *Plans kube-scheduler realizes: the readiness model*) refuses a plan
  whose worst realization is no cheaper than greedy's.
- ``rule_exact``: the cheapest packing that rule admits (the *rule-obeying* optimum): greedy's
  plan, or one whose worst realization (``core/scheduling/realization.py``, the controller's
  own model) is cheaper than greedy's. Existing nodes keep the pods kube-scheduler gives them
  (greedy's: a Ready node takes pending pods in queue order, which the rule does not re-plan).
  A plan's worst realization depends only on its nodes' types, not on which pods it meant for
  them (kube-scheduler places them), so the rule is written into the compact program as
  constraints that cut off, one by one, each set of node types the rule refuses (lazily: solve,
  ask the rule, cut, solve again), until the program's plan is admitted. Every admitted plan
  stays feasible, so the program's value is always a lower bound on the rule-obeying optimum,
  and the optimum itself once its plan is admitted.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import lil_matrix, vstack

from karpenter_capi.core.instancetype import InstanceType
from karpenter_capi.core.scheduling.packing import EPSILON
from karpenter_capi.core.scheduling.packing_problem import Bin, BinType, PackingProblem, PodGroup
from karpenter_capi.core.scheduling.realization import Assessed, Realizer
from karpenter_capi.core.values.resources import pod_requests

Pod = dict[str, Any]
MI = 1 << 20
NAMES = ("cpu", "memory", "pods")
RULE_CUTS = 40
"""Sets of node types the rule-obeying reference may cut off before it settles for a bound."""
ZONES = ("zone-a", "zone-b", "zone-c")


@dataclass
class Extras:
    """What makes an instance realistic beyond a catalog and a workload (issue 25, item 4)."""

    daemonsets: list[dict[str, Any]] = field(default_factory=list)
    daemon: tuple[int, int] = (0, 0)  # their CPU (milli) and memory (MiB) on every node
    existing: list[Any] = field(default_factory=list)  # ExistingNode
    free_rooms: list[tuple[int, int, int]] = field(default_factory=list)  # milli
    cpu_limit: int | None = None  # milli, the NodePool's spec.limits.cpu
    zones: int = 1

    def daemon_vector(self) -> tuple[int, int, int]:
        cpu, memory = self.daemon
        return (cpu, memory * MI * 1000, len(self.daemonsets) * 1000)

    def describe(self) -> str:
        parts = []
        if self.daemonsets:
            parts.append(f"{len(self.daemonsets)}ds")
        if self.zones > 1:
            parts.append(f"{self.zones}zones")
        if self.existing:
            parts.append(f"{len(self.existing)}existing")
        if self.cpu_limit is not None:
            parts.append("limit")
        return ",".join(parts)


@dataclass
class Reference:
    """An exact reference: its value (the optimum, or a lower bound when not ``proven``)."""

    value: float
    proven: bool
    cuts: int = 0  # sets of node types the readiness rule refused, cut off


@dataclass
class _Compact:
    """The compact program of one instance: candidate node ``(t, k)`` per type and ``k`` below
    ``upper / price``, ``y`` (bought) first, then ``x`` (pods of each group on it)."""

    types: int  # instance types; the rest of ``rooms`` are existing nodes' free room
    groups: list[tuple[tuple[int, ...], int]]
    rooms: list[tuple[int, ...]]
    prices: list[float]
    nodes: list[tuple[int, int]]
    cost: np.ndarray
    high: np.ndarray
    rows: Any  # CSR
    low_rows: list[float]
    high_rows: list[float]

    def solve(self, cuts: Sequence[tuple[np.ndarray, float]], time_limit: float | None) -> Any:
        rows, low, high = self.rows, list(self.low_rows), list(self.high_rows)
        if cuts:
            rows = vstack([rows, *(cut.reshape(1, -1) for cut, _ in cuts)]).tocsr()
            low += [floor for _, floor in cuts]
            high += [np.inf] * len(cuts)
        options: dict[str, Any] = {"disp": False}
        if time_limit is not None:
            options["time_limit"] = time_limit
        with _quiet_stdout():
            return milp(
                self.cost,
                constraints=LinearConstraint(rows, low, high),
                integrality=np.ones(len(self.cost)),
                bounds=Bounds(np.zeros(len(self.cost)), self.high),
                options=options,
            )

    def bought(self, x: np.ndarray) -> list[Bin]:
        """The new nodes of a solution, each with the pods it holds."""
        result = []
        for n, (t, _) in enumerate(self.nodes):
            if t < self.types and x[n] > 0.5:
                start = len(self.nodes) + n * len(self.groups)
                counts = tuple(round(v) for v in x[start : start + len(self.groups)])
                result.append(Bin(t, counts))
        return result

    def cut(self, kinds: Counter[int]) -> tuple[np.ndarray, float]:
        """A row no plan buying exactly ``kinds[t]`` nodes of each type satisfies: nodes of a
        type are bought in order, so that count is ``y[t, n-1] = 1`` and ``y[t, n] = 0``."""
        row = np.zeros(len(self.cost))
        floor = 1.0
        for n, (t, k) in enumerate(self.nodes):
            if t >= self.types:
                continue
            if k == kinds[t] - 1:
                row[n] -= 1  # 1 - y
                floor -= 1
            elif k == kinds[t]:
                row[n] += 1
        return row, floor


def _groups(pods: Sequence[Pod]) -> list[tuple[tuple[int, ...], int]]:
    """Pods with the same requests, in the order their first pod comes (the queue's)."""
    shapes = Counter(
        tuple(pod_requests(p, include_pod_count=True).milli(n) for n in NAMES) for p in pods
    )
    return list(shapes.items())


def _compact(
    types: Sequence[InstanceType],
    groups: list[tuple[tuple[int, ...], int]],
    upper: float,
    extras: Extras,
    free_rooms: Sequence[tuple[int, int, int]],
) -> _Compact:
    shapes = dict(groups)
    daemon = extras.daemon_vector()
    rooms = [
        tuple(t.allocatable.milli(n) - d for n, d in zip(NAMES, daemon, strict=True)) for t in types
    ]
    prices = [min(o.price for o in t.offerings if o.available) for t in types]
    capacity_cpu = [t.capacity.milli("cpu") for t in types]
    free = [tuple(room) for room in free_rooms]
    rooms += free
    prices += [0.0] * len(free)
    capacity_cpu += [0] * len(free)
    scale = [max(1, *(r[i] for r in rooms)) for i in range(3)]
    nodes = [
        (t, k)
        for t in range(len(types))
        for k in range(min(int(upper / prices[t] + 1e-9), sum(shapes.values())))
        if any(all(v[i] <= rooms[t][i] for i in range(3)) for v, _ in groups)
    ] + [(len(types) + f, 0) for f in range(len(free))]
    count = len(nodes) * (1 + len(groups))
    cost = np.zeros(count)
    high = np.zeros(count)
    rows = lil_matrix((len(groups) + len(nodes) * (3 + len(groups) + 1) + 2, count))
    low_rows: list[float] = []
    high_rows: list[float] = []
    r = 0
    for g, (_, demand) in enumerate(groups):
        for n in range(len(nodes)):
            rows[r, len(nodes) + n * len(groups) + g] = 1
        low_rows.append(demand)
        high_rows.append(demand)
        r += 1
    for n, (t, k) in enumerate(nodes):
        cost[n] = prices[t]
        high[n] = 1
        for g, (vector, demand) in enumerate(groups):
            fit = max(0, min(rooms[t][i] // v for i, v in enumerate(vector) if v))
            high[len(nodes) + n * len(groups) + g] = min(fit, demand)
        for i in range(3):
            for g, (vector, _) in enumerate(groups):
                rows[r, len(nodes) + n * len(groups) + g] = vector[i] / scale[i]
            rows[r, n] = -rooms[t][i] / scale[i]
            low_rows.append(-np.inf)
            high_rows.append(0)
            r += 1
        for g in range(len(groups)):
            rows[r, len(nodes) + n * len(groups) + g] = 1
            rows[r, n] = -high[len(nodes) + n * len(groups) + g]
            low_rows.append(-np.inf)
            high_rows.append(0)
            r += 1
        if k:
            rows[r, n - 1] = 1
            rows[r, n] = -1
            low_rows.append(0)
        else:
            low_rows.append(-np.inf)
        high_rows.append(np.inf)
        r += 1
    for n in range(len(nodes)):
        rows[r, n] = prices[nodes[n][0]]
    low_rows.append(-np.inf)
    high_rows.append(upper + 1e-9)
    r += 1
    for n in range(len(nodes)):
        rows[r, n] = capacity_cpu[nodes[n][0]] / 1000
    low_rows.append(-np.inf)
    high_rows.append(np.inf if extras.cpu_limit is None else extras.cpu_limit / 1000 + 1e-9)
    return _Compact(
        len(types),
        groups,
        rooms,
        prices,
        nodes,
        cost,
        high,
        rows.tocsr(),
        low_rows,
        high_rows,
    )


def exact(
    types: Sequence[InstanceType],
    pods: Sequence[Pod],
    upper: float,
    time_limit: float | None,
    extras: Extras | None = None,
) -> tuple[float, bool]:
    """The cheapest packing of ``pods`` onto ``types`` (and whether it is proven optimal).

    A compact model, independent of the solver's: candidate node ``(t, k)`` for every type and
    ``k`` below ``upper / price``, ``y`` whether it is bought, ``x`` how many pods of each group
    it holds; nodes of a type are bought in order (symmetry). ``extras``: the DaemonSet pods
    take their requests off every type, existing nodes are free candidates with the room they
    have left, and the NodePool's CPU limit bounds the bought nodes' CPU capacity. Without a
    time limit the result is the optimum; with one, the proven lower bound when the limit
    stops it first.
    """
    extras = extras or Extras()
    groups = _groups(pods)
    model = _compact(types, groups, upper, extras, extras.free_rooms)
    result = model.solve((), time_limit)
    if result.status == 0:
        return float(result.fun), True
    return _bound(model, result, extras.free_rooms), False


def rule_exact(
    types: Sequence[InstanceType],
    pods: Sequence[Pod],
    greedy: Sequence[Sequence[Pod]],
    plan: Sequence[Sequence[Pod]],
    time_limit: float | None,
    *,
    extras: Extras | None = None,
    seed: int = 0,
) -> RuleReferences:
    """The two optima of ``pods`` under the readiness rule (module docstring).

    ``pods`` are the pods greedy left for new nodes (those it put on existing nodes stay
    there), in kube-scheduler's queue order; ``greedy`` and ``plan`` are greedy's plan and the
    controller's, the pods of each of their new nodes. The rule is the controller's
    (``packing.py``, ``realization.py``): a plan replaces greedy's when its worst realization
    costs less than greedy's by more than ``packing.EPSILON``, and plans are weighed by their
    worst realization. Plans are enumerated cheapest first, each set of node types cut off
    once seen, until the next costs more than the cheapest worst realization found: at most
    ``RULE_CUTS`` sets, each solve within ``time_limit``; stopped first, the values are the
    program's bound, lower bounds on both optima.
    """
    extras = extras or Extras()
    groups = _groups(pods)
    if not groups:
        return RuleReferences(Reference(0.0, True), Reference(0.0, True), 0.0)
    model, realizer, greedy_plan, controller = _assessed(
        types, pods, greedy, plan, extras=extras, seed=seed
    )
    admitted = min(greedy_plan.cost, controller.cost)
    robust = min(greedy_plan.worst, controller.worst)
    model = _compact(types, groups, robust, extras, ())
    cuts: list[tuple[np.ndarray, float]] = []
    cheapest: Reference | None = None
    deadline = None if time_limit is None else time.monotonic() + 3 * time_limit
    while True:
        result = model.solve(cuts, time_limit)
        if result.status == 2:  # infeasible: every plan under ``robust`` seen
            floor, proven = robust, True
            break
        if result.status != 0:
            floor, proven = _bound(model, result, ()), False
            break
        floor, proven = float(result.fun), True
        if floor >= robust * (1 - EPSILON):
            break
        bins = model.bought(np.asarray(result.x))
        assessed = realizer.assess(bins)
        if cheapest is None and assessed.worst < greedy_plan.worst * (1 - EPSILON):
            cheapest = Reference(min(floor, admitted), True, len(cuts))
        robust = min(robust, assessed.worst)
        out_of_time = deadline is not None and time.monotonic() > deadline
        if len(cuts) >= RULE_CUTS or out_of_time:
            proven = False
            break
        cuts.append(model.cut(_kinds(bins)))
    if cheapest is None:
        cheapest = Reference(min(floor, admitted), proven or floor >= admitted, len(cuts))
    return RuleReferences(
        cheapest, Reference(min(floor, robust), proven, len(cuts)), controller.worst
    )


def plan_worst(
    types: Sequence[InstanceType],
    pods: Sequence[Pod],
    greedy: Sequence[Sequence[Pod]],
    plan: Sequence[Sequence[Pod]],
    *,
    extras: Extras | None = None,
    seed: int = 0,
) -> float:
    """The worst realization of ``plan`` as ``rule_exact`` assesses it, without solving for the
    references (``benchmarks/packing.py --references`` reads those from an earlier run)."""
    if not _groups(pods):
        return 0.0
    return _assessed(types, pods, greedy, plan, extras=extras or Extras(), seed=seed)[3].worst


def _assessed(
    types: Sequence[InstanceType],
    pods: Sequence[Pod],
    greedy: Sequence[Sequence[Pod]],
    plan: Sequence[Sequence[Pod]],
    *,
    extras: Extras,
    seed: int,
) -> tuple[_Compact, Realizer, Assessed, Assessed]:
    """The compact program without candidate nodes, the rule's oracle, and greedy's and the
    controller's plans as it assesses them."""
    model = _compact(types, _groups(pods), 0.0, extras, ())
    realizer = Realizer(_readiness_problem(model, pods, extras), nominated=False, seed=seed)
    index = {vector: g for g, (vector, _) in enumerate(model.groups)}
    greedy_plan = realizer.assess([_launched(model, index, node) for node in greedy])
    controller = realizer.assess([_launched(model, index, node) for node in plan])
    return model, realizer, greedy_plan, controller


@dataclass
class RuleReferences:
    """The readiness rule's optima: ``cheapest`` the cheapest plan it admits (by cost),
    ``robust`` the cheapest worst realization of any plan (what the controller weighs plans
    by); ``worst`` the controller's own plan's worst realization."""

    cheapest: Reference
    robust: Reference
    worst: float


def _kinds(bins: Sequence[Bin]) -> Counter[int]:
    return Counter(b.type for b in bins)


def _launched(model: _Compact, index: dict[tuple[int, ...], int], pods: Sequence[Pod]) -> Bin:
    """A node of a plan as the compact program's types see it: the cheapest type that holds
    its pods (what its NodeClaim is launched as)."""
    counts = [0] * len(model.groups)
    for pod in pods:
        counts[index[tuple(pod_requests(pod, include_pod_count=True).milli(n) for n in NAMES)]] += 1
    total = [
        sum(v[i] * c for (v, _), c in zip(model.groups, counts, strict=True)) for i in range(3)
    ]
    kind = min(
        (
            t
            for t in range(model.types)
            if all(u <= r for u, r in zip(total, model.rooms[t], strict=True))
        ),
        key=lambda t: model.prices[t],
    )
    return Bin(kind, tuple(counts))


def _readiness_problem(model: _Compact, pods: Sequence[Pod], extras: Extras) -> PackingProblem:
    """The instance as the readiness model reads it: node types, pod groups, and the queue
    (the pods in order; the benchmark creates its Deployments one after another)."""
    index = {vector: g for g, (vector, _) in enumerate(model.groups)}
    everywhere = frozenset(range(model.types))
    return PackingProblem(
        tuple(BinType(model.rooms[t], model.prices[t], (0, 0, 0)) for t in range(model.types)),
        tuple(PodGroup(vector, count, everywhere) for vector, count in model.groups),
        (),
        tuple(
            index[tuple(pod_requests(p, include_pod_count=True).milli(n) for n in NAMES)]
            for p in pods
        ),
        None,
        extras.daemon_vector(),
    )


def _bound(model: _Compact, result: Any, free: Sequence[tuple[int, int, int]]) -> float:
    bound = getattr(result, "mip_dual_bound", None)
    paid = model.types
    floor = _fractional(model.groups, model.rooms[:paid], model.prices[:paid], free)
    return max(float(bound or 0.0), floor)


def _fractional(
    groups: Sequence[tuple[tuple[int, ...], int]],
    rooms: Sequence[tuple[int, ...]],
    prices: Sequence[float],
    free: Sequence[tuple[int, int, int]] = (),
) -> float:
    """No packing costs less than the dearest resource, less what existing nodes have free,
    at its cheapest rate (limits only make it dearer)."""
    bound = 0.0
    for i in range(3):
        total = sum(vector[i] * count for vector, count in groups) - sum(f[i] for f in free)
        best = max(room[i] / price for room, price in zip(rooms, prices, strict=True))
        bound = max(bound, total / best)
    return bound


@contextlib.contextmanager
def _quiet_stdout() -> Iterator[None]:
    """HiGHS's presolve can print a debug line straight to file descriptor 1; keep ``--json``
    output one object."""
    sys.stdout.flush()
    saved = os.dup(1)
    with open(os.devnull, "w") as sink:
        os.dup2(sink.fileno(), 1)
        try:
            yield
        finally:
            os.dup2(saved, 1)
            os.close(saved)
