"""Who hears about an informer's changes: its registered handlers, each called in turn.

Why a module of its own: ``informer.py`` keeps the cache in step with the API server; telling
consumers what changed (and keeping one consumer's exception from reaching the informer or the
others) is the processor half of client-go's informer, and reads more easily apart.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")

# Under the informer's name: a handler's failure is reported as the informer's.
_log = logging.getLogger("karpenter_capi.core.kube.informer")


@dataclass(frozen=True, slots=True)
class EventHandler(Generic[T]):
    """Callbacks for one consumer of an informer. Any of them may be ``None``."""

    on_add: Callable[[T], None] | None = None
    on_update: Callable[[T, T], None] | None = None
    on_delete: Callable[[T], None] | None = None


class HandlerSet(Generic[T]):
    """The handlers of one informer (``name`` in the log), called on the caller's thread.

    ``notify`` runs for every watch event, so the callbacks of each kind are kept as a tuple,
    rebuilt when a handler is added: an event walks only the handlers that have a callback
    for it, without copying the list or looking the callback up.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._handlers: list[EventHandler[T]] = []
        self._on_add: tuple[tuple[EventHandler[T], Callable[[T], None]], ...] = ()
        self._on_update: tuple[tuple[EventHandler[T], Callable[[T, T], None]], ...] = ()
        self._on_delete: tuple[tuple[EventHandler[T], Callable[[T], None]], ...] = ()

    def add(self, handler: EventHandler[T], *, replay: Iterable[T] = ()) -> None:
        """Register ``handler``; ``replay`` are objects its ``on_add`` hears about first."""
        self._handlers.append(handler)
        if handler.on_add is not None:
            self._on_add = (*self._on_add, (handler, handler.on_add))
        if handler.on_update is not None:
            self._on_update = (*self._on_update, (handler, handler.on_update))
        if handler.on_delete is not None:
            self._on_delete = (*self._on_delete, (handler, handler.on_delete))
        if handler.on_add is not None:
            for obj in replay:
                self._call(handler, "on_add", handler.on_add, obj)

    def notify(self, old: T | None, new: T | None, *, final: T | None = None) -> None:
        if new is None:
            if old is not None:
                gone = final if final is not None else old
                for handler, on_delete in self._on_delete:
                    self._call(handler, "on_delete", on_delete, gone)
        elif old is None:
            for handler, on_add in self._on_add:
                try:
                    on_add(new)
                except Exception:
                    _log.exception("%s: %s handler %r raised", self.name, "on_add", handler)
        else:
            for handler, on_update in self._on_update:
                try:
                    on_update(old, new)
                except Exception:
                    _log.exception("%s: %s handler %r raised", self.name, "on_update", handler)

    def _call(self, handler: EventHandler[T], which: str, func: Any, *args: T) -> None:
        try:
            func(*args)
        except Exception:
            _log.exception("%s: %s handler %r raised", self.name, which, handler)
