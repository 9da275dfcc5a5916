"""The batching window: wait for a burst of pending pods to finish arriving, then solve once.

A Deployment scaled to 100 replicas creates its pods over a second or two; solving after the
first would launch a node for it alone. As upstream Karpenter, the window closes once no new
pod has appeared for ``idle`` seconds (default 1 s), or ``max_duration`` after it opened
(default 10 s) however busy it is, so a steady trickle cannot postpone provisioning for ever.
Time comes from the injected clock. Pods are observed when a round looks (``observe``) and,
against a real API, as their events arrive (``saw``, from an informer's thread), so the window
counts from the pod itself and not from the next look.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Final

from karpenter_capi.core.clock import Clock

DEFAULT_IDLE_SECONDS: Final = 1.0
DEFAULT_MAX_SECONDS: Final = 10.0


class Batcher:
    """Tracks when the current batch of pending pods began and last grew."""

    def __init__(
        self,
        clock: Clock,
        *,
        idle: float = DEFAULT_IDLE_SECONDS,
        max_duration: float = DEFAULT_MAX_SECONDS,
    ) -> None:
        if idle <= 0 or max_duration < idle:
            raise ValueError(
                f"batch window: need 0 < idle ({idle}) <= max duration ({max_duration})"
            )
        self._clock = clock
        self._idle = idle
        self._max = max_duration
        self._seen: set[str] = set()
        self._opened: float | None = None
        self._last_new: float = 0.0
        self._lock = threading.Lock()

    def observe(self, pending: Iterable[str]) -> None:
        """The pods pending now (by key); any not seen before opens or extends the window."""
        current = set(pending)
        with self._lock:
            now = self._clock.now().timestamp()
            if current - self._seen:
                if self._opened is None:
                    self._opened = now
                self._last_new = now
            self._seen = current

    def saw(self, key: str) -> float | None:
        """One pending pod, as its event arrives: a new one opens or extends the window.
        Returns the seconds until the window closes when it did, else ``None``."""
        with self._lock:
            if key in self._seen:
                return None
            self._seen.add(key)
            now = self._clock.now().timestamp()
            if self._opened is None:
                self._opened = now
            self._last_new = now
            return max(0.0, min(self._last_new + self._idle, self._opened + self._max) - now)

    def trigger(self) -> None:
        """Something other than a new pod calls for a round (the cluster changed under pods
        still pending): open or extend the window as a new pod would."""
        with self._lock:
            now = self._clock.now().timestamp()
            if self._opened is None:
                self._opened = now
            self._last_new = now

    def ready(self) -> bool:
        """Whether the open window has closed, so a solve should run now."""
        if self._opened is None:
            return False
        now = self._clock.now().timestamp()
        return now - self._last_new >= self._idle or now - self._opened >= self._max

    def seconds_until_ready(self) -> float | None:
        """How long until the window closes with no new pods; ``None`` when none is open."""
        if self._opened is None:
            return None
        now = self._clock.now().timestamp()
        return max(0.0, min(self._last_new + self._idle, self._opened + self._max) - now)

    def reset(self) -> None:
        """The batch was solved: the next new pod opens a new window."""
        with self._lock:
            self._opened = None
