"""Building members off the sync thread, so a workload cluster that does not answer delays no
other.

Building a member asks its workload API server for ``/version`` first; an unreachable one
takes the client's connect timeout to say so. Done inline, a sync with a few such clusters
would wait that long for each before serving a new, healthy one. So the threaded fleet builds
on a small pool of threads: the sync starts a build and moves on, and picks the member up at a
later sync (the fleet is woken when a build ends). A build whose kubeconfig changed meanwhile,
or whose Cluster is no longer wanted, is thrown away (and its member stopped) when it ends.
In virtual time builds run inline, so a stepped fleet stays deterministic.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from karpenter_capi.core.fleet.discovery import ObservedCluster
from karpenter_capi.core.fleet.kubeconfigs import Kubeconfig
from karpenter_capi.core.fleet.members import Member

log = logging.getLogger(__name__)

Build = Callable[[ObservedCluster, Kubeconfig], Member]


@dataclass
class _Pending:
    fingerprint: str
    future: Future[Member]


def _discard(future: Future[Member]) -> None:
    """Stop the member a thrown-away build made, once it is made."""

    def done(finished: Future[Member]) -> None:
        if finished.cancelled() or finished.exception() is not None:
            return
        finished.result().stop()

    future.add_done_callback(done)


class Builds:
    """Member builds: inline (``threads=0``) or on ``threads`` threads."""

    def __init__(
        self, build: Build, *, threads: int = 0, on_done: Callable[[], None] | None = None
    ) -> None:
        self._build = build
        self._on_done = on_done
        self._executor = (
            ThreadPoolExecutor(threads, thread_name_prefix="fleet-build") if threads > 0 else None
        )
        self._pending: dict[str, _Pending] = {}

    def obtain(self, cluster: ObservedCluster, kubeconfig: Kubeconfig) -> Member | None:
        """The built member, ``None`` while it is being built; raises what the build raised."""
        if self._executor is None:
            return self._build(cluster, kubeconfig)
        key = cluster.key
        pending = self._pending.get(key)
        if pending is not None and pending.fingerprint != kubeconfig.fingerprint:
            del self._pending[key]
            _discard(pending.future)
            pending = None
        if pending is None:
            future = self._executor.submit(self._build, cluster, kubeconfig)
            if self._on_done is not None:
                wake = self._on_done
                future.add_done_callback(lambda _finished: wake())
            self._pending[key] = _Pending(kubeconfig.fingerprint, future)
            return None
        if not pending.future.done():
            return None
        del self._pending[key]
        return pending.future.result()

    def keep_only(self, keys: Collection[str]) -> None:
        """Throw away the builds of clusters not in ``keys`` (gone, paused, handed over)."""
        for key in [k for k in self._pending if k not in keys]:
            _discard(self._pending.pop(key).future)

    def close(self) -> None:
        """Wait for the builds under way and stop what they made."""
        self.keep_only(())
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)


__all__ = ["Build", "Builds"]
