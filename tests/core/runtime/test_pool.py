"""The shared worker pool: many drivers (clusters) on a few threads, fairly and in isolation.

Real threads on the ``SystemClock`` against one in-memory API per cluster. Orderings and counts
are asserted, never timings: ``threading.Event`` handshakes make one cluster's reconciles block
or fail on purpose, and ``WAIT`` only guards against a hang.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from karpenter_capi.core.clock import SystemClock
from karpenter_capi.core.kube.errors import TooManyRequests
from karpenter_capi.core.kube.resources import CONFIGMAPS
from karpenter_capi.core.runtime.controller import DONE, WORKLOAD, Key, Result
from karpenter_capi.core.runtime.manager import Manager
from karpenter_capi.core.runtime.pool import WorkerPool
from karpenter_capi.core.runtime.threaded import ThreadedDriver
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from tests.core.runtime.toys import (
    Recorder,
    Scripted,
    Ticker,
    Woken,
    WokenWhileRunning,
    configmap,
)

WAIT = 10.0
QUIET = 0.2


class Cluster:
    """One workload cluster of the fleet: its API, manager, recorder and pooled driver."""

    def __init__(self, name: str, pool: WorkerPool, *controllers: object, **driver: object) -> None:
        self.name = name
        self.api = InMemoryAPIServer(clock=SystemClock())
        self.recorder = Recorder()
        self.manager = Manager(self.api, clock=SystemClock(), observer=self.recorder)
        self.manager.add(*controllers)  # type: ignore[arg-type]
        driver.setdefault("poll_interval", 0.05)
        self.driver = ThreadedDriver(self.manager, pool=pool, name=name, **driver)  # type: ignore[arg-type]

    def start(self) -> Cluster:
        self.driver.start()
        assert self.driver.wait_for_sync(WAIT)
        return self

    def create(self, *names: str) -> None:
        for name in names:
            self.api.create(CONFIGMAPS, configmap(name, {}), "default")

    def wait_until(self, predicate: Callable[[], bool], timeout: float = WAIT) -> bool:
        return self.recorder.wait_until(predicate, timeout)


@pytest.fixture
def pool() -> Iterator[WorkerPool]:
    pool = WorkerPool(2, name="test-pool")
    yield pool
    assert pool.close(WAIT)


def test_a_cluster_with_blocked_reconciles_does_not_stall_another(pool: WorkerPool) -> None:
    entered, release = threading.Event(), threading.Event()

    def stuck(key: Key, call: int) -> Result:
        entered.set()
        release.wait(WAIT)
        return DONE

    slow = Scripted(SystemClock(), behaviour=stuck)
    fast = Scripted(SystemClock())
    a = Cluster("a", pool, slow, workers=4).start()
    b = Cluster("b", pool, fast).start()
    try:
        a.create("a1", "a2", "a3", "a4")
        assert entered.wait(WAIT)
        b.create("b1", "b2")
        # Both of b's keys are reconciled while a's first reconcile is still blocked: a may use
        # one of the two workers at most (per_cluster), whatever its backlog and its workers.
        assert b.wait_until(lambda: len(fast.calls) == 2)
        assert not release.is_set()
        assert [key for key, _ in slow.calls] == ["default/a1"]
        assert a.driver.in_flight == 1
    finally:
        release.set()
    assert a.wait_until(lambda: len(slow.calls) == 4)
    assert a.driver.stop(WAIT)
    assert b.driver.stop(WAIT)


def test_a_cluster_storming_429s_does_not_stall_another(pool: WorkerPool) -> None:
    def throttled(key: Key, call: int) -> Result:
        raise TooManyRequests("the API server is throttling", retry_after_seconds=0)

    storming = Scripted(SystemClock(), behaviour=throttled)
    fast = Scripted(SystemClock())
    a = Cluster("a", pool, storming, workers=4).start()
    b = Cluster("b", pool, fast).start()
    a.create(*(f"a{index}" for index in range(50)))
    assert a.wait_until(lambda: a.manager.errors_total >= 50)
    b.create("b1")
    assert b.wait_until(lambda: [key for key, _ in fast.calls] == ["default/b1"])
    # The storm goes on, retried with each key's backoff.
    assert a.manager.queue("scripted").waiting() + a.manager.queue("scripted").depth > 0
    assert a.driver.stop(WAIT)
    assert b.driver.stop(WAIT)


def test_one_worker_takes_clusters_in_turn_whatever_their_backlog() -> None:
    order: list[str] = []
    entered, release = threading.Event(), threading.Event()

    def first_blocks(cluster: str) -> Scripted:
        def behaviour(key: Key, call: int) -> Result:
            order.append(cluster)
            if cluster == "a" and call == 1:
                entered.set()
                release.wait(WAIT)
            return DONE

        return Scripted(SystemClock(), behaviour=behaviour)

    with WorkerPool(1) as pool:
        a = Cluster("a", pool, first_blocks("a")).start()
        b = Cluster("b", pool, first_blocks("b")).start()
        a.create("a0")
        assert entered.wait(WAIT)
        # While the only worker is held, a builds a backlog ten times b's.
        a.create(*(f"a{index}" for index in range(1, 21)))
        b.create("b1", "b2")
        assert a.wait_until(lambda: a.manager.queue("scripted").depth == 20)
        assert b.wait_until(lambda: b.manager.queue("scripted").depth == 2)
        release.set()
        assert a.wait_until(lambda: len(order) == 23)
        assert order[:5] == ["a", "b", "a", "b", "a"]
        assert a.driver.stop(WAIT)
        assert b.driver.stop(WAIT)


def test_one_worker_takes_a_clusters_controllers_in_turn() -> None:
    order: list[str] = []
    entered, release = threading.Event(), threading.Event()

    def behaviour(name: str) -> Scripted:
        def reconcile(key: Key, call: int) -> Result:
            order.append(name)
            if name == "first" and call == 1:
                entered.set()
                release.wait(WAIT)
            return DONE

        return Scripted(SystemClock(), behaviour=reconcile, name=name)

    with WorkerPool(1) as pool:
        cluster = Cluster("a", pool, behaviour("first"), behaviour("second")).start()
        cluster.create("c0")
        assert entered.wait(WAIT)
        cluster.create("c1", "c2", "c3")
        queues = [cluster.manager.queue(name) for name in ("first", "second")]
        # c0 for "second", then c1..c3 for both.
        assert cluster.wait_until(lambda: [q.depth for q in queues] == [3, 4])
        release.set()
        assert cluster.wait_until(lambda: len(order) == 8)
        assert order == ["first", "second", "first", "second", "first", "second", "first", "second"]
        assert cluster.driver.stop(WAIT)


def test_stopping_one_driver_lets_its_reconcile_finish_while_the_others_run(
    pool: WorkerPool,
) -> None:
    entered, release = threading.Event(), threading.Event()

    def stuck(key: Key, call: int) -> Result:
        entered.set()
        release.wait(WAIT)
        return DONE

    slow = Scripted(SystemClock(), behaviour=stuck)
    fast = Scripted(SystemClock())
    a = Cluster("a", pool, slow).start()
    b = Cluster("b", pool, fast).start()
    a.create("a1")
    assert entered.wait(WAIT)

    outcome: list[bool] = []
    stopper = threading.Thread(target=lambda: outcome.append(a.driver.stop(WAIT)))
    stopper.start()
    stopper.join(QUIET)
    assert stopper.is_alive()  # waiting for a1's reconcile
    assert pool.members == ["b"]
    a.create("a2")  # too late: a is stopping
    b.create("b1")
    assert b.wait_until(lambda: len(fast.calls) == 1)

    release.set()
    stopper.join(WAIT)
    assert outcome == [True]
    assert [key for key, _ in slow.calls] == ["default/a1"]
    b.create("b2")
    assert b.wait_until(lambda: len(fast.calls) == 2)
    assert b.driver.stop(WAIT)


def test_pooled_periodic_controllers_run_on_the_shared_timer(pool: WorkerPool) -> None:
    tickers = [Ticker(SystemClock(), interval=0.05) for _ in range(3)]
    clusters = [Cluster(f"c{i}", pool, ticker).start() for i, ticker in enumerate(tickers)]
    for cluster, ticker in zip(clusters, tickers, strict=True):
        assert cluster.wait_until(lambda ticker=ticker: len(ticker.runs) >= 3)
    for ticker in tickers:
        gaps = [
            later - earlier for earlier, later in zip(ticker.runs, ticker.runs[1:], strict=False)
        ]
        assert all(gap >= 0.05 for gap in gaps)
    # No thread of its own per controller or per timer: the pool's do the work.
    names = [thread.name for thread in threading.enumerate()]
    assert not [name for name in names if name.startswith(("worker-", "periodic-"))]
    assert len([name for name in names if name.startswith("test-pool-worker-")]) == 2
    for cluster in clusters:
        assert cluster.driver.stop(WAIT)


def test_pooled_leader_gate(pool: WorkerPool) -> None:
    leading = threading.Event()
    controller = Scripted(SystemClock())
    ticker = Ticker(SystemClock(), interval=3600)
    # A long poll: reacting promptly proves the notifications, not the polling, do the work.
    cluster = Cluster("a", pool, controller, ticker, is_leader=leading.is_set, poll_interval=30)
    cluster.start()
    queue = cluster.manager.queue("scripted")
    cluster.create("a")
    assert cluster.wait_until(lambda: queue.depth == 1)
    assert not cluster.wait_until(lambda: bool(controller.calls or ticker.runs), QUIET)

    leading.set()
    cluster.driver.on_leadership_gained()
    assert cluster.wait_until(lambda: len(controller.calls) == 1 and len(ticker.runs) == 1)

    leading.clear()
    assert cluster.driver.on_leadership_lost(WAIT)
    cluster.create("b")
    assert cluster.wait_until(lambda: queue.depth == 1)
    assert len(controller.calls) == 1
    assert cluster.driver.stop(WAIT)


def test_a_failed_reconcile_is_retried_on_the_pools_timer(pool: WorkerPool) -> None:
    def flaky(key: Key, call: int) -> Result:
        if call < 3:
            raise TooManyRequests("slow down")
        return DONE

    controller = Scripted(SystemClock(), behaviour=flaky)
    cluster = Cluster("a", pool, controller).start()
    cluster.create("app")
    assert cluster.wait_until(lambda: len(controller.calls) == 3)
    assert cluster.manager.queue("scripted").num_requeues("default/app") == 0
    assert cluster.driver.stop(WAIT)


def test_request_stop_stops_a_pooled_driver(pool: WorkerPool) -> None:
    cluster = Cluster("a", pool, Scripted(SystemClock())).start()
    cluster.driver.request_stop()
    assert cluster.driver.wait(WAIT)
    assert cluster.driver.stopped
    assert pool.members == []


def test_timers_superseded_by_sooner_ones_do_not_pile_up(pool: WorkerPool) -> None:
    cluster = Cluster("a", pool, Scripted(SystemClock())).start()
    queue = cluster.manager.queue("scripted")
    # Each key sooner than the one before: every timer supersedes the pool's previous one.
    for index in range(2000):
        queue.add_after(f"default/k{index}", 3600.0 - index)
    assert pool.timers <= 4 * len(cluster.manager.entries) + 64 + 1
    assert cluster.driver.stop(WAIT)


def test_an_informer_event_runs_a_pooled_periodic_controller_before_its_interval(
    pool: WorkerPool,
) -> None:
    ticker = Woken(SystemClock(), interval=3600, read=[(CONFIGMAPS, WORKLOAD)])
    cluster = Cluster("a", pool, ticker, poll_interval=30).start()
    assert cluster.wait_until(lambda: len(ticker.runs) == 1)
    cluster.create("other")
    cluster.create("wake-up")
    assert cluster.wait_until(lambda: len(ticker.runs) == 2)
    assert cluster.driver.stop(WAIT)


def test_an_event_during_a_pooled_run_is_not_lost_to_the_run_s_own_schedule(
    pool: WorkerPool,
) -> None:
    # The run under way plans its next in an hour; the event that came meanwhile asked for now.
    ticker = WokenWhileRunning(SystemClock(), interval=3600, read=[(CONFIGMAPS, WORKLOAD)])
    cluster = Cluster("a", pool, ticker, poll_interval=30).start()
    assert cluster.wait_until(lambda: len(ticker.runs) == 1)
    cluster.create("wake-a")
    assert ticker.entered.wait(WAIT)
    cluster.create("wake-b")
    assert ticker.asked.acquire(timeout=WAIT)  # wake-a
    assert ticker.asked.acquire(timeout=WAIT)  # wake-b, during the run
    ticker.release.set()
    assert cluster.wait_until(lambda: len(ticker.runs) == 3)
    assert cluster.driver.stop(WAIT)


def test_a_stop_requested_before_start_is_honoured(pool: WorkerPool) -> None:
    cluster = Cluster("a", pool, Scripted(SystemClock()))
    cluster.driver.request_stop()
    cluster.driver.start()
    assert cluster.driver.wait(WAIT)
    assert pool.members == []


def test_two_blocked_clusters_still_leave_a_worker_for_a_third() -> None:
    release = threading.Event()
    entered = threading.Semaphore(0)

    def stuck(key: Key, call: int) -> Result:
        entered.release()
        release.wait(WAIT)
        return DONE

    # Four workers, two per cluster at most: a and b blocked would hold all four, but a
    # cluster's second reconcile only runs while another worker stays free.
    with WorkerPool(4, per_cluster=2) as pool:
        slow_a = Scripted(SystemClock(), behaviour=stuck)
        slow_b = Scripted(SystemClock(), behaviour=stuck)
        fast = Scripted(SystemClock())
        a = Cluster("a", pool, slow_a, workers=4).start()
        b = Cluster("b", pool, slow_b, workers=4).start()
        c = Cluster("c", pool, fast).start()
        try:
            a.create("a1", "a2", "a3")
            assert entered.acquire(timeout=WAIT)
            assert entered.acquire(timeout=WAIT)  # a holds two workers
            b.create("b1", "b2", "b3")
            assert entered.acquire(timeout=WAIT)  # b one: the last is kept free
            assert not entered.acquire(timeout=QUIET)
            c.create("c1")
            assert c.wait_until(lambda: len(fast.calls) == 1)
            assert (a.driver.in_flight, b.driver.in_flight) == (2, 1)
        finally:
            release.set()
        for cluster in (a, b, c):
            assert cluster.driver.stop(WAIT)


def test_a_driver_stopped_from_its_own_reconcile_does_not_wait_for_it(pool: WorkerPool) -> None:
    outcome: list[bool] = []
    holder: list[ThreadedDriver] = []

    def stop_myself(key: Key, call: int) -> Result:
        outcome.append(holder[0].stop(WAIT))
        return DONE

    cluster = Cluster("a", pool, Scripted(SystemClock(), behaviour=stop_myself))
    holder.append(cluster.driver)
    cluster.start()
    cluster.create("a1")
    assert cluster.driver.wait(WAIT)
    assert outcome == [True]
    assert pool.members == []


@dataclass
class Decides(Scripted):
    """A scripted controller the pool treats as a scale-up decision."""

    latency_sensitive: bool = True


class HeldFirst:
    """Reconciles that log their cluster in ``order``; cluster a's first one is held until
    ``release`` (``entered`` says it began), keeping a worker busy."""

    def __init__(self) -> None:
        self.order: list[str] = []
        self.entered, self.release = threading.Event(), threading.Event()

    def behaviour(self, cluster: str) -> Callable[[Key, int], Result]:
        def reconcile(key: Key, call: int) -> Result:
            self.order.append(cluster)
            if cluster == "a" and call == 1:
                self.entered.set()
                self.release.wait(WAIT)
            return DONE

        return reconcile


def test_a_decision_runs_while_every_shared_worker_is_busy() -> None:
    # At a fleet's burst every shared worker may be inside another cluster's reconcile
    # (waiting on its API server): a closed batch window must not wait for one of them to end.
    # The urgent-only worker takes the decision, and nothing else.
    held = HeldFirst()
    order, entered, release, behaviour = held.order, held.entered, held.release, held.behaviour
    with WorkerPool(1, urgent_workers=1) as pool:
        a = Cluster("a", pool, Scripted(SystemClock(), behaviour=behaviour("a"))).start()
        b = Cluster("b", pool, Scripted(SystemClock(), behaviour=behaviour("b"))).start()
        c = Cluster("c", pool, Decides(SystemClock(), behaviour=behaviour("c"))).start()
        a.create("a0")
        assert entered.wait(WAIT)
        b.create("b1")
        queued = b.manager.queue("scripted")
        assert b.wait_until(lambda: queued.depth == 1)  # b's informer has delivered it
        c.create("c1")
        assert c.wait_until(lambda: "c" in order)
        # b's key is not the urgent worker's to take: it waits for the shared one.
        assert queued.depth == 1
        assert order == ["a", "c"]
        release.set()
        assert b.wait_until(lambda: "b" in order)
        for cluster in (a, b, c):
            assert cluster.driver.stop(WAIT)


def test_a_latency_sensitive_controller_goes_before_other_clusters_backlogs() -> None:
    # A scale-up decision waits on a pod; a status write or a launch check can wait a moment.
    # Across clusters, a due decision takes the next free worker, ahead of every other
    # cluster's queued work (which then goes on in turn).
    held = HeldFirst()
    order, entered, release, behaviour = held.order, held.entered, held.release, held.behaviour
    with WorkerPool(1) as pool:
        a = Cluster("a", pool, Scripted(SystemClock(), behaviour=behaviour("a"))).start()
        b = Cluster("b", pool, Scripted(SystemClock(), behaviour=behaviour("b"))).start()
        c = Cluster("c", pool, Decides(SystemClock(), behaviour=behaviour("c"))).start()
        a.create("a0")
        assert entered.wait(WAIT)
        a.create("a1", "a2")
        b.create("b1", "b2")
        c.create("c1")
        for cluster, depth in ((a, 2), (b, 2), (c, 1)):
            queue = cluster.manager.queue("scripted")
            assert cluster.wait_until(lambda queue=queue, depth=depth: queue.depth == depth)
        release.set()
        assert a.wait_until(lambda: len(order) == 6)
        assert order[:2] == ["a", "c"]
        assert sorted(order[2:]) == ["a", "a", "b", "b"]
        for cluster in (a, b, c):
            assert cluster.driver.stop(WAIT)


@dataclass
class Rechecks(Scripted):
    """A latency-sensitive controller whose runs are decisions only while ``decides`` is set
    (``urgent_run``), as the provisioner's rechecks of pods a round already placed are not."""

    latency_sensitive: bool = True
    decides: bool = False

    def urgent_run(self) -> bool:
        return self.decides


