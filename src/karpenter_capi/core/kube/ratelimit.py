"""A token bucket on the injected clock, for writes that are for humans and may be dropped.

Upstream Karpenter rate-limits its per-pod ``Nominated`` Events with client-go's
``flowcontrol.NewTokenBucketRateLimiter(5, 10)``, one shared by every pod, and drops (never
queues) what does not get a token: a 1,000-pod round says so on 10 pods, not on 1,000, and its
API requests go to NodeClaims instead. client-go's bucket reads the wall clock; this one asks a
``Clock``, so the simulator and tests refill it in virtual time.
"""

from __future__ import annotations

import threading

from karpenter_capi.core.clock import Clock

__all__ = ["TokenBucket"]


class TokenBucket:
    """``qps`` tokens a second up to ``burst``, starting full; ``try_accept`` takes one."""

    def __init__(self, qps: float, burst: int, clock: Clock) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError(f"a token bucket needs qps > 0 and burst >= 1, not {qps}/{burst}")
        self._qps = qps
        self._burst = float(burst)
        self._clock = clock
        self._tokens = float(burst)
        self._last = clock.monotonic()
        self._lock = threading.Lock()

    def try_accept(self) -> bool:
        """Take a token if one is there; ``False`` (nothing taken) when the bucket is empty."""
        with self._lock:
            now = self._clock.monotonic()
            self._tokens = min(self._burst, self._tokens + (now - self._last) * self._qps)
            self._last = now
            if self._tokens < 1:
                return False
            self._tokens -= 1
            return True
