"""The informer's local copy of a resource, with secondary indexes.

Controllers read the cluster from memory, not from the API server: "which pods are bound to
node X", "which Machine has providerID Y" must be answered in microseconds on every reconcile.
The store keeps objects by ``namespace/name`` (``name`` for cluster-scoped ones) and maintains
named indexes incrementally as objects come and go, under one lock, so a reader never sees an
object without its index entries or the other way round.

Objects are shared, not copied: treat what the store returns as read-only (frozen models make
that automatic; raw dicts rely on discipline).
"""

from __future__ import annotations

import builtins
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")

IndexFunc = Callable[[T], list[str]]
"""Maps an object to the index values it should be found under (``[]`` for none)."""

_log = logging.getLogger(__name__)

_NO_VALUES: list[str] = []  # never mutated: what an object not in an index compares with
_NO_METADATA: Mapping[str, Any] = {}


def object_key(obj: Mapping[str, Any]) -> str:
    """The cache key of a raw object: ``namespace/name``, or ``name`` when cluster-scoped."""
    metadata = obj.get("metadata") or {}
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError("object has no metadata.name")
    namespace = metadata.get("namespace")
    return f"{namespace}/{name}" if namespace else name


def event_key_and_version(obj: Mapping[str, Any]) -> tuple[str | None, str]:
    """A watch event object's key and resourceVersion, read in one look at its metadata for
    every event an informer applies. The key is ``None`` unless the metadata is a dict with a
    non-empty string name (then ``object_key`` says what is wrong); the resourceVersion is
    ``""`` when absent. Metadata that is not a mapping raises ``AttributeError``."""
    metadata = obj.get("metadata", _NO_METADATA)
    rv = metadata.get("resourceVersion", "")
    if type(rv) is not str:
        rv = str(rv)
    name = metadata.get("name") if type(metadata) is dict else None
    if type(name) is not str or not name:
        return None, rv
    namespace = metadata.get("namespace")
    return (f"{namespace}/{name}" if namespace else name), rv


def make_key(name: str, namespace: str | None = None) -> str:
    """The cache key for a name (and namespace, for namespaced resources)."""
    return f"{namespace}/{name}" if namespace else name


def split_key(key: str) -> tuple[str | None, str]:
    """``(namespace, name)`` of a cache key; namespace is ``None`` for cluster-scoped keys."""
    namespace, sep, name = key.partition("/")
    return (namespace, name) if sep else (None, key)


@dataclass(frozen=True, slots=True)
class StoreSnapshot(Generic[T]):
    """An immutable view of a store at one instant: items and indexes agree with each other."""

    items: Mapping[str, T]
    _indexes: Mapping[str, Mapping[str, frozenset[str]]]

    def get(self, key: str) -> T | None:
        return self.items.get(key)

    def list(self) -> builtins.list[T]:
        return list(self.items.values())

    def by_index(self, index_name: str, value: str) -> builtins.list[T]:
        if index_name not in self._indexes:
            raise KeyError(f"no index named {index_name!r}")
        keys = self._indexes[index_name].get(value, frozenset())
        return [self.items[key] for key in sorted(keys)]

    def __len__(self) -> int:
        return len(self.items)


