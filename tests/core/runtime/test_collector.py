"""``core/runtime/collector.py``: what survives a collection (``--gc-policy survivors``: any;
``middle-survivors``: a middle or full one) is frozen, and the frozen heap is given back for a
whole walk when asked or after a period, at a bounded rate.

Frozen objects are told by their absence from ``gc.get_objects()`` (which lists what the
collections walk) and by weak references: frozen cyclic garbage stays, a whole walk frees it.
"""

from __future__ import annotations

import gc
import weakref

import pytest

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.runtime.collector import (
    MIN_WHOLE_WALK_GAP,
    YOUNG_THRESHOLD,
    CollectorPolicy,
    policy_named,
    request_whole_walk,
)


class _Cycle:
    """An object in a reference cycle: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


def _walked(obj: object) -> bool:
    """Whether the collections walk ``obj`` (it is tracked and not frozen)."""
    return any(o is obj for o in gc.get_objects())


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def test_install_freezes_start_up_and_survivors_of_a_middle_collection(clock: FakeClock) -> None:
    thresholds = gc.get_threshold()
    before = _Cycle()
    assert _walked(before)
    with CollectorPolicy(clock, freeze_after=1).applied() as policy:
        assert not _walked(before)  # start-up's objects: frozen
        assert gc.get_threshold()[0] == YOUNG_THRESHOLD
        frozen = gc.get_freeze_count()
        kept = [_Cycle() for _ in range(200)]
        assert _walked(kept[0])
        gc.collect(1)
        assert gc.get_freeze_count() >= frozen + 200
        assert not _walked(kept[0])
        assert policy.freezes >= 1
    # Uninstalled: the collector as it was, every object walked again.
    assert gc.get_threshold() == thresholds
    assert _walked(kept[0])
    assert _walked(before)
    assert gc.get_freeze_count() == 0


def test_survivors_of_a_young_collection_are_frozen_and_no_middle_one_comes(
    clock: FakeClock,
) -> None:
    """``survivors`` (the default): each long-lived object is walked by one young collection,
    and the middle collections, which walked it again with everything else young collections
    had left, never come (``gc.freeze`` zeroes their counter)."""
    policy = policy_named("survivors", clock)
    assert policy is not None
    with policy.applied():
        kept = [_Cycle() for _ in range(200)]
        assert _walked(kept[0])
        gc.collect(0)
        assert not _walked(kept[0])
        stats = gc.get_stats()
        more = [[] for _ in range(30_000)]  # 3 young collections' worth, kept alive
        gc.collect(0)
        after = gc.get_stats()
        assert after[0]["collections"] - stats[0]["collections"] >= 3
        assert after[1]["collections"] == stats[1]["collections"]
        assert not _walked(more[-1])
    assert len(more) == 30_000


def test_unwalked_collections_walk_nothing_and_their_cycles_wait_for_the_whole_walk(
    clock: FakeClock,
) -> None:
    """``unwalked``: a young or middle collection's objects are frozen as it starts, so it
    finds nothing; a cycle dropped before it waits, frozen, for the whole walk, which is
    walked as under ``survivors``, the young collections before it included."""
    policy = policy_named("unwalked", clock)
    assert policy is not None
    with policy.applied():
        cycle = _Cycle()
        ref = weakref.ref(cycle)
        del cycle
        kept = _Cycle()
        assert _walked(kept)
        stats = gc.get_stats()
        gc.collect(0)
        gc.collect(1)
        after = gc.get_stats()
        assert [after[g]["collected"] - stats[g]["collected"] for g in (0, 1)] == [0, 0]
        assert ref() is not None  # garbage, but frozen before the collection could find it
        assert not _walked(kept)
        assert policy.unwalked == 2
        more = [[] for _ in range(3 * YOUNG_THRESHOLD)]  # automatic young collections too
        assert policy.unwalked >= 5
        assert not _walked(more[0])

        clock.advance(MIN_WHOLE_WALK_GAP)
        policy.request_whole_walk()
        young = _Cycle()
        gc.collect(0)
        assert _walked(young)  # given back: walked until the whole walk has come
        gc.collect()
        assert ref() is None
        assert policy.whole_walks == 1
        assert not _walked(kept)  # what the whole walk left is frozen again
    assert len(more) == 3 * YOUNG_THRESHOLD


def test_a_young_collection_after_a_request_leaves_the_heap_for_the_whole_walk(
    clock: FakeClock,
) -> None:
    with CollectorPolicy(clock, min_whole_walk_gap=0.0).applied() as policy:
        cycle = _Cycle()
        ref = weakref.ref(cycle)
        gc.collect(0)  # frozen by a young collection
        del cycle
        gc.collect(1)
        assert ref() is not None
        policy.request_whole_walk()
        young = _Cycle()
        gc.collect(0)
        assert _walked(young)  # not frozen: the whole walk has not come yet
        gc.collect()
        assert ref() is None
        assert policy.whole_walks == 1


def test_no_full_collection_comes_between_whole_walks(clock: FakeClock) -> None:
    # gc.freeze zeroes the oldest generation's counter too: CPython's rule never comes due.
    with CollectorPolicy(clock, freeze_after=1, young_threshold=100).applied() as policy:
        stats = gc.get_stats()
        kept = [[] for _ in range(30_000)]  # 300 young collections' worth, kept alive
        after = gc.get_stats()
        assert after[1]["collections"] - stats[1]["collections"] >= 20
        assert after[2]["collections"] == stats[2]["collections"]
        assert policy.freezes >= 20
        assert not _walked(kept[0])
    assert len(kept) == 30_000


def test_frozen_cyclic_garbage_stays_until_a_requested_whole_walk(clock: FakeClock) -> None:
    with CollectorPolicy(clock, min_whole_walk_gap=0.0).applied() as policy:
        cycle = _Cycle()
        ref = weakref.ref(cycle)
        gc.collect(1)  # frozen
        del cycle
        gc.collect()
        assert ref() is not None  # garbage, but frozen: no collection walks it
        request_whole_walk()  # what a fleet member's stop calls
        gc.collect()
        assert ref() is None
        assert policy.whole_walks == 1
        # What the whole walk left is frozen again.
        kept = _Cycle()
        gc.collect()
        assert not _walked(kept)


def test_whole_walks_come_at_most_once_a_gap_and_at_least_once_a_period(
    clock: FakeClock,
) -> None:
    policy = CollectorPolicy(clock, whole_walk_every=3600.0, min_whole_walk_gap=300.0)
    with policy.applied():
        first = _Cycle()
        ref = weakref.ref(first)
        gc.collect(1)
        del first
        clock.advance(100)
        policy.request_whole_walk()  # within the gap since install: deferred
        gc.collect()
        assert ref() is not None
        clock.advance(200)
        gc.collect(1)  # the gap has passed: this collection gives the heap back
        gc.collect()
        assert ref() is None
        assert policy.whole_walks == 1

        # Nobody asks: the period brings the next one.
        second = _Cycle()
        ref = weakref.ref(second)
        gc.collect(1)
        del second
        clock.advance(3599)
        gc.collect()
        assert ref() is not None
        clock.advance(1)
        gc.collect(1)
        gc.collect()
        assert ref() is None
        assert policy.whole_walks == 2


def test_the_startup_policy_freezes_once_and_off_is_cpythons(clock: FakeClock) -> None:
    startup = policy_named("startup", clock)
    assert startup is not None
    assert not startup.freeze_survivors
    with startup.applied():
        assert startup._on_collection not in gc.callbacks
        kept = _Cycle()
        gc.collect(1)
        assert _walked(kept)  # survivors are not frozen
    middle = policy_named("middle-survivors", clock)
    assert middle is not None
    with middle.applied():
        kept = _Cycle()
        gc.collect(0)
        assert _walked(kept)  # a young collection's survivors are not frozen
        gc.collect(1)
        assert not _walked(kept)
    assert policy_named("off", clock) is None
    with pytest.raises(ValueError, match="unknown collector policy"):
        policy_named("never", clock)


def test_one_policy_per_process(clock: FakeClock) -> None:
    with (
        CollectorPolicy(clock).applied(),
        pytest.raises(RuntimeError, match="already installed"),
    ):
        CollectorPolicy(clock).install()
    request_whole_walk()  # none installed: nothing to do
