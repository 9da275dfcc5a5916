"""Watch: a bounded event log per resource and the streams that read it.

kube-apiserver's watch cache keeps a window of recent events per resource; a watch starting at
a resourceVersion replays what came after it, and one starting before the window gets a 410
``Expired`` so the client relists. Informers depend on exactly that contract (resume after a
dropped connection, relist on 410, bookmarks to advance their resourceVersion), so it is
reproduced here: one log per resource shared by all streams, guarded by the server's lock,
each reader woken by the writes it concerns, so a slow reader never blocks a writer.

The log also keeps each event's previous object. That lets a label-selector watch turn a
MODIFIED into ADDED or DELETED when the object starts or stops matching (as kube's cacher
does), and lets paginated lists rebuild the snapshot their continue token refers to.
"""

from __future__ import annotations

import threading
import time
import weakref
from bisect import bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

from karpenter_capi.core.kube.client import WatchEvent, WatchEventType
from karpenter_capi.core.kube.errors import Gone

JsonObject = dict[str, Any]
Presenter = Callable[[JsonObject], JsonObject]


class LoggedEvent(NamedTuple):
    """A committed change. ``obj`` is the stored object after it (the last state if DELETED).

    A named tuple (one made per write: half the cost of a frozen dataclass's ``__init__``)."""

    rv: int
    type: WatchEventType
    obj: JsonObject
    prev: JsonObject | None


class EventLog:
    """The retained events of one resource, oldest first, at least ``capacity`` of them."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(1, capacity)
        self._events: list[LoggedEvent] = []
        self._rvs: list[int] = []
        # Events at or below this resourceVersion are gone; a reader at an older one is 410.
        self.compacted_rv = 0

    def append(self, event: LoggedEvent) -> None:
        self._events.append(event)
        self._rvs.append(event.rv)
        # Trim in batches so a large window costs O(1) amortized per write.
        slack = self.capacity // 8
        if len(self._events) > self.capacity + slack:
            self._drop(len(self._events) - self.capacity)

    def _drop(self, count: int) -> None:
        if count <= 0:
            return
        self.compacted_rv = max(self.compacted_rv, self._rvs[count - 1])
        del self._events[:count]
        del self._rvs[:count]

    def set_capacity(self, capacity: int) -> None:
        self.capacity = max(1, capacity)
        self._drop(len(self._events) - self.capacity)

    def drop_through(self, rv: int) -> None:
        """Forget the events at or below ``rv`` (an etcd compaction at that revision)."""
        self._drop(bisect_right(self._rvs, rv))
        self.compacted_rv = max(self.compacted_rv, rv)

    def compact(self, up_to_rv: int) -> None:
        """Forget every event (history before ``up_to_rv`` can no longer be replayed)."""
        self._events.clear()
        self._rvs.clear()
        self.compacted_rv = max(self.compacted_rv, up_to_rv)

    def expired(self, rv: int) -> bool:
        return rv < self.compacted_rv

    def since(self, rv: int) -> list[LoggedEvent] | None:
        """Events after ``rv``, or ``None`` when some of them were already dropped."""
        if self.expired(rv):
            return None
        start = bisect_right(self._rvs, rv)
        return self._events[start:]

    def __len__(self) -> int:
        return len(self._events)


def gone_status(requested: int, oldest: int) -> JsonObject:
    """The 410 ``Status`` an expired watch ends with, worded as kube's watch cache words it."""
    return Gone(f"too old resource version: {requested} ({oldest})").to_status()


@dataclass(frozen=True, slots=True)
class WatchFilter:
    """Which events a stream wants: namespace (None = all) and an object predicate."""

    namespace: str | None
    predicate: Callable[[JsonObject], bool] | None


