"""A watch that keeps a ``Mirror``'s copy up to date on a thread of its own, and the barrier that
makes a read of that copy show this process's own writes (``mirror`` module docstring).

Why: against a real kube-apiserver the mirror cannot drain a watch without waiting, so without
this every launch call listed every NodeClaim and its resource's Machines afresh: about two
lists of each per NodeClaim in a burst, a tenth of the controller's CPU on a real API (issue 25).
A watch delivers a resource's events in resourceVersion order, so once it has delivered an
event at or past the resourceVersion a write answered with, the copy shows that write or a later
one. The feed ends itself, and the next read lists and starts it again, on anything it cannot
vouch for: an error, a 410, a watch the server ended without an event (so a server that ends
every watch at once costs a list per read, as before, instead of a busy loop), a resourceVersion
that is not an integer.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Final, Generic, TypeVar

from karpenter_capi.plugin_api import KubeClient, Resource
from karpenter_capi.plugin_api.kube import JsonObject, WriteLog, Written, object_key

T = TypeVar("T")

BARRIER_SECONDS: Final = 5.0
"""How long a read waits for the watch to reach this process's writes before it lists."""

WATCH_SECONDS: Final = 300
"""Each watch request's server-side timeout; the feed watches again from where it ended."""


def _equalities(selector: str | None) -> Mapping[str, str] | None:
    """An equality-only label selector as its pairs; ``None`` when it says more than that (then
    every write is taken to match: waiting for one too many only costs a list)."""
    pairs: dict[str, str] = {}
    for part in (selector or "").split(","):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        if not sep or key.endswith("!") or any(c in part for c in "() "):
            return None
        pairs[key.strip()] = value.lstrip("=").strip()
    return pairs


class Feed(Generic[T]):
    """The watch behind one mirror. Every method but the thread's own runs with ``lock`` held
    (the mirror's), which the thread also takes to apply an event through ``put``."""

    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        log: WriteLog,
        lock: threading.Lock,
        *,
        put: Callable[[str, T | None, int | None], None],
        holds: Callable[[str], bool],
        transform: Callable[[JsonObject], T],
        namespace: str | None = None,
        label_selector: str | None = None,
        barrier_seconds: float,
    ) -> None:
        self._client = client
        self._resource = resource
        self._log = log
        self._cond = threading.Condition(lock)
        self._put = put
        self._holds = holds
        self._transform = transform
        self._namespace = namespace
        self._label_selector = label_selector
        self._labels = _equalities(label_selector)
        self._barrier_seconds = barrier_seconds
        self._generation = 0  # a thread applies events only while its generation is current
        self._alive = False
        self._progress = 0  # the resourceVersion the copy has reached
        self._needed = 0  # the highest resourceVersion of this process's writes it must show
        self._cursor = 0  # into the write log
        self._stream_close: Callable[[], None] | None = None
        self.waits = 0
        """Reads that waited for the watch to reach a write (for tests)."""

    def before_list(self) -> int:
        """The write-log cursor to pass to ``start`` once the list is made: every write logged
        after it may be newer than the list."""
        self.stop()
        return self._log.end(self._resource)

    def start(self, cursor: int, resource_version: str) -> bool:
        """Follow the watch from a list at ``resource_version``; False when that is not an
        integer (the mirror then lists on every read)."""
        progress = resource_version
        if not progress.isdigit():
            return False
        self._cursor, self._progress, self._alive = cursor, int(progress), True
        generation = self._generation
        thread = threading.Thread(
            target=self._follow,
            args=(generation, resource_version),
            name=f"mirror-{self._resource.plural}",
            daemon=True,
        )
        thread.start()
        return True

    def stop(self) -> None:
        self._generation += 1
        self._alive = False
        close, self._stream_close = self._stream_close, None
        if close is not None:
            close()
        self._cond.notify_all()

    def caught_up(self) -> bool:
        """Whether the copy shows every write this process made to what the mirror covers,
        waiting up to ``barrier_seconds`` for the watch to get there; False means list."""
        if not self._alive:
            return False
        writes, self._cursor = self._log.since(self._resource, self._cursor)
        if writes is None:
            return False
        for written in writes:
            if not self._covers(written):
                continue
            if written.resource_version is None:
                return False
            self._needed = max(self._needed, written.resource_version)
        if self._progress >= self._needed:
            return True
        self.waits += 1
        self._cond.wait_for(
            lambda: self._progress >= self._needed or not self._alive,
            timeout=self._barrier_seconds,
        )
        return self._alive and self._progress >= self._needed

    def _covers(self, written: Written) -> bool:
        if self._namespace and written.namespace and written.namespace != self._namespace:
            return False
        if written.labels is None:
            # A subresource's answer (a Scale) does not show the labels, but such a write does
            # not change them either: it concerns the copy only if the copy holds the object.
            return written.key is None or self._holds(written.key)
        if self._labels is None:
            return True
        if all(written.labels.get(k) == v for k, v in self._labels.items()):
            return True
        # Labels that no longer match may have moved the object out of the copy (the watch
        # sends a DELETED for it): that concerns the copy if it holds the object.
        return written.key is None or self._holds(written.key)

    def _follow(self, generation: int, resource_version: str) -> None:
        try:
            while self._watch_once(generation, resource_version):
                resource_version = self._resume_from(generation)
        except Exception:  # any failure: the next read lists and restarts
            pass
        finally:
            with self._cond:
                if generation == self._generation:
                    self._alive = False
                    self._stream_close = None
                    self._cond.notify_all()

    def _resume_from(self, generation: int) -> str:
        with self._cond:
            if generation != self._generation:
                raise _Superseded
            return str(self._progress)

    def _watch_once(self, generation: int, resource_version: str) -> bool:
        """One watch request to its end; True when it should be made again from where it
        ended (it delivered something and nothing was wrong)."""
        stream = self._client.watch(
            self._resource,
            self._namespace,
            resource_version=resource_version,
            label_selector=self._label_selector,
            allow_bookmarks=True,
            timeout_seconds=WATCH_SECONDS,
        )
        with self._cond:
            if generation != self._generation:
                stream.close()
                return False
            self._stream_close = stream.close
        delivered = False
        try:
            for event in stream:
                if event.type == "ERROR":
                    return False
                rv = event.resource_version
                if not rv.isdigit():
                    return False
                key = "" if event.type == "BOOKMARK" else object_key(event.object)
                obj = None if event.type in ("DELETED", "BOOKMARK") else event.object
                value = None if obj is None else self._transform(obj)
                with self._cond:
                    if generation != self._generation:
                        return False
                    if key:
                        self._put(key, value, int(rv))
                    self._progress = max(self._progress, int(rv))
                    self._cond.notify_all()
                delivered = True
        finally:
            stream.close()
        return delivered


class _Superseded(Exception):
    """The mirror started another feed: this thread's work is over."""
