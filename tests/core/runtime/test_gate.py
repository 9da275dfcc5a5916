"""The pool's run gate: how many shared workers run Python at once (``core.runtime.gate``).

Real threads; ``threading.Event`` handshakes say who got in, and ``WAIT`` only guards against a
hang. A gate whose ``bound`` is ``WAIT`` lets a waiting run in only when a place is given up
(``forced`` stays 0), so what the tests see is the gate's rule, not its timeout.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest

from karpenter_capi.core.clock import SystemClock
from karpenter_capi.core.runtime.controller import DONE, Key, Result
from karpenter_capi.core.runtime.gate import RunGate
from karpenter_capi.core.runtime.pool import WorkerPool
from tests.core.runtime.test_pool import Cluster, Decides
from tests.core.runtime.toys import Scripted

WAIT = 10.0


class Run:
    """A pool run on a thread of its own: enters the gate, says so, and does what it is told
    (``steps``: callables run in turn, each after ``go`` is set again)."""

    def __init__(self, gate: RunGate, *, urgent: bool = False) -> None:
        self.gate, self.urgent = gate, urgent
        self.inside = threading.Event()
        self.done = threading.Event()
        self._next = threading.Event()
        self._steps: list[Callable[[], None]] = []
        self._thread = threading.Thread(target=self._main, daemon=True)
        self._thread.start()

    def then(self, step: Callable[[], None]) -> None:
        self._steps.append(step)
        self._next.set()

    def blocked_until(self, released: threading.Event) -> threading.Event:
        """Waits on the network (inside the client's hook) until ``released``; the event
        returned says it has begun waiting."""
        began = threading.Event()

        def wait() -> None:
            with self.gate:
                began.set()
                released.wait(WAIT)

        self.then(wait)
        return began

    def end(self) -> None:
        self.then(_END)
        assert self.done.wait(WAIT)

    def _main(self) -> None:
        self.gate.enter(urgent=self.urgent)
        self.inside.set()
        while True:
            assert self._next.wait(WAIT)
            self._next.clear()
            while self._steps:
                step = self._steps.pop(0)
                if step is _END:
                    self.gate.leave()
                    self.done.set()
                    return
                step()


def _END() -> None:
    return None


def test_a_run_waiting_on_the_network_gives_its_place_to_another() -> None:
    gate = RunGate(1, bound=WAIT)
    first = Run(gate)
    assert first.inside.wait(WAIT)
    released = threading.Event()
    second = Run(gate)
    assert first.blocked_until(released).wait(WAIT)
    assert second.inside.wait(WAIT)  # in while the first waits on its API server
    assert gate.running == 1
    second.end()
    released.set()
    first.end()
    assert (gate.forced, gate.running) == (0, 0)


def test_a_run_back_from_the_network_waits_for_a_place() -> None:
    gate = RunGate(1, bound=WAIT)
    first = Run(gate)
    assert first.inside.wait(WAIT)
    released = threading.Event()
    assert first.blocked_until(released).wait(WAIT)
    second = Run(gate)
    assert second.inside.wait(WAIT)
    back = threading.Event()
    first.then(back.set)
    released.set()
    assert _eventually(lambda: gate.waiting == 1)  # the first, its answer come, waits
    assert not back.is_set()
    second.end()
    assert back.wait(WAIT)
    first.end()
    assert (gate.forced, gate.running) == (0, 0)


def test_an_urgent_run_never_waits_and_holds_the_others_while_it_runs() -> None:
    gate = RunGate(1, bound=WAIT)
    shared = Run(gate)
    assert shared.inside.wait(WAIT)
    urgent = Run(gate, urgent=True)
    assert urgent.inside.wait(WAIT)  # every place taken: in all the same
    shared.end()
    assert gate.running == 0
    held = Run(gate)
    assert _eventually(lambda: gate.waiting == 1)  # a place is free, but a decision runs
    assert not held.inside.is_set()
    # Waiting on its own request, the decision holds no one.
    released = threading.Event()
    assert urgent.blocked_until(released).wait(WAIT)
    assert held.inside.wait(WAIT)
    held.end()
    released.set()
    urgent.end()
    assert (gate.forced, gate.running, gate.urgent_running) == (0, 0, 0)


def test_a_place_holder_that_never_gives_it_up_stalls_another_only_for_the_bound() -> None:
    gate = RunGate(1, bound=0.05)
    stuck = Run(gate)  # blocked elsewhere than the network (a lock): it keeps its place
    assert stuck.inside.wait(WAIT)
    other = Run(gate)
    assert other.inside.wait(WAIT)
    assert gate.forced == 1
    other.end()
    stuck.end()
    assert gate.running == 0


def test_threads_outside_a_run_pass_through_the_hook() -> None:
    gate = RunGate(1, bound=WAIT)
    shared = Run(gate)
    assert shared.inside.wait(WAIT)
    with gate:  # an informer's request
        assert gate.running == 1
    assert gate.running == 1
    shared.end()


# The gate in the pool.


def _blocked(
    gate: RunGate, through_hook: bool
) -> tuple[Scripted, threading.Event, threading.Event]:
    entered, release = threading.Event(), threading.Event()

    def stuck(key: Key, call: int) -> Result:
        entered.set()
        if through_hook:
            with gate:  # an unreachable API server: the request waits
                release.wait(WAIT)
        else:
            release.wait(WAIT)
        return DONE

    return Scripted(SystemClock(), behaviour=stuck), entered, release


@pytest.fixture
def cleanup() -> Iterator[list[Callable[[], object]]]:
    steps: list[Callable[[], object]] = []
    yield steps
    for step in reversed(steps):
        step()


@pytest.mark.parametrize("through_hook", [True, False], ids=["on-the-network", "elsewhere"])
def test_a_cluster_with_blocked_reconciles_does_not_stall_another_through_the_gate(
    through_hook: bool, cleanup: list[Callable[[], object]]
) -> None:
    # One place: a reconcile waiting on its API server gives it up at once; one blocked
    # elsewhere keeps it, and the other cluster's runs go on after the bound.
    gate = RunGate(1, bound=WAIT if through_hook else 0.05)
    pool = WorkerPool(2, gate=gate, name="gated")
    cleanup.append(lambda: pool.close(WAIT))
    slow, entered, release = _blocked(gate, through_hook)
    cleanup.append(release.set)
    fast = Scripted(SystemClock())
    a = Cluster("a", pool, slow, workers=4).start()
    b = Cluster("b", pool, fast).start()
    a.create("a1", "a2")
    assert entered.wait(WAIT)
    b.create("b1", "b2")
    assert b.wait_until(lambda: len(fast.calls) == 2)
    assert not release.is_set()
    assert gate.forced == 0 if through_hook else gate.forced >= 1
    release.set()
    assert a.wait_until(lambda: len(slow.calls) == 2)
    assert a.driver.stop(WAIT)
    assert b.driver.stop(WAIT)


def test_a_decision_takes_no_place(cleanup: list[Callable[[], object]]) -> None:
    # The only place is held by a run that never gives it up (and the bound is long): the
    # pool tells the gate that a latency-sensitive run is a decision, which never waits.
    gate = RunGate(1, bound=WAIT)
    pool = WorkerPool(2, gate=gate, name="gated")
    cleanup.append(lambda: pool.close(WAIT))
    slow, entered, release = _blocked(gate, through_hook=False)
    cleanup.append(release.set)
    decides = Decides(SystemClock())
    a = Cluster("a", pool, slow).start()
    c = Cluster("c", pool, decides).start()
    a.create("a1")
    assert entered.wait(WAIT)
    c.create("c1")
    assert c.wait_until(lambda: len(decides.calls) == 1)
    assert gate.forced == 0
    release.set()
    assert a.driver.stop(WAIT)
    assert c.driver.stop(WAIT)


def _eventually(predicate: Callable[[], bool]) -> bool:
    done = threading.Event()
    for _ in range(int(WAIT / 0.01)):
        if predicate():
            return True
        done.wait(0.01)
    return False
