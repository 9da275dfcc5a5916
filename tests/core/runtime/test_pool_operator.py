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
from karpenter_capi.core.kube.resources import CLUSTER_API_NODE_CLASSES, NODECLAIMS, NODEPOOLS
from karpenter_capi.core.operator import Operator, OperatorOptions
from karpenter_capi.core.runtime.pool import WorkerPool
from karpenter_capi.sim.apiserver import InMemoryAPIServer
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
    def __init__(self, name: str, pool: WorkerPool) -> None:
        clock = SystemClock()
        self.api: InMemoryAPIServer = new_cluster(clock=clock)
        self.api.create(CLUSTER_API_NODE_CLASSES, nodeclass())
        self.api.create(NODEPOOLS, nodepool())
        options = OperatorOptions(
            leader_elect=False, metrics_port=None, batch_idle=0.05, batch_max=0.5, packing_budget=0
        )
        provider = FakeProvider(clock)
        self.operator = Operator(
            self.api, self.api, provider.plugins(self.api), clock, options, pool=pool, name=name
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