class Store(Generic[T]):
    """A thread-safe map of key to object with incrementally maintained indexes."""

    def __init__(self, indexers: Mapping[str, IndexFunc[T]] | None = None) -> None:
        self._lock = threading.RLock()
        self._items: dict[str, T] = {}
        self._indexers: dict[str, IndexFunc[T]] = dict(indexers or {})
        # index name -> index value -> keys; and the reverse, to unindex without recomputing.
        self._indexes: dict[str, dict[str, set[str]]] = {name: {} for name in self._indexers}
        self._indexed_values: dict[str, dict[str, list[str]]] = {
            name: {} for name in self._indexers
        }
        self._changes = 0

    # Reads.

    @property
    def changes(self) -> int:
        """How many writes the store has taken: equal counts mean equal content, so a reader
        that polls (the provisioner looks twice a second) can skip re-reading an unchanged
        store."""
        return self._changes

    def get(self, key: str) -> T | None:
        with self._lock:
            return self._items.get(key)

    def get_by_name(self, name: str, namespace: str | None = None) -> T | None:
        return self.get(make_key(name, namespace))

    def list(self) -> builtins.list[T]:
        with self._lock:
            return list(self._items.values())

    def keys(self) -> builtins.list[str]:
        with self._lock:
            return list(self._items)

    def by_index(self, index_name: str, value: str) -> builtins.list[T]:
        """Objects whose index function returned ``value``, in key order."""
        with self._lock:
            return [self._items[key] for key in self.index_keys(index_name, value)]

    def index_count(self, index_name: str, value: str) -> int:
        """How many objects are under ``value`` (no list built: for checks on every event)."""
        with self._lock:
            if index_name not in self._indexes:
                raise KeyError(f"no index named {index_name!r}")
            return len(self._indexes[index_name].get(value, ()))

    def index_keys(self, index_name: str, value: str) -> builtins.list[str]:
        with self._lock:
            if index_name not in self._indexes:
                raise KeyError(f"no index named {index_name!r}")
            return sorted(self._indexes[index_name].get(value, ()))

    def index_values(self, index_name: str) -> builtins.list[str]:
        """Every value currently present in an index."""
        with self._lock:
            if index_name not in self._indexes:
                raise KeyError(f"no index named {index_name!r}")
            return sorted(self._indexes[index_name])

    def snapshot(self) -> StoreSnapshot[T]:
        with self._lock:
            indexes = {
                name: {value: frozenset(keys) for value, keys in index.items()}
                for name, index in self._indexes.items()
            }
            return StoreSnapshot(dict(self._items), indexes)

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._items

    def __iter__(self) -> Iterator[T]:
        return iter(self.list())

    # Writes (the informer is the only writer in normal use).

    def add_indexer(self, name: str, func: IndexFunc[T]) -> None:
        """Add an index, computing it for the objects already stored (adding the same one
        twice is a no-op: two components may each need it)."""
        with self._lock:
            if self._indexers.get(name) is func:
                return
            if name in self._indexers:
                raise ValueError(f"index {name!r} already exists")
            self._indexers[name] = func
            self._indexes[name] = {}
            self._indexed_values[name] = {}
            for key, obj in self._items.items():
                self._index_one(name, key, obj)

    def upsert(self, key: str, obj: T) -> T | None:
        """Store ``obj`` under ``key``; return the object it replaced, if any."""
        with self._lock:
            self._changes += 1
            old = self._items.get(key)
            self._items[key] = obj
            if old is None:
                for name in self._indexers:
                    self._index_one(name, key, obj)
                return old
            # Most updates (a pod's status, a NodeClaim's conditions) leave every indexed value
            # as it was: the buckets are touched only for an index whose values changed. This
            # runs for every watch event, so the common case (an index function returning a
            # list of at most one value, as all of ``indexes``' do) is spelled out inline.
            indexed = self._indexed_values
            for name, func in self._indexers.items():
                try:
                    values = func(obj)
                    if type(values) is not list or len(values) > 1:
                        values = list(dict.fromkeys(values))
                except Exception:
                    values = self._values_of(name, key, obj)  # logs, indexes nothing
                by_key = indexed[name]
                if values != by_key.get(key, _NO_VALUES):
                    self._unindex_one(name, key)
                    self._store_values(name, key, values)
            return old

    def delete(self, key: str) -> T | None:
        """Remove ``key``; return the object removed, if any."""
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._changes += 1
                self._unindex(key)
            return old

    def replace(self, items: Mapping[str, T]) -> None:
        """Swap the whole content at once (readers see the old or the new set, never a mix)."""
        with self._lock:
            self._changes += 1
            self._items = {}
            self._indexes = {name: {} for name in self._indexers}
            self._indexed_values = {name: {} for name in self._indexers}
            for key, obj in items.items():
                self._items[key] = obj
                for name in self._indexers:
                    self._index_one(name, key, obj)

    def _index_one(self, name: str, key: str, obj: T) -> None:
        self._store_values(name, key, self._values_of(name, key, obj))

    def _values_of(self, name: str, key: str, obj: T) -> builtins.list[str]:
        try:
            values = self._indexers[name](obj)
            # Duplicates dropped, order kept; a list of one value (the usual) is taken as is.
            if type(values) is not list or len(values) > 1:
                values = list(dict.fromkeys(values))
            return values
        except Exception:
            # A malformed object must not take the cache down: it is simply not indexed.
            _log.warning("index %r failed for %s; object left out of it", name, key, exc_info=True)
            return []

    def _store_values(self, name: str, key: str, values: builtins.list[str]) -> None:
        if not values:
            return
        self._indexed_values[name][key] = values
        index = self._indexes[name]
        for value in values:
            index.setdefault(value, set()).add(key)

    def _unindex(self, key: str) -> None:
        for name in self._indexed_values:
            self._unindex_one(name, key)

    def _unindex_one(self, name: str, key: str) -> None:
        index = self._indexes[name]
        for value in self._indexed_values[name].pop(key, ()):
            keys = index.get(value)
            if keys is None:
                continue
            keys.discard(key)
            if not keys:
                del index[value]
