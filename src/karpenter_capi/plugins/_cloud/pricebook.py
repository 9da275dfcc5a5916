"""Hourly prices of a cloud, refreshed in the background and kept when the cloud is unreachable.

A cloud's price list changes rarely (AWS publishes on-demand prices a few times a month, spot
prices move slowly) but fetching it is slow and may fail: the Pricing API throttles, a private
cluster has no route to it. So a ``PriceBook`` holds one ``PriceSnapshot`` and:

* refreshes it every ``refresh_seconds`` (12 hours by default) off the caller's path: the
  inventory asks at every provisioning round and must never wait for a price list, so a due
  refresh runs on a daemon thread and the caller gets the current snapshot;
* keeps the last good snapshot when a refresh fails, logs the failure once (not at every
  round), and tries again after ``retry_seconds``;
* saves every good snapshot to a ``PriceStore`` (``ConfigMapPriceStore``) and, on first use,
  starts from the stored one, so an operator restarted without cloud access still has prices.

Only the very first fetch, when nothing is known yet, runs on the caller's thread: without it the
first provisioning round would have no prices at all. Time comes from the injected clock, so a
``FakeClock`` drives refreshes in tests; ``background=False`` refreshes inline, deterministically.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType
from typing import Any, Final, Protocol

from karpenter_capi.plugin_api import Clock, KubeClient
from karpenter_capi.plugin_api.karpenter import format_timestamp, parse_timestamp
from karpenter_capi.plugin_api.kube import (
    CONFIGMAPS,
    WARNING,
    AlreadyExists,
    ApiError,
    Conflict,
    EventRecorder,
    NotFound,
)
from karpenter_capi.plugins._cloud.metrics import CloudMetrics

log = logging.getLogger(__name__)

DEFAULT_REFRESH_SECONDS: Final = 12 * 3600.0
DEFAULT_RETRY_SECONDS: Final = 300.0
REASON_INVALID_PRICES: Final = "InvalidPriceSnapshot"
"""The Event reason on a price ConfigMap whose snapshot could not be read."""
SNAPSHOT_KEY: Final = "prices.json"
"""The ConfigMap data key holding the snapshot's JSON."""
_FORMAT_VERSION: Final = 1