class WatchHub:
    """The open streams of one server, and how a write wakes the ones it concerns.

    Every stream waits on a wake-up of its own (``InMemoryWatch._wait``), indexed by the log it
    reads and the namespace it watches (``None``: all). A write wakes only the streams of its
    resource in its namespace and that resource's cluster-wide streams: with one condition for
    all, every write woke every watch of the server (a fleet's 20 watches a cluster, each
    waking for every pod status patch to re-check a log with nothing new for it).
    """

    def __init__(self, condition: threading.Condition) -> None:
        self.condition = condition
        self._streams: weakref.WeakSet[InMemoryWatch] = weakref.WeakSet()
        # Weak references by ``id``, not a ``WeakSet``: a write walks its keys' streams, and
        # iterating a ``WeakSet`` (its iteration guard) cost ten times what the walk does.
        # A stream collected without unregistering (never iterated nor closed) leaves a dead
        # reference, skipped by ``notify`` and dropped when its key next registers a stream.
        self._by_key: dict[tuple[int, str | None], dict[int, weakref.ref[InMemoryWatch]]] = {}
        self.wakeups = 0
        """Streams woken by writes so far (what ``notify`` cost; for tests and benchmarks)."""

    @property
    def lock(self) -> Any:
        """The server's lock (a ``threading.RLock``), which a stream reads its log under."""
        return self.condition._lock  # type: ignore[attr-defined]

    def register(self, stream: InMemoryWatch) -> None:
        with self.condition:
            self._streams.add(stream)
            streams = self._by_key.setdefault(stream.wake_key, {})
            for dead in [ident for ident, ref in streams.items() if ref() is None]:
                del streams[dead]
            streams[id(stream)] = weakref.ref(stream)

    def unregister(self, stream: InMemoryWatch) -> None:
        with self.condition:
            self._streams.discard(stream)
            streams = self._by_key.get(stream.wake_key)
            ref = streams.get(id(stream)) if streams is not None else None
            if streams is not None and ref is not None and ref() is stream:
                del streams[id(stream)]
                if not streams:
                    del self._by_key[stream.wake_key]

    def open_streams(self) -> list[InMemoryWatch]:
        with self.condition:
            return list(self._streams)

    def notify(self, log: EventLog, namespace: str | None) -> None:
        """A write to ``log`` in ``namespace`` was committed (called with the lock held)."""
        for key in ((id(log), namespace), (id(log), None)) if namespace else ((id(log), None),):
            streams = self._by_key.get(key)
            if streams:
                # A copy: a stream collected meanwhile (a collection may run at any allocation)
                # unregisters from its generator's ``finally``, on this thread.
                for ref in tuple(streams.values()):
                    stream = ref()
                    if stream is not None:
                        stream.wake()
                        self.wakeups += 1

    def drop_all(self) -> int:
        """End every open stream as if its connection dropped; returns how many."""
        with self.condition:
            streams = self.open_streams()
            for stream in streams:
                stream.mark_closed()
        return len(streams)

    def drop_for(self, log: EventLog) -> None:
        """End the streams reading ``log`` (their resource stopped being served)."""
        with self.condition:
            for stream in self.open_streams():
                if stream.reads(log):
                    stream.mark_closed()

    def request_bookmarks(self) -> None:
        with self.condition:
            for stream in self.open_streams():
                stream.mark_bookmark_due()


