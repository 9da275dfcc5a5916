"""The Prometheus collector prometheus_client lacks and Karpenter's exposition needs.

Why a module of its own: ``metrics.py`` names and records the series; this is general plumbing
under it (a summary with quantiles over a sliding window, as client_golang has), with its own
locking and clock. (``*_created`` series are left out by ``exposition.py``.)
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Iterable, Sequence

from prometheus_client.metrics_core import Metric

from karpenter_capi.core.clock import Clock

SUMMARY_QUANTILES: tuple[float, ...] = (0.0, 0.5, 0.9, 0.99, 1.0)
"""Karpenter's ``metrics.SummaryObjectives()`` quantiles."""

SUMMARY_MAX_AGE_SECONDS = 600.0
"""client_golang's ``DefMaxAge``: a summary's quantiles describe the last ten minutes."""

_SUMMARY_MAX_SAMPLES = 4096
"""Observations kept per series for quantiles; beyond it the oldest go first (bounded memory
when a burst of pods starts at once)."""


class WindowedSummary:
    """A summary with upstream's quantiles (0, 0.5, 0.9, 0.99, 1) over the last ten minutes.

    prometheus_client's ``Summary`` exposes only ``_count`` and ``_sum``; Karpenter's
    ``karpenter_pods_startup_duration_seconds{quantile="0.99"}`` is what its dashboards plot,
    so this collector keeps the recent observations and computes exact quantiles at scrape
    time. ``_count`` and ``_sum`` are cumulative, like client_golang's. Time comes from the
    injected clock, so the window slides with simulated time too.
    """

    def __init__(
        self, name: str, documentation: str, labelnames: Sequence[str], clock: Clock
    ) -> None:
        self._name = name
        self._documentation = documentation
        self._labelnames = tuple(labelnames)
        self._clock = clock
        self._lock = threading.Lock()
        self._series: dict[tuple[str, ...], _Window] = {}
        if not self._labelnames:
            # An unlabelled summary is exposed from the start (count 0, NaN quantiles), as
            # client_golang does, so rate() has a zero to start from.
            self._series[()] = _Window()

    def observe(self, value: float, labelvalues: tuple[str, ...]) -> None:
        if len(labelvalues) != len(self._labelnames):
            raise ValueError(f"{self._name} takes labels {self._labelnames}, got {labelvalues}")
        now = self._clock.monotonic()
        with self._lock:
            window = self._series.get(labelvalues)
            if window is None:
                window = self._series[labelvalues] = _Window()
            window.add(now, value)
            # Unscraped (no Prometheus, or a slow one), the window would keep observations
            # long past the ten minutes any scrape could report, up to its cap per series.
            window.recent(now - SUMMARY_MAX_AGE_SECONDS, values=False)

    def describe(self) -> Iterable[Metric]:
        return [Metric(self._name, self._documentation, "summary")]

    def collect(self) -> Iterable[Metric]:
        family = Metric(self._name, self._documentation, "summary")
        horizon = self._clock.monotonic() - SUMMARY_MAX_AGE_SECONDS
        with self._lock:
            snapshot = [
                (labelvalues, window.recent(horizon), window.count, window.total)
                for labelvalues, window in sorted(self._series.items())
            ]
        for labelvalues, recent, count, total in snapshot:
            labels = dict(zip(self._labelnames, labelvalues, strict=True))
            for q, value in zip(SUMMARY_QUANTILES, _quantiles(recent), strict=True):
                family.add_sample(self._name, {**labels, "quantile": _format_quantile(q)}, value)
            family.add_sample(self._name + "_sum", labels, total)
            family.add_sample(self._name + "_count", labels, float(count))
        return [family]


class _Window:
    """One series of a ``WindowedSummary``: cumulative count and sum, recent observations."""

    def __init__(self) -> None:
        self.count = 0
        self.total = 0.0
        self._recent: deque[tuple[float, float]] = deque(maxlen=_SUMMARY_MAX_SAMPLES)

    def add(self, at: float, value: float) -> None:
        self.count += 1
        self.total += value
        self._recent.append((at, value))

    def recent(self, horizon: float, *, values: bool = True) -> list[float]:
        """The observations since ``horizon``, sorted (older ones are dropped for good);
        ``values=False`` only drops them."""
        while self._recent and self._recent[0][0] < horizon:
            self._recent.popleft()
        return sorted(value for _, value in self._recent) if values else []


def _quantiles(ordered: list[float]) -> list[float]:
    """Nearest-rank quantiles of sorted values; NaN for an empty window, as client_golang."""
    if not ordered:
        return [math.nan] * len(SUMMARY_QUANTILES)
    last = len(ordered) - 1
    return [ordered[min(last, max(0, math.ceil(q * len(ordered)) - 1))] for q in SUMMARY_QUANTILES]


def _format_quantile(q: float) -> str:
    # client_golang prints the objective with %g: "0", "0.5", "0.99", "1".
    return f"{q:g}"