def _frozen(mapping: Mapping[Any, float]) -> Mapping[Any, float]:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True)
class PriceSnapshot:
    """Every price of one region (or location) at one moment, in USD per hour.

    ``on_demand`` maps an instance type to its on-demand price; ``spot`` maps an
    ``(instance type, zone)`` pair to its spot price there. ``fetched_at`` is when the cloud
    said so (kept across restarts, so the age of stored prices is honest).
    """

    on_demand: Mapping[str, float]
    spot: Mapping[tuple[str, str], float]
    fetched_at: datetime

    def __post_init__(self) -> None:
        # Callers build snapshots from plain dicts; freeze them so a shared snapshot cannot
        # change under a concurrent reader.
        object.__setattr__(self, "on_demand", _frozen(self.on_demand))
        object.__setattr__(self, "spot", _frozen(self.spot))

    def to_json(self) -> str:
        """A compact, stable JSON form (spot keys as ``"type|zone"``)."""
        return json.dumps(
            {
                "version": _FORMAT_VERSION,
                "fetchedAt": format_timestamp(self.fetched_at),
                "onDemand": dict(sorted(self.on_demand.items())),
                "spot": {f"{t}|{z}": p for (t, z), p in sorted(self.spot.items())},
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> PriceSnapshot:
        """Parse ``to_json``'s output; ``ValueError`` when it is not a snapshot."""
        try:
            raw = json.loads(text)
            if not isinstance(raw, dict) or raw.get("version") != _FORMAT_VERSION:
                raise ValueError(f"not a version-{_FORMAT_VERSION} price snapshot")
            for field in ("onDemand", "spot"):
                # dict() would also take a list of pairs: a snapshot is objects, nothing else.
                if not isinstance(raw.get(field) or {}, dict):
                    raise ValueError(f"{field} is not an object of prices")
            spot: dict[tuple[str, str], float] = {}
            for key, price in dict(raw.get("spot") or {}).items():
                instance_type, sep, zone = str(key).partition("|")
                if not sep:
                    raise ValueError(f"spot key {key!r} is not type|zone")
                spot[(instance_type, zone)] = _price(price)
            return cls(
                on_demand={str(k): _price(v) for k, v in dict(raw.get("onDemand") or {}).items()},
                spot=spot,
                fetched_at=parse_timestamp(str(raw["fetchedAt"])),
            )
        except (KeyError, TypeError, json.JSONDecodeError) as exc:
            raise ValueError(f"malformed price snapshot: {exc}") from None


def _price(value: object) -> float:
    price = float(value)  # type: ignore[arg-type]
    if price < 0 or not math.isfinite(price):
        raise ValueError(f"price {value!r} is not a finite number >= 0")
    return price


class PriceStore(Protocol):
    """Where a ``PriceBook`` keeps its last good snapshot across restarts."""

    def load(self) -> PriceSnapshot | None:
        """The stored snapshot, or ``None`` when there is none (or it cannot be read)."""
        ...

    def save(self, snapshot: PriceSnapshot) -> None:
        """Store ``snapshot``, replacing the previous one; may raise on API errors."""
        ...


class ReadOnlyPriceStore:
    """Loads stored prices but never writes them: what ``--dry-run`` (which writes nothing to
    the cluster) gives a price book."""

    def __init__(self, store: PriceStore) -> None:
        self._store = store

    def load(self) -> PriceSnapshot | None:
        return self._store.load()

    def save(self, snapshot: PriceSnapshot) -> None:
        return None


class ConfigMapPriceStore:
    """A ``PriceStore`` in one ConfigMap (``data["prices.json"]``).

    With a ``clock``, a snapshot that cannot be read is also a Warning Event on the ConfigMap
    (reason ``InvalidPriceSnapshot``); without one (a dry run) only a log line.

    Written only after a successful fetch (twice a day by default), with the read
    ``resourceVersion`` as a precondition: two replicas refreshing at once cannot interleave a
    half-written update, and the loser simply retries once on the new version.
    """

    def __init__(
        self, client: KubeClient, namespace: str, name: str, *, clock: Clock | None = None
    ) -> None:
        self._client = client
        self.namespace = namespace
        self.name = name
        self._clock = clock

    def load(self) -> PriceSnapshot | None:
        try:
            found = self._client.get(CONFIGMAPS, self.name, self.namespace)
        except NotFound:
            return None
        except ApiError as exc:
            where = f"{self.namespace}/{self.name}"
            log.warning("cannot read prices from ConfigMap %s: %s", where, exc)
            return None
        text = (found.get("data") or {}).get(SNAPSHOT_KEY)
        if not text:
            return None
        try:
            return PriceSnapshot.from_json(str(text))
        except ValueError as exc:
            message = (
                f"ignoring {SNAPSHOT_KEY} of ConfigMap {self.namespace}/{self.name}: {exc}; "
                "prices come from the cloud (or an estimate) until it is rewritten"
            )
            log.warning("%s", message)
            if self._clock is not None:
                # The log is easy to miss; an Event on the ConfigMap is where kubectl looks.
                recorder = EventRecorder(self._client, self._clock)
                recorder.record(found, WARNING, REASON_INVALID_PRICES, message)
            return None

    def save(self, snapshot: PriceSnapshot) -> None:
        data = {SNAPSHOT_KEY: snapshot.to_json()}
        for attempt in range(2):
            try:
                self._write(data)
                return
            except (Conflict, AlreadyExists):
                # Another replica wrote between our read and write; once more on its version.
                if attempt:
                    raise

    def _write(self, data: Mapping[str, str]) -> None:
        try:
            current = self._client.get(CONFIGMAPS, self.name, self.namespace)
        except NotFound:
            self._client.create(
                CONFIGMAPS,
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {
                        "name": self.name,
                        "namespace": self.namespace,
                        "labels": {"app.kubernetes.io/managed-by": "karpenter-capi"},
                    },
                    "data": dict(data),
                },
                self.namespace,
            )
            return
        updated = dict(current)
        meta = dict(current.get("metadata") or {})
        updated["metadata"] = meta  # keeps resourceVersion: the update's precondition
        updated["data"] = {**(current.get("data") or {}), **data}
        self._client.update(CONFIGMAPS, updated)


class PriceBook:
    """The prices of one cloud region, refreshed in the background (see the module docstring).

    ``fetch`` returns a complete ``PriceSnapshot`` or raises; ``name`` appears in logs and is
    the ``plugin`` label of the price-age gauge. Thread-safe.
    """

    def __init__(
        self,
        name: str,
        fetch: Callable[[], PriceSnapshot],
        clock: Clock,
        *,
        refresh_seconds: float = DEFAULT_REFRESH_SECONDS,
        retry_seconds: float = DEFAULT_RETRY_SECONDS,
        store: PriceStore | None = None,
        metrics: CloudMetrics | None = None,
        background: bool = True,
    ) -> None:
        if refresh_seconds <= 0 or retry_seconds <= 0:
            raise ValueError("refresh_seconds and retry_seconds must be positive")
        self.name = name
        self._fetch = fetch
        self._clock = clock
        self._refresh_seconds = refresh_seconds
        self._retry_seconds = min(retry_seconds, refresh_seconds)
        self._store = store
        self._metrics = metrics
        self._background = background
        self._lock = threading.Lock()
        self._refresh_lock = threading.Lock()  # one fetch at a time
        self._first_lock = threading.Lock()  # one first use: concurrent callers wait for it
        self._snapshot: PriceSnapshot | None = None
        self._started = False
        self._next_refresh = 0.0  # on the monotonic clock
        self._failing = False
        self._thread: threading.Thread | None = None
        self.last_error: str | None = None
        """The message of the last failed refresh, until one succeeds."""

    # -- reading ---------------------------------------------------------------------------------

    def snapshot(self) -> PriceSnapshot | None:
        """The current prices, refreshing when due; ``None`` only while none were ever known."""
        with self._lock:
            started = self._started
        if not started:
            self._first_use()
        elif self._clock.monotonic() >= self._due():
            if self._background:
                self._refresh_in_background()
            else:
                self.refresh()
        with self._lock:
            snapshot = self._snapshot
        self._report_age(snapshot)
        return snapshot

    def current(self) -> PriceSnapshot | None:
        """The prices held now, never refreshing: what a ``fetch`` may read to keep part of
        them (``snapshot`` would wait for the refresh that is calling it)."""
        with self._lock:
            return self._snapshot

    def on_demand(self, instance_type: str) -> float | None:
        """The on-demand hourly price of ``instance_type``, or ``None`` when unknown."""
        snapshot = self.snapshot()
        return None if snapshot is None else snapshot.on_demand.get(instance_type)

    def spot(self, instance_type: str, zone: str) -> float | None:
        """The spot hourly price of ``instance_type`` in ``zone``, or ``None`` when unknown."""
        snapshot = self.snapshot()
        return None if snapshot is None else snapshot.spot.get((instance_type, zone))

    def age_seconds(self) -> float | None:
        """How old the current prices are (since the cloud gave them), or ``None``."""
        with self._lock:
            snapshot = self._snapshot
        if snapshot is None:
            return None
        return max(0.0, (self._clock.now() - snapshot.fetched_at).total_seconds())

    # -- refreshing ------------------------------------------------------------------------------

    def refresh(self) -> bool:
        """Fetch now, on this thread. True when new prices were fetched (and stored)."""
        with self._refresh_lock:
            try:
                snapshot = self._fetch()
            except Exception as exc:  # any SDK error: keep the last good prices
                self._failed(exc)
                return False
            with self._lock:
                self._snapshot = snapshot
                self._started = True
                self._next_refresh = self._clock.monotonic() + self._refresh_seconds
                recovered, self._failing = self._failing, False
                self.last_error = None
            if recovered:
                log.info("%s: prices refreshed again after failures", self.name)
            self._save(snapshot)
            self._report_age(snapshot)
            return True

    def _due(self) -> float:
        with self._lock:
            return self._next_refresh

    def _first_use(self) -> None:
        """Start from the stored snapshot when it is fresh; otherwise fetch, falling back to it."""
        with self._first_lock:
            with self._lock:
                if self._started:
                    return  # another thread got here first
            self._start()

    def _start(self) -> None:
        stored = self._load()
        if stored is not None:
            age = (self._clock.now() - stored.fetched_at).total_seconds()
            if age < self._refresh_seconds:
                with self._lock:
                    if not self._started:
                        self._snapshot, self._started = stored, True
                        self._next_refresh = self._clock.monotonic() + self._refresh_seconds - age
                return
        if not self.refresh() and stored is not None:
            with self._lock:
                if self._snapshot is None:
                    self._snapshot = stored
            log.warning(
                "%s: using stored prices from %s until the cloud answers",
                self.name,
                format_timestamp(stored.fetched_at),
            )

    def _refresh_in_background(self) -> None:
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            # Push the deadline so the rounds that follow do not each start a thread.
            self._next_refresh = self._clock.monotonic() + self._retry_seconds
            self._thread = threading.Thread(
                target=self.refresh, name=f"pricebook-{self.name}", daemon=True
            )
            self._thread.start()

    def wait_for_refresh(self, timeout: float | None = None) -> None:
        """Join a background refresh in progress (tests, shutdown)."""
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def _failed(self, exc: Exception) -> None:
        message = f"{type(exc).__name__}: {exc}"
        with self._lock:
            self._started = True
            self._next_refresh = self._clock.monotonic() + self._retry_seconds
            first, self._failing = not self._failing, True
            self.last_error = message
            kept = self._snapshot is not None
        if first:
            log.warning(
                "%s: cannot fetch prices (%s); %s, retrying every %gs",
                self.name,
                message,
                "keeping the last good prices" if kept else "no prices yet",
                self._retry_seconds,
            )
        else:
            log.debug("%s: price refresh failed again: %s", self.name, message)

    def _load(self) -> PriceSnapshot | None:
        if self._store is None:
            return None
        try:
            return self._store.load()
        except Exception as exc:  # a broken store must not cost us the cloud's prices
            log.warning("%s: cannot load stored prices: %s", self.name, exc)
            return None

    def _save(self, snapshot: PriceSnapshot) -> None:
        if self._store is None:
            return
        try:
            self._store.save(snapshot)
        except Exception as exc:  # prices in memory still serve; the next refresh saves again
            log.warning("%s: cannot store prices: %s", self.name, exc)

    def _report_age(self, snapshot: PriceSnapshot | None) -> None:
        if self._metrics is None:
            return
        if snapshot is None:
            self._metrics.price_age(None)
            return
        self._metrics.price_age((self._clock.now() - snapshot.fetched_at).total_seconds())