class InMemoryWatch:
    """A ``WatchStream`` over an ``EventLog``.

    ``timeout_seconds`` is real time (a transport-level limit, as in kube). ``0`` means:
    deliver what is already available, then end without blocking; the stepped simulation
    runtime relies on this to poll watches deterministically. When bookmarks are allowed, a
    stream that ends by timeout sends one last BOOKMARK carrying the server's current
    resourceVersion, so the reader can resume from there without replaying anything; an idle
    stream also sends one every ``bookmark_interval`` seconds (kube: about once a minute).
    """

    def __init__(
        self,
        hub: WatchHub,
        log: EventLog,
        *,
        position: int,
        initial: list[WatchEvent],
        selection: WatchFilter,
        present: Presenter,
        bookmark: Callable[[], JsonObject] | None,
        current_rv: Callable[[], int],
        timeout_seconds: float | None,
        bookmark_interval: float | None = None,
    ) -> None:
        self._hub = hub
        self._log = log
        self._position = position
        self._initial = initial
        self._selection = selection
        self._present = present
        self._bookmark = bookmark
        self._current_rv = current_rv
        self._timeout = timeout_seconds
        self._bookmark_interval = bookmark_interval if bookmark is not None else None
        self._closed = False
        self._bookmark_due = False
        self._last_sent = time.monotonic()
        self._started = False
        # The reader's wait (``_wait``), read and set under the server's lock: blocked in it,
        # and the wake-up given and not yet taken (then ``_token`` is unlocked).
        self._lock = hub.lock
        self._waiting = False
        self._signalled = False
        self._token = threading.Lock()
        self._token.acquire()
        self.woken = 0
        """How many writes woke this stream (each one of its resource, in its namespace)."""
        self.wake_key: tuple[int, str | None] = (id(log), selection.namespace)
        hub.register(self)

    def reads(self, log: EventLog) -> bool:
        return self._log is log

    # Called with the hub's condition held.
    def wake(self) -> None:
        self.woken += 1
        # Only a reader blocked in ``_next_batch``'s wait needs waking, and once: one that is
        # not (it is delivering, or has not started) looks at the log under this same lock
        # before it waits again, so it finds this write without a wake-up.
        if self._waiting and not self._signalled:
            self._signal()

    def _signal(self) -> None:
        """Wake the reader from ``_wait`` (lock held; it waits, not woken yet)."""
        self._signalled = True
        self._token.release()

    def mark_closed(self) -> None:
        self._closed = True
        if self._waiting and not self._signalled:
            self._signal()

    def mark_bookmark_due(self) -> None:
        if self._bookmark is not None:
            self._bookmark_due = True
            if self._waiting and not self._signalled:
                self._signal()

    def close(self) -> None:
        with self._hub.condition:
            self.mark_closed()
        self._hub.unregister(self)

    def __enter__(self) -> InMemoryWatch:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[WatchEvent]:
        return self._events(self.batches())

    def batches(self) -> Iterator[list[WatchEvent]]:
        """The same events, in the batches they become available in: a writer sends each
        batch in one write (one system call and one wakeup of the reader for what was there
        at once, not one per event). Either this or ``__iter__``, once."""
        if self._started:
            raise RuntimeError("a watch stream can be iterated only once")
        self._started = True
        return self._batches()

    def _events(self, batches: Iterator[list[WatchEvent]]) -> Iterator[WatchEvent]:
        for batch in batches:
            for event in batch:
                if self._closed:
                    return
                yield event

    def _batches(self) -> Iterator[list[WatchEvent]]:
        try:
            initial, self._initial = self._initial, []
            if initial and not self._closed:
                yield initial
            deadline = None if self._timeout is None else time.monotonic() + self._timeout
            while True:
                batch, finished = self._next_batch(deadline)
                if self._closed:
                    return
                if batch:
                    yield batch
                self._last_sent = time.monotonic()
                if finished:
                    return
        finally:
            self._hub.unregister(self)

    def _next_batch(self, deadline: float | None) -> tuple[list[WatchEvent], bool]:
        with self._lock:
            while True:
                if self._closed:
                    return [], True
                logged = self._log.since(self._position)
                if logged is None:
                    status = gone_status(self._position, self._log.compacted_rv)
                    return [WatchEvent("ERROR", status)], True
                if logged:
                    self._position = logged[-1].rv
                    out = [e for e in map(self._translate, logged) if e is not None]
                    if out:
                        return out, False
                    continue
                if self._bookmark_due:
                    self._bookmark_due = False
                    return [self._bookmark_event()], False
                now = time.monotonic()
                remaining = None if deadline is None else deadline - now
                if remaining is not None and remaining <= 0:
                    return ([self._bookmark_event()] if self._bookmark else []), True
                if self._bookmark_interval is not None:
                    idle_until = self._last_sent + self._bookmark_interval
                    if now >= idle_until:
                        return [self._bookmark_event()], False
                    remaining = min(remaining or idle_until - now, idle_until - now)
                self._wait(remaining)

    def _wait(self, timeout: float | None) -> None:
        """Block until a wake-up or ``timeout``, the server's lock released meanwhile (held on
        entry and on return), as ``Condition.wait`` does, at a fraction of its cost: a write
        wakes a reader by releasing ``_token``, which the reader holds while it does not wait.
        A wake-up given just as the wait timed out stays given (``_signalled``); the next wait
        takes it at once and looks at the log again, and no write releases ``_token`` twice."""
        lock = self._lock
        self._waiting = True
        saved = lock._release_save()
        try:
            taken = self._token.acquire(True, -1 if timeout is None else timeout)
        finally:
            lock._acquire_restore(saved)
            self._waiting = False
        if taken:
            self._signalled = False

    def _bookmark_event(self) -> WatchEvent:
        assert self._bookmark is not None
        # Everything of this resource up to the current resourceVersion was delivered.
        self._position = max(self._position, self._current_rv())
        obj = self._bookmark()
        obj["metadata"] = {"resourceVersion": str(self._position)}
        return WatchEvent("BOOKMARK", obj)

    def _translate(self, event: LoggedEvent) -> WatchEvent | None:
        selection = self._selection
        if (
            selection.namespace is not None
            and (event.obj.get("metadata") or {}).get("namespace") != selection.namespace
        ):
            return None
        predicate = selection.predicate
        if predicate is None:
            return WatchEvent(event.type, self._present(event.obj))
        matches_now = predicate(event.obj)
        if event.type != "MODIFIED" or event.prev is None:
            return WatchEvent(event.type, self._present(event.obj)) if matches_now else None
        matched_before = predicate(event.prev)
        if matches_now:
            kind: WatchEventType = "MODIFIED" if matched_before else "ADDED"
            return WatchEvent(kind, self._present(event.obj))
        if not matched_before:
            return None
        # It left the selection: a DELETED carrying the old content at the new version.
        # A fresh top and metadata: the presented object may be the stored one (``shared``).
        left = dict(self._present(event.prev))
        left["metadata"] = {**left["metadata"], "resourceVersion": str(event.rv)}
        return WatchEvent("DELETED", left)
