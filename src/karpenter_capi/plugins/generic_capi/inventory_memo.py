"""The last inventory built per NodeClass, reused while everything it was built from is the same.

``inventory.build_inventory`` runs on every provisioning round and every launch call (about
22 ms per call in ``basic-1000``, issue 25): describing each resource (``offering``, ``shape``)
and grouping them into instance types is pure, given what was read for it. So the build is
split in two. The reads run on every call, as before (the selection, each resource's template,
kubelet settings, native description, learned overhead and recent launch failure: their own
caches decide when they go to the API, and time-based expiry keeps working). The pure part is
reused when its key is equal to the last one's:

- the ``ShapeSettings`` (the NodeClass's annotations and the plugin options);
- per selected resource, in order: its kind, namespace, name, ``(uid, resourceVersion)``, the
  template status, the template and kubelet read errors, the native description and its
  error, the kubelet settings, the learned overhead, the launch-failure reason and why it is
  left out before describing (``inventory._ResourceInputs.key``).

A resource without a ``resourceVersion`` (an object not from an API server) cannot be keyed, so
nothing is reused for that build. The problems the selection carried in (with their uids) are
not cached: each call adds its own.

The memo is per cluster (``InventoryMemo.shared``, the framework's ``PluginContext.state``),
keeps one entry per NodeClass and at most ``max_entries`` NodeClasses (least recently used
out). What it returns is a fresh ``Inventory`` with fresh lists over frozen elements
(``InstanceType``, ``ScalableResource`` with read-only labels, ``ResourceProblem``), so a caller
that extends its lists (the hook adds rollout notices) changes nothing cached.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from karpenter_capi.plugin_api import InstanceType, PluginContext
from karpenter_capi.plugins.generic_capi.offering import ScalableResource
from karpenter_capi.plugins.generic_capi.selection import ResourceProblem


@dataclass(frozen=True)
class BuiltPart:
    """What the pure part of a build made: everything but the problems the selection carried."""

    instance_types: tuple[InstanceType, ...]
    resources: tuple[ScalableResource, ...]
    problems: tuple[ResourceProblem, ...]
    notices: tuple[ResourceProblem, ...]
    described: int
    """Resources the build looked at (kept or left out): they count as selected."""


class InventoryMemo:
    """The last ``BuiltPart`` per NodeClass and the key it was built under. Thread-safe."""

    DEFAULT_MAX_ENTRIES: ClassVar[int] = 64

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        self._max = max_entries
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, tuple[tuple[Any, ...], BuiltPart]] = OrderedDict()
        self.builds = 0
        """How many times the pure part ran (tests count them)."""
        self.hits = 0

    @classmethod
    def shared(cls, ctx: PluginContext) -> InventoryMemo:
        """The memo of ``ctx``'s cluster."""
        return ctx.state(cls, cls)

    def get_or_build(
        self, slot: str, key: tuple[Any, ...] | None, build: Callable[[], BuiltPart]
    ) -> BuiltPart:
        """The part kept in ``slot`` when it was built under a key equal to ``key``, else
        ``build()`` (kept under ``key`` unless ``key`` is ``None``: not keyable)."""
        if key is not None:
            with self._lock:
                kept = self._entries.get(slot)
                if kept is not None and kept[0] == key:
                    self._entries.move_to_end(slot)
                    self.hits += 1
                    return kept[1]
        part = build()
        with self._lock:
            self.builds += 1
            if key is None:
                self._entries.pop(slot, None)
            else:
                self._entries[slot] = (key, part)
                self._entries.move_to_end(slot)
                while len(self._entries) > self._max:
                    self._entries.popitem(last=False)
        return part

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)
