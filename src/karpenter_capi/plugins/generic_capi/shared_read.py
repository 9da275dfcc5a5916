"""One read shared by the calls that wait for it, each answered by a read that began after it
asked: as fresh as reading alone.

Why: the lifecycle controller launches a round's NodeClaims on several workers at once, and
every launch call decides from fresh reads of every NodeClaim and of the resource's Machines
(``launch`` and ``mirror`` module docstrings). Over a real API each is a list, and a mirror
makes one at a time, so four calls in flight made four identical lists, one after the other.
A list is linearizable: one that begins after a call began shows every write that ended before
it. So a call that finds a read under way waits for it to end and then shares the next one with
every call that arrived meanwhile; a read that began before the call is never handed to it.
Reads run one at a time per ``SharedRead``: use it only where they already did, or callers
that read side by side would now wait for one another.

An error is shared like an answer (an API that is away fails every call that waited on it,
once, instead of once per call in turn).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class SharedRead(Generic[T]):
    """``read()`` for many threads: every caller gets the outcome of a call to ``read`` made
    after it called (module docstring)."""

    def __init__(self, read: Callable[[], T]) -> None:
        self._read = read
        self._cond = threading.Condition()
        self._started = 0  # reads begun so far, numbered from 1
        self._ended = 0  # the number of the last read that ended
        self._running = False
        self._outcome: tuple[T | None, BaseException | None] = (None, None)
        self.reads = 0
        """How many times ``read`` ran (for tests)."""
        self.waiting = 0
        """Callers waiting for a read to end (for tests)."""

    def __call__(self) -> T:
        with self._cond:
            wanted = self._started + 1  # the first read that begins from now on
            while self._ended < wanted:
                if not self._running:
                    break
                self.waiting += 1
                self._cond.wait()
                self.waiting -= 1
            else:
                return self._result(self._outcome)
            self._running = True
            self._started += 1
            number = self._started
            self.reads += 1
        outcome: tuple[T | None, BaseException | None]
        try:
            outcome = (self._read(), None)
        except BaseException as error:  # shared with the waiters, then raised here too
            outcome = (None, error)
        with self._cond:
            self._running = False
            self._ended = number
            self._outcome = outcome
            self._cond.notify_all()
        return self._result(outcome)

    @staticmethod
    def _result(outcome: tuple[T | None, BaseException | None]) -> T:
        value, error = outcome
        if error is not None:
            raise error
        return value  # type: ignore[return-value]  # None only alongside an error
