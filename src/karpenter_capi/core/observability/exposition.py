"""The text exposition of many registries, byte for byte prometheus_client's, at a fraction of
its CPU.

Why: a fleet controller renders every served cluster's metrics on each scrape. At 100
clusters that is ~70,000 samples, 90% of them histogram buckets, and prometheus_client's
``generate_latest`` spent ~0.6 CPU-s a render building a ``Sample`` (a dict of labels) per line,
copying it to add the ``cluster`` label, then sorting and escaping every label of every line:
under the GIL, against every cluster's decisions, every 15-30 s.

How: a series' labels never change, so its lines' text up to the value (``name{labels} ``) is
built once and kept; a render reads each series' values (its buckets, sum, value) straight
from prometheus_client's ``Counter``, ``Gauge`` and ``Histogram`` and formats only the numbers,
and a series whose values are those of the last render reuses its lines whole. Any other
collector (the summaries of ``_collectors``, the process's collectors, a plugin's custom one)
goes through ``generate_latest`` itself. ``tests/core/observability/test_exposition.py``
compares the output with ``generate_latest``'s, byte for byte. When prometheus_client's
internals are not the ones this reads (another major version, multiprocess mode), every
render falls back to ``generate_latest`` whole.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, values
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics.exposition import escape_label_name, escape_metric_name
from prometheus_client.utils import floatToGoString

Source = tuple[str | None, CollectorRegistry]
"""A registry and the ``cluster`` label its samples get (``None``: none)."""

CLUSTER = "cluster"
"""The label a fleet puts on each cluster's samples."""

EXPORTED_CLUSTER = "exported_" + CLUSTER
"""Where a sample's own ``cluster`` label goes, as Prometheus does with clashing target labels."""

_VERSIONS = itertools.count(1)


_go_float: Callable[[float], str] = floatToGoString
"""How prometheus_client writes a value or bound (``+Inf``, ``1.5e+06``, ``3.0``)."""


class TrackedHistogram(Histogram):
    """A ``Histogram`` whose observations stamp their series with a fresh version, so a render
    skips reading (41 locked bucket reads) and formatting a series unchanged since the last.

    The stamp comes from one process-wide ``itertools.count`` (atomic under the GIL) and is
    written after the buckets: a render that reads the stamp before the buckets can only see a
    stamp older than the buckets it reads, and renders the series again next time.
    """

    _version = 0

    def observe(self, amount: float, exemplar: dict[str, str] | None = None) -> None:
        super().observe(amount, exemplar)
        self._version = next(_VERSIONS)


_TYPES = {
    Counter: "counter",
    Gauge: "gauge",
    Histogram: "histogram",
    TrackedHistogram: "histogram",
}


def _readable() -> bool:
    """Whether this prometheus_client keeps values where the fast path reads them."""
    try:
        registry = CollectorRegistry()
        histogram = Histogram("probe", "", ["l"], buckets=(1.0,), registry=registry)
        child = histogram.labels("x")
        child.observe(0.5)
        counter = Counter("probe_c", "", registry=registry)
        gauge = Gauge("probe_g", "", registry=registry)
        with registry._lock:
            collectors = list(registry._collector_to_names)
        return (
            values.ValueClass is values.MutexValue
            and collectors == [histogram, counter, gauge]
            and not registry._target_info
            and histogram._metrics[("x",)] is child
            and child._buckets[0].get() == 1.0
            and child._sum.get() == 0.5
            and list(child._upper_bounds) == [1.0, float("inf")]
            and counter._value.get() == 0.0
            and gauge._value.get() == 0.0
        )
    except Exception:
        return False


FAST = _readable()


