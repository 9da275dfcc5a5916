"""How kube-scheduler may realize a packing plan: where its pods really land, and what it strands.

Why it exists: the solver plans which pod goes on which new node, but kube-scheduler does not
read the plan (unless the controller nominates the nodes, KEP-5278: ``plans_nominated`` in
``packing.py``). It takes pending pods in its queue order (priority descending, then creation
time) and puts each on the feasible node its default profile scores highest: NodeResourcesFit's
LeastAllocated plus NodeResourcesBalancedAllocation, weight 1 each, the emptiest node first. So
small pods queued first spread over every ready node, including the one planned for a big pod,
and the big pod is stranded: another launch. The re-packing optimizer weighs each plan by its
worst realization here (``packing.py``).

A *realization*: the new nodes become Ready in some sequence of batches (all together, one at a
time in any order, or any mix); after each batch every pending pod, in queue order, goes to the
best scored ready node with room (ties, which kube breaks at random, are every way). A plan
strands pods when some realization leaves them pending once every node is Ready.

Realizations are explored depth first with a counted work budget (pod placements), pruning
states already seen, so small plans are checked exhaustively; past the budget, and for larger
plans, a fixed set of realizations stands in: all nodes together, one at a time largest and
smallest first, and seeded random batch sequences and tie-breaks. The work is counted, never
timed: the same plan gives the same verdict on any machine.

Left out (``docs/scheduling.md``): existing nodes (kube-scheduler fills a Ready node's room
with whatever comes first, so the re-packing plans them only with nominations),
PodTopologySpread's system default spreading of ReplicaSets' pods (it spreads further, as
LeastAllocated does), the per-container defaults of request-less pods beyond the pod's own
requests, and a node becoming Ready in the middle of a pass.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

Vector = tuple[int, ...]

EXHAUSTIVE_WORK: Final = 4_000
"""Pod placements the exhaustive search may make before the sampled realizations stand in."""
EXHAUSTIVE_NODES: Final = 8
"""Plans of more nodes go straight to the sampled realizations (they would exhaust the work)."""
SAMPLED: Final = 8
"""Seeded random realizations tried besides the fixed ones when the search is not exhaustive."""
MAX_SCORE: Final = 100
# LeastAllocated counts a pod without a CPU or memory request as asking for these (milli-units).
NONZERO_CPU: Final = 100
NONZERO_MEMORY: Final = 200 * 1024 * 1024 * 1000
CPU: Final = 0  # the solver's resource vectors start cpu, memory, pods
MEMORY: Final = 1


def queue_runs(queue: Sequence[int]) -> tuple[tuple[int, int], ...]:
    """The queue as ``(group, count)`` runs: consecutive identical pods are placed alike."""
    runs: list[tuple[int, int]] = []
    for group in queue:
        if runs and runs[-1][0] == group:
            runs[-1] = (group, runs[-1][1] + 1)
        else:
            runs.append((group, 1))
    return tuple(runs)


@dataclass(frozen=True)
class SchedulerView:
    """The node types and pending pods of one packing problem, as kube-scheduler scores them.

    ``rooms[t]`` is what pods may use of a node of type ``t`` (allocatable less the DaemonSet
    pods, ``daemon``), a pod of group ``g`` requests ``vectors[g]`` and may only run on the
    types in ``allowed[g]``; ``runs`` is the queue (``queue_runs``).
    """

    rooms: tuple[Vector, ...]
    vectors: tuple[Vector, ...]
    allowed: tuple[frozenset[int], ...]
    runs: tuple[tuple[int, int], ...]
    daemon: Vector | None = None
    # Derived: each type's allocatable, and each group's requests as LeastAllocated counts them.
    allocatable: tuple[Vector, ...] = field(init=False, repr=False, compare=False)
    nonzero: tuple[tuple[int, int], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        base = self.daemon or (0,) * len(self.rooms[0])
        allocatable = tuple(
            tuple(r + d for r, d in zip(room, base, strict=True)) for room in self.rooms
        )
        nonzero = tuple((v[CPU] or NONZERO_CPU, v[MEMORY] or NONZERO_MEMORY) for v in self.vectors)
        object.__setattr__(self, "allocatable", allocatable)
        object.__setattr__(self, "nonzero", nonzero)

    def score(self, kind: int, used: Vector, nonzero: tuple[int, int], group: int) -> int:
        """The default profile's resource scores for one more pod of ``group`` on a node of
        ``kind`` whose pods use ``used`` (``nonzero``: their requests as LeastAllocated counts
        them): LeastAllocated plus BalancedAllocation, 0..100 each."""
        base = self.daemon or (0,) * len(used)
        node = self.allocatable[kind]
        vector = self.vectors[group]
        cpu_alloc, memory_alloc = node[CPU], node[MEMORY]
        total = weights = 0
        for requested, alloc in (
            (base[CPU] + nonzero[0] + self.nonzero[group][0], cpu_alloc),
            (base[MEMORY] + nonzero[1] + self.nonzero[group][1], memory_alloc),
        ):
            if alloc > 0:
                weights += 1
                if requested <= alloc:
                    total += (alloc - requested) * MAX_SCORE // alloc
        fit = total // weights if weights else 0
        if not vector[CPU] and not vector[MEMORY]:
            return fit  # best-effort pods skip BalancedAllocation
        if cpu_alloc <= 0 or memory_alloc <= 0:
            return fit + MAX_SCORE
        cpu = min(1.0, (base[CPU] + used[CPU] + vector[CPU]) / cpu_alloc)
        memory = min(1.0, (base[MEMORY] + used[MEMORY] + vector[MEMORY]) / memory_alloc)
        return fit + int((1 - abs(cpu - memory) / 2) * MAX_SCORE)


@dataclass(frozen=True)
class Stranding:
    """A realization that leaves pods pending: its batches (node types becoming Ready together,
    in turn) and how many pods of each group it strands."""

    batches: tuple[tuple[int, ...], ...]
    left: tuple[int, ...]


class _OutOfWork(Exception):
    pass


@dataclass
class _Node:
    kind: int
    used: Vector
    nonzero: tuple[int, int]


def strandings(
    view: SchedulerView,
    kinds: Sequence[int],
    *,
    seed: int = 0,
    work: int = EXHAUSTIVE_WORK,
) -> list[Stranding]:
    """One realization per distinct set of stranded pods, for new nodes of types ``kinds``.

    Exhaustive within ``work`` pod placements; past it, the fixed and sampled realizations
    (module docstring) are added to what the search found.
    """
    found: dict[tuple[int, ...], Stranding] = {}
    waiting = [0] * len(view.rooms)
    for kind in kinds:
        waiting[kind] += 1
    pods = sum(count for _, count in view.runs)
    # Every realization places every pod at least once: past the budget before it starts.
    if len(kinds) <= EXHAUSTIVE_NODES and pods < work:
        explorer = _Explorer(view, work)
        try:
            explorer.search(tuple(waiting), found)
            return list(found.values())
        except _OutOfWork:
            pass
    rng = random.Random(seed)
    strategies: list[tuple[_BatchRule, _TieRule]] = [
        (_together, _first),
        (_one_by_one(view, largest=True), _first),
        (_one_by_one(view, largest=False), _first),
    ]
    for _ in range(SAMPLED):
        strategies.append((_random_batches(rng), _random_tie(rng)))
    for batch_rule, tie_rule in strategies:
        outcome = _simulate(view, tuple(waiting), batch_rule, tie_rule)
        if outcome is not None:
            _record(view, outcome, found)
    return list(found.values())


_BatchRule = Callable[[tuple[int, ...]], tuple[int, ...]]
_TieRule = Callable[[int], int]


def _together(waiting: tuple[int, ...]) -> tuple[int, ...]:
    return waiting


def _first(options: int) -> int:
    return 0


def _one_by_one(view: SchedulerView, *, largest: bool) -> _BatchRule:
    order = sorted(range(len(view.rooms)), key=lambda t: view.rooms[t], reverse=largest)

    def rule(waiting: tuple[int, ...]) -> tuple[int, ...]:
        kind = next(t for t in order if waiting[t])
        return tuple(int(t == kind) for t in range(len(waiting)))

    return rule


def _random_batches(rng: random.Random) -> _BatchRule:
    def rule(waiting: tuple[int, ...]) -> tuple[int, ...]:
        while True:
            batch = tuple(rng.randint(0, n) if n else 0 for n in waiting)
            if any(batch):
                return batch

    return rule


def _random_tie(rng: random.Random) -> _TieRule:
    return rng.randrange


def _record(
    view: SchedulerView,
    outcome: tuple[tuple[tuple[int, ...], ...], list[int]],
    found: dict[tuple[int, ...], Stranding],
) -> None:
    batches, pending = outcome
    if not any(pending):
        return
    left = [0] * len(view.vectors)
    for (group, _), count in zip(view.runs, pending, strict=True):
        left[group] += count
    found.setdefault(tuple(left), Stranding(batches, tuple(left)))


def _batch_options(waiting: tuple[int, ...]) -> int:
    count = 1
    for n in waiting:
        count *= n + 1
    return count - 1


def _batch(waiting: tuple[int, ...], index: int) -> tuple[int, ...]:
    """The ``index``-th non-empty batch of ``waiting`` (mixed radix, counts per type)."""
    index += 1
    batch = []
    for n in waiting:
        batch.append(index % (n + 1))
        index //= n + 1
    return tuple(batch)


class _Explorer:
    """Depth-first over every realization, by replaying choice prefixes (iterative: plans hold
    thousands of pods), pruning at batch boundaries states already explored."""

    def __init__(self, view: SchedulerView, work: int) -> None:
        self.view = view
        self.work = work
        self.seen: set[object] = set()
        self.prefix: list[int] = []
        self.choices: list[tuple[int, int]] = []  # (chosen, options) at each choice point

    def search(self, waiting: tuple[int, ...], found: dict[tuple[int, ...], Stranding]) -> None:
        while True:
            self.choices = []
            outcome = _simulate(
                self.view, waiting, self.batch_rule, self.choose, new_state=self.new_state
            )
            if outcome is not None:
                _record(self.view, outcome, found)
            choices = self.choices
            while choices and choices[-1][0] + 1 >= choices[-1][1]:
                choices.pop()
            if not choices:
                return
            self.prefix = [chosen for chosen, _ in choices[:-1]] + [choices[-1][0] + 1]

    def choose(self, options: int) -> int:
        position = len(self.choices)
        chosen = self.prefix[position] if position < len(self.prefix) else 0
        self.choices.append((chosen, options))
        return chosen

    def batch_rule(self, waiting: tuple[int, ...]) -> tuple[int, ...]:
        return _batch(waiting, self.choose(_batch_options(waiting)))

    def new_state(self, key: object, placed: int) -> bool:
        """Whether the search goes on from this state (``placed``: pods the last pass placed,
        counted against the work budget)."""
        self.work -= placed + 1
        if self.work < 0:
            raise _OutOfWork
        if key is None or len(self.choices) < len(self.prefix):
            return True  # replaying the way to a state already explored
        if key in self.seen:
            return False
        self.seen.add(key)
        return True


def _simulate(
    view: SchedulerView,
    waiting_types: tuple[int, ...],
    batch_rule: _BatchRule,
    tie_rule: _TieRule,
    *,
    new_state: Callable[[object, int], bool] | None = None,
) -> tuple[tuple[tuple[int, ...], ...], list[int]] | None:
    """One realization: the batches it made Ready and what stays pending per run (``None``
    when ``new_state`` says the search was here before)."""
    ready: list[_Node] = []
    waiting = list(waiting_types)
    pending = [count for _, count in view.runs]
    batches: list[tuple[int, ...]] = []
    zero = (0,) * len(view.rooms[0])
    placed = 0
    while any(waiting):
        if new_state is not None:
            key = (
                tuple(sorted((n.kind, n.used, n.nonzero) for n in ready)),
                tuple(waiting),
                tuple(pending),
            )
            if not new_state(key, placed):
                return None
        batch = batch_rule(tuple(waiting))
        arrived: list[_Node] = []
        for kind, count in enumerate(batch):
            waiting[kind] -= count
            arrived.extend(_Node(kind, zero, (0, 0)) for _ in range(count))
        ready.extend(arrived)
        batches.append(tuple(k for k, n in enumerate(batch) for _ in range(n)))
        # A pod still pending fitted no node ready before, and those only filled up since:
        # only the nodes just arrived can take it.
        placed = _pass(view, arrived, pending, tie_rule, distinct=new_state is not None)
    if new_state is not None:
        new_state(None, placed)  # only counts the last pass's work
    return tuple(batches), pending


def _pass(
    view: SchedulerView,
    ready: list[_Node],
    pending: list[int],
    tie_rule: _TieRule,
    *,
    distinct: bool,
) -> int:
    """Every pending pod, in queue order, onto the best scored node of ``ready`` with room;
    returns the pods placed. A pod that fits nowhere stays, and so do the rest of its run.
    Ties go to ``tie_rule``, among the tied nodes as kube-scheduler picks (uniformly), or with
    ``distinct`` among the tied nodes that differ (the exhaustive search's branches)."""
    placed = 0
    for r, (group, _) in enumerate(view.runs):
        if not pending[r]:
            continue
        vector = view.vectors[group]
        allowed = view.allowed[group]
        nonzero = view.nonzero[group]
        candidates = [
            n for n in ready if n.kind in allowed and _fits(n.used, vector, view.rooms[n.kind])
        ]
        scores = [view.score(n.kind, n.used, n.nonzero, group) for n in candidates]
        while pending[r] and candidates:
            best = max(scores)
            chosen = scores.index(best)
            if tie_rule is not _first and scores.count(best) > 1:
                tied = [i for i, s in enumerate(scores) if s == best]
                if distinct:
                    # Nodes alike (type and load) lead to the same realizations: one choice.
                    alike: dict[tuple[int, Vector], int] = {}
                    for i in tied:
                        alike.setdefault((candidates[i].kind, candidates[i].used), i)
                    tied = list(alike.values())
                chosen = tied[tie_rule(len(tied))] if len(tied) > 1 else tied[0]
            node = candidates[chosen]
            node.used = tuple(u + v for u, v in zip(node.used, vector, strict=True))
            node.nonzero = (node.nonzero[0] + nonzero[0], node.nonzero[1] + nonzero[1])
            pending[r] -= 1
            placed += 1
            if _fits(node.used, vector, view.rooms[node.kind]):
                scores[chosen] = view.score(node.kind, node.used, node.nonzero, group)
            else:
                del candidates[chosen]
                del scores[chosen]
    return placed


def _fits(used: Vector, vector: Vector, room: Vector) -> bool:
    return all(u + v <= r for u, v, r in zip(used, vector, room, strict=True))
