"""The work queue's guarantees, as a controller relies on them."""

from __future__ import annotations

import threading

import pytest

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube.workqueue import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    QueueHooks,
    WorkQueue,
    default_controller_rate_limiter,
)


def drain(queue: WorkQueue[str]) -> list[str]:
    taken = []
    while (item := queue.pop_ready()) is not None:
        taken.append(item)
        queue.done(item)
    return taken


def test_a_key_added_twice_before_processing_is_processed_once() -> None:
    queue: WorkQueue[str] = WorkQueue(FakeClock())
    queue.add("default/a")
    queue.add("default/b")
    queue.add("default/a")
    assert len(queue) == 2
    assert drain(queue) == ["default/a", "default/b"]
    assert queue.adds_total == 2


def test_a_key_re_added_while_processing_is_requeued_only_after_done() -> None:
    queue: WorkQueue[str] = WorkQueue(FakeClock())
    queue.add("a")
    taken = queue.pop_ready()
    assert taken == "a"
    queue.add("a")
    # Never handed to a second worker while the first still holds it.
    assert queue.pop_ready() is None
    assert queue.processing() == 1
    queue.done("a")
    assert queue.pop_ready() == "a"
    queue.done("a")
    assert queue.pop_ready() is None


def test_item_exponential_backoff_matches_client_go_defaults() -> None:
    limiter = ItemExponentialFailureRateLimiter()
    delays = [limiter.when("x") for _ in range(5)]
    assert delays == pytest.approx([0.005, 0.010, 0.020, 0.040, 0.080])
    assert limiter.num_requeues("x") == 5
    for _ in range(40):
        limiter.when("x")
    assert limiter.when("x") == 1000.0
    limiter.forget("x")
    assert limiter.num_requeues("x") == 0
    assert limiter.when("x") == pytest.approx(0.005)
    # Other keys have their own counters.
    assert limiter.when("y") == pytest.approx(0.005)


def test_token_bucket_allows_a_burst_then_spreads_retries_at_qps() -> None:
    clock = FakeClock()
    bucket = BucketRateLimiter(clock, qps=10.0, burst=100)
    assert all(bucket.when(f"k{i}") == 0.0 for i in range(100))
    assert bucket.when("k100") == pytest.approx(0.1)
    assert bucket.when("k101") == pytest.approx(0.2)
    # The two reservations made on credit are paid back first, then the bucket refills to
    # the full burst and no further.
    clock.advance(60)
    assert all(bucket.when(f"j{i}") == 0.0 for i in range(100))
    assert bucket.when("j100") == pytest.approx(0.1)


def test_rate_limited_requeue_waits_for_the_backoff_on_the_clock() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock, rate_limiter=default_controller_rate_limiter(clock))
    for expected in (0.005, 0.010, 0.020):
        queue.add_rate_limited("a")
        assert queue.pop_ready() is None
        assert queue.next_ready_time() == pytest.approx(clock.monotonic() + expected)
        clock.advance(expected)
        assert queue.pop_ready() == "a"
        queue.done("a")
    assert queue.num_requeues("a") == 3
    assert queue.retries_total == 3
    queue.forget("a")
    assert queue.num_requeues("a") == 0


def test_delayed_adds_become_ready_in_time_order_and_keep_the_earliest_time() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock)
    start = clock.monotonic()
    queue.add_after("late", 30)
    queue.add_after("soon", 5)
    queue.add_after("soon", 20)  # a later time does not postpone an earlier one
    queue.add_after("late", 10)  # an earlier time wins
    assert queue.waiting() == 2
    assert queue.next_ready_time() == pytest.approx(start + 5)
    assert queue.pop_ready() is None
    clock.advance(5)
    assert drain(queue) == ["soon"]
    assert queue.next_ready_time() == pytest.approx(start + 10)
    clock.advance(5)
    assert drain(queue) == ["late"]
    assert queue.next_ready_time() is None
    assert queue.waiting() == 0


def test_a_delayed_key_already_queued_is_not_processed_twice() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock)
    queue.add("a")
    queue.add_after("a", 1)
    clock.advance(1)
    assert drain(queue) == ["a"]


def test_add_after_with_no_delay_is_an_immediate_add() -> None:
    queue: WorkQueue[str] = WorkQueue(FakeClock())
    queue.add_after("a", 0)
    assert queue.pop_ready() == "a"


def test_shutdown_drains_queued_items_then_ends_and_ignores_new_ones() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock)
    queue.add("a")
    queue.add_after("later", 1)
    queue.shutdown()
    queue.add("b")
    clock.advance(5)
    assert queue.shutting_down
    assert queue.get(timeout=1) == "a"
    queue.done("a")
    assert queue.get() is None  # does not block once shut down and empty
    assert queue.next_ready_time() is None


def test_shutdown_wakes_a_blocked_worker() -> None:
    queue: WorkQueue[str] = WorkQueue(FakeClock())
    results: list[str | None] = []
    entered = threading.Event()

    def worker() -> None:
        entered.set()
        results.append(queue.get())

    thread = threading.Thread(target=worker)
    thread.start()
    assert entered.wait(5)
    queue.shutdown()
    thread.join(5)
    assert not thread.is_alive()
    assert results == [None]


