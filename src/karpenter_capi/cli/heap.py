"""The controller's heap and CPython's cyclic collector: what survived a full collection is left
out of the next ones, and the whole heap is looked at again only once it has doubled.

Why: a controller's heap is mostly its informers' caches, plain JSON trees that refcounting
frees the moment a newer version replaces them. CPython's collector cannot tell churn from
growth: it runs a full collection, walking every tracked object while every thread waits on
the GIL, whenever the objects promoted to its oldest generation since the last one reach a
quarter of those that survived it, and each watch event promotes a fresh tree. Serving 100
workload clusters (issue 28, docs/benchmarks.md), a wave of pod events brought a full
collection every 5 to 10 seconds, each stopping the controller for 1.2 to 1.8 seconds: the
decisions that fell in one waited for it. Here a full collection freezes what survived it
(``gc.freeze``: the permanent generation, which later collections skip), so the next ones walk
only what came since. Frozen objects are still freed by refcounting; what freezing hides is a
cycle among them that became garbage later (a fleet member's controllers after its Cluster
left, say). So when the heap has grown by ``GROWTH`` since the last complete look (pymalloc's
allocated blocks, which leaked cycles count in), the frozen objects are given back
(``gc.unfreeze``) and the next full collection walks everything: a heap that does not grow is
walked whole only at start-up, one that grows is walked whole each time it doubles, and garbage
hidden by a freeze is bounded by the heap's own size, the bound Go's collector keeps by default
(``GOGC=100``: the heap may double between collections). Such garbage is rare: at 100 clusters
a whole walk found a few thousand objects to collect in a heap of over a million.

Only where the command owns its process (``cli.run``): a test or an embedding program keeps
its collector as it is.
"""

from __future__ import annotations

import gc
import sys
from typing import Any, Final

GEN0_THRESHOLD: Final = 10_000
"""Allocations between young-generation collections once started (CPython's default: 700)."""

_OLDEST: Final = 2
"""CPython's oldest generation: a collection of it is a full collection."""

GROWTH: Final = 1.0
"""How much the heap grows (in allocated blocks) before a full collection walks all of it."""


class TenuredHeap:
    """Freezes what each full collection leaves; unfreezes once the heap grew by ``growth``."""

    def __init__(self, growth: float = GROWTH) -> None:
        if growth <= 0:
            raise ValueError(f"heap growth must be positive, not {growth}")
        self._growth = growth
        self._base = 0
        self._whole_next = False
        self.complete_walks = 0
        """Full collections that walked the whole heap (start-up's included)."""
        self.partial_walks = 0
        """Full collections that walked only what came since the last freeze."""

    def install(self) -> None:
        """Collect and freeze what start-up left, then tend every later full collection."""
        gc.collect()
        self._frozen_after_whole()
        gc.callbacks.append(self._on_collection)

    def uninstall(self) -> None:
        """Stop tending collections and give the frozen objects back to the collector."""
        if self._on_collection in gc.callbacks:
            gc.callbacks.remove(self._on_collection)
        gc.unfreeze()

    def _frozen_after_whole(self) -> None:
        gc.freeze()
        self._base = sys.getallocatedblocks()
        self.complete_walks += 1

    def _on_collection(self, phase: str, info: dict[str, Any]) -> None:
        # "stop" comes once the collection is over and its lists are whole again, so merging
        # them into the permanent generation here is as safe as a ``gc.freeze()`` anywhere.
        if phase != "stop" or info.get("generation") != _OLDEST:
            return
        if self._whole_next:
            self._whole_next = False
            self._frozen_after_whole()
            return
        gc.freeze()
        self.partial_walks += 1
        if sys.getallocatedblocks() > self._base * (1 + self._growth):
            gc.unfreeze()  # the next full collection walks the whole heap
            self._whole_next = True


def settle_heap() -> TenuredHeap:
    """Once started: what start-up made is collected once and frozen, the young generation is
    collected less often, and every full collection from then on is tended (``TenuredHeap``).

    Start-up (imports, plugins, the clients' generated models) leaves about 120,000 long-lived
    objects that every full collection would otherwise walk again for nothing: 3 full
    collections cost 0.35 CPU-seconds of a 1,000-pod burst (docs/benchmarks.md)."""
    heap = TenuredHeap()
    heap.install()
    gc.set_threshold(GEN0_THRESHOLD, *gc.get_threshold()[1:])
    return heap
