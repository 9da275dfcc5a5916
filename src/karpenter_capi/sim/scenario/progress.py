"""The live progress line ``simulate`` shows on a terminal while a scenario runs.

A run of several virtual minutes takes seconds to a minute of wall time; without feedback the
terminal looks hung, and with ``--realtime`` the point is to watch. The runner hands each
sample to a callback; this module turns a sample into one line (virtual time, pods, nodes,
NodeClaims by state, cost per hour) and rewrites it in place with a carriage return, at most
a few times per wall second so a fast run does not spend its time printing. It is only used
when stdout is a terminal and the output is not ``--json``: a pipe or a file gets the summary
alone.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from typing import TextIO

from karpenter_capi.sim.scenario.result import NODECLAIM_STATES, Sample

_ERASE_LINE = "\r\x1b[K"


def clock_time(seconds: float) -> str:
    """Virtual time as ``h:mm:ss``."""
    whole = int(seconds)
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


def render_progress(sample: Sample, width: int = 100) -> str:
    """One line describing ``sample``, cut to ``width`` (so the most telling figures first).

    NodeClaim states with none in them are left out.
    """
    states = sample.nodeclaims_by_state
    claims = ", ".join(f"{states[key]} {key}" for key in NODECLAIM_STATES if states.get(key))
    line = (
        f"{clock_time(sample.at)}  pods {sample.pods_pending} pending, {sample.pods_bound} bound"
        f"  nodes {sample.nodes}  ${sample.cost_per_hour:,.2f}/h  NodeClaims {claims or '0'}"
    )
    if sample.disruptions:
        line += f"  disrupted {sum(sample.disruptions.values())}"
    return line[: max(1, width)]


class ProgressLine:
    """An ``on_sample`` callback that keeps one line up to date on a terminal.

    ``interval`` is the least wall time between two redraws (samples in between are skipped;
    the summary that follows has the final figures). ``clear`` erases the line.
    """

    def __init__(
        self,
        stream: TextIO,
        *,
        interval: float = 0.2,
        monotonic: Callable[[], float] = time.monotonic,
        width: Callable[[], int] | None = None,
    ) -> None:
        self._stream = stream
        self._interval = interval
        self._monotonic = monotonic
        self._width = width or (lambda: shutil.get_terminal_size((100, 24)).columns)
        self._last: float | None = None
        self._shown = False

    def __call__(self, sample: Sample) -> None:
        now = self._monotonic()
        if self._last is not None and now - self._last < self._interval:
            return
        self._last = now
        self._stream.write(_ERASE_LINE + render_progress(sample, self._width() - 1))
        self._stream.flush()
        self._shown = True

    def clear(self) -> None:
        if self._shown:
            self._stream.write(_ERASE_LINE)
            self._stream.flush()
            self._shown = False


def progress_line(stream: TextIO, *, json_output: bool) -> ProgressLine | None:
    """A progress line for ``stream`` if it is a terminal and the output is not JSON."""
    if json_output:
        return None
    isatty = getattr(stream, "isatty", None)
    if isatty is None or not isatty():
        return None
    return ProgressLine(stream)
