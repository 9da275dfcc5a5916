"""The part of the runtime both drivers share: informers, work queues and what a reconcile means.

Controllers (``core.runtime.controller``) declare what they need: a primary resource, watched
resources with a key mapping, resources they only read. The ``Manager`` turns those declarations
into machinery, once, so that the threaded driver (real clusters) and the stepped driver (tests
and the simulator) cannot disagree about it:

* one ``Informer`` per (resource, cluster), shared by every controller that uses it, with the
  common indexes registered (pods by node, nodes/machines/NodeClaims by providerID, ...);
* the ``Caches`` protocol over those informers, which controllers read instead of the API;
* one ``WorkQueue`` per controller, fed by informer handlers (primary events enqueue their own
  key, watched events go through ``Watch.to_keys``, old and new object alike on update);
* ``process``: what the outcome of one reconcile does to its queue, exactly as controller-runtime
  does it (an exception retries with per-key backoff; ``requeue_after`` forgets the backoff and
  schedules the key; success forgets it), timed on the injected clock for the metrics observer;
* ``run_periodic``: the same for ``PeriodicController``s, which have no queue but a schedule;
* outages: a reconcile or periodic run that failed because an API server could not be
  reached (``core.kube.errors.unreachable``) retries within ``UNREACHABLE_RETRY_MAX`` seconds
  whatever its backoff, and at once when one of the controller's informers hears its server
  answer again; a controller with a ``recovered()`` method also gets the keys it returns then
  queued. Work waiting on an outage resumes within seconds of its end.

Drivers decide only *when* these run: on threads, or in virtual time.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from karpenter_capi.core.clock import Clock
from karpenter_capi.core.kube.backoff import UNREACHABLE_RETRY_MAX, Backoff
from karpenter_capi.core.kube.cache import IndexFunc, Store
from karpenter_capi.core.kube.client import JsonObject, KubeClient
from karpenter_capi.core.kube.errors import Conflict, retry_after, unreachable
from karpenter_capi.core.kube.events import EventRecorder
from karpenter_capi.core.kube.indexes import (
    MACHINE_INDEXERS,
    MACHINE_POOL_INDEXERS,
    NODE_INDEXERS,
    NODECLAIM_INDEXERS,
    POD_INDEXERS,
)
from karpenter_capi.core.kube.informer import Informer
from karpenter_capi.core.kube.resources import (
    CAPI_GROUP,
    KARPENTER_GROUP,
    Resource,
)
from karpenter_capi.core.kube.workqueue import (
    QueueHooks,
    RateLimiter,
    WorkQueue,
    default_controller_rate_limiter,
)
from karpenter_capi.core.observability.logs import log_fields
from karpenter_capi.core.plugin_host import Plugins
from karpenter_capi.core.runtime._informer_events import enqueue_on_events, wake_on_events
from karpenter_capi.core.runtime.controller import (
    MANAGEMENT,
    WORKLOAD,
    Controller,
    ControllerContext,
    Key,
    Metrics,
    PeriodicController,
    Result,
    Watch,
)
from karpenter_capi.core.runtime.entries import ControllerEntry, Entry, PeriodicEntry
from karpenter_capi.core.runtime.failures import FailureLog

_log = logging.getLogger(__name__)

DEFAULT_PAGE_SIZE = 500


class ReconcileObserver(Protocol):
    """Receives what the runtime measures; the observability layer turns it into metrics.

    ``on_reconcile`` is called after every reconcile and every periodic run, with its duration
    on the injected clock's monotonic time and the exception it raised (``None`` on success):
    enough for ``controller_runtime_reconcile_total``, ``..._errors_total`` and
    ``..._time_seconds``. ``on_queue_depth`` follows each work queue's ready depth. Both may be
    called from several threads at once, and must not block.
    """

    def on_reconcile(self, controller: str, seconds: float, error: BaseException | None) -> None:
        """One reconcile of ``controller`` finished."""
        ...

    def on_queue_depth(self, controller: str, depth: int) -> None:
        """The number of keys ready in ``controller``'s queue changed."""
        ...