def _escape_value(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _label_text(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    inner = ",".join(
        f'{escape_label_name(name)}="{_escape_value(value)}"'
        for name, value in sorted(labels.items())
    )
    return "{" + inner + "}"


def with_cluster(cluster: str | None, labels: dict[str, str]) -> dict[str, str]:
    """``labels`` with ``cluster="<cluster>"`` first, a sample's own ``cluster`` renamed."""
    if cluster is None:
        return labels
    own = dict(labels)
    if CLUSTER in own:
        own[EXPORTED_CLUSTER] = own.pop(CLUSTER)
    return {CLUSTER: cluster, **own}


class _Family:
    """One family of the output: its two header lines and its samples' lines, in order."""

    __slots__ = ("header", "lines")

    def __init__(self, name: str, documentation: str, kind: str) -> None:
        exposed = escape_metric_name(name + "_total" if kind == "counter" else name)
        help_text = documentation.replace("\\", r"\\").replace("\n", r"\n")
        self.header = f"# HELP {exposed} {help_text}\n# TYPE {exposed} {kind}\n"
        self.lines: list[str] = []


class _Series:
    """What a render keeps of one series: its lines up to the value, and its last output."""

    __slots__ = ("prefixes", "text", "values", "version")

    def __init__(self, prefixes: list[str]) -> None:
        self.prefixes = prefixes
        self.values: list[float] | None = None
        self.version = -1
        self.text = ""

    def render(self, values: list[float], counts: int) -> str:
        """The lines for ``values``; the first ``counts`` of them are observation counts."""
        if values != self.values:
            self.values = values
            prefixes = self.prefixes
            lines = [f"{prefixes[i]}{_count_text(values[i])}\n" for i in range(counts)]
            lines.extend(
                f"{prefixes[i]}{_go_float(values[i])}\n" for i in range(counts, len(values))
            )
            self.text = "".join(lines)
        return self.text


_COUNT_TEXTS: dict[float, str] = {}
"""Counts already formatted: a histogram's lines are mostly the same few small counts."""


def _count_text(count: float) -> str:
    # Only counts come here: never -0.0, which as a key would find 0.0's text.
    text = _COUNT_TEXTS.get(count)
    if text is None:
        text = _go_float(count)
        if len(_COUNT_TEXTS) < 100_000:
            _COUNT_TEXTS[count] = text
    return text


class Exposition:
    """Renders sources into the Prometheus text format; keeps what it built for the next one.

    ``render(sources, trailer)``: each source's families merged by name across sources (each
    family's header once, where ``generate_latest`` over a collector yielding them merged would
    put it, every sample labelled with its source's cluster, ``*_created`` dropped), then the
    ``trailer``'s families as they are. Thread-safe; renders run one at a time.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._series: dict[tuple[str | None, object], _Series] = {}

    def render(
        self, sources: Sequence[Source], trailer: Iterable[CollectorRegistry | Metric] = ()
    ) -> bytes:
        if not FAST:
            return generate_latest(_Reference(sources, trailer))
        with self._lock:
            kept: dict[tuple[str | None, object], _Series] = {}
            families: dict[str, _Family] = {}
            for cluster, registry in sources:
                self._add(families, kept, cluster, registry)
            out = [part for family in families.values() for part in (family.header, *family.lines)]
            for item in trailer:
                if isinstance(item, CollectorRegistry):
                    tail: dict[str, _Family] = {}
                    self._add(tail, kept, None, item)
                    out.extend(part for fam in tail.values() for part in (fam.header, *fam.lines))
                else:
                    out.append(_generic_text(item, None, header=True))
            self._series = kept
        return "".join(out).encode("utf-8")

    def _add(
        self,
        families: dict[str, _Family],
        kept: dict[tuple[str | None, object], _Series],
        cluster: str | None,
        registry: CollectorRegistry,
    ) -> None:
        with registry._lock:
            collectors = list(registry._collector_to_names)
        for collector in collectors:
            kind = _TYPES.get(type(collector))
            if kind is None:
                for metric in collector.collect():
                    family = families.get(metric.name)
                    if family is None:
                        family = families[metric.name] = _Family(
                            metric.name, metric.documentation, metric.type
                        )
                    family.lines.append(_generic_text(metric, cluster, header=False))
                continue
            wrapper: Any = collector  # one of _TYPES: prometheus_client's metric classes
            name: str = wrapper._name
            family = families.get(name)
            if family is None:
                family = families[name] = _Family(name, wrapper._documentation, kind)
            for labelvalues, child in _children(collector):
                key = (cluster, child)  # a child's labels and buckets are its own for good
                series = self._series.get(key)
                if series is None:
                    labels = with_cluster(
                        cluster, dict(zip(wrapper._labelnames, labelvalues, strict=True))
                    )
                    series = _Series(_prefixes(name, kind, labels, child))
                kept[key] = series
                version = getattr(child, "_version", None)
                if version is None:
                    series.render(_values(kind, child), _counts(kind, child))
                elif version != series.version:
                    series.render(_values(kind, child), _counts(kind, child))
                    series.version = version
                    series.values = None  # the stamp says when to read them again
                family.lines.append(series.text)


def _children(collector: Any) -> Iterator[tuple[tuple[str, ...], Any]]:
    if not collector._labelnames:
        yield (), collector
        return
    with collector._lock:
        children = list(collector._metrics.items())
    yield from children


def _prefixes(name: str, kind: str, labels: dict[str, str], child: Any) -> list[str]:
    if kind == "counter":
        return [f"{escape_metric_name(name + '_total')}{_label_text(labels)} "]
    if kind == "gauge":
        return [f"{escape_metric_name(name)}{_label_text(labels)} "]
    bucket = escape_metric_name(name + "_bucket")
    prefixes = [
        f"{bucket}{_label_text({**labels, 'le': _go_float(bound)})} "
        for bound in child._upper_bounds
    ]
    prefixes.append(f"{escape_metric_name(name + '_count')}{_label_text(labels)} ")
    if child._upper_bounds[0] >= 0:
        prefixes.append(f"{escape_metric_name(name + '_sum')}{_label_text(labels)} ")
    return prefixes


def _counts(kind: str, child: Any) -> int:
    """How many of a series' values are counts: a histogram's buckets and ``_count``."""
    return len(child._upper_bounds) + 1 if kind == "histogram" else 0


def _values(kind: str, child: Any) -> list[float]:
    if kind != "histogram":
        return [child._value.get()]
    out: list[float] = []
    total = 0.0
    for bucket in child._buckets:
        total += bucket.get()
        out.append(total)
    out.append(total)
    if child._upper_bounds[0] >= 0:  # prometheus_client has no _sum for negative buckets
        out.append(child._sum.get())
    return out


def _generic_text(metric: Metric, cluster: str | None, *, header: bool) -> str:
    """``metric``'s lines as ``generate_latest`` writes them (``*_created`` dropped), with the
    cluster label; its two header lines only when ``header``."""
    one = Metric(metric.name, metric.documentation, metric.type, metric.unit)
    created = metric.name + "_created"
    one.samples = [
        sample._replace(labels=with_cluster(cluster, sample.labels))
        for sample in metric.samples
        if sample.name != created
    ]
    text = generate_latest(_Reference((), (one,))).decode("utf-8")
    return text if header else text.split("\n", 2)[2]


class _Reference:
    """What ``Exposition.render`` writes, as a collector ``generate_latest`` renders: the
    reference its output is compared with, and the fallback."""

    def __init__(
        self, sources: Sequence[Source], trailer: Iterable[CollectorRegistry | Metric]
    ) -> None:
        self._sources = sources
        self._trailer = trailer

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        for cluster, registry in self._sources:
            for family in registry.collect():
                merged = families.get(family.name)
                if merged is None:
                    merged = Metric(family.name, family.documentation, family.type, family.unit)
                    families[family.name] = merged
                created = family.name + "_created"
                merged.samples.extend(
                    sample._replace(labels=with_cluster(cluster, sample.labels))
                    for sample in family.samples
                    if sample.name != created
                )
        yield from families.values()
        for item in self._trailer:
            if isinstance(item, CollectorRegistry):
                yield from _Reference([(None, item)], ()).collect()
            else:
                yield item


def reference_families(
    sources: Sequence[Source], trailer: Iterable[CollectorRegistry | Metric] = ()
) -> Iterator[Metric]:
    """The families ``Exposition.render`` writes, as prometheus_client collects them."""
    return _Reference(sources, trailer).collect()


def reference(
    sources: Sequence[Source], trailer: Iterable[CollectorRegistry | Metric] = ()
) -> bytes:
    """``generate_latest``'s rendering of what ``Exposition.render`` renders."""
    return generate_latest(_Reference(sources, trailer))
