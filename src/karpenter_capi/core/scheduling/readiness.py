"""Whether kube-scheduler can realize a packing plan, whatever order its nodes become ready in.

Why it exists: the solver plans which pod goes on which new node, but kube-scheduler does not
read the plan. Nodes become Ready one at a time, and pending pods go, in the scheduling queue's
order (priority descending, then creation time), to whichever ready node has room. A plan with
no slack can then strand a big pod behind small ones that filled the node meant for it, and
the stranded pod costs another launch. The re-packing optimizer (``packing.py``) accepts a plan
only if no order of its nodes strands a pod here.

The model: for each order of the new nodes, each node becomes ready in turn, and every pod
still pending, in queue order, goes first-fit to the ready nodes in the order they became
ready. A plan strands a pod when some order leaves one pending after every node is ready.
Every order is tried up to ``EXHAUSTIVE_NODES`` nodes (orders of identical types are one);
beyond, the smallest-first and largest-first orders and a seeded sample. It ignores existing
nodes (the pods were planned on new ones because the existing ones had no room) and
kube-scheduler's scoring, which spreads rather than fills first: first-fit is the stingier.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Final

Vector = tuple[int, ...]

EXHAUSTIVE_NODES: Final = 6
SAMPLED_ORDERS: Final = 64


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
class Stranding:
    """A readiness order that leaves pods pending, and how many of each group."""

    order: tuple[int, ...]
    left: tuple[int, ...]


def strandings(
    rooms: Sequence[Vector],
    kinds: Sequence[int],
    vectors: Sequence[Vector],
    allowed: Sequence[frozenset[int]],
    runs: Sequence[tuple[int, int]],
    *,
    seed: int = 0,
) -> Iterator[Stranding]:
    """Each order (of those described above) that strands pods, and what it strands.

    Node ``n`` has room ``rooms[n]`` and is of type ``kinds[n]``; a pod of group ``g``
    requests ``vectors[g]`` and may only run on the types in ``allowed[g]``.
    """
    for order in _orders(rooms, kinds, seed):
        pending = _pending(order, rooms, kinds, vectors, allowed=allowed, runs=runs)
        if any(pending):
            left = [0] * len(vectors)
            for (group, _), count in zip(runs, pending, strict=True):
                left[group] += count
            yield Stranding(tuple(order), tuple(left))


def _orders(rooms: Sequence[Vector], kinds: Sequence[int], seed: int) -> Iterator[list[int]]:
    nodes = list(range(len(kinds)))
    if len(nodes) <= EXHAUSTIVE_NODES:
        seen: set[tuple[int, ...]] = set()
        for order in itertools.permutations(nodes):
            signature = tuple(kinds[n] for n in order)
            if signature not in seen:
                seen.add(signature)
                yield list(order)
        return
    by_size = sorted(nodes, key=lambda n: (rooms[n], n))
    yield by_size
    yield by_size[::-1]
    rng = random.Random(seed)
    for _ in range(SAMPLED_ORDERS):
        shuffled = list(nodes)
        rng.shuffle(shuffled)
        yield shuffled


def _pending(
    order: Sequence[int],
    rooms: Sequence[Vector],
    kinds: Sequence[int],
    vectors: Sequence[Vector],
    *,
    allowed: Sequence[frozenset[int]],
    runs: Sequence[tuple[int, int]],
) -> list[int]:
    pending = [count for _, count in runs]
    waiting = list(range(len(runs)))
    for node in order:
        # A pod still pending did not fit any node ready before, and those only filled up
        # since: first-fit can only put it on the node that just became ready.
        room = list(rooms[node])
        kind = kinds[node]
        still = []
        for r in waiting:
            group = runs[r][0]
            vector = vectors[group]
            if kind in allowed[group]:
                fit = min((room[i] // v for i, v in enumerate(vector) if v > 0), default=0)
                take = min(fit, pending[r])
                if take > 0:
                    for i, v in enumerate(vector):
                        room[i] -= v * take
                    pending[r] -= take
            if pending[r]:
                still.append(r)
        waiting = still
        if not waiting:
            break
    return pending
