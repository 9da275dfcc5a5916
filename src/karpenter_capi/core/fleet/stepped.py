"""The fleet in virtual time: discovery, the sync and every member's ``SteppedDriver``, in
one thread on one ``FakeClock``.

What ``SteppedDriver`` is to one Operator, ``SteppedFleet`` is to a fleet: a pass steps the
discovery informers, syncs when the sync is due or discovery saw a change, then gives every
member's driver one pass, in the order of their keys; ``advance`` jumps the clock from timer to
timer (the next sync, a discovery retry, any member's requeue or periodic run) and settles at
each. Members come and go between passes, so the simulator and the tests see a Cluster served
within one sync of its appearance, exactly where a real replica would serve it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.runtime.stepped import DEFAULT_MAX_ITERATIONS, NotQuietError

if TYPE_CHECKING:
    from karpenter_capi.core.fleet.fleet import Fleet

_TICK = 1e-6


class SteppedFleet:
    """Drives a ``Fleet`` deterministically; get one from ``Fleet.stepped()``."""

    def __init__(self, fleet: Fleet, *, max_iterations: int = DEFAULT_MAX_ITERATIONS) -> None:
        if not isinstance(fleet.clock, FakeClock):
            raise TypeError("SteppedFleet needs a fleet built with a FakeClock")
        self.fleet = fleet
        self.clock: FakeClock = fleet.clock
        self._max_iterations = max_iterations

    def step(self) -> bool:
        """One pass over discovery, the sync and every member; whether anything happened."""
        fleet = self.fleet
        progressed = fleet.discovery.step()
        due = fleet.next_sync is None or fleet.next_sync <= self.clock.monotonic()
        if fleet.discovery.has_synced() and (progressed or due):
            progressed = fleet.sync() or progressed
        for key in sorted(fleet.members):
            driver = fleet.members[key].stepped_driver
            if driver is not None:
                progressed = driver.step() or progressed
        return progressed

    def run_until_quiet(self, max_iterations: int | None = None) -> None:
        limit = self._max_iterations if max_iterations is None else max_iterations
        for _ in range(limit):
            if not self.step():
                return
        raise NotQuietError(
            f"the fleet was still busy after {limit} passes at clock {self.clock.monotonic():.6f}"
        )

    def next_timer(self) -> float | None:
        """The earliest time after now at which the fleet or any member has something due."""
        now = self.clock.monotonic()
        fleet = self.fleet
        times = [fleet.next_sync, fleet.discovery.next_wakeup_time()]
        for member in fleet.members.values():
            driver = member.stepped_driver
            if driver is not None:
                times.append(driver.next_timer())
        later = [time for time in times if time is not None and time > now]
        return min(later) if later else None

    def advance(self, seconds: float) -> None:
        """Move the clock ``seconds`` forward, stopping and settling at every timer."""
        if seconds < 0:
            raise ValueError("the clock cannot go backwards")
        end = self.clock.monotonic() + seconds
        self.run_until_quiet()
        while True:
            timer = self.next_timer()
            if timer is None or timer > end:
                break
            self._move_to(timer)
            self.run_until_quiet()
        self._move_to(end)
        self.run_until_quiet()

    def _move_to(self, target: float) -> None:
        delta = target - self.clock.monotonic()
        if delta > 0:
            self.clock.advance(delta)
        while self.clock.monotonic() < target:
            self.clock.advance(_TICK)


__all__ = ["SteppedFleet"]
