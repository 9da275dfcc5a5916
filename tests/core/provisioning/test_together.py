"""A round's creates and Events go to the process's shared writer threads (``together.py``):
each call once, results in order, at most ``concurrency`` at once with the round's own thread
one of them, threads kept between rounds instead of started for each, and a raising call
raised in the round."""

from __future__ import annotations

import threading

import pytest

from karpenter_capi.core.provisioning.together import Writers, together


def test_each_call_once_results_in_order_the_callers_thread_one_of_the_lanes() -> None:
    writers = Writers("together-order", idle_seconds=60)
    lanes = 3
    # The first ``lanes`` calls meet here: all of them are in flight at once, or it breaks.
    met = threading.Barrier(lanes, timeout=30)
    seen: list[str] = []
    lock = threading.Lock()

    def call(item: int) -> int:
        with lock:
            seen.append(threading.current_thread().name)
        if item < lanes:
            met.wait()
        return item * item

    assert together(writers, call, list(range(20)), lanes) == [i * i for i in range(20)]
    assert len(seen) == 20
    assert threading.current_thread().name in seen
    assert {n for n in seen if n != threading.current_thread().name} <= {
        "together-order_1",
        "together-order_2",
    }
    assert writers.threads == lanes - 1


def test_a_second_round_reuses_the_idle_threads() -> None:
    writers = Writers("together-reuse", idle_seconds=60)
    names: set[str] = set()
    lock = threading.Lock()

    def call(item: int) -> int:
        with lock:
            names.add(threading.current_thread().name)
        return item

    for _ in range(5):
        together(writers, call, list(range(16)), 4)
    assert writers.threads <= 3
    helpers = {n for n in names if n.startswith("together-reuse_")}
    assert len(helpers) <= 3  # started once, by the first round that needed them


def test_one_lane_runs_everything_on_the_callers_thread() -> None:
    writers = Writers("together-one", idle_seconds=60)
    names = []
    assert together(
        writers, lambda i: names.append(threading.current_thread().name) or i, [1, 2], 1
    ) == [1, 2]
    assert names == [threading.current_thread().name] * 2
    assert writers.threads == 0


def test_what_a_call_raises_is_raised_once_every_lane_stopped() -> None:
    writers = Writers("together-raise", idle_seconds=60)
    done: list[int] = []
    lock = threading.Lock()

    def call(item: int) -> int:
        if item == 3:
            raise RuntimeError("boom")
        with lock:
            done.append(item)
        return item

    with pytest.raises(RuntimeError, match="boom"):
        together(writers, call, list(range(10)), 4)
    assert 3 not in done
    # No lane is still running: a call made now sees the list as it stays.
    settled = list(done)
    assert together(writers, lambda i: i, [7], 4) == [7]
    assert done == settled
