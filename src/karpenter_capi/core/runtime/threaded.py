"""The production driver: informer threads, worker pools and periodic timers on real time.

A real cluster needs what the stepped driver deliberately lacks: watches that block, several
reconciles in flight at once, and a process that can be stopped without cutting a reconcile in
half. This driver runs the same ``Manager`` that way:

* one thread per informer (``Informer.run``), which also fires its resyncs;
* ``workers`` threads per controller, each taking keys from the controller's queue once that
  controller's caches have synced (client-go's ``WaitForCacheSync`` before ``Run``);
* one timer thread per periodic controller;
* or, given a ``WorkerPool`` (``core.runtime.pool``), none of those worker and timer threads:
  the pool's shared threads take this driver's keys and periodic runs, fairly across the many
  drivers of a fleet, through the same leadership gate and in-flight accounting;
* a leadership gate: while ``is_leader()`` is False the informers keep the caches warm and
  events keep queueing keys, but no reconcile starts and no periodic run happens, so a standby
  replica takes over with a warm cache and its backlog intact; a key taken just as leadership
  is lost is put back, not reconciled;
* graceful stop: no new work is taken, reconciles in flight finish, the queues shut down, then
  the informers stop. ``install_signal_handlers`` wires SIGTERM/SIGINT to it (a second signal
  exits at once, as controller-runtime's signal handler does).

Threads block on conditions and events, never in sleeps; waits that have to poll (for a
leadership answer that comes without a notification) use ``poll_interval``.
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from types import FrameType
from typing import Any

from karpenter_capi.core.kube.client import JsonObject
from karpenter_capi.core.kube.informer import Informer
from karpenter_capi.core.observability.logs import log_fields
from karpenter_capi.core.runtime.controller import Key
from karpenter_capi.core.runtime.entries import ControllerEntry, PeriodicEntry
from karpenter_capi.core.runtime.manager import Manager
from karpenter_capi.core.runtime.pool import Membership, PoolMember, WorkerPool

_log = logging.getLogger(__name__)

DEFAULT_POLL_INTERVAL = 1.0
"""Longest a waiting thread goes without re-checking leadership or the clock."""

DEFAULT_STOP_TIMEOUT = 30.0
_SYNC_POLL = 0.1

SignalHandler = Callable[[int, FrameType | None], Any] | int | None


class ThreadedDriver:
    """Runs a ``Manager``'s controllers on threads until ``stop``.

    ``workers`` is the number of worker threads per controller, or a mapping from controller
    name to that number (controllers it does not name get one). ``is_leader``, when given,
    gates all reconciles and periodic runs; an elector should call ``on_leadership_gained`` and
    ``on_leadership_lost`` when its answer changes so that waiting threads react at once instead
    of at their next ``poll_interval``. With ``pool``, the driver starts only its informer
    threads and joins the pool, whose threads run its controllers (``workers`` then caps how
    many reconciles of one controller run at once); ``name`` names it in the pool's logs.
    """

    def __init__(
        self,
        manager: Manager,
        *,
        workers: int | Mapping[str, int] = 1,
        is_leader: Callable[[], bool] | None = None,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        pool: WorkerPool | None = None,
        name: str = "driver",
    ) -> None:
        if poll_interval <= 0:
            raise ValueError("poll_interval must be positive")
        counts = {
            entry.name: workers if isinstance(workers, int) else workers.get(entry.name, 1)
            for entry in manager.entries
            if isinstance(entry, ControllerEntry)
        }
        for controller, count in counts.items():
            if count < 1:
                raise ValueError(f"{controller}: a controller needs at least one worker")
        manager.seal()
        self._manager = manager
        self._workers = counts
        self._is_leader = is_leader
        self._poll_interval = poll_interval
        self._state_lock = threading.Lock()
        self._started = False
        # Leadership changes and stop requests wake every waiting thread through this.
        self._wake = threading.Condition()
        self._stopping = threading.Event()
        self._stop_requested = threading.Event()
        self._stopped = threading.Event()
        self._stop_finished = threading.Event()
        self._informer_stop = threading.Event()
        self._informer_threads: list[threading.Thread] = []
        self._work_threads: list[threading.Thread] = []
        self._idle = threading.Condition()
        self._in_flight = 0
        self._previous_handlers: dict[int, SignalHandler] = {}
        self._signalled = False
        self._stop_timeout = DEFAULT_STOP_TIMEOUT
        self._pool = pool
        self._name = name
        self._membership: Membership | None = None

    @property
    def manager(self) -> Manager:
        return self._manager

    # Lifecycle.

    def start(self) -> None:
        """Start every thread and return; controllers begin once their caches have synced."""
        # Under the lock, so that a concurrent ``stop`` sees every thread it has to join.
        with self._state_lock:
            if self._started or self._stopping.is_set():
                raise RuntimeError("a driver starts once, and not after stop")
            self._started = True
            # Pooled, a fleet saves each informer's timer thread: ``stop`` interrupts the watches.
            supervise = self._pool is None
            for informer in self._manager.informers:
                run = functools.partial(informer.run, supervise=supervise)
                self._informer_threads.append(
                    self._spawn(f"informer-{informer.name}", run, self._informer_stop)
                )
            if self._pool is not None:
                self._membership = self._pool.join(self._pool_member())
                if self._stop_requested.is_set():  # asked before it started
                    self._membership.request_stop()
                return
            for entry in self._manager.entries:
                if isinstance(entry, ControllerEntry):
                    for index in range(self._workers[entry.name]):
                        self._work_threads.append(
                            self._spawn(f"worker-{entry.name}-{index}", self._work, entry)
                        )
                else:
                    self._work_threads.append(
                        self._spawn(f"periodic-{entry.name}", self._run_periodic, entry)
                    )
            self._spawn("stop-on-request", self._stop_on_request)

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        """Block until every informer has listed once; False after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for informer in self._manager.informers:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not informer.wait_for_sync(remaining):
                return False
        return True

    def request_stop(self) -> None:
        """Ask for a graceful stop without waiting for it (safe from a signal handler)."""
        self._stop_requested.set()
        if self._membership is not None:
            self._membership.request_stop()

    def stop(self, timeout: float | None = DEFAULT_STOP_TIMEOUT) -> bool:
        """Stop gracefully; True once every thread has ended within ``timeout`` seconds.

        No reconcile starts after this is called; those in flight run to completion (Python
        cannot interrupt them, and a half-done reconcile is exactly what idempotence is for,
        but finishing is kinder). Queued keys are dropped: the next leader relists and
        re-queues everything anyway.
        """
        with self._state_lock:
            first = not self._stopping.is_set()
            self._stopping.set()
            started = self._started
        self._stop_requested.set()
        if first:
            _log.info("stopping: letting reconciles in flight finish")
            self._notify()
            if self._membership is not None:
                # Out of the pool's rotation at once; the reconciles in flight are awaited below.
                self._membership.leave(0)
            self._manager.shutdown_queues()
        try:
            if not started:
                self._stopped.set()
                return True
            deadline = None if timeout is None else time.monotonic() + timeout
            _join_all(self._work_threads, deadline)
            pool_done = self._membership is None or self._membership.leave(_remaining(deadline))
            # Informers last: a reconcile finishing its work may still read the caches.
            self._informer_stop.set()
            if self._pool is not None:
                for informer in self._manager.informers:
                    informer.interrupt()
            _join_all(self._informer_threads, deadline)
            threads = (*self._work_threads, *self._informer_threads)
            alive = [thread.name for thread in threads if thread.is_alive()]
            if not pool_done:
                alive.append(f"{self.in_flight} pooled reconcile(s)")
            if alive:
                _log.warning("stop timed out; still running: %s", ", ".join(alive))
                return False
            self._stopped.set()
            _log.info("stopped")
            return True
        finally:
            self._stop_finished.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until a stop has finished, cleanly or not (for a main thread awaiting signals).

        Returns False only on ``timeout``; ``stopped`` tells whether every thread ended.
        """
        return self._stop_finished.wait(timeout)

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def __enter__(self) -> ThreadedDriver:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # Leadership.

    def leading(self) -> bool:
        if self._is_leader is None:
            return True
        try:
            return bool(self._is_leader())
        except Exception:
            _log.exception("the leadership check raised; acting as a follower")
            return False

    def on_leadership_gained(self) -> None:
        """For an elector's ``on_started_leading``: start reconciling now."""
        self._notify()
        if self._membership is not None:
            self._membership.wake()

    def on_leadership_lost(self, timeout: float | None = None) -> bool:
        """For an elector's ``on_stopped_leading``: return once no reconcile is running.

        ``is_leader`` must already answer False, so nothing new starts; this waits for the
        reconciles in flight (True), or gives up after ``timeout`` seconds (False).
        """
        self._notify()
        return self.wait_idle(timeout)

    @property
    def in_flight(self) -> int:
        """Reconciles and periodic runs executing right now."""
        with self._idle:
            return self._in_flight

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until no reconcile or periodic run is executing; False after ``timeout``."""
        with self._idle:
            return self._idle.wait_for(lambda: self._in_flight == 0, timeout)

    # Signals.

    def install_signal_handlers(
        self,
        signals: Iterable[int] = (signal.SIGTERM, signal.SIGINT),
        *,
        stop_timeout: float = DEFAULT_STOP_TIMEOUT,
    ) -> None:
        """Make the first SIGTERM/SIGINT stop gracefully and a second one exit at once.

        Python delivers signals to the main thread only, so this must be called from it.
        """
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("signal handlers can only be installed from the main thread")
        self._stop_timeout = stop_timeout
        for signum in signals:
            previous = signal.signal(signum, self._on_signal)
            self._previous_handlers.setdefault(signum, previous)

    def uninstall_signal_handlers(self) -> None:
        """Restore the handlers ``install_signal_handlers`` replaced (main thread only)."""
        for signum, previous in self._previous_handlers.items():
            signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        self._previous_handlers.clear()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        # Runs in the main thread between two bytecodes, possibly inside any lock it holds:
        # only set an event; the stop itself runs on its own thread.
        if self._signalled:
            _log.warning("second %s: exiting now", signal.Signals(signum).name)
            os._exit(1)
        self._signalled = True
        _log.info("%s received: stopping gracefully", signal.Signals(signum).name)
        self.request_stop()

    def _stop_on_request(self) -> None:
        self._stop_requested.wait()
        # ``stop`` also sets the request, to end this thread; then there is nothing to do.
        if not self._stopping.is_set():
            self.stop(self._stop_timeout)

    # Threads.

    def _spawn(self, name: str, target: Callable[..., None], *args: Any) -> threading.Thread:
        fields = self._manager.log_fields

        def run() -> None:
            # A new thread starts with an empty context: its lines name the member too.
            with log_fields(fields):
                target(*args)

        # Daemon threads, so that a stop that times out cannot keep the process alive.
        thread = threading.Thread(target=run, name=name, daemon=True)
        thread.start()
        return thread

    def _work(self, entry: ControllerEntry) -> None:
        if not self._wait_synced(entry.informers):
            return
        queue = entry.queue
        while self._wait_leading():
            key = queue.get(timeout=self._poll_interval)
            if key is None:
                if queue.shutting_down:
                    return
                continue
            if self._stopping.is_set():
                queue.done(key)
                return
            self._reconcile_taken(entry, key)

    def _reconcile_taken(self, entry: ControllerEntry, key: Key) -> None:
        # Counted as in flight before leadership is checked, so ``on_leadership_lost``
        # cannot find the driver idle between the check and the reconcile.
        with self._busy():
            if self.leading():
                self._manager.process(entry, key)
                return
            # Taken as leadership was lost: back into the queue for whoever leads next.
            entry.queue.add(key)
            entry.queue.done(key)

    def _pool_member(self) -> PoolMember:
        entries = [
            (entry, self._workers[entry.name] if isinstance(entry, ControllerEntry) else 1)
            for entry in self._manager.entries
        ]
        return PoolMember(
            name=self._name,
            clock=self._manager.clock,
            entries=entries,
            leading=self.leading,
            reconcile=self._pooled_reconcile,
            run_periodic=self._run_periodic_now,
            stop=lambda: self.stop(self._stop_timeout),
        )

    def _pooled_reconcile(self, entry: ControllerEntry, key: Key) -> None:
        if self._stopping.is_set():
            entry.queue.done(key)
            return
        self._reconcile_taken(entry, key)

    def _run_periodic_now(self, entry: PeriodicEntry) -> None:
        with self._busy():
            if self.leading():
                self._manager.run_periodic(entry)

    def _run_periodic(self, entry: PeriodicEntry) -> None:
        entry.wake = lambda at: self._wake_at(entry, at)
        if not self._wait_synced(entry.informers):
            return
        clock = self._manager.clock
        while self._wait_leading():
            now = clock.monotonic()
            if entry.due(now):
                self._run_periodic_now(entry)
                continue
            next_run = entry.next_run if entry.next_run is not None else now
            with self._wake:
                # Woken early by a stop or a change of leadership; both are re-checked above.
                if not self._stopping.is_set():
                    self._wake.wait(min(next_run - now, self._poll_interval))

    def _wait_synced(self, informers: Iterable[Informer[JsonObject]]) -> bool:
        for informer in informers:
            while not informer.wait_for_sync(_SYNC_POLL):
                if self._stopping.is_set():
                    return False
        return not self._stopping.is_set()

    def _wait_leading(self) -> bool:
        """Block while not leading; False once stopping."""
        with self._wake:
            while not self._stopping.is_set():
                if self.leading():
                    return True
                self._wake.wait(self._poll_interval)
            return False

    @contextmanager
    def _busy(self) -> Iterator[None]:
        with self._idle:
            self._in_flight += 1
        try:
            yield
        finally:
            with self._idle:
                self._in_flight -= 1
                if self._in_flight == 0:
                    self._idle.notify_all()

    def _wake_at(self, entry: PeriodicEntry, at: float) -> None:
        """Run ``entry`` at ``at`` if that is sooner than planned (an informer event asked)."""
        with self._wake:
            if entry.ask(at):
                self._wake.notify_all()

    def _notify(self) -> None:
        with self._wake:
            self._wake.notify_all()


def _remaining(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def _join_all(threads: Iterable[threading.Thread], deadline: float | None) -> None:
    for thread in threads:
        if thread is threading.current_thread():
            continue
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        thread.join(remaining)


__all__ = ["DEFAULT_POLL_INTERVAL", "DEFAULT_STOP_TIMEOUT", "ThreadedDriver"]
