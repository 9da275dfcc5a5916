"""The writes this process made through one client, in the order they ended: what a reader of a
watch-fed copy must wait for before the copy is as good as a list (read your own writes).

Why: a copy fed by a watch lags the API server by however long the events take to arrive, so a
decision made from it may miss a write that has already happened. A write by someone else can
land a moment later just as well, and a list made at that moment would miss it too, so that lag
changes nothing a caller could rely on; a write *this process* made and then reads back is
different: launch binds a Machine to a NodeClaim and the next launch call must see that bind, or
it hands the same Machine out twice. controller-runtime solves the same problem with
"expectations"; here the writer's answer carries the object's new ``resourceVersion``, and a
watch delivers a resource's events in resourceVersion order, so a copy whose watch has reached
that resourceVersion shows the write (or a later one). The log keeps, per resource, the last
``capacity`` writes with the resourceVersion, namespace and labels their answers showed; a
reader keeps a cursor into it and learns only the writes since its last read. ResourceVersions
are opaque by contract; kube-apiserver's are etcd revisions (integers) and the in-memory API
server's too, and a write whose resourceVersion is not an integer is logged as unknown, which
tells the reader to list instead.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from karpenter_capi.core.kube.resources import Resource

DEFAULT_CAPACITY: Final = 4096
"""Writes kept per resource: a reader that falls further behind lists instead."""


@dataclass(frozen=True, slots=True)
class Written:
    """One write's answer, as much of it as a reader needs to know whether to wait for it."""

    resource_version: int | None
    """``None``: not an integer, so no watch position can be compared with it."""
    namespace: str | None
    key: str | None
    """The object's cache key (``namespace/name`` or ``name``), when the answer named it."""
    labels: Mapping[str, str] | None
    """``None``: the answer did not show them (a ``scale`` subresource), so any selector may
    match."""


def resource_version_number(value: object) -> int | None:
    """A resourceVersion as the integer kube-apiserver makes it, or ``None``."""
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


class WriteLog:
    """Thread-safe; ``record`` after every successful write, ``since`` from every reader."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self._capacity = capacity
        self._lock = threading.Lock()
        self._writes: dict[str, deque[Written]] = {}
        self._ends: dict[str, int] = {}  # per resource: the number the next write gets

    def record(self, resource: Resource, answer: Mapping[str, Any], *, whole: bool) -> None:
        """Log a write's ``answer``; ``whole``: it is the object itself (not a subresource's
        view of it, whose labels are not the object's)."""
        metadata = answer.get("metadata")
        if not isinstance(metadata, Mapping) or answer.get("kind") == "Status":
            # A delete may answer with a Status: nothing known, so every reader lists.
            metadata, whole = {}, False
        labels = metadata.get("labels") if whole else None
        namespace = (
            metadata.get("namespace") if isinstance(metadata.get("namespace"), str) else None
        )
        name = metadata.get("name")
        written = Written(
            resource_version_number(metadata.get("resourceVersion")),
            namespace,
            (f"{namespace}/{name}" if namespace else name) if isinstance(name, str) else None,
            (labels if isinstance(labels, Mapping) else {}) if whole else None,
        )
        key = resource.group_resource
        with self._lock:
            writes = self._writes.get(key)
            if writes is None:
                writes = self._writes[key] = deque(maxlen=self._capacity)
            writes.append(written)
            self._ends[key] = self._ends.get(key, 0) + 1

    def end(self, resource: Resource) -> int:
        """A cursor past every write logged so far."""
        with self._lock:
            return self._ends.get(resource.group_resource, 0)

    def since(self, resource: Resource, cursor: int) -> tuple[Sequence[Written] | None, int]:
        """The writes from ``cursor`` on and the cursor past them; ``None`` instead of the
        writes when some of them were already dropped (the reader must list)."""
        key = resource.group_resource
        with self._lock:
            end = self._ends.get(key, 0)
            if cursor >= end:
                return (), end
            writes = self._writes[key]
            missed = end - cursor
            if missed > len(writes):
                return None, end
            return tuple(writes)[len(writes) - missed :], end
