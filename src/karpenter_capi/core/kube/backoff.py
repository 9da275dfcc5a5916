"""Exponential backoff with jitter, computed rather than slept.

An informer that loses its API server must not hammer it on the way back, and many replicas
restarting together must not retry in lockstep. This object only *computes* delays: the caller
decides how to wait (a threaded runner waits on a ``threading.Event``, the stepped simulation
advances a virtual clock to ``retry_at``), so the same logic runs deterministically in tests.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from karpenter_capi.core.clock import Clock

UNREACHABLE_RETRY_MAX = 5.0
"""The longest wait (seconds) before trying an API server again that could not be reached
(``core.kube.errors.unreachable``). Longer backoffs protect a server that answers with errors;
one that does not answer at all costs nothing to ask again, and every second waited past its
return is a second of pods left pending (issue 24: a 60 s backoff bound the last pods 59 s
after the API was back). A ``Retry-After`` the server sends still wins."""

RECONNECT_MAX = 2.0
"""The longest wait (seconds) of an informer before listing or watching again a server that
could not be reached: its first answer is what wakes every controller waiting on the outage
(``Informer.add_recovery_handler``), so it is asked more often than anything else. A refused
connection costs the server nothing."""


class Backoff:
    """Delays of ``initial * factor**n`` capped at ``cap``, each shortened by up to ``jitter``.

    Jitter is applied downwards (a delay lies in ``[base * (1 - jitter), base]``) so the cap is
    a true upper bound while retries at the cap still spread out instead of synchronising.
    """

    def __init__(
        self,
        clock: Clock,
        *,
        initial: float = 1.0,
        cap: float = 30.0,
        factor: float = 2.0,
        jitter: float = 0.25,
        rand: Callable[[], float] = random.random,
    ) -> None:
        if initial <= 0 or cap < initial or factor < 1 or not 0 <= jitter < 1:
            raise ValueError("backoff needs 0 < initial <= cap, factor >= 1 and 0 <= jitter < 1")
        self._clock = clock
        self._initial = initial
        self._cap = cap
        self._factor = factor
        self._jitter = jitter
        self._rand = rand
        self._failures = 0
        self._retry_at: float | None = None

    @property
    def failures(self) -> int:
        """Consecutive failures since the last reset."""
        return self._failures

    @property
    def retry_at(self) -> float | None:
        """Monotonic time before which the caller should not retry; ``None`` when healthy."""
        return self._retry_at

    def base_delay(self) -> float:
        """The un-jittered delay the next failure will get."""
        return min(self._cap, self._initial * self._factor**self._failures)

    def fail(self, at_least: float = 0.0, *, cap: float | None = None) -> float:
        """Record a failure; return the delay to wait and remember when the wait ends.

        ``at_least`` honours a server's ``Retry-After`` when it asks for longer than the backoff;
        ``cap`` lowers the cap for this failure (``UNREACHABLE_RETRY_MAX`` for a server that
        did not answer), without forgetting the failures counted so far.
        """
        base = self.base_delay() if cap is None else min(cap, self.base_delay())
        delay = max(at_least, base * (1.0 - self._jitter * self._rand()))
        self._failures += 1
        self._retry_at = self._clock.monotonic() + delay
        return delay

    def remaining(self) -> float:
        """Seconds left until ``retry_at`` (0 when a retry may happen now)."""
        if self._retry_at is None:
            return 0.0
        return max(0.0, self._retry_at - self._clock.monotonic())

    def ready(self) -> bool:
        return self.remaining() <= 0.0

    def reset(self) -> None:
        """Forget past failures after a healthy period: the next failure waits ``initial`` again."""
        self._failures = 0
        self._retry_at = None
