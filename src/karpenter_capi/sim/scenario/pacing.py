"""Holding virtual time to wall time, for ``simulate --realtime`` and ``--speed``.

By default a scenario runs as fast as the machine goes: ten virtual minutes in a few seconds,
too fast to follow with ``kubectl get -w`` while ``--serve`` is on. The runner calls a
``pace(virtual_seconds)`` callable as its clock advances; this one sleeps until that much wall
time (divided by the speed) has passed since its first call. The wall clock starts there, not
when the pacer is built: the CLI builds it before ``run()`` loads the CRDs and plugins and
settles the cluster, and counting that setup against the pace would let the first virtual
seconds run unpaced at a high ``--speed``. Controllers never sleep: only this callable,
injected by the CLI, does; tests inject a recording fake instead.

A run slower than the requested speed is not slowed further; it catches up as fast as it can.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class WallClockPacer:
    """``pace(virtual_seconds)``: wait until ``virtual_seconds / speed`` of wall time passed."""

    def __init__(
        self,
        speed: float = 1.0,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if speed <= 0:
            raise ValueError("the speed must be positive")
        self.speed = speed
        self._monotonic = monotonic
        self._sleep = sleep
        # Wall time and virtual seconds at the first call: virtual time is paced from there.
        self._start: tuple[float, float] | None = None

    def __call__(self, virtual_seconds: float) -> None:
        now = self._monotonic()
        if self._start is None:
            self._start = (now, virtual_seconds)
        wall_start, virtual_start = self._start
        ahead = (virtual_seconds - virtual_start) / self.speed - (now - wall_start)
        if ahead > 0:
            self._sleep(ahead)
