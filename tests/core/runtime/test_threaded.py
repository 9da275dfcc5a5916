"""The threaded driver: worker pools, periodic timers, graceful stop, signals, leadership.

Real threads on the ``SystemClock`` against the in-memory API. Waits are event-driven (the
``Recorder`` observer notifies on every reconcile and queue change) and bounded by ``WAIT``;
the few assertions that something does *not* happen wait a short ``QUIET`` for it.
"""

from __future__ import annotations

import os
import signal
import threading

import pytest

from karpenter_capi.core.clock import SystemClock
from karpenter_capi.core.kube.resources import CONFIGMAPS
from karpenter_capi.core.runtime.controller import DONE, WORKLOAD, Key, Result
from karpenter_capi.core.runtime.manager import Manager
from karpenter_capi.core.runtime.threaded import ThreadedDriver
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from tests.core.runtime.toys import (
    Failing,
    Recorder,
    Scripted,
    Ticker,
    Woken,
    WokenWhileRunning,
    configmap,
)

WAIT = 10.0
QUIET = 0.2


@pytest.fixture
def api() -> InMemoryAPIServer:
    return InMemoryAPIServer(clock=SystemClock())


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


class Running:
    def __init__(self, driver: ThreadedDriver) -> None:
        self.driver = driver

    def __enter__(self) -> ThreadedDriver:
        self.driver.start()
        assert self.driver.wait_for_sync(WAIT)
        return self.driver

    def __exit__(self, *exc_info: object) -> None:
        assert self.driver.stop(WAIT)


def manager_of(api: InMemoryAPIServer, recorder: Recorder, *controllers: object) -> Manager:
    manager = Manager(api, clock=SystemClock(), observer=recorder)
    manager.add(*controllers)  # type: ignore[arg-type]
    return manager


def test_failed_reconciles_are_retried_until_they_succeed(
    api: InMemoryAPIServer, recorder: Recorder
) -> None:
    def flaky(key: Key, call: int) -> Result:
        if call < 3:
            raise Failing("not yet")
        return DONE

    controller = Scripted(SystemClock(), behaviour=flaky)
    manager = manager_of(api, recorder, controller)
    with Running(ThreadedDriver(manager, poll_interval=0.05)):
        api.create(CONFIGMAPS, configmap("app", {}), "default")
        assert recorder.wait_until(lambda: len(controller.calls) == 3)
        assert manager.queue("scripted").num_requeues("default/app") == 0
    assert [error is None for _, _, error in recorder.reconciles] == [False, False, True]


def test_workers_reconcile_different_keys_in_parallel(
    api: InMemoryAPIServer, recorder: Recorder
) -> None:
    # Both reconciles must be in flight at once for the barrier to open.
    barrier = threading.Barrier(2, timeout=WAIT)

    def meet(key: Key, call: int) -> Result:
        barrier.wait()
        return DONE

    controller = Scripted(SystemClock(), behaviour=meet)
    with Running(ThreadedDriver(manager_of(api, recorder, controller), workers=2)):
        api.create(CONFIGMAPS, configmap("a", {}), "default")
        api.create(CONFIGMAPS, configmap("b", {}), "default")
        assert recorder.wait_until(lambda: recorder.count("scripted") == 2)
    assert [error for _, _, error in recorder.reconciles] == [None, None]


def test_periodic_controller_runs_at_its_interval(
    api: InMemoryAPIServer, recorder: Recorder
) -> None:
    ticker = Ticker(SystemClock(), interval=0.05)
    with Running(ThreadedDriver(manager_of(api, recorder, ticker), poll_interval=0.05)):
        assert recorder.wait_until(lambda: len(ticker.runs) >= 3)
    gaps = [later - earlier for earlier, later in zip(ticker.runs, ticker.runs[1:], strict=False)]
    assert all(gap >= 0.05 for gap in gaps)


def test_graceful_stop_lets_the_reconcile_in_flight_finish(
    api: InMemoryAPIServer, recorder: Recorder
) -> None:
    entered, release, finished = threading.Event(), threading.Event(), threading.Event()

    def slow(key: Key, call: int) -> Result:
        entered.set()
        release.wait(WAIT)
        finished.set()
        return DONE

    controller = Scripted(SystemClock(), behaviour=slow)
    driver = ThreadedDriver(manager_of(api, recorder, controller), poll_interval=0.05)
    driver.start()
    assert driver.wait_for_sync(WAIT)
    api.create(CONFIGMAPS, configmap("a", {}), "default")
    assert entered.wait(WAIT)

    outcome: list[bool] = []
    stopper = threading.Thread(target=lambda: outcome.append(driver.stop(WAIT)))
    stopper.start()
    stopper.join(QUIET)
    assert stopper.is_alive()  # stop is waiting for the reconcile
    assert driver.stopping
    api.create(CONFIGMAPS, configmap("b", {}), "default")  # too late to be reconciled

    release.set()
    stopper.join(WAIT)
    assert outcome == [True]
    assert finished.is_set()
    assert driver.stopped
    assert [key for key, _ in controller.calls] == ["default/a"]


def test_stop_before_start_and_no_start_after_stop(
    api: InMemoryAPIServer, recorder: Recorder
) -> None:
    driver = ThreadedDriver(manager_of(api, recorder, Scripted(SystemClock())))
    assert driver.stop(WAIT)
    with pytest.raises(RuntimeError, match="not after stop"):
        driver.start()


