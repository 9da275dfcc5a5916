"""The versioned object store behind the in-memory API server (its etcd).

Every write goes through ``Store.commit``: it assigns the next global resourceVersion, swaps the
stored object, appends the event to the resource's watch log and keeps the two indexes the
server needs to answer ownership questions without scanning everything (objects by uid, and
dependents by owner uid — cascade deletion of 10,000 pods must not be quadratic).

Stored objects are never mutated after commit: writers build a new dict and commit it. That is
what makes it safe for watch events and list snapshots to reference stored objects instead of
copying them; copies are made only when an object leaves the server.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from karpenter_capi.core.kube.client import WatchEventType
from karpenter_capi.core.kube.errors import Gone
from karpenter_capi.sim.apiserver.definitions import ResourceDefinition
from karpenter_capi.sim.apiserver.objects import object_key
from karpenter_capi.sim.apiserver.watch import EventLog, LoggedEvent

JsonObject = dict[str, Any]
TableRef = tuple[str, str]  # (group_resource, key)

_EXPIRED_CONTINUE = (
    "The provided continue parameter is too old to display a consistent list result. You can "
    "start a new list without the continue parameter, or use the continue token in this "
    "response to retrieve the remainder of the results. Continuing with the provided token "
    "results in an inconsistent list - objects that were created, modified, or deleted between "
    "the time the first chunk was returned and now may show up in the list."
)


def key_of(obj: JsonObject) -> str:
    meta = obj.get("metadata") or {}
    return object_key(meta.get("namespace"), str(meta.get("name", "")))


def _owner_uids(obj: JsonObject | None) -> set[str]:
    if obj is None:
        return set()
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return {str(ref.get("uid")) for ref in refs if ref.get("uid")}


def same_owners(before: JsonObject, after: JsonObject) -> bool:
    """Whether two versions of an object carry the very same ownerReferences list: a write
    that does not touch them (a status write, most patches) keeps the stored list itself."""
    refs = (before.get("metadata") or {}).get("ownerReferences")
    return refs is not None and refs is (after.get("metadata") or {}).get("ownerReferences")


@dataclass
class Table:
    """The objects of one resource (all versions share it), and their event log."""

    definition: ResourceDefinition
    log: EventLog
    objects: dict[str, JsonObject] = field(default_factory=dict)
    _sorted: list[str] | None = None

    @property
    def name(self) -> str:
        return self.definition.group_resource

    def sorted_keys(self) -> list[str]:
        if self._sorted is None:
            self._sorted = sorted(self.objects)
        return self._sorted

    def snapshot_at(self, rv: int) -> tuple[dict[str, JsonObject], list[str]]:
        """The objects at ``rv`` (later events undone) and their sorted keys; 410 if unknown."""
        later = self.log.since(rv)
        if later is None:
            raise Gone(_EXPIRED_CONTINUE)
        if not later:
            return self.objects, self.sorted_keys()
        snapshot = dict(self.objects)
        for event in reversed(later):
            key = key_of(event.obj)
            if event.type == "ADDED":
                snapshot.pop(key, None)
            elif event.prev is not None:
                snapshot[key] = event.prev
        return snapshot, sorted(snapshot)


class Store:
    """All tables, the global resourceVersion, and the uid/owner indexes."""

    def __init__(self, watch_history: int) -> None:
        self.rv = 0
        self.watch_history = watch_history
        self.tables: dict[str, Table] = {}
        self.by_uid: dict[str, TableRef] = {}
        self.dependents: dict[str, set[TableRef]] = {}
        # Objects per namespace, so a terminating namespace knows when it is empty.
        self.namespace_counts: dict[str, int] = {}
        # The resourceVersion of the latest write per namespace ("" for cluster-scoped objects),
        # so a stepped fleet can tell which clusters' namespaces changed without polling them.
        self.written_at: dict[str, int] = {}
        # Periodic compaction (``set_compaction``): (interval, monotonic clock), when it is due
        # next, and the revision the previous one recorded (compacted at the next).
        self._compaction: tuple[float, Callable[[], float]] | None = None
        self._compaction_due = 0.0
        self._compaction_rv = 0

    def table(self, definition: ResourceDefinition) -> Table:
        """The table of a resource, created on first use (kept when a CRD is re-created)."""
        table = self.tables.get(definition.group_resource)
        if table is None:
            table = Table(definition, EventLog(self.watch_history))
            self.tables[definition.group_resource] = table
        else:
            table.definition = definition
        return table

    def lookup_uid(self, uid: str) -> JsonObject | None:
        ref = self.by_uid.get(uid)
        if ref is None:
            return None
        table = self.tables.get(ref[0])
        return None if table is None else table.objects.get(ref[1])

    def dependents_of(self, uid: str) -> list[tuple[Table, JsonObject]]:
        found: list[tuple[Table, JsonObject]] = []
        for table_name, key in sorted(self.dependents.get(uid, ())):
            table = self.tables[table_name]
            obj = table.objects.get(key)
            if obj is not None:
                found.append((table, obj))
        return found

    def commit(
        self,
        table: Table,
        event_type: WatchEventType,
        obj: JsonObject,
        prev: JsonObject | None,
        *,
        owned: bool = False,
    ) -> JsonObject:
        """Write ``obj`` (or delete it, for DELETED) at the next resourceVersion; return it.

        ``owned``: ``obj`` and its metadata are dicts the write made for itself, referenced by
        nothing else, so they become the stored object (its resourceVersion set in place)
        instead of being copied once more. A metadata that is ``prev``'s is copied anyway."""
        self.rv += 1
        version = str(self.rv)
        meta = obj["metadata"]
        if owned and (prev is None or meta is not prev["metadata"]):
            meta["resourceVersion"] = version
            stored = obj
        else:
            stored = {**obj, "metadata": {**meta, "resourceVersion": version}}
        key = key_of(stored)
        uid = str(stored["metadata"].get("uid", ""))
        ref = (table.name, key)
        namespace = stored["metadata"].get("namespace")
        self.written_at[namespace or ""] = self.rv
        if event_type == "DELETED":
            if table.objects.pop(key, None) is not None:
                table._sorted = None
                if namespace:
                    self.namespace_counts[namespace] -= 1
            self.by_uid.pop(uid, None)
            self._reindex_owners(ref, prev, None)
        else:
            if key not in table.objects:
                table._sorted = None
                if namespace:
                    self.namespace_counts[namespace] = self.namespace_counts.get(namespace, 0) + 1
            table.objects[key] = stored
            self.by_uid[uid] = ref
            self._reindex_owners(ref, prev, stored)
        table.log.append(LoggedEvent(self.rv, event_type, stored, prev))
        if self._compaction is not None:
            self._compact_when_due()
        return stored

    def set_compaction(self, interval: float | None, monotonic: Callable[[], float]) -> None:
        """Every ``interval`` seconds of ``monotonic``, forget the history up to the revision
        the previous compaction recorded, as kube-apiserver has etcd do every 5 minutes
        (``--etcd-compaction-interval``): a watch resuming from before it gets 410. ``None``
        stops it."""
        self._compaction = None if interval is None else (interval, monotonic)
        self._compaction_due = 0.0 if interval is None else monotonic() + interval
        self._compaction_rv = self.rv

    def _compact_when_due(self) -> None:
        assert self._compaction is not None
        interval, monotonic = self._compaction
        now = monotonic()
        if now < self._compaction_due:
            return
        for table in self.tables.values():
            table.log.drop_through(self._compaction_rv)
        self._compaction_rv = self.rv
        self._compaction_due = now + interval

    def _reindex_owners(
        self, ref: TableRef, before: JsonObject | None, after: JsonObject | None
    ) -> None:
        if before is not None and after is not None and same_owners(before, after):
            return
        old, new = _owner_uids(before), _owner_uids(after)
        for uid in old - new:
            holders = self.dependents.get(uid)
            if holders is not None:
                holders.discard(ref)
                if not holders:
                    del self.dependents[uid]
        for uid in new - old:
            self.dependents.setdefault(uid, set()).add(ref)

    def set_watch_history(self, capacity: int) -> None:
        self.watch_history = capacity
        for table in self.tables.values():
            table.log.set_capacity(capacity)

    def compact(self) -> None:
        for table in self.tables.values():
            table.log.compact(self.rv)
