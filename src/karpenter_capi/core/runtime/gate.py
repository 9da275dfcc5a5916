"""How many of a ``WorkerPool``'s shared workers run Python at once: ``RunGate``.

Every thread of a fleet controller shares one interpreter: a provisioning round that needs
24 ms of CPU took 87 ms of wall at the median (300-440 ms at the p99) beside eight shared
workers, each taking the interpreter's turns as its request comes back. Fewer workers halved
the round's wall but weakened isolation: a reconcile waiting on an unreachable API server holds
a worker without using the interpreter, and with two workers one such cluster stalled another.

The gate separates the two: a shared worker's run holds one of ``slots`` places only while it
runs Python. Around each wait for the network (the client's ``blocking`` hook, this object as a
context manager) it gives its place up, and takes one again when the answer comes; so a worker
blocked on an API server holds no place and the workers keep their isolation, while at most
``slots`` of them compete with the round for the interpreter.

* A run the pool calls urgent (a provisioning decision) takes no place and never waits; while
  one runs Python (not while it waits on its own requests), the others' places are held
  (``hold_for_urgent``): a worker asking for one waits for the decision too.
* A worker that cannot get a place within ``bound`` seconds goes on anyway (counted in
  ``forced``): a place holder blocked elsewhere (a lock, a backoff) stalls no one for longer.
* Threads that are not the pool's runs (informers, watches) pass through the hook untouched.

Waiting threads are woken first come, first served (``threading.Condition``'s order).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

DEFAULT_BOUND = 0.05
"""The longest a shared worker waits for a place before it runs anyway, seconds."""

_IDLE, _SHARED, _URGENT = 0, 1, 2


class _Run(threading.local):
    mode = _IDLE
    holding = False
    """A shared run holds a place (it may not, having gone on after the bound)."""
    blocked = False


class RunGate:
    """At most ``slots`` shared workers' runs executing Python at once (see the module)."""

    def __init__(
        self,
        slots: int,
        *,
        bound: float = DEFAULT_BOUND,
        hold_for_urgent: bool = True,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if slots < 1:
            raise ValueError("a run gate needs at least one place")
        if bound < 0:
            raise ValueError("the bound cannot be negative")
        self.slots = slots
        self.bound = bound
        self.hold_for_urgent = hold_for_urgent
        self._monotonic = monotonic
        self._cond = threading.Condition(threading.Lock())
        self._run = _Run()
        self._running = 0
        """Shared runs holding a place."""
        self._urgent = 0
        """Urgent runs executing Python (not waiting on the network)."""
        self._waiting = 0
        self.forced = 0
        """Shared runs that went on without a place after waiting ``bound`` seconds."""
        self.waited = 0
        """Times a shared run waited for a place."""

    # The pool's side: around each run of a worker.

    def enter(self, *, urgent: bool) -> None:
        """The current thread starts a run (an urgent one never waits)."""
        run = self._run
        run.blocked = False
        if urgent:
            run.mode = _URGENT
            with self._cond:
                self._urgent += 1
            return
        run.mode = _SHARED
        self._take(run)

    def leave(self) -> None:
        """The current thread's run has ended."""
        run = self._run
        mode, run.mode = run.mode, _IDLE
        if run.blocked:
            run.blocked = False
            return  # its place was given up when it blocked
        if mode == _URGENT:
            with self._cond:
                self._urgent_ends_locked()
        elif mode == _SHARED:
            self._give(run)

    # The client's side: ``with gate:`` around a wait for the network.

    def __enter__(self) -> None:
        run = self._run
        if run.mode == _IDLE or run.blocked:
            return
        run.blocked = True
        if run.mode == _URGENT:
            with self._cond:
                self._urgent_ends_locked()
        else:
            self._give(run)

    def __exit__(self, *exc_info: object) -> None:
        run = self._run
        if run.mode == _IDLE or not run.blocked:
            return
        run.blocked = False
        if run.mode == _URGENT:
            with self._cond:
                self._urgent += 1
        else:
            self._take(run)

    @property
    def running(self) -> int:
        """Shared runs holding a place now."""
        with self._cond:
            return self._running

    @property
    def waiting(self) -> int:
        """Shared runs waiting for a place now."""
        with self._cond:
            return self._waiting

    @property
    def urgent_running(self) -> int:
        """Urgent runs executing Python now."""
        with self._cond:
            return self._urgent

    # Places.

    def _free_locked(self) -> bool:
        return self._running < self.slots and not (self.hold_for_urgent and self._urgent)

    def _take(self, run: _Run) -> None:
        with self._cond:
            if not self._free_locked() or self._waiting:
                # Behind those already waiting: first come, first served.
                self.waited += 1
                self._waiting += 1
                deadline = self._monotonic() + self.bound
                try:
                    while True:
                        remaining = deadline - self._monotonic()
                        if remaining <= 0:
                            self.forced += 1
                            run.holding = False
                            return
                        self._cond.wait(remaining)
                        if self._free_locked():
                            break
                finally:
                    self._waiting -= 1
            self._running += 1
            run.holding = True
            if self._waiting and self._free_locked():
                self._cond.notify()  # room for the next in line too

    def _give(self, run: _Run) -> None:
        if not run.holding:
            return
        run.holding = False
        with self._cond:
            self._running -= 1
            if self._waiting and self._free_locked():
                self._cond.notify()

    def _urgent_ends_locked(self) -> None:
        self._urgent -= 1
        if self._waiting and self._free_locked():
            self._cond.notify(self.slots - self._running)


__all__ = ["DEFAULT_BOUND", "RunGate"]
