"""Offerings a spot interruption took away, kept unavailable for every plugin's inventory.

When the cloud reclaims a spot instance, buying the same type in the same zone as spot again
is likely to be reclaimed too; upstream Karpenter's interruption controller marks the offering
(type, zone, ``spot``) in its unavailable-offerings cache for three minutes
(``pkg/controllers/interruption/utils.go: markUnavailableOfferings``). The plugins each keep such
a cache for the capacity errors their own launches see, but an interruption is learnt by the core
(from any plugin's queue, or from a Node's taint), so the facade keeps this one and applies it
to every inventory it returns: the solver, launches and consolidation all see the offering as
unavailable, whichever plugin serves the NodeClass.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterable
from typing import Final

from karpenter_capi.core.clock import Clock
from karpenter_capi.core.instancetype import InstanceType, Offering

INTERRUPTED_TTL_SECONDS: Final = 180.0
"""Upstream's ``UnavailableOfferingsTTL`` (3 minutes)."""


class InterruptedOfferings:
    """(instance type, zone, capacity type) -> when the mark ends. Thread-safe."""

    def __init__(self, clock: Clock, ttl_seconds: float = INTERRUPTED_TTL_SECONDS) -> None:
        self._clock = clock
        self._ttl = ttl_seconds
        self._lock = threading.Lock()
        self._until: dict[tuple[str, str, str], float] = {}

    def mark(self, instance_type: str, zone: str, capacity_type: str) -> None:
        with self._lock:
            self._until[(instance_type, zone, capacity_type)] = self._clock.monotonic() + self._ttl

    def is_marked(self, instance_type: str, zone: str, capacity_type: str) -> bool:
        with self._lock:
            return self._live().get((instance_type, zone, capacity_type)) is not None

    def _live(self) -> dict[tuple[str, str, str], float]:
        now = self._clock.monotonic()
        for key in [key for key, until in self._until.items() if until <= now]:
            del self._until[key]
        return self._until

    def apply(self, instance_types: Iterable[InstanceType]) -> list[InstanceType]:
        """The same types, with the marked offerings made unavailable."""
        with self._lock:
            marked = set(self._live())
        if not marked:
            return list(instance_types)
        result = []
        for it in instance_types:
            if not any((it.name, o.zone, o.capacity_type) in marked for o in it.offerings):
                result.append(it)
                continue
            result.append(
                it.with_offerings(self._unavailable(it.name, o, marked) for o in it.offerings)
            )
        return result

    @staticmethod
    def _unavailable(name: str, offering: Offering, marked: set[tuple[str, str, str]]) -> Offering:
        if (name, offering.zone, offering.capacity_type) not in marked or not offering.available:
            return offering
        return dataclasses.replace(offering, available=False)