@pytest.fixture
def leading() -> threading.Event:
    return threading.Event()


def test_leader_gate(api: InMemoryAPIServer, recorder: Recorder, leading: threading.Event) -> None:
    controller = Scripted(SystemClock())
    ticker = Ticker(SystemClock(), interval=3600)
    manager = manager_of(api, recorder, controller, ticker)
    queue = manager.queue("scripted")
    # A long poll: reacting promptly proves the notifications, not the polling, do the work.
    driver = ThreadedDriver(manager, is_leader=leading.is_set, poll_interval=30)
    with Running(driver):
        # Not leading: the cache is warm, the key is queued, nothing runs.
        api.create(CONFIGMAPS, configmap("a", {}), "default")
        assert recorder.wait_until(lambda: queue.depth == 1)
        assert not recorder.wait_until(lambda: bool(controller.calls or ticker.runs), QUIET)
        assert manager.store(CONFIGMAPS).keys() == ["default/a"]

        # Elected: the queued work and the periodic controller run.
        leading.set()
        driver.on_leadership_gained()
        assert recorder.wait_until(lambda: len(controller.calls) == 1 and len(ticker.runs) == 1)

        # Deposed: nothing more runs, new keys wait for the next leader.
        leading.clear()
        assert driver.on_leadership_lost(WAIT)
        api.create(CONFIGMAPS, configmap("b", {}), "default")
        assert recorder.wait_until(lambda: queue.depth == 1)
        assert not recorder.wait_until(lambda: len(controller.calls) > 1, QUIET)


def test_losing_leadership_waits_for_the_reconcile_in_flight(
    api: InMemoryAPIServer, recorder: Recorder, leading: threading.Event
) -> None:
    entered, release = threading.Event(), threading.Event()

    def slow(key: Key, call: int) -> Result:
        entered.set()
        release.wait(WAIT)
        return DONE

    leading.set()
    controller = Scripted(SystemClock(), behaviour=slow)
    driver = ThreadedDriver(manager_of(api, recorder, controller), is_leader=leading.is_set)
    with Running(driver):
        api.create(CONFIGMAPS, configmap("a", {}), "default")
        assert entered.wait(WAIT)
        leading.clear()
        outcome: list[bool] = []
        loser = threading.Thread(target=lambda: outcome.append(driver.on_leadership_lost(WAIT)))
        loser.start()
        loser.join(QUIET)
        assert loser.is_alive()  # the elector's callback returns only once work has stopped
        release.set()
        loser.join(WAIT)
        assert outcome == [True]
        assert driver.in_flight == 0


def test_sigterm_stops_gracefully(api: InMemoryAPIServer, recorder: Recorder) -> None:
    driver = ThreadedDriver(manager_of(api, recorder, Scripted(SystemClock())))
    driver.start()
    driver.install_signal_handlers()
    try:
        assert driver.wait_for_sync(WAIT)
        os.kill(os.getpid(), signal.SIGTERM)
        assert driver.wait(WAIT)
        assert driver.stopped
    finally:
        driver.uninstall_signal_handlers()
        driver.stop(WAIT)
    assert signal.getsignal(signal.SIGTERM) is not driver._on_signal


def test_signal_handlers_need_the_main_thread(api: InMemoryAPIServer, recorder: Recorder) -> None:
    driver = ThreadedDriver(manager_of(api, recorder, Scripted(SystemClock())))
    errors: list[BaseException] = []

    def install() -> None:
        try:
            driver.install_signal_handlers()
        except RuntimeError as error:
            errors.append(error)

    thread = threading.Thread(target=install)
    thread.start()
    thread.join(WAIT)
    assert len(errors) == 1
    assert "main thread" in str(errors[0])


def test_an_informer_event_runs_a_periodic_controller_before_its_interval(
    api: InMemoryAPIServer, recorder: Recorder
) -> None:
    """The provisioner looks every half second; a pending pod's event must not wait for the
    next look (issue 25). An event its ``wake_on`` asks for runs it before its interval."""
    ticker = Woken(SystemClock(), interval=3600, read=[(CONFIGMAPS, WORKLOAD)])
    with Running(ThreadedDriver(manager_of(api, recorder, ticker), poll_interval=30)):
        assert recorder.wait_until(lambda: len(ticker.runs) == 1)
        api.create(CONFIGMAPS, configmap("other", {}))
        api.create(CONFIGMAPS, configmap("wake-up", {}))
        assert recorder.wait_until(lambda: len(ticker.runs) == 2)


def test_an_event_during_a_run_is_not_lost_to_the_run_s_own_schedule(
    api: InMemoryAPIServer, recorder: Recorder
) -> None:
    """A look that found a burst incomplete plans its next run for when the full window ends;
    the pod event that completes the burst may come while that look still runs."""
    ticker = WokenWhileRunning(SystemClock(), interval=3600, read=[(CONFIGMAPS, WORKLOAD)])
    with Running(ThreadedDriver(manager_of(api, recorder, ticker), poll_interval=30)):
        assert recorder.wait_until(lambda: len(ticker.runs) == 1)
        api.create(CONFIGMAPS, configmap("wake-a", {}))
        assert ticker.entered.wait(10)
        api.create(CONFIGMAPS, configmap("wake-b", {}))
        assert ticker.asked.acquire(timeout=10)  # wake-a
        assert ticker.asked.acquire(timeout=10)  # wake-b, during the run
        ticker.release.set()
        assert recorder.wait_until(lambda: len(ticker.runs) == 3)