def _logged(
    order: list[str], cluster: str, release: threading.Event | None = None
) -> Callable[[Key, int], Result]:
    """Reconciles that log ``cluster`` in ``order``, then wait for ``release`` if given."""

    def reconcile(key: Key, call: int) -> Result:
        order.append(cluster)
        if release is not None:
            release.wait(WAIT)
        return DONE

    return reconcile


def test_a_recheck_leaves_the_urgent_worker_to_another_clusters_decision() -> None:
    # At a fleet's saturated wave most provisioning rounds are rechecks of pods a round already
    # placed: in the urgent lane, they held the workers another cluster's closing window
    # needed. A recheck waits for a shared worker, and still runs.
    held = HeldFirst()
    order, release = held.order, held.release
    with WorkerPool(1, urgent_workers=1) as pool:
        a = Cluster("a", pool, Scripted(SystemClock(), behaviour=held.behaviour("a"))).start()
        r = Cluster("r", pool, Rechecks(SystemClock(), behaviour=_logged(order, "r", release)))
        c = Cluster("c", pool, Rechecks(SystemClock(), behaviour=_logged(order, "c"), decides=True))
        a.create("a0")
        assert held.entered.wait(WAIT)  # the shared worker is held
        r.start().create("r1")
        queued = r.manager.queue("scripted")
        assert r.wait_until(lambda: queued.depth == 1)
        c.start().create("c1")
        assert c.wait_until(lambda: "c" in order)
        assert order == ["a", "c"]
        assert queued.depth == 1  # the recheck waits its turn
        release.set()
        assert r.wait_until(lambda: "r" in order)
        for cluster in (a, r, c):
            assert cluster.driver.stop(WAIT)


@dataclass
class WokenDecision(Woken):
    """A latency-sensitive ``Woken`` whose runs are decisions once ``decides`` is set."""

    latency_sensitive: bool = True
    decides: bool = False

    def urgent_run(self) -> bool:
        return self.decides


def test_a_run_waiting_in_the_ordinary_lane_turns_urgent_when_its_event_makes_it_a_decision() -> (
    None
):
    # A cluster's look is due and waiting its turn behind a busy shared worker when a new pod
    # comes: the look is now the pod's decision, and the urgent worker takes it.
    held = HeldFirst()
    with WorkerPool(1, urgent_workers=1) as pool:
        a = Cluster("a", pool, Scripted(SystemClock(), behaviour=held.behaviour("a"))).start()
        a.create("a0")
        assert held.entered.wait(WAIT)
        looks = WokenDecision(SystemClock())
        b = Cluster("b", pool, looks).start()  # its first run is due, in the ordinary lane
        looks.decides = True
        b.create("wake-1")
        assert b.wait_until(lambda: len(looks.runs) >= 1)
        assert held.order == ["a"]  # the shared worker is still held
        held.release.set()
        for cluster in (a, b):
            assert cluster.driver.stop(WAIT)
