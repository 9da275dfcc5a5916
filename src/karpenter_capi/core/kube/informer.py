"""List-then-watch informer: a local, indexed, event-driven mirror of one resource.

This is the Python counterpart of client-go's reflector + DeltaFIFO + indexer, reduced to what
the controllers need and written so that one piece of logic runs under two drivers:

* ``run(stop)`` for real clusters: a thread that lists, then holds a long watch open
  (5-10 minutes, jittered like client-go), resuming and relisting as needed;
* ``step()`` for the deterministic simulation: each call does one unit of work (one list page,
  or one non-blocking drain of the watch) and says whether anything happened, so a virtual-time
  runtime can run the whole cluster in one thread.

The semantics that keep the cache exact:

* The initial list is paginated (``limit``/``continue``). If a continue token expires (410)
  the list restarts from the beginning: pages of different snapshots must not be mixed.
* The watch starts at the list's resourceVersion with bookmarks on, and every event (bookmarks
  included) advances the resume point. When a stream ends or the connection drops, the watch
  resumes from that point; nothing is relisted, missed or delivered twice.
* A 410 Gone (the resume point fell out of the server's history) forces a relist. The relist is
  reconciled against the cache like DeltaFIFO's ``Replace``: objects that vanished during the
  gap get a synthesized delete, new ones an add, and ones whose resourceVersion moved an update.
* Errors back off exponentially with jitter (1s doubling to 30s), reset after healthy work;
  an API server that cannot be reached is asked again at least every ``backoff.RECONNECT_MAX``
  (2) seconds, so the cache follows within seconds of its return.
  A failure is logged once per change of error, one line; a traceback only for what is not an
  API or connection error (a bug).
* When the server answers again after failures (a list or a watch succeeds), the recovery
  handlers run (``add_recovery_handler``): whoever waits on that cluster resumes now instead of
  at the end of its own backoff.
* A malformed object (``transform`` raises) is logged and skipped; it never stops the informer.
"""

from __future__ import annotations

import enum
import logging
import random
import threading
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar, cast, overload

from karpenter_capi.core.clock import Clock
from karpenter_capi.core.kube._handlers import EventHandler, HandlerSet
from karpenter_capi.core.kube._outage import OutageLog
from karpenter_capi.core.kube.backoff import RECONNECT_MAX, Backoff
from karpenter_capi.core.kube.cache import IndexFunc, Store, event_key_and_version, object_key
from karpenter_capi.core.kube.client import JsonObject, KubeClient, WatchEvent, WatchStream
from karpenter_capi.core.kube.errors import ApiError, Gone, error_from_status, unreachable
from karpenter_capi.core.kube.resources import Resource

T = TypeVar("T")

_log = logging.getLogger(__name__)

DEFAULT_WATCH_TIMEOUT = 300.0
"""Base server-side watch timeout; each watch adds up to 100% jitter (client-go: 5-10 min)."""

MIN_HEALTHY_WATCH = 1.0
"""A stream that ends sooner than this without a single event counts as a failure."""


class _Phase(enum.Enum):
    LISTING = "listing"
    WATCHING = "watching"


class _ShortWatchError(Exception):
    """The watch ended immediately without delivering anything: treat like an error."""

    expected = True  # a server or proxy cutting watches short: one line, no traceback


