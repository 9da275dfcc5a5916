"""The cyclic garbage collector's policy for a controller that runs for months: what survives
a collection is frozen, and given back for a whole walk at a bounded rate.

Why: a controller's heap is its informers' caches, millions of GC-tracked containers (the
orjson-decoded pods, Nodes and NodeClaims, the objects parsed from them) that live for minutes
or for good. CPython's collector (3.11, ``Modules/gcmodule.c``) walks each new object in a
young collection, again in a middle one, then in every full collection, each of which walks
the whole oldest generation while holding the interpreter: every thread of every served
cluster waits. Measured in ``run --fleet`` at 100 clusters, one scale-up wave: 3 full
collections of about 0.9 CPU-seconds each (up to 1.8 s of pause) over 1.2-1.5 million objects,
freeing 4,930 objects in all; with those gone (survivors of middle collections frozen), 29
middle collections of 3.3 CPU-seconds and pauses up to 0.48 s, each overlapping one of the
slowest decisions, for 34,157 objects found (docs/benchmarks.md). Nearly all the cyclic garbage
was two cycles of our own, an error kept with its traceback, whose frames held it (and all
they referenced) back; broken, a 20-cluster wave leaves none to the collector.

What ``CollectorPolicy.install`` sets up (``karpenter-capi run``, where it owns its process):

- start-up's objects collected, then frozen (``gc.freeze``: every tracked object moves to the
  permanent generation, which no collection walks; O(1)), and the young threshold raised from
  700 to ``YOUNG_THRESHOLD`` allocations;
- after every collection (``--gc-policy survivors``; ``middle-survivors``: every middle or
  full one, a ``gc.callbacks`` hook), its survivors frozen too. So each long-lived object is
  walked once, by the young collection after it was made, and never again. ``gc.freeze`` also
  zeroes every generation's counter (3.11), so no middle collection comes (with
  ``middle-survivors``: none of the oldest, whose counter counts middle collections up to its
  threshold of 10). A young collection still walks all that was made since the last one and
  is alive: CPython 3.11 counts allocations less deallocations of any tracked object, frozen
  ones included, so while the informers replace cached objects the young list grows well
  past the threshold (289,393 objects at a 100-cluster wave's end);
- with ``--gc-policy unwalked``, at the start of every young or middle collection, all it
  would walk frozen first (the hook's ``start`` phase), so it walks nothing. In a 100-cluster
  wave the young collections found no garbage at all, and each held the interpreter for about
  13.5 ms of CPU (35 ms of wall on loaded cores); only the whole walks below look for cycles.

The risk, and its bound: a frozen object is still freed by reference counting when its last
reference goes, but frozen *cyclic* garbage (objects that only reference each other) is never
collected: a cycle still reachable at its young collection that becomes garbage after it.
A served cluster's controllers, informers and bound-method callbacks reference each other, so a
fleet member that stops (its Cluster deleted, paused or handed to another replica, its
kubeconfig rotated) is freed only by a collection that walks it; other cycles are none to a
few objects a wave (measured: a whole walk after three 20-cluster waves freed 0 objects, after
a 100-cluster wave 97; before the two cycles were broken, under ``middle-survivors``, 1,423 and
5,226). So the frozen heap is given back (``gc.unfreeze``: it rejoins the oldest generation,
and nothing is frozen until the next full collection has walked all of it and freed what is
garbage; CPython's own rule brings that one, from the 11th middle collection on once what they
promoted since the last full one exceeds a quarter of what that one left,
``long_lived_pending > long_lived_total / 4``):

- when a fleet member stops (``request_whole_walk``; members stopping before that collection
  are covered by it), and
- once ``WHOLE_WALK_EVERY`` seconds have passed since the last whole walk, whatever happened,

never sooner than ``MIN_WHOLE_WALK_GAP`` seconds after the last whole walk (a request within
the gap is served once it has passed): a rotation of many members at once, or a flapping one,
brings one whole walk, not one each.

Time is the injected ``Clock`` (read only in the hook and in ``request_whole_walk``).
``--gc-policy`` (``cli/run.py``) chooses this (``survivors``), the same freezing only what
middle and full collections leave (``middle-survivors``), start-up's freeze alone
(``startup``) or CPython's defaults (``off``).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

from karpenter_capi.core.clock import Clock

YOUNG_THRESHOLD: Final = 10_000
"""Net allocations of tracked objects between young collections (CPython's default: 700)."""
WHOLE_WALK_EVERY: Final = 3600.0
"""Seconds after which the frozen heap is given back for a whole walk even if nothing asked."""
MIN_WHOLE_WALK_GAP: Final = 60.0
"""Seconds at least between two whole walks, however many members stop meanwhile."""

POLICIES: Final = ("survivors", "unwalked", "middle-survivors", "startup", "off")
"""``--gc-policy``'s choices: this module's policy, the same with what a collection would walk
frozen before it walks it, the same freezing only what middle and full collections leave,
start-up frozen only, CPython's defaults."""

_lock = threading.Lock()
_installed: CollectorPolicy | None = None


class CollectorPolicy:
    """The collector's settings for a long-running controller (see the module docstring).

    ``freeze_after``: the youngest generation whose collections' survivors are frozen (0,
    every collection's; 1, ``--gc-policy middle-survivors``, those of middle and full ones).
    ``freeze_survivors=False`` keeps only the start-up part (collect, freeze, young
    threshold): the policy of ``--gc-policy startup``. ``freeze_unwalked``: a young or middle
    collection's objects are frozen as it starts, so it walks nothing, and only whole walks
    look for cycles (``--gc-policy unwalked``)."""

    def __init__(
        self,
        clock: Clock,
        *,
        freeze_survivors: bool = True,
        freeze_after: int = 0,
        freeze_unwalked: bool = False,
        young_threshold: int = YOUNG_THRESHOLD,
        whole_walk_every: float = WHOLE_WALK_EVERY,
        min_whole_walk_gap: float = MIN_WHOLE_WALK_GAP,
    ) -> None:
        self.clock = clock
        self.freeze_survivors = freeze_survivors
        self.freeze_after = freeze_after
        self.freeze_unwalked = freeze_unwalked and freeze_survivors
        self.young_threshold = young_threshold
        self.whole_walk_every = whole_walk_every
        self.min_whole_walk_gap = min_whole_walk_gap
        self.freezes = 0
        """Collections whose survivors were frozen."""
        self.unwalked = 0
        """Collections whose objects were frozen before they walked them (``freeze_unwalked``)."""
        self.whole_walks = 0
        """Full collections that walked the heap given back (``gc.unfreeze``)."""
        self._thresholds: tuple[int, int, int] | None = None
        self._last_whole_walk = 0.0
        self._requested = False
        self._unfrozen = False
        """The heap was given back and the next full collection walks it."""

    @property
    def installed(self) -> bool:
        return self._thresholds is not None

    def install(self) -> None:
        """Collect start-up's cycles, freeze the rest and, with ``freeze_survivors``, hook the
        collections. One policy per process: a second one is refused."""
        global _installed
        with _lock:
            if _installed is not None:
                raise RuntimeError("a collector policy is already installed")
            _installed = self
        self._thresholds = gc.get_threshold()
        # Nothing frozen is garbage: start-up's cycles are collected first.
        gc.collect()
        gc.freeze()
        self._last_whole_walk = self.clock.monotonic()
        gc.set_threshold(self.young_threshold, *self._thresholds[1:])
        if self.freeze_survivors:
            gc.callbacks.append(self._on_collection)

    def uninstall(self) -> None:
        """The collector as it was before ``install``, the frozen heap given back."""
        global _installed
        if self._thresholds is None:
            return
        if self._on_collection in gc.callbacks:
            gc.callbacks.remove(self._on_collection)
        gc.set_threshold(*self._thresholds)
        gc.unfreeze()
        self._thresholds = None
        with _lock:
            if _installed is self:
                _installed = None

    @contextmanager
    def applied(self) -> Iterator[CollectorPolicy]:
        """Installed for the body (``install``, then ``uninstall``)."""
        self.install()
        try:
            yield self
        finally:
            self.uninstall()

    def request_whole_walk(self) -> None:
        """Have the next full collection walk the frozen heap too (a member's controllers
        were dropped): at once, or once ``min_whole_walk_gap`` has passed since the last."""
        if not self.freeze_survivors or self._thresholds is None or self._unfrozen:
            return  # nothing frozen to give back, or given back already for the next walk
        self._requested = True
        if self._may_walk(self.clock.monotonic()):
            self._unfreeze()

    def _may_walk(self, now: float) -> bool:
        return now - self._last_whole_walk >= self.min_whole_walk_gap

    def _unfreeze(self) -> None:
        gc.unfreeze()
        self._unfrozen = True
        self._requested = False

    def _on_collection(self, phase: str, info: dict[str, Any]) -> None:
        """``gc.callbacks``: after a collection of ``freeze_after``'s generation or an older one,
        freeze what it left, or give the frozen heap back when a whole walk is due. Never
        raises (a collection may start inside any code) and does O(1) work: ``gc.freeze`` and
        ``gc.unfreeze`` move lists."""
        generation = info.get("generation", 0)
        if phase == "start":
            if self.freeze_unwalked and generation < 2 and not self._unfrozen:
                # Nothing for this collection to walk: a cycle made since the last one waits
                # for the whole walk. Frozen objects still go when their last reference does.
                gc.freeze()
                self.unwalked += 1
            return
        if phase != "stop" or generation < self.freeze_after:
            return
        now = self.clock.monotonic()
        if self._unfrozen:
            if generation < 2:
                return  # the whole walk has not come yet: keep what it will walk unfrozen
            self._unfrozen = False
            self._last_whole_walk = now
            self.whole_walks += 1
        elif self._may_walk(now) and (
            self._requested or now - self._last_whole_walk >= self.whole_walk_every
        ):
            self._unfreeze()
            return
        gc.freeze()
        self.freezes += 1


def request_whole_walk() -> None:
    """Called when a served cluster's controllers are dropped: the installed policy, if any,
    has its frozen heap walked so that their reference cycles are freed."""
    policy = _installed
    if policy is not None:
        policy.request_whole_walk()


def policy_named(name: str, clock: Clock) -> CollectorPolicy | None:
    """``--gc-policy NAME``'s policy; ``None`` for ``off`` (CPython's defaults)."""
    if name not in POLICIES:
        raise ValueError(f"unknown collector policy {name!r} (known: {', '.join(POLICIES)})")
    if name == "off":
        return None
    if name == "startup":
        return CollectorPolicy(clock, freeze_survivors=False)
    if name == "unwalked":
        return CollectorPolicy(clock, freeze_unwalked=True)
    return CollectorPolicy(clock, freeze_after=0 if name == "survivors" else 1)


__all__ = [
    "MIN_WHOLE_WALK_GAP",
    "POLICIES",
    "WHOLE_WALK_EVERY",
    "YOUNG_THRESHOLD",
    "CollectorPolicy",
    "policy_named",
    "request_whole_walk",
]
