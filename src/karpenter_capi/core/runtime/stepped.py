"""The deterministic driver: every controller in one thread, on a virtual clock.

Tests and the simulator need hours of cluster life (requeues, expiry, consolidation windows) to
run in milliseconds and to run the same way every time. This driver does what the threaded one
does, but in a fixed order and only when asked: informers are stepped (``Informer.step``) until
they have nothing to deliver, then each controller, in registration order, reconciles the keys
that were ready (FIFO) or, for a periodic controller, runs if it is due; that pass repeats until
nothing happens. Time moves only through ``advance``, which jumps a ``FakeClock`` from one timer
to the next (a requeue, a backoff retry, a periodic run, an informer retry or resync) and lets
the system settle at each, so every reconcile sees the exact time it was scheduled for.
"""

from __future__ import annotations

from collections.abc import Callable

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.runtime.entries import ControllerEntry
from karpenter_capi.core.runtime.manager import Manager

DEFAULT_MAX_ITERATIONS = 1000
"""Passes ``run_until_quiet`` allows before deciding the system cannot settle."""

_INFORMER_STEPS_PER_PASS = 100_000
_TICK = 1e-6
"""``FakeClock`` moves in whole microseconds; a timer between two of them needs one more."""


class NotQuietError(RuntimeError):
    """The controllers kept making work for each other (a hot loop) past the iteration limit."""


class SteppedDriver:
    """Runs a ``Manager``'s controllers deterministically in the calling thread.

    ``is_leader``, when given, is asked before each pass: while it answers False the caches
    still fill and events still queue keys, but nothing is reconciled and no periodic controller
    runs, as in a replica that lost the election.
    """

    def __init__(
        self,
        manager: Manager,
        *,
        is_leader: Callable[[], bool] | None = None,
        max_iterations: int = DEFAULT_MAX_ITERATIONS,
    ) -> None:
        if not isinstance(manager.clock, FakeClock):
            raise TypeError(
                "SteppedDriver runs on virtual time and needs the manager built with a "
                f"FakeClock, not {type(manager.clock).__name__}; use ThreadedDriver otherwise"
            )
        manager.seal()
        self._manager = manager
        self._clock: FakeClock = manager.clock
        self._is_leader = is_leader
        self._max_iterations = max_iterations

    @property
    def manager(self) -> Manager:
        return self._manager

    @property
    def clock(self) -> FakeClock:
        return self._clock

    def leading(self) -> bool:
        return self._is_leader is None or self._is_leader()

    # Running at the current time.

    def step(self, *, news: bool = True) -> bool:
        """One pass: drain the informers, then give each controller its ready work once.

        A key is reconciled at most once per pass (one that is ready again at once waits for
        the next), so every pass ends. Returns whether anything happened. ``news=False``: the
        caller knows that nothing the informers watch changed since the last pass (a fleet's
        change feed), so only those with timed work are stepped; the others' polls would
        bring nothing.
        """
        progressed = self._step_informers(news)
        if not self.leading():
            return progressed
        for entry in self._manager.entries:
            if not entry.synced():
                continue
            if isinstance(entry, ControllerEntry):
                progressed = self._drain(entry) or progressed
            elif entry.due(self._clock.monotonic()):
                self._manager.run_periodic(entry)
                progressed = True
        return progressed

    def _drain(self, entry: ControllerEntry) -> bool:
        """Reconcile the ready keys of one controller, each at most once in this pass."""
        seen: set[str] = set()
        while True:
            key = entry.queue.pop_ready()
            if key is None:
                return bool(seen)
            if key in seen:
                # Ready again already (a zero-delay rate limiter, or a reconcile that moved the
                # clock): hand it back, queued, for the next pass, so this one ends.
                entry.queue.add(key)
                entry.queue.done(key)
                return True
            seen.add(key)
            self._manager.process(entry, key)

    def run_until_quiet(self, max_iterations: int | None = None) -> int:
        """Pass after pass until one does nothing; return the reconciles and periodic runs.

        Raises ``NotQuietError`` after ``max_iterations`` passes (a controller that rewrites
        its own object on every reconcile, or two that undo each other).
        """
        limit = self._max_iterations if max_iterations is None else max_iterations
        before = self._manager.reconciles_total
        for _ in range(limit):
            if not self.step():
                return self._manager.reconciles_total - before
        raise NotQuietError(
            f"the controllers were still busy after {limit} passes at clock "
            f"{self._clock.monotonic():.6f}; reconciles so far: {self._busiest()}"
        )

    def has_timed_work(self) -> bool:
        """Whether a pass now would do anything without news: an informer with timed work
        (``Informer.has_timed_work``), or, once synced and while leading, a controller with a
        key ready or a periodic one due."""
        if any(informer.has_timed_work() for informer in self._manager.informers):
            return True
        if not self.leading():
            return False
        now = self._clock.monotonic()
        for entry in self._manager.entries:
            if not entry.synced():
                continue
            if isinstance(entry, ControllerEntry):
                ready = entry.queue.next_ready_time()
                if ready is not None and ready <= now:
                    return True
            elif entry.due(now):
                return True
        return False

    def _step_informers(self, news: bool = True) -> bool:
        progressed = False
        for informer in self._manager.informers:
            if not news and not informer.has_timed_work():
                continue
            for _ in range(_INFORMER_STEPS_PER_PASS):
                if not informer.step():
                    break
                progressed = True
            else:
                raise NotQuietError(f"informer {informer.name} never ran out of events")
        return progressed

    def _busiest(self) -> str:
        counts = {e.name: self._manager.reconciles_of(e.name) for e in self._manager.entries}
        ranked = sorted(counts.items(), key=lambda item: -item[1])
        return ", ".join(f"{name}={count}" for name, count in ranked)

    # Moving time.

    def next_timer(self) -> float | None:
        """The earliest clock-monotonic time after now at which something is scheduled.

        Work that is due but cannot run (no leadership, caches not synced) is not a timer: only
        the informer retries that will sync those caches, or a change of leadership, unblock it.
        """
        now = self._clock.monotonic()
        times = [informer.next_wakeup_time for informer in self._manager.informers]
        if self.leading():
            for entry in self._manager.entries:
                if not entry.synced():
                    continue
                if isinstance(entry, ControllerEntry):
                    times.append(entry.queue.next_ready_time())
                else:
                    times.append(entry.next_run)
        later = [time for time in times if time is not None and time > now]
        return min(later) if later else None

    def advance(self, seconds: float) -> int:
        """Move the clock ``seconds`` forward, stopping at every timer on the way.

        Settles first at the current time, then at each timer, then at the end; returns the
        reconciles and periodic runs that happened.
        """
        if seconds < 0:
            raise ValueError("the clock cannot go backwards")
        end = self._clock.monotonic() + seconds
        count = self.run_until_quiet()
        while True:
            timer = self.next_timer()
            if timer is None or timer > end:
                break
            self._move_to(timer)
            count += self.run_until_quiet()
        self._move_to(end)
        return count + self.run_until_quiet()

    def _move_to(self, target: float) -> None:
        delta = target - self._clock.monotonic()
        if delta > 0:
            self._clock.advance(delta)
        # Rounding to microseconds may leave the clock a hair short of the timer, which would
        # then never be due; nudge it over.
        while self._clock.monotonic() < target:
            self._clock.advance(_TICK)


__all__ = ["DEFAULT_MAX_ITERATIONS", "NotQuietError", "SteppedDriver"]
