"""What the ``Manager`` keeps for each registered controller, and what the drivers schedule.

A ``ControllerEntry`` is a queue-driven ``Controller`` with its work queue and the informers it
reads; a ``PeriodicEntry`` a ``PeriodicController`` with its schedule and backoff. The drivers
(threaded, pooled, stepped) take these from the ``Manager`` and decide only when each runs, so
the entries live apart from the ``Manager``'s machinery that builds them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from karpenter_capi.core.kube.backoff import Backoff
from karpenter_capi.core.kube.client import JsonObject
from karpenter_capi.core.kube.informer import Informer
from karpenter_capi.core.kube.workqueue import WorkQueue
from karpenter_capi.core.runtime.controller import Controller, Key, PeriodicController


@dataclass(eq=False)
class ControllerEntry:
    """A registered ``Controller`` with its queue and the informers it depends on."""

    controller: Controller
    queue: WorkQueue[Key]
    informers: tuple[Informer[JsonObject], ...]
    outage_keys: set[Key] = field(default_factory=set)
    """Keys whose last reconcile failed for want of an API server (under ``lock``)."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    _synced: bool = field(default=False, init=False, repr=False)

    def note(self, key: Key, *, outage: bool) -> None:
        with self.lock:
            (self.outage_keys.add if outage else self.outage_keys.discard)(key)

    @property
    def name(self) -> str:
        return self.controller.name

    def synced(self) -> bool:
        """Whether every cache this controller uses has completed its first list."""
        # Remembered once true (an informer stays synced): the stepped drivers ask each pass.
        if not self._synced:
            self._synced = all(informer.has_synced() for informer in self.informers)
        return self._synced


@dataclass(eq=False)
class PeriodicEntry:
    """A registered ``PeriodicController`` and its schedule (``next_run`` on clock-monotonic)."""

    controller: PeriodicController
    informers: tuple[Informer[JsonObject], ...]
    backoff: Backoff
    next_run: float | None = None
    """``None`` until the first run, which is due as soon as the caches have synced."""
    wake: Callable[[float], None] | None = None
    """Set by a threaded or pooled driver: an informer event asks for a run then (``ask``)."""
    _synced: bool = field(default=False, init=False, repr=False)
    _asked: float | None = field(default=None, init=False, repr=False)
    _asking: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    @property
    def name(self) -> str:
        return self.controller.name

    def synced(self) -> bool:
        if not self._synced:
            self._synced = all(informer.has_synced() for informer in self.informers)
        return self._synced

    def due(self, now: float) -> bool:
        return self.next_run is None or self.next_run <= now

    def ask(self, at: float) -> bool:
        """An informer event asks for a run at ``at``: True when sooner than planned. Kept for
        a run under way too, whose ``planned`` next run was worked out before the event (lost,
        such asks held decisions up to a second at 100 clusters: issue 28)."""
        with self._asking:
            self._asked = at if self._asked is None else min(self._asked, at)
            sooner = self.next_run is not None and at < self.next_run
            self.next_run = at if sooner else self.next_run
            return sooner

    def running(self) -> None:
        with self._asking:
            self._asked = None  # a run starts: asks from now on are for after it

    def planned(self, at: float) -> None:
        """The run that ended asks to run next at ``at``; sooner if an event asked meanwhile."""
        with self._asking:
            asked, self._asked = self._asked, None
            self.next_run = at if asked is None else min(at, asked)


Entry = ControllerEntry | PeriodicEntry
