"""The re-packing problem and its plans as plain numbers (what ``packing.optimize`` solves).

Why apart from ``packing.py``: the adapter that builds problems from the solver's claims
(``repack.py``), the optimizer, and the tests and benchmark that build problems by hand all
speak these types; the optimizer's machinery need not come with them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

Vector = tuple[int, ...]


@dataclass(frozen=True)
class BinType:
    """An instance type a node of the plan may be: what pods may use of it and its price.

    Or an existing node (``available`` 1): the room it has left, for nothing, at most once.
    """

    room: Vector  # allocatable minus the DaemonSet pods that would run there
    price: float  # its cheapest compatible available offering
    limit_use: Vector  # what one such node counts against the NodePool's limits
    available: int | None = None  # how many the plan may use; None: as many as it buys


@dataclass(frozen=True)
class PodGroup:
    """Identical pods: same requests, same scheduling class, so the same allowed types."""

    vector: Vector
    count: int
    types: frozenset[int]  # indices of the BinTypes it may run on


@dataclass(frozen=True)
class Bin:
    """One node of a plan: its type and how many pods of each group it holds."""

    type: int
    counts: tuple[int, ...]


@dataclass(frozen=True)
class PackingProblem:
    """Pods that may share any node of ``types``, and the plan greedy made for them.

    ``queue`` is the group of every pod in kube-scheduler's queue order (priority descending,
    then creation time), for the readiness model; ``limit`` what the plan's nodes together may
    count against the NodePool's limits (``None``: unlimited); ``daemon`` what the DaemonSet
    pods on every node request (kube-scheduler's scores count it; ``None``: nothing).
    """

    types: tuple[BinType, ...]
    groups: tuple[PodGroup, ...]
    greedy: tuple[Bin, ...]
    queue: tuple[int, ...]
    limit: Vector | None = None
    daemon: Vector | None = None


@dataclass
class PackingOutcome:
    """What ``optimize`` decided. ``bins`` is the plan to use; ``None``: keep greedy's.

    ``status``: ``improved``, ``not-cheaper`` (greedy is optimal or nothing cheaper was found),
    ``not-robust`` (every cheaper plan found strands a pod), ``budget-exhausted`` (the work
    budget ran out before any cheaper plan; the same every time), ``timed-out`` (the CPU-time
    safety net struck: a machine too loaded to finish), ``too-large``, ``disabled``, or (set by
    ``repack.py``) ``voided``: the plan was no cheaper once built as NodeClaims within the
    NodePool's limits. ``packing_summary.py`` words them for the user.
    ``rejected`` counts cheaper plans the readiness rule turned down (their worst realization
    no cheaper than greedy's); ``worst`` is the used plan's worst realization cost (its cost
    plus the nodes the pods its worst realization strands would force, ``realization.py``).
    """

    status: str
    greedy_cost: float
    bins: tuple[Bin, ...] | None = None
    cost: float | None = None
    rejected: int = 0
    lower_bound: float | None = None
    worst: float | None = None


def plan_cost(problem: PackingProblem, bins: Sequence[Bin]) -> float:
    return sum(problem.types[b.type].price for b in bins)


def fits(total: Vector, room: Vector) -> bool:
    return all(used <= available for used, available in zip(total, room, strict=True))


def load(problem: PackingProblem, counts: Sequence[int]) -> Vector:
    """What ``counts`` pods of each group request together."""
    total = [0] * len(problem.types[0].room)
    for group, count in zip(problem.groups, counts, strict=True):
        if count:
            for i, value in enumerate(group.vector):
                total[i] += value * count
    return tuple(total)


def cheapest_type(problem: PackingProblem, counts: Sequence[int]) -> int | None:
    """The cheapest type to buy that every group present may run on and holds them all."""
    total = load(problem, counts)
    best: int | None = None
    for index, kind in enumerate(problem.types):
        if kind.available is not None or not fits(total, kind.room):
            continue
        if any(c and index not in g.types for g, c in zip(problem.groups, counts, strict=True)):
            continue
        if best is None or kind.price < problem.types[best].price:
            best = index
    return best


def launch_type(problem: PackingProblem, node: Bin) -> int:
    """The type ``node`` is launched as: the cheapest that holds its pods (what its NodeClaim
    lists first), or the existing node it is."""
    if problem.types[node.type].available is not None:
        return node.type
    cheapest = cheapest_type(problem, node.counts)
    return node.type if cheapest is None else cheapest


def fewest_nodes(problem: PackingProblem, bins: Sequence[Bin]) -> list[Bin]:
    """``bins`` with new nodes merged wherever one node holds several for no more than they
    cost together, until none is left: the plan costs no more, has fewer nodes, and stays
    within the NodePool's limits. Existing nodes (``available``) are never merged.

    Why: on a catalog priced by the vCPU, plans of any mix of sizes cost the same and the
    optimizer returns whichever it meets first (11 NodeClaims or 5 for the same pods and
    price). A user expects the fewer nodes (fewer DaemonSet pods, fewer objects, less for the
    controller to write), and one node holding what several held strands no pod they did not.
    For each type, dearest first, the dearest nodes cheaper than it are gathered while their
    pods fit (first fit decreasing) until they cost as much as it."""
    nodes = list(bins)
    loads = [load(problem, b.counts) for b in nodes]
    order = sorted(range(len(problem.types)), key=lambda t: (-problem.types[t].price, t))
    merged = True
    while merged:
        merged = False
        for target in order:
            kind = problem.types[target]
            if kind.available is not None:
                continue
            while (found := _gather(problem, nodes, loads, target)) is not None:
                counts = tuple(map(sum, zip(*(nodes[i].counts for i in found), strict=True)))
                cheapest = cheapest_type(problem, counts)
                rest = [b for i, b in enumerate(nodes) if i not in found]
                node = Bin(target if cheapest is None else cheapest, counts)
                if not _within_limit(problem, [*rest, node]):
                    break
                loads = [lo for i, lo in enumerate(loads) if i not in found]
                loads.append(load(problem, counts))
                nodes = [*rest, node]
                merged = True
    return nodes


def _gather(
    problem: PackingProblem, nodes: Sequence[Bin], loads: Sequence[Vector], target: int
) -> set[int] | None:
    """Two or more of ``nodes``, none existing, that a node of type ``target`` holds and
    that cost at least as much as it; ``None`` if there are none such."""
    kind = problem.types[target]
    types = problem.types
    candidates = sorted(
        (
            i
            for i, b in enumerate(nodes)
            if types[b.type].available is None
            and types[b.type].price < kind.price
            and all(
                not c or target in g.types for g, c in zip(problem.groups, b.counts, strict=True)
            )
        ),
        key=lambda i: (-types[nodes[i].type].price, i),
    )
    found: set[int] = set()
    total = tuple(0 for _ in kind.room)
    spent = 0.0
    for i in candidates:
        more = tuple(a + b for a, b in zip(total, loads[i], strict=True))
        if not fits(more, kind.room):
            continue
        found.add(i)
        total, spent = more, spent + types[nodes[i].type].price
        if spent >= kind.price * (1 - 1e-9):
            return found if len(found) > 1 else None
    return None


def _within_limit(problem: PackingProblem, bins: Sequence[Bin]) -> bool:
    if problem.limit is None:
        return True
    used = [0] * len(problem.limit)
    for b in bins:
        for d, value in enumerate(problem.types[b.type].limit_use):
            used[d] += value
    return all(u <= limit for u, limit in zip(used, problem.limit, strict=True))


def fit_count(vector: Vector, room: Vector) -> int:
    """How many pods of ``vector`` fit in ``room`` (a pod always takes a pod slot)."""
    counts = [available // used for used, available in zip(vector, room, strict=True) if used > 0]
    return max(min(counts, default=0), 0)


def trimmed(problem: PackingProblem, columns: Sequence[Bin], chosen: Sequence[int]) -> list[Bin]:
    """The nodes of a solution choosing ``chosen[j]`` of pattern ``columns[j]``: patterns cover
    pods at least once, so trim the excess, then launch each node as ``launch_type`` says."""
    nodes: list[tuple[int, list[int]]] = [
        (column.type, list(column.counts))
        for column, n in zip(columns, chosen, strict=True)
        for _ in range(n)
    ]
    # The dearest nodes keep their pods; the excess comes off the cheapest first.
    nodes.sort(key=lambda node: -problem.types[node[0]].price)
    for g, group in enumerate(problem.groups):
        excess = sum(counts[g] for _, counts in nodes) - group.count
        for _, counts in reversed(nodes):
            if excess <= 0:
                break
            take = min(excess, counts[g])
            counts[g] -= take
            excess -= take
    result = []
    for kind, counts in nodes:
        if any(counts):
            node = Bin(kind, tuple(counts))
            result.append(Bin(launch_type(problem, node), node.counts))
    return result


def sub_problem(
    problem: PackingProblem,
    fixed: Sequence[Bin],
    counts: Sequence[int],
    keep: Sequence[int],
    rest: Sequence[Bin],
) -> PackingProblem:
    """The pods ``counts`` leaves (groups ``keep``) with ``fixed`` bought: limits and existing
    nodes less what they use, ``rest`` (restricted to ``keep``) as its greedy plan."""
    limit = problem.limit
    if limit is not None:
        limit = tuple(
            value - sum(problem.types[b.type].limit_use[d] for b in fixed)
            for d, value in enumerate(limit)
        )
    used = [sum(1 for b in fixed if b.type == t) for t in range(len(problem.types))]
    types = tuple(
        kind
        if kind.available is None
        else dataclasses.replace(kind, available=kind.available - used[t])
        for t, kind in enumerate(problem.types)
    )
    return PackingProblem(
        types,
        tuple(dataclasses.replace(problem.groups[i], count=counts[i]) for i in keep),
        tuple(Bin(b.type, tuple(b.counts[i] for i in keep)) for b in rest),
        (),
        limit,
        problem.daemon,
    )
