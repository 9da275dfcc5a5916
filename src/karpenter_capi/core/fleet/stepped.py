"""The fleet in virtual time: discovery, the sync and every member's ``SteppedDriver``, in
one thread on one ``FakeClock``.

What ``SteppedDriver`` is to one Operator, ``SteppedFleet`` is to a fleet: a pass steps the
discovery informers, syncs when the sync is due or discovery saw a change, then gives every
member's driver one pass, in the order of their keys; ``advance`` jumps the clock from timer to
timer (the next sync, a discovery retry, any member's requeue or periodic run) and settles at
each. Members come and go between passes, so the simulator and the tests see a Cluster served
within one sync of its appearance, exactly where a real replica would serve it.

Most members are idle at most timers (one cluster's requeue is nobody else's business), and an
idle member's pass is still a poll of each of its twenty-odd watches. Given a ``ChangeFeed``
(the simulator knows when a cluster's API servers were written to, or stopped answering), a
member without news is not polled: its pass runs only if it has timed work (a key ready, a
periodic run, an informer's list, retry or resync due), and then steps only the informers with
timed work. Polls that would bring nothing are all that is saved: the outcome is the same as
stepping every member (same order, same time). Without a feed every member is polled, since
nothing else can tell a quiet cluster from one with news.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.runtime.stepped import DEFAULT_MAX_ITERATIONS, NotQuietError

if TYPE_CHECKING:
    from karpenter_capi.core.fleet.fleet import Fleet

_TICK = 1e-6


class ChangeFeed(Protocol):
    """Which members' clusters changed: what lets ``SteppedFleet`` skip the quiet ones."""

    def changed(self, key: str) -> bool:
        """Whether anything member ``key`` watches or reaches may have changed since the last
        call for ``key`` (an object written in its workload cluster or in its namespace of the
        management cluster, an API server going away or coming back); True on the first call
        and whenever in doubt."""
        ...


class SteppedFleet:
    """Drives a ``Fleet`` deterministically; get one from ``Fleet.stepped()``.

    ``changes``: set it to a ``ChangeFeed`` to skip idle members (module docstring).
    """

    def __init__(self, fleet: Fleet, *, max_iterations: int = DEFAULT_MAX_ITERATIONS) -> None:
        if not isinstance(fleet.clock, FakeClock):
            raise TypeError("SteppedFleet needs a fleet built with a FakeClock")
        self.fleet = fleet
        self.clock: FakeClock = fleet.clock
        self._max_iterations = max_iterations
        self.changes: ChangeFeed | None = None

    def step(self) -> bool:
        """One pass over discovery, the sync and every member; whether anything happened."""
        fleet = self.fleet
        progressed = fleet.discovery.step()
        due = fleet.next_sync is None or fleet.next_sync <= self.clock.monotonic()
        if fleet.discovery.has_synced() and (progressed or due):
            progressed = fleet.sync() or progressed
        for key in sorted(fleet.members):
            driver = fleet.members[key].stepped_driver
            if driver is None:
                continue
            # Asked of each member in turn, right before its pass, so a write by one earlier
            # in this pass is news here, as it would be to the member's own watches.
            news = self.changes is None or self.changes.changed(key)
            if news or driver.has_timed_work():
                progressed = driver.step(news=news) or progressed
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


__all__ = ["ChangeFeed", "SteppedFleet"]
