"""Injected time.

Controllers never read the wall clock or sleep: they ask a ``Clock``. Real clusters use
``SystemClock``; tests and the simulator use ``FakeClock``, which moves only when told, so hours
of cluster life (consolidateAfter, expireAfter, registration timeouts) run in milliseconds and
deterministically.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol, runtime_checkable


@runtime_checkable
class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards (for intervals and deadlines)."""
        ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()


class FakeClock:
    """A clock that moves only when ``advance``/``set`` is called. Thread-safe."""

    def __init__(self, start: datetime | None = None) -> None:
        self._lock = threading.Lock()
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)
        self._monotonic = 1000.0

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def monotonic(self) -> float:
        with self._lock:
            return self._monotonic

    def advance(self, seconds: float | timedelta) -> None:
        delta = seconds if isinstance(seconds, timedelta) else timedelta(seconds=seconds)
        if delta < timedelta(0):
            raise ValueError("a clock cannot go backwards")
        with self._lock:
            self._now += delta
            self._monotonic += delta.total_seconds()


def format_timestamp(moment: datetime) -> str:
    """RFC 3339 with second precision and a ``Z``, as Kubernetes writes ``metav1.Time``."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_micro_time(moment: datetime) -> str:
    """RFC 3339 with microseconds and a ``Z``: the wire form of ``metav1.MicroTime``
    (Lease and Event series times), which a strict decoder requires."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_timestamp(value: str) -> datetime:
    """Parse a ``metav1.Time``/``MicroTime`` string into an aware UTC datetime."""
    return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)