class Informer(Generic[T]):
    """Keeps a ``Store`` of one resource in sync with the API server and notifies handlers.

    Handlers run on the driver's thread after the cache has been updated, one at a time; an
    exception in a handler is logged and does not affect the informer or other handlers. For
    an object deleted while the informer could not watch (seen only at the relist), ``on_delete``
    receives the last state the cache knew.

    Typical use, with a narrow model and an index::

        pods = Informer(client, PODS, clock=clock, transform=PodView.model_validate,
                        indexers={BY_NODE_NAME: index_by(lambda pod: pod.spec.node_name)})
        pods.add_handler(on_add=enqueue, on_update=lambda _, new: enqueue(new))
        threading.Thread(target=pods.run, args=(stop,), daemon=True).start()  # or: pods.step()
        pods.wait_for_sync(60)
        pods.store.by_index(BY_NODE_NAME, "node-1")
    """

    @overload
    def __init__(
        self: Informer[JsonObject],
        client: KubeClient,
        resource: Resource,
        *,
        clock: Clock,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int | None = 500,
        transform: None = None,
        indexers: Mapping[str, IndexFunc[JsonObject]] | None = None,
        resync_period: float | None = None,
        rand: Callable[[], float] = random.random,
        watch_timeout: float = DEFAULT_WATCH_TIMEOUT,
        name: str | None = None,
    ) -> None: ...

    @overload
    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        *,
        clock: Clock,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int | None = 500,
        transform: Callable[[JsonObject], T],
        indexers: Mapping[str, IndexFunc[T]] | None = None,
        resync_period: float | None = None,
        rand: Callable[[], float] = random.random,
        watch_timeout: float = DEFAULT_WATCH_TIMEOUT,
        name: str | None = None,
    ) -> None: ...

    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        *,
        clock: Clock,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int | None = 500,
        transform: Callable[[JsonObject], Any] | None = None,
        indexers: Mapping[str, IndexFunc[Any]] | None = None,
        resync_period: float | None = None,
        rand: Callable[[], float] = random.random,
        watch_timeout: float = DEFAULT_WATCH_TIMEOUT,
        name: str | None = None,
    ) -> None:
        if resync_period is not None and resync_period <= 0:
            raise ValueError("resync_period must be positive (or None to disable)")
        self.name = name or resource.group_resource
        self._client = client
        self._resource = resource
        self._namespace = namespace
        self._label_selector = label_selector
        self._field_selector = field_selector
        self._page_size = page_size if page_size and page_size > 0 else None
        self._clock = clock
        self._transform: Callable[[JsonObject], T] = transform or cast(
            Callable[[JsonObject], T], _identity
        )
        self._resync_period = resync_period
        self._rand = rand
        self._watch_timeout = watch_timeout
        self._store: Store[T] = Store(indexers)
        self._backoff = Backoff(clock, initial=1.0, cap=30.0, factor=2.0, jitter=0.25, rand=rand)

        self._handlers: HandlerSet[T] = HandlerSet(self.name)
        # Serialises cache mutation + handler dispatch between the driver, the resync timer and
        # add_handler, so handlers see events in cache order.
        self._dispatch_lock = threading.RLock()
        self._synced = threading.Event()

        self._phase = _Phase.LISTING
        self._continue_token: str | None = None
        self._pending: dict[str, JsonObject] = {}
        self._versions: dict[str, str] = {}  # key -> resourceVersion of the cached object
        self._last_sync_rv = ""
        self._watch_ok_since_list = False
        self._next_resync: float | None = None

        self._stream_lock = threading.Lock()
        self._stream: WatchStream | None = None

        self.skipped_total = 0
        """Objects dropped because ``transform`` or key extraction failed."""
        self.relists_total = 0
        """Relists forced by 410 Gone (the initial list is not counted)."""
        self._failing_since: float | None = None
        self._last_error = ""
        self._watch_opened_at: float | None = None  # while a watch stream is open
        self._outage = OutageLog(self.name)

    # Public reads.

    @property
    def store(self) -> Store[T]:
        return self._store

    @property
    def resource(self) -> Resource:
        return self._resource

    def has_synced(self) -> bool:
        """True once the first complete list is in the cache and its handlers have run."""
        return self._synced.is_set()

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        """Block (real time) until synced; for threaded start-up only."""
        return self._synced.wait(timeout)

    @property
    def last_sync_resource_version(self) -> str:
        """The resourceVersion the next watch resumes from (``""`` before the first list)."""
        return self._last_sync_rv

    @property
    def next_retry_time(self) -> float | None:
        """Clock-monotonic time of the next retry after an error; ``None`` when not backing off."""
        return None if self._backoff.ready() else self._backoff.retry_at

    @property
    def next_resync_time(self) -> float | None:
        return self._next_resync

    @property
    def next_wakeup_time(self) -> float | None:
        """The earliest clock time at which ``step`` has timed work (a retry or a resync).

        A stepped runtime that finds every informer idle advances its virtual clock to the
        minimum of these (and of its work queues' ``next_ready_time``).
        """
        times = [t for t in (self.next_retry_time, self._next_resync) if t is not None]
        return min(times) if times else None

    def has_timed_work(self) -> bool:
        """Whether ``step`` has work no new event brings: a (re)list, a retry, a resync, due."""
        if self._next_resync is not None and self._clock.monotonic() >= self._next_resync:
            return True
        retrying = self._phase is _Phase.LISTING or self._backoff.failures > 0
        return retrying and self._backoff.ready()

    @property
    def consecutive_failures(self) -> int:
        return self._backoff.failures

    @property
    def failing_since(self) -> float | None:
        """Clock-monotonic time of the first of the failures in a row now going on (``None``
        when the last list or watch worked): how long this cache has been unable to follow.

        A watch open for ``MIN_HEALTHY_WATCH`` since the last failure counts as working: a
        healthy watch may stream for minutes before it ends and says so, and one that ends at
        once (still a failure) does not clear the streak.
        """
        since, opened = self._failing_since, self._watch_opened_at
        if (
            since is not None
            and opened is not None
            and opened >= since
            and self._clock.monotonic() - opened >= MIN_HEALTHY_WATCH
        ):
            return None
        return since

    @property
    def last_error(self) -> str:
        """The latest failure, one line (empty when none yet)."""
        return self._last_error

    def add_handler(
        self,
        on_add: Callable[[T], None] | None = None,
        on_update: Callable[[T, T], None] | None = None,
        on_delete: Callable[[T], None] | None = None,
    ) -> EventHandler[T]:
        """Register callbacks; registered after sync, ``on_add`` first replays the cache."""
        handler = EventHandler(on_add, on_update, on_delete)
        with self._dispatch_lock:
            self._handlers.add(handler, replay=self._store.list() if self._synced.is_set() else ())
        return handler

    def add_recovery_handler(self, handler: Callable[[], None]) -> None:
        """Call ``handler`` (on the informer's thread) each time the API server answers again
        after a failed list or watch; an exception in it is logged and goes no further."""
        self._outage.add_handler(handler)

    # Stepped driver.

    def step(self) -> bool:
        """Do the next unit of work without blocking; return whether anything happened.

        One list page while listing; otherwise one drain of the watch (``timeout_seconds=0``),
        and a resync if one is due. Errors schedule a retry (see ``next_retry_time``) and return
        False, as does a call made while backing off.
        """
        progressed = self._resync_if_due()
        if not self._backoff.ready():
            return progressed
        try:
            if self._phase is _Phase.LISTING:
                self._list_page()
                return True
            changes, _ = self._watch(timeout_seconds=0, stop=None)
            self._watch_ok_since_list = True
            self._healthy()
            return changes > 0 or progressed
        except Gone as gone:
            return self._on_gone(gone) or progressed
        except Exception as error:
            self._on_failure(error)
            return progressed

    # Threaded driver.

    def run(self, stop: threading.Event, *, supervise: bool = True) -> None:
        """List and watch until ``stop`` is set. Blocks; run it in its own thread.

        ``supervise=False`` (a driver on a shared pool) saves the timer thread unless resyncs
        need it; the caller then calls ``interrupt()`` once ``stop`` is set."""
        supervisor: threading.Thread | None = None
        while not stop.is_set():
            delay = self._backoff.remaining()
            if delay > 0 and stop.wait(delay):
                break
            try:
                if self._phase is _Phase.LISTING:
                    while not self._list_page() and not stop.is_set():
                        pass
                    continue
                if supervisor is None and (supervise or self._resync_period is not None):
                    # Started once synced, so the resync schedule it follows already exists.
                    supervisor = threading.Thread(
                        target=self._supervise,
                        args=(stop,),
                        name=f"informer-{self.name}-timer",
                        daemon=True,
                    )
                    supervisor.start()
                started = self._clock.monotonic()
                timeout = self._watch_timeout * (1.0 + self._rand())
                _, delivered = self._watch(timeout_seconds=timeout, stop=stop)
                if stop.is_set():
                    break
                if delivered == 0 and self._clock.monotonic() - started < MIN_HEALTHY_WATCH:
                    raise _ShortWatchError("watch ended at once without any event")
                self._watch_ok_since_list = True
                self._healthy()
            except Gone as gone:
                self._on_gone(gone)
            except Exception as error:
                if stop.is_set():
                    break
                self._on_failure(error)
        self._close_stream()

    def _supervise(self, stop: threading.Event) -> None:
        """Fires resyncs on time and interrupts a blocked watch when ``stop`` is set."""
        while True:
            wait = None
            if self._next_resync is not None:
                wait = max(0.0, self._next_resync - self._clock.monotonic())
            if stop.wait(wait):
                break
            self._resync_if_due()
        self._close_stream()

    def interrupt(self) -> None:
        """End a blocked watch now (after setting ``run``'s ``stop``, which it then sees)."""
        self._close_stream()

    def _close_stream(self) -> None:
        with self._stream_lock:
            stream, self._stream = self._stream, None
            self._watch_opened_at = None
        if stream is not None:
            try:
                stream.close()
            except Exception:
                _log.debug("closing the %s watch failed", self.name, exc_info=True)

    # Listing.

    def _list_page(self) -> bool:
        """Fetch one page; when it was the last one, reconcile the cache. True when complete."""
        try:
            page = self._client.list(
                self._resource,
                self._namespace,
                label_selector=self._label_selector,
                field_selector=self._field_selector,
                limit=self._page_size,
                continue_token=self._continue_token,
            )
        except Gone:
            if self._continue_token is None:
                raise
            # The snapshot behind the continue token was compacted: start over, since pages
            # from two snapshots would not form one consistent state.
            _log.info("%s: list continue token expired, restarting the list", self.name)
            self._continue_token = None
            self._pending = {}
            return False
        for raw in page.items:
            key = self._key_or_none(raw)
            if key is not None:
                self._pending[key] = raw
        if page.continue_token:
            self._continue_token = page.continue_token
            return False
        self._continue_token = None
        pending, self._pending = self._pending, {}
        self._replace(pending, page.resource_version)
        return True

    def _replace(self, listed: dict[str, JsonObject], resource_version: str) -> None:
        """Make the cache equal the listed state, notifying what changed (DeltaFIFO Replace)."""
        with self._dispatch_lock:
            items: dict[str, T] = {}
            versions: dict[str, str] = {}
            changes: list[tuple[T | None, T | None]] = []
            for key, raw in listed.items():
                rv = _resource_version(raw)
                old = self._store.get(key)
                if old is not None and self._versions.get(key) == rv:
                    items[key], versions[key] = old, rv
                    continue
                new = self._transform_or_none(raw, key)
                if new is None:
                    if old is not None:
                        # Keep the last good state: the object still exists, only its new
                        # version is unreadable.
                        items[key], versions[key] = old, self._versions[key]
                    continue
                items[key], versions[key] = new, rv
                changes.append((old, new))
            for key, gone in self._store.snapshot().items.items():
                if key not in listed:
                    changes.append((gone, None))
            self._store.replace(items)
            self._versions = versions
            self._last_sync_rv = resource_version
            self._phase = _Phase.WATCHING
            self._watch_ok_since_list = False
            for old, new in changes:
                self._handlers.notify(old, new)
            if not self._synced.is_set():
                self._synced.set()
                _log.debug("%s: synced %d objects at %s", self.name, len(items), resource_version)
            if self._resync_period is not None and self._next_resync is None:
                self._next_resync = self._clock.monotonic() + self._resync_period
        self._healthy()
        self._outage.answered()

    # Watching.

    def _watch(self, *, timeout_seconds: float, stop: threading.Event | None) -> tuple[int, int]:
        """Watch from the last resourceVersion until the stream ends.

        Returns ``(changes, events)``: object events applied, and all events including
        bookmarks (a bookmark proves the stream was healthy but changes nothing).
        """
        stream = self._client.watch(
            self._resource,
            self._namespace,
            resource_version=self._last_sync_rv,
            label_selector=self._label_selector,
            field_selector=self._field_selector,
            allow_bookmarks=True,
            timeout_seconds=timeout_seconds,
        )
        with self._stream_lock:
            self._stream = stream
            self._watch_opened_at = self._clock.monotonic()
        self._outage.answered()
        if stop is not None and stop.is_set():
            self._close_stream()
            return 0, 0
        changes = events = 0
        try:
            for event in stream:
                if stop is not None and stop.is_set():
                    break
                events += 1
                if self._apply(event):
                    changes += 1
        finally:
            self._close_stream()
        return changes, events

    def _apply(self, event: WatchEvent) -> bool:
        """Apply one event; False for a bookmark, which only moves the resume point."""
        kind = event.type
        if kind == "ERROR":
            # 410 comes out as Gone (relist); anything else backs off and resumes.
            raise error_from_status(event.object)
        raw: Any = event.object
        key, rv = event_key_and_version(raw)
        if kind == "BOOKMARK":
            self._advance(rv)
            return False
        if key is None and (key := self._key_or_none(raw)) is None:
            self._advance(rv)
            return True
        with self._dispatch_lock:
            # Cache and resume point move first, so handlers observe a consistent informer.
            if kind == "DELETED":
                old = self._store.delete(key)
                self._versions.pop(key, None)
                self._advance(rv)
                if old is not None:
                    final = self._transform_or_none(raw, key)
                    self._handlers.notify(old, None, final=final)
            elif self._versions.get(key) != rv:
                new = raw if self._transform is _identity else self._transform_or_none(raw, key)
                self._advance(rv)
                if new is not None:
                    old = self._store.upsert(key, new)
                    self._versions[key] = rv
                    self._handlers.notify(old, new)
            else:
                self._advance(rv)
        return True

    def _advance(self, resource_version: str) -> None:
        if resource_version:
            self._last_sync_rv = resource_version

    def _on_gone(self, gone: Gone) -> bool:
        """Relist after 410; immediately, unless the watch never worked since the last list."""
        _log.info("%s: watch from %s expired (%s), relisting", self.name, self._last_sync_rv, gone)
        self._phase = _Phase.LISTING
        self._continue_token = None
        self._pending = {}
        self.relists_total += 1
        if not self._watch_ok_since_list:
            # A resourceVersion that is already too old right after a list means the server
            # cannot keep up; relisting in a tight loop would only make that worse.
            self._backoff.fail()
            return False
        return True

    def _healthy(self) -> None:
        self._backoff.reset()
        self._failing_since = None

    def _on_failure(self, error: Exception) -> None:
        if self._failing_since is None:
            self._failing_since = self._clock.monotonic()
        self._last_error = f"{type(error).__name__}: {error}".splitlines()[0][:200]
        retry_after = error.retry_after_seconds if isinstance(error, ApiError) else None
        cap = RECONNECT_MAX if unreachable(error) else None
        delay = self._backoff.fail(at_least=float(retry_after or 0), cap=cap)
        self._outage.failed(error, self._last_error, self._phase.value, delay)

    # Resync and notification.

    def _resync_if_due(self) -> bool:
        """Re-deliver every cached object as an update (client-go resync), if it is time."""
        if self._next_resync is None or self._resync_period is None:
            return False
        if self._clock.monotonic() < self._next_resync:
            return False
        with self._dispatch_lock:
            self._next_resync = self._clock.monotonic() + self._resync_period
            for obj in self._store.list():
                self._handlers.notify(obj, obj)
        return True

    # Object helpers.

    def _key_or_none(self, raw: JsonObject) -> str | None:
        try:
            return object_key(raw)
        except (ValueError, AttributeError, TypeError):
            self.skipped_total += 1
            _log.warning("%s: skipping an object without a usable name", self.name)
            return None

    def _transform_or_none(self, raw: JsonObject, key: str) -> T | None:
        try:
            return self._transform(raw)
        except Exception as error:
            self.skipped_total += 1
            _log.warning(
                "%s: skipping malformed object %s at resourceVersion %s: %s",
                self.name,
                key,
                _resource_version(raw),
                error,
            )
            return None


def _identity(obj: JsonObject) -> JsonObject:
    return obj


def _resource_version(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping):
        return ""
    return str(metadata.get("resourceVersion") or "")
