"""A TTL cache of what a cloud sells, per key (a region, a location).

The inventory is rebuilt at every provisioning round, while the catalog it reads (instance
types, their shapes, the zones that offer them) changes a few times a year. ``CatalogCache``
loads a key's value once and serves it for ``ttl_seconds`` on the injected clock. When a reload
fails the stale value keeps serving (a catalog a day old is still right about almost everything)
and the failure is logged once; a key that never loaded re-raises its error, but asks the cloud
again only after ``retry_seconds`` so a broken credential does not cost an API call per round.
Loads of one key are serialised, loads of different keys run in parallel. Thread-safe.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Final, Generic, TypeVar

from karpenter_capi.plugin_api import Clock

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

DEFAULT_TTL_SECONDS: Final = 6 * 3600.0
DEFAULT_RETRY_SECONDS: Final = 60.0


class CatalogError(Exception):
    """Loading a catalog failed and no earlier value can stand in; the message says why."""


@dataclass
class _Entry(Generic[V]):
    value: V | None = None
    loaded: bool = False
    expires: float = 0.0  # monotonic: when to load again
    error: str | None = None  # the last failure, while it lasts


class CatalogCache(Generic[K, V]):
    """``get(key)`` returns ``loader(key)``, cached for ``ttl_seconds`` (see the module doc)."""

    def __init__(
        self,
        name: str,
        loader: Callable[[K], V],
        clock: Clock,
        *,
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
        retry_seconds: float = DEFAULT_RETRY_SECONDS,
    ) -> None:
        self.name = name
        self._loader = loader
        self._clock = clock
        self._ttl = ttl_seconds
        self._retry = min(retry_seconds, ttl_seconds)
        self._lock = threading.Lock()
        self._entries: dict[K, _Entry[V]] = {}
        self._key_locks: dict[K, threading.Lock] = {}

    def get(self, key: K) -> V:
        """The value for ``key``; raises ``CatalogError`` when it never loaded."""
        entry = self._fresh(key)
        if entry is None:
            with self._key_lock(key):
                entry = self._fresh(key)  # another thread may have loaded it meanwhile
                if entry is None:
                    entry = self._load(key)
        if entry.loaded:
            return entry.value  # type: ignore[return-value]  # loaded: value is a V
        raise CatalogError(f"{self.name} {key}: {entry.error}")

    def invalidate(self, key: K) -> None:
        """Load ``key`` again at the next ``get`` (a launcher learned the catalog is wrong)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                entry.expires = 0.0

    def _key_lock(self, key: K) -> threading.Lock:
        with self._lock:
            return self._key_locks.setdefault(key, threading.Lock())

    def _fresh(self, key: K) -> _Entry[V] | None:
        now = self._clock.monotonic()
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry.expires > now:
                return entry
        return None

    def _load(self, key: K) -> _Entry[V]:
        with self._lock:
            previous = self._entries.get(key)
        try:
            value = self._loader(key)
        except Exception as exc:  # any SDK error: keep what we had
            message = f"{type(exc).__name__}: {exc}"
            entry = _Entry[V](
                value=previous.value if previous else None,
                loaded=bool(previous and previous.loaded),
                expires=self._clock.monotonic() + self._retry,
                error=message,
            )
            if previous is None or previous.error is None:
                log.warning(
                    "%s %s: cannot load (%s)%s",
                    self.name,
                    key,
                    message,
                    "; serving the previous catalog" if entry.loaded else "",
                )
        else:
            entry = _Entry[V](value=value, loaded=True, expires=self._clock.monotonic() + self._ttl)
        with self._lock:
            self._entries[key] = entry
        return entry
