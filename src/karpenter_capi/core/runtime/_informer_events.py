"""The handlers that turn informer events into work: keys of a controller's queue, or an early
run of a periodic controller.

Kept apart from ``manager`` (which registers them) so that module stays about wiring and
running; the handlers are what every informer event goes through.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from karpenter_capi.core.kube.client import JsonObject
from karpenter_capi.core.kube.informer import Informer
from karpenter_capi.core.kube.workqueue import WorkQueue
from karpenter_capi.core.runtime.controller import Key, Watch

_log = logging.getLogger("karpenter_capi.core.runtime.manager")


class _Wakeable(Protocol):
    """A periodic entry as its wake handler sees it."""

    @property
    def name(self) -> str: ...

    @property
    def wake(self) -> Callable[[float], None] | None: ...


def wake_on_events(
    informer: Informer[JsonObject],
    entry: _Wakeable,
    when: Callable[[JsonObject], float | None],
) -> None:
    """Register the handler that asks ``entry``'s driver for an early run: ``when`` says, for
    an added or updated object, at what clock-monotonic time (``None``: no run)."""

    def on_event(obj: JsonObject) -> None:
        try:
            at = when(obj)
        except Exception:
            _log.exception("%s: judging a %s event failed", entry.name, obj.get("kind"))
            return
        if at is not None and entry.wake is not None:
            entry.wake(at)

    def on_update(_old: JsonObject, new: JsonObject) -> None:
        on_event(new)

    informer.add_handler(on_add=on_event, on_update=on_update)


def enqueue_on_events(
    informer: Informer[JsonObject],
    queue: WorkQueue[Key],
    watch: Watch,
    controller: str,
    *,
    primary: bool = False,
) -> None:
    """Register the handlers that turn ``informer`` events into keys of ``queue``.

    The deletion of a ``primary`` object also drops its key's pending ``requeue_after``: the
    reconcile the deletion queues says whether anything is still to wait for, and a timer
    left for an object that is gone (an expiry, hours away) would be kept until it fires,
    one per object the controller ever saw.
    """

    to_keys = watch.to_keys

    def keys_of(obj: JsonObject) -> Sequence[Key]:
        try:
            keys = to_keys(obj)
            # Most events map to no key or one, returned as a tuple or list: used as is. A
            # generator is drawn here, so its failure is caught like the mapping's.
            return keys if type(keys) is tuple or type(keys) is list else list(keys)
        except Exception:
            # One bad mapping must not hide the other side of an update from the controller.
            _log.exception("%s: mapping a %s event to keys failed", controller, watch.resource.kind)
            return ()

    def enqueue(obj: JsonObject) -> None:
        for key in keys_of(obj):
            queue.add(key)

    def on_delete(obj: JsonObject) -> None:
        for key in keys_of(obj):
            if primary:
                queue.cancel_later(key)
            queue.add(key)

    def on_update(old: JsonObject, new: JsonObject) -> None:
        # Both sides: a pod moving from ConfigMap a to b must wake a (lost one) and b (got one).
        # Both are mapped before either is queued, and a key of both is queued once: the
        # second add of a key still queued would change nothing.
        before = keys_of(old)
        after = keys_of(new)
        for key in before:
            queue.add(key)
        if after:
            seen = before if len(before) < 8 else set(before)
            for key in after:
                if key not in seen:
                    queue.add(key)

    informer.add_handler(on_add=enqueue, on_update=on_update, on_delete=on_delete)
