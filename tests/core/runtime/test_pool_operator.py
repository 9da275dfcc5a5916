"""Whole operators on one shared worker pool: the fleet's shape, on real time, in memory.

Two workload clusters, each with every controller wired (``Operator``), run on a pool of four
threads; each cluster's pending pods get their NodeClaims in that cluster, and no controller
gets a thread of its own (informers keep one each, for their watch).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from karpenter_capi.core.clock import SystemClock
from karpenter_capi.core.kube.client import JsonObject, KubeClient
from karpenter_capi.core.kube.resources import (
    CLUSTER_API_NODE_CLASSES,
    NODECLAIMS,
    NODEPOOLS,
    Resource,
)
from karpenter_capi.core.operator import Operator, OperatorOptions
from karpenter_capi.core.runtime.pool import WorkerPool
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.apiserver.faulty_client import FaultyClient, throttled
from karpenter_capi.sim.cluster import new_cluster
from tests.support.operator_world import nodeclass, nodepool, pending_pod
from tests.support.provider import FakeProvider

WAIT = 20.0


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    # Real threads race here; poll in real time, bounded only as a guard against a hang.
    deadline = time.monotonic() + WAIT
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)


class PooledCluster:
    def __init__(
        self, name: str, pool: WorkerPool, client: Callable[[KubeClient], KubeClient] | None = None
    ) -> None:
        clock = SystemClock()
        self.api: InMemoryAPIServer = new_cluster(clock=clock)
        self.api.create(CLUSTER_API_NODE_CLASSES, nodeclass())
        self.api.create(NODEPOOLS, nodepool())
        options = OperatorOptions(
            leader_elect=False, metrics_port=None, batch_idle=0.05, batch_max=0.5, packing_budget=0
        )
        provider = FakeProvider(clock)
        workload = self.api if client is None else client(self.api)
        self.operator = Operator(
            workload, self.api, provider.plugins(self.api), clock, options, pool=pool, name=name
        )
        self.stop = threading.Event()
        self.started = threading.Event()
        self.thread = threading.Thread(
            target=self.operator.run,
            args=(self.stop,),
            kwargs={"on_started": self.started.set},
            name=f"operator-{name}",
            daemon=True,
        )

    def claims(self) -> int:
        return len(self.api.list(NODECLAIMS).items)


def test_two_operators_provision_their_own_clusters_on_one_pool() -> None:
    with WorkerPool(4, name="fleet") as pool:
        clusters = [PooledCluster(name, pool) for name in ("a", "b")]
        for cluster in clusters:
            cluster.thread.start()
            assert cluster.started.wait(WAIT)
        assert pool.members == ["a", "b"]
        pending_pod(clusters[0].api, "web-0")
        pending_pod(clusters[1].api, "web-0", cpu="5")
        pending_pod(clusters[1].api, "web-1", cpu="5")
        _wait_for(lambda: clusters[0].claims() == 1, "a's NodeClaim")
        _wait_for(lambda: clusters[1].claims() == 2, "b's two NodeClaims")
        names = [thread.name for thread in threading.enumerate()]
        assert not [name for name in names if name.startswith(("worker-", "periodic-"))]
        # Nor each informer a timer thread: only its watch.
        assert not [name for name in names if name.endswith("-timer")]
        for cluster in clusters:
            cluster.stop.set()
            cluster.thread.join(WAIT)
            assert not cluster.thread.is_alive()
        assert pool.members == []


class WriteStorm(FaultyClient):
    """Every write of the controller to this cluster gets 429 with ``Retry-After: 3600`` while
    ``storming``; reads and watches go through, so its controllers see work and keep trying."""

    def __init__(self, inner: KubeClient) -> None:
        super().__init__(inner, lambda: throttled(3600) if self.storming else None)
        self.storming = True
        self.threads: list[str] = []

    def _record(
        self,
        verb: str,
        resource: Resource,
        namespace: str | None,
        name: str | None = None,
        subresource: str | None = None,
    ) -> None:
        if verb not in ("get", "list", "watch"):
            self.threads.append(threading.current_thread().name)
            self._check()

    def server_version(self) -> JsonObject:
        return self._inner.server_version()


def test_a_storming_cluster_holds_no_worker_of_a_one_worker_pool() -> None:
    """Issue 28's isolation on the fleet's real shape: one shared worker for two clusters, one
    of them answering every write with 429 and an hour's ``Retry-After``. The storming
    cluster's reconciles fail at once and back off on the pool's timer, not on the worker: had
    any of them slept out the ``Retry-After`` (in a retry loop, the client, or a backoff), the
    only worker would be gone for an hour and the other cluster would never provision."""
    storms: list[WriteStorm] = []

    def storming(api: KubeClient) -> KubeClient:
        storms.append(WriteStorm(api))
        return storms[-1]

    with WorkerPool(1, name="fleet") as pool:
        a = PooledCluster("a", pool, storming)
        b = PooledCluster("b", pool)
        for cluster in (a, b):
            cluster.thread.start()
            assert cluster.started.wait(WAIT)
        (storm,) = storms
        pending_pod(a.api, "web-0")
        _wait_for(lambda: storm.refused > 0, "a's NodeClaim create refused")
        pending_pod(b.api, "web-0", cpu="5")
        pending_pod(b.api, "web-1", cpu="5")
        _wait_for(lambda: b.claims() == 2, "b's two NodeClaims")
        assert a.claims() == 0
        # The refused writes were made by the pool's one worker (or threads a reconcile on it
        # started and ended), and the worker is free again: b's work ran on it since.
        assert storm.threads
        assert all(
            name.startswith(("fleet-worker-", "create-nodeclaim")) for name in storm.threads
        ), storm.threads
        storm.storming = False
        for cluster in (a, b):
            cluster.stop.set()
            cluster.thread.join(WAIT)
            assert not cluster.thread.is_alive()
