"""The threaded fleet's shard coordinator, stepped on a thread of its own.

``Fleet.run`` once stepped the coordinator inside its sync, on the thread that also starts,
stops and rebuilds members. Under load a sync took seconds, the Lease renewals came more than
the renew deadline apart, and the replica fenced clusters it held itself (issue 28 item 3).
Here the coordinator steps every ``retry_period`` whatever the sync is doing, and wakes the
sync when the clusters it serves change. The stepped (virtual time) fleet keeps stepping it
from its sync: there nothing runs meanwhile.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection
from typing import Final, Protocol

from karpenter_capi.core.clock import Clock

log = logging.getLogger(__name__)

_STOP_POLL: Final = 0.25
"""Seconds between looks at the stop flag while waiting for the next step."""
_AFTER_EXPIRY = 0.01
"""A step for a Lease's expiry comes this long after it, so the Lease reads as expired."""


class Steppable(Protocol):
    def step(self, clusters: Collection[str]) -> frozenset[str]: ...


class ShardLoop:
    """Steps ``coordinator`` with ``clusters()`` every ``retry_period`` on its own thread.

    ``clusters()`` returns the keys to share, or None while they are not known yet (discovery
    not synced: a partial list would take less than the share). ``on_change`` is called when
    the served set changes, ``on_error`` with what a step raised (the set then stays as it
    was: the fence stops writes once the Leases lapse), ``on_step`` with each step's length
    in seconds (the fleet's ``karpenter_fleet_shard_step_duration_seconds``). The next step
    comes a ``retry_period`` after the last began, or as soon as ``next_expiry()`` (the first
    foreign Lease to expire, ``ShardCoordinator.next_expiry``) has passed, if that is sooner.
    """

    def __init__(
        self,
        coordinator: Steppable,
        clock: Clock,
        retry_period: float,
        *,
        clusters: Callable[[], Collection[str] | None],
        on_change: Callable[[], None],
        on_error: Callable[[Exception], None],
        on_step: Callable[[float], None] = lambda _seconds: None,
        next_expiry: Callable[[], float | None] = lambda: None,
    ) -> None:
        self._coordinator = coordinator
        self._clock = clock
        self._retry_period = retry_period
        self._clusters = clusters
        self._on_change = on_change
        self._on_error = on_error
        self._on_step = on_step
        self._next_expiry = next_expiry
        self._served: frozenset[str] = frozenset()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.steps = 0

    def served(self) -> frozenset[str]:
        """The clusters the last step said this replica serves."""
        return self._served

    def start(self) -> ShardLoop:
        self._thread = threading.Thread(target=self._run, name="fleet-shards", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop stepping and wait for a step under way: ``release_all`` may follow."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def step_once(self) -> None:
        keys = self._clusters()
        if keys is None:
            return
        try:
            served = self._coordinator.step(keys)
        except Exception as exc:
            self._on_error(exc)
            return
        finally:
            self.steps += 1
        if served != self._served:
            self._served = served
            self._on_change()

    def _run(self) -> None:
        while not self._stop.is_set():
            began = self._clock.monotonic()
            self.step_once()
            took = self._clock.monotonic() - began
            self._on_step(took)
            if took > self._retry_period:
                log.debug("a shard step took %.1fs (retry period %gs)", took, self._retry_period)
            deadline = began + self._retry_period
            expiry = self._next_expiry()
            if expiry is not None:
                deadline = min(deadline, expiry + _AFTER_EXPIRY)
            while not self._stop.is_set():
                left = deadline - self._clock.monotonic()
                if left <= 0:
                    break
                self._stop.wait(min(left, _STOP_POLL))