def test_blocking_get_returns_an_item_added_by_another_thread() -> None:
    queue: WorkQueue[str] = WorkQueue(FakeClock())
    got: list[str | None] = []
    thread = threading.Thread(target=lambda: got.append(queue.get(timeout=10)))
    thread.start()
    queue.add("a")
    thread.join(10)
    assert got == ["a"]


def test_blocking_get_wakes_for_a_timer_when_the_clock_is_advanced() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock)
    queue.add_after("a", 60)
    got: list[str | None] = []
    thread = threading.Thread(target=lambda: got.append(queue.get(timeout=10)))
    thread.start()
    clock.advance(60)
    queue.notify_clock_advanced()
    thread.join(10)
    assert got == ["a"]


def test_get_times_out_when_nothing_is_ready() -> None:
    queue: WorkQueue[str] = WorkQueue(FakeClock())
    assert queue.get(timeout=0.01) is None
    assert queue.get(block=False) is None


def test_metric_hooks_see_adds_depth_latency_retries_and_work_time() -> None:
    clock = FakeClock()
    seen: dict[str, list[object]] = {
        "add": [],
        "retry": [],
        "depth": [],
        "latency": [],
        "work": [],
    }
    hooks = QueueHooks(
        on_add=seen["add"].append,
        on_retry=seen["retry"].append,
        on_depth=seen["depth"].append,
        on_queue_latency=seen["latency"].append,
        on_work_duration=seen["work"].append,
    )
    queue: WorkQueue[str] = WorkQueue(clock, hooks=hooks)
    queue.add("a")
    queue.add("b")
    clock.advance(2)
    item = queue.pop_ready()
    assert item == "a"
    clock.advance(3)
    queue.done(item)
    queue.add_rate_limited("c")
    assert seen["add"] == ["a", "b"]
    assert seen["depth"] == [1, 2, 1]
    assert seen["latency"] == [pytest.approx(2.0)]
    assert seen["work"] == [pytest.approx(3.0)]
    assert seen["retry"] == ["c"]
    assert queue.depth == 1


def test_concurrent_workers_never_hold_one_key_at_once_and_miss_no_final_add() -> None:
    queue: WorkQueue[str] = WorkQueue(FakeClock())
    keys = [f"k{i}" for i in range(5)]
    guard = threading.Lock()
    in_flight: set[str] = set()
    overlaps: list[str] = []
    versions_seen: dict[str, int] = dict.fromkeys(keys, -1)
    latest: dict[str, int] = dict.fromkeys(keys, -1)

    def worker() -> None:
        while (key := queue.get()) is not None:
            with guard:
                if key in in_flight:
                    overlaps.append(key)
                in_flight.add(key)
                # Reconciling reads the newest state, as a controller reads its cache.
                versions_seen[key] = latest[key]
            sum(range(5000))  # some work outside the lock, so overlaps would have room to show
            with guard:
                in_flight.discard(key)
            queue.done(key)

    workers = [threading.Thread(target=worker) for _ in range(4)]
    for thread in workers:
        thread.start()
    for version in range(200):
        for key in keys:
            with guard:
                latest[key] = version
            queue.add(key)
    # Shutting down still drains what is queued, and a worker that re-queues a key on ``done``
    # takes it again itself, so every final add is processed before the workers exit.
    queue.shutdown()
    for thread in workers:
        thread.join(10)
    assert overlaps == []
    # Every key was reconciled after its last change: nothing was lost to deduplication.
    assert versions_seen == dict.fromkeys(keys, 199)


def test_a_cancelled_timer_never_fires_and_leaves_nothing_behind() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock)
    for n in range(200):
        queue.add_after(f"nodeclaim-{n}", 5 * 3600)
    queue.add_after("kept", 5 * 3600)
    for n in range(200):
        queue.cancel_later(f"nodeclaim-{n}")
    assert queue.waiting() == 1
    # The heap is rebuilt once stale entries dominate: memory follows the live timers.
    assert len(queue._heap) <= 2 * queue.waiting() + 16
    clock.advance(5 * 3600)
    assert drain(queue) == ["kept"]


def test_rescheduling_a_key_earlier_again_and_again_keeps_the_heap_bounded() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock)
    for n in range(1000):
        queue.add_after("a", 10_000 - n)
    assert queue.waiting() == 1
    assert len(queue._heap) <= 2 * queue.waiting() + 16
    clock.advance(10_000 - 999)
    assert drain(queue) == ["a"]


def test_a_worker_waits_for_a_timer_further_off_than_a_thread_can_wait() -> None:
    """A NodeClaim expiring in 2562047h (the longest duration Kubernetes holds) is requeued that
    far off; a blocking wait beyond ``threading.TIMEOUT_MAX`` raised OverflowError in the worker."""
    queue: WorkQueue[str] = WorkQueue(FakeClock())
    queue.add_after("far", threading.TIMEOUT_MAX * 2)
    results: list[str | None] = []
    failures: list[BaseException] = []
    entered = threading.Event()

    def worker() -> None:
        entered.set()
        try:
            results.append(queue.get())
        except BaseException as error:  # what the thread would die of
            failures.append(error)

    thread = threading.Thread(target=worker)
    thread.start()
    assert entered.wait(5)
    queue.shutdown()
    thread.join(5)
    assert failures == []
    assert results == [None]