# Keyed by (group, plural), not by Resource, so a discovered Cluster API version still matches.
_DEFAULT_INDEXERS: dict[tuple[str, str], Mapping[str, IndexFunc[Any]]] = {
    ("", "pods"): POD_INDEXERS,
    ("", "nodes"): NODE_INDEXERS,
    (KARPENTER_GROUP, "nodeclaims"): NODECLAIM_INDEXERS,
    (CAPI_GROUP, "machines"): MACHINE_INDEXERS,
    (CAPI_GROUP, "machinepools"): MACHINE_POOL_INDEXERS,
}


def default_indexers(resource: Resource) -> dict[str, IndexFunc[JsonObject]]:
    """The indexes the manager registers on an informer of ``resource`` (possibly none)."""
    return dict(_DEFAULT_INDEXERS.get((resource.group, resource.plural), {}))


@dataclass
class _Stats:
    reconciles_total: int = 0
    errors_total: int = 0
    by_controller: dict[str, int] = field(default_factory=dict)


class Manager:
    """Builds and owns the informers, caches and queues of a set of controllers.

    Build it, make the controllers (they usually need ``manager.context(...)``, whose ``caches``
    is the manager itself), ``add`` them, then hand the manager to one driver::

        manager = Manager(client, management, clock=clock)
        context = manager.context(plugins)
        manager.add(MyController(context), MyPeriodicLoop(context))
        SteppedDriver(manager).run_until_quiet()       # or ThreadedDriver(manager).start()

    When ``management`` is ``client`` itself (or omitted), ``WORKLOAD`` and ``MANAGEMENT`` name
    the same cluster and share one informer per resource.
    """

    def __init__(
        self,
        client: KubeClient,
        management: KubeClient | None = None,
        *,
        clock: Clock,
        controllers: Iterable[Controller | PeriodicController] = (),
        observer: ReconcileObserver | None = None,
        rate_limiter: Callable[[Clock], RateLimiter] = default_controller_rate_limiter,
        resync_period: float | None = None,
        page_size: int = DEFAULT_PAGE_SIZE,
        rand: Callable[[], float] = random.random,
        log_fields: Mapping[str, str] | None = None,
    ) -> None:
        self.client = client
        self.log_fields: Mapping[str, str] = dict(log_fields or {})
        """Fields every line logged by a reconcile, a periodic run or (threaded) an informer of
        this manager carries: ``{"cluster": "ns/name"}`` for a fleet member."""
        self.management = management if management is not None else client
        self.clock = clock
        # Told of every reconcile and queue depth, in order: the metrics, and whoever else
        # measures the runtime (the simulator's reports), added with ``add_observer``.
        self.observers: list[ReconcileObserver] = [] if observer is None else [observer]
        self._rate_limiter = rate_limiter
        self._resync_period = resync_period
        self._page_size = page_size
        self._rand = rand
        self._lock = threading.Lock()
        self._informers: dict[tuple[Resource, str], Informer[JsonObject]] = {}
        self._entries: list[Entry] = []
        self._names: set[str] = set()
        self._sealed = False
        self._stats = _Stats()
        self._failures = FailureLog(_log)
        self.add(*controllers)

    # Building.

    def add_observer(self, observer: ReconcileObserver) -> None:
        """Tell ``observer`` of every reconcile and queue depth from now on, after the others."""
        self.observers.append(observer)

    def add(self, *controllers: Controller | PeriodicController) -> None:
        """Register controllers (before a driver takes the manager), in their run order."""
        for controller in controllers:
            self._add_one(controller)

    def _add_one(self, controller: Controller | PeriodicController) -> None:
        if self._sealed:
            raise RuntimeError(f"cannot add {controller.name!r}: the manager is already running")
        if controller.name in self._names:
            raise ValueError(f"two controllers are named {controller.name!r}")
        if callable(getattr(controller, "reconcile", None)):
            entry: Entry = self._add_reconciler(cast(Controller, controller))
        elif callable(getattr(controller, "run_once", None)):
            entry = self._add_periodic(cast(PeriodicController, controller))
        else:
            raise TypeError(f"{controller!r} has neither reconcile() nor run_once()")
        self._names.add(controller.name)
        self._entries.append(entry)

    def _add_reconciler(self, controller: Controller) -> ControllerEntry:
        name = controller.name
        observers = self.observers
        hooks = QueueHooks(on_depth=lambda depth: _observe_depth(observers, name, depth))
        queue: WorkQueue[Key] = WorkQueue(
            self.clock, rate_limiter=self._rate_limiter(self.clock), name=name, hooks=hooks
        )
        primary = self.informer(controller.primary, controller.primary_cluster)
        used = [primary]
        enqueue_on_events(primary, queue, Watch(controller.primary), name, primary=True)
        for watch in controller.watches():
            informer = self.informer(watch.resource, watch.cluster)
            enqueue_on_events(informer, queue, watch, name)
            used.append(informer)
        used.extend(self.informer(resource, cluster) for resource, cluster in controller.reads())
        entry = ControllerEntry(controller, queue, _unique(used))
        for informer in entry.informers:
            informer.add_recovery_handler(lambda: self._resume(entry))
        return entry

    def _add_periodic(self, controller: PeriodicController) -> PeriodicEntry:
        if controller.interval <= 0:
            raise ValueError(f"{controller.name}: interval must be positive")
        used = [self.informer(resource, cluster) for resource, cluster in controller.reads()]
        # Failures retry sooner than the interval, but never more often than it would allow.
        initial = min(1.0, controller.interval)
        backoff = Backoff(self.clock, initial=initial, cap=controller.interval, jitter=0.0)
        entry = PeriodicEntry(controller, _unique(used), backoff)
        for informer in entry.informers:
            informer.add_recovery_handler(lambda: self._resume_periodic(entry))
        wake_on = getattr(controller, "wake_on", None)
        for resource, cluster, when in wake_on() if callable(wake_on) else ():
            wake_on_events(self.informer(resource, cluster), entry, when)
        return entry

    def _resume(self, entry: ControllerEntry) -> None:
        """An informer of ``entry`` hears its API server again: retry what the outage held."""
        with entry.lock:
            keys, entry.outage_keys = list(entry.outage_keys), set()
        recovered = getattr(entry.controller, "recovered", None)
        if callable(recovered):
            keys.extend(recovered())
        for key in keys:
            entry.queue.add(key)

    def _resume_periodic(self, entry: PeriodicEntry) -> None:
        if entry.backoff.failures:
            entry.next_run = self.clock.monotonic()

    def informer(self, resource: Resource, cluster: str = WORKLOAD) -> Informer[JsonObject]:
        """The shared informer of ``resource`` in ``cluster``, created on first use."""
        key = self._informer_key(resource, cluster)
        with self._lock:
            found = self._informers.get(key)
            if found is not None:
                return found
            if self._sealed:
                raise RuntimeError(
                    f"no informer for {resource.group_resource} in the {key[1]} cluster: "
                    "declare it in a controller's watches() or reads()"
                )
            informer = Informer(
                self.client if key[1] == WORKLOAD else self.management,
                resource,
                clock=self.clock,
                page_size=self._page_size,
                indexers=default_indexers(resource),
                resync_period=self._resync_period,
                rand=self._rand,
                name=f"{key[1]}/{resource.group_resource}",
            )
            self._informers[key] = informer
            return informer

    def add_indexer(
        self, resource: Resource, name: str, func: IndexFunc[JsonObject], cluster: str = WORKLOAD
    ) -> None:
        """Register one more index on the cache of ``resource`` (creating its informer)."""
        self.informer(resource, cluster).store.add_indexer(name, func)

    def _informer_key(self, resource: Resource, cluster: str) -> tuple[Resource, str]:
        if cluster not in (WORKLOAD, MANAGEMENT):
            raise ValueError(f"unknown cluster {cluster!r}: use WORKLOAD or MANAGEMENT")
        if self.management is self.client:
            cluster = WORKLOAD
        return resource, cluster

    def context(
        self,
        plugins: Plugins,
        *,
        recorder: EventRecorder | None = None,
        metrics: Metrics | None = None,
        dry_run: bool = False,
        log: logging.Logger | None = None,
    ) -> ControllerContext:
        """A ``ControllerContext`` whose caches are this manager's."""
        context = ControllerContext(
            client=self.client,
            management=self.management,
            caches=self,
            clock=self.clock,
            plugins=plugins,
            recorder=recorder or EventRecorder(self.client, self.clock),
            metrics=metrics,
            dry_run=dry_run,
        )
        if log is not None:
            context.log = log
        return context

    def seal(self) -> None:
        """Called by a driver when it takes the manager: no more controllers or informers.

        A manager runs under one driver; a second one would compete for the same queues.
        """
        with self._lock:
            if self._sealed:
                raise RuntimeError("this manager is already run by a driver")
            self._sealed = True

    # The Caches protocol.

    def store(self, resource: Resource, cluster: str = WORKLOAD) -> Store[JsonObject]:
        key = self._informer_key(resource, cluster)
        with self._lock:
            informer = self._informers.get(key)
        if informer is None:
            raise KeyError(
                f"no cache of {resource.group_resource} in the {key[1]} cluster: "
                "declare it in a controller's watches() or reads()"
            )
        return informer.store

    def has_synced(self) -> bool:
        return all(informer.has_synced() for informer in self.informers)

    def resource_version(self, resource: Resource, cluster: str = WORKLOAD) -> str:
        return self.informer(resource, cluster).last_sync_resource_version

    # What drivers use.

    @property
    def informers(self) -> list[Informer[JsonObject]]:
        """Every informer, in creation order."""
        with self._lock:
            return list(self._informers.values())

    @property
    def entries(self) -> list[Entry]:
        """Every registered controller, in registration order (the stepped run order)."""
        return list(self._entries)

    def entry(self, name: str) -> Entry:
        for entry in self._entries:
            if entry.name == name:
                return entry
        raise KeyError(f"no controller named {name!r}")

    def queue(self, name: str) -> WorkQueue[Key]:
        """The work queue of the controller ``name``."""
        entry = self.entry(name)
        if not isinstance(entry, ControllerEntry):
            raise KeyError(f"{name!r} is a periodic controller and has no queue")
        return entry.queue

    def enqueue(self, name: str, key: Key) -> None:
        """Queue ``key`` for the controller ``name`` by hand (a CLI command, a test)."""
        self.queue(name).add(key)

    def process(self, entry: ControllerEntry, key: Key) -> None:
        """Reconcile ``key``, which the caller took from ``entry.queue``, and settle the queue.

        An exception is logged and retried with the key's backoff; ``requeue_after`` > 0 resets
        the backoff and schedules the key; ``requeue_after`` <= 0 asks for another pass as soon
        as the rate limiter allows (controller-runtime's ``Requeue: true``); ``None`` forgets
        the key until its next event.
        """
        with log_fields(self.log_fields):
            self._process(entry, key)

    def _process(self, entry: ControllerEntry, key: Key) -> None:
        queue = entry.queue
        started = self.clock.monotonic()
        error: Exception | None = None
        # ``done`` in every case, even a BaseException (KeyboardInterrupt) escaping the
        # reconcile: a key left "processing" would never be handed to a worker again.
        try:
            try:
                result: Result | None = entry.controller.reconcile(key)
            except Exception as raised:
                error, result = raised, None
            seconds = max(0.0, self.clock.monotonic() - started)
            if error is not None:
                if isinstance(error, Conflict):
                    # Optimistic concurrency at work (another writer got there first): a
                    # retry on fresh data is the whole remedy, not an error worth a traceback.
                    _log.debug("%s: %s changed under the reconcile; retrying", entry.name, key)
                else:
                    retry = queue.num_requeues(key) + 1
                    self._failures.failed(
                        (entry.name, key),
                        f"{entry.name}: reconcile of {key} failed (retry {retry})",
                        error,
                    )
                # A server that answered 429 said when to come back; sooner is a retry storm.
                # One that did not answer at all is asked again within seconds.
                outage = unreachable(error)
                queue.add_rate_limited(
                    key, at_least=retry_after(error), cap=UNREACHABLE_RETRY_MAX if outage else None
                )
                entry.note(key, outage=outage)
            else:
                self._failures.succeeded((entry.name, key))
                entry.note(key, outage=False)
                requeue_after = getattr(result, "requeue_after", None)
                if requeue_after is None:
                    queue.forget(key)
                elif requeue_after > 0:
                    queue.forget(key)
                    queue.add_after(key, requeue_after)
                else:
                    queue.add_rate_limited(key)
        finally:
            queue.done(key)
        self._count(entry.name, error)
        _observe(self.observers, entry.name, seconds, error)
        del error  # its traceback holds this frame: a cycle for the collector otherwise

    def run_periodic(self, entry: PeriodicEntry) -> None:
        """Run ``entry`` once now and schedule its next run."""
        with log_fields(self.log_fields):
            self._run_periodic(entry)

    def _run_periodic(self, entry: PeriodicEntry) -> None:
        controller = entry.controller
        started = self.clock.monotonic()
        error: Exception | None = None
        result: Result | None = None
        entry.running()
        try:
            result = controller.run_once()
        except Exception as raised:
            error = raised
        now = self.clock.monotonic()
        if error is not None:
            cap = UNREACHABLE_RETRY_MAX if unreachable(error) else None
            delay = entry.backoff.fail(at_least=retry_after(error), cap=cap)
            what = f"{entry.name}: run failed, retrying in {delay:.3g}s"
            self._failures.failed(entry.name, what, error)
        else:
            self._failures.succeeded(entry.name)
            entry.backoff.reset()
            requeue_after = getattr(result, "requeue_after", None)
            delay = controller.interval if requeue_after is None else max(0.0, requeue_after)
        entry.planned(now + delay)
        self._count(entry.name, error)
        _observe(self.observers, entry.name, max(0.0, now - started), error)
        del error  # as in ``_process``

    def shutdown_queues(self) -> None:
        for entry in self._entries:
            if isinstance(entry, ControllerEntry):
                entry.queue.shutdown()

    # Introspection.

    @property
    def reconciles_total(self) -> int:
        """Reconciles and periodic runs so far, successful or not."""
        with self._lock:
            return self._stats.reconciles_total

    @property
    def errors_total(self) -> int:
        with self._lock:
            return self._stats.errors_total

    def reconciles_of(self, name: str) -> int:
        with self._lock:
            return self._stats.by_controller.get(name, 0)

    def _count(self, name: str, error: BaseException | None) -> None:
        with self._lock:
            self._stats.reconciles_total += 1
            self._stats.by_controller[name] = self._stats.by_controller.get(name, 0) + 1
            if error is not None:
                self._stats.errors_total += 1


def _unique(informers: Sequence[Informer[JsonObject]]) -> tuple[Informer[JsonObject], ...]:
    seen: dict[int, Informer[JsonObject]] = {}
    for informer in informers:
        seen.setdefault(id(informer), informer)
    return tuple(seen.values())


def _observe(
    observers: Sequence[ReconcileObserver],
    name: str,
    seconds: float,
    error: BaseException | None,
) -> None:
    for observer in observers:
        try:
            observer.on_reconcile(name, seconds, error)
        except Exception:
            _log.exception("%s: the reconcile observer raised", name)


def _observe_depth(observers: Sequence[ReconcileObserver], name: str, depth: int) -> None:
    for observer in observers:
        try:
            observer.on_queue_depth(name, depth)
        except Exception:
            _log.exception("%s: the queue depth observer raised", name)


__all__ = [
    "ControllerEntry",
    "Entry",
    "Manager",
    "PeriodicEntry",
    "ReconcileObserver",
    "default_indexers",
]
