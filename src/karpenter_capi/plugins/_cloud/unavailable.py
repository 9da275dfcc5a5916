"""Offerings a launch found unavailable, remembered for a while.

When a cloud refuses capacity (EC2's InsufficientInstanceCapacity, Azure's
SkuNotAvailable/ZonalAllocationFailed), asking again at the next round would fail the same way;
Karpenter remembers the offering (instance type, zone, capacity type) as unavailable for three
minutes so the solver picks the next cheapest. ``ExpiringMarks`` is that memory for any key, on
the injected clock; ``generic_capi`` keys it by scalable resource, the cloud launchers by
``UnavailableOfferings``' offering triple.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from typing import ClassVar, Final, Generic, TypeVar

from karpenter_capi.plugin_api import Clock

K = TypeVar("K", bound=Hashable)

DEFAULT_TTL_SECONDS: Final = 180.0


class ExpiringMarks(Generic[K]):
    """Keys marked with a reason, each forgotten ``ttl_seconds`` after its mark. Thread-safe."""

    DEFAULT_TTL_SECONDS: ClassVar[float] = DEFAULT_TTL_SECONDS

    def __init__(self, clock: Clock, ttl_seconds: float = DEFAULT_TTL_SECONDS) -> None:
        self._clock = clock
        self._ttl = ttl_seconds
        self._lock = threading.Lock()
        self._entries: dict[K, tuple[float, str]] = {}

    def mark(self, key: K, reason: str) -> None:
        """Mark ``key`` for the TTL (restarting it if already marked)."""
        with self._lock:
            self._entries[key] = (self._clock.monotonic() + self._ttl, reason)

    def clear(self, key: K) -> None:
        """Forget a mark early."""
        with self._lock:
            self._entries.pop(key, None)

    def reason(self, key: K) -> str | None:
        """Why ``key`` is marked, or ``None`` when it is not (or no longer)."""
        now = self._clock.monotonic()
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            if entry[0] <= now:
                del self._entries[key]
                return None
            return entry[1]

    def is_unavailable(self, key: K) -> bool:
        return self.reason(key) is not None


class UnavailableOfferings:
    """Offerings keyed by (instance type, zone, capacity type), unavailable for 3 minutes."""

    def __init__(self, clock: Clock, ttl_seconds: float = DEFAULT_TTL_SECONDS) -> None:
        self._marks = ExpiringMarks[tuple[str, str, str]](clock, ttl_seconds)

    def mark(self, instance_type: str, zone: str, capacity_type: str, reason: str) -> None:
        """The cloud refused this offering: unavailable for the TTL."""
        self._marks.mark((instance_type, zone, capacity_type), reason)

    def clear(self, instance_type: str, zone: str, capacity_type: str) -> None:
        self._marks.clear((instance_type, zone, capacity_type))

    def reason(self, instance_type: str, zone: str, capacity_type: str) -> str | None:
        """Why the offering is unavailable, or ``None``."""
        return self._marks.reason((instance_type, zone, capacity_type))

    def is_unavailable(self, instance_type: str, zone: str, capacity_type: str) -> bool:
        return self.reason(instance_type, zone, capacity_type) is not None
