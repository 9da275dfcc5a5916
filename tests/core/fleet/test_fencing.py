"""Fenced writes: a replica that lost (or may have lost) a cluster's Lease writes nothing to it.

``FencedClient`` wraps the client of one workload cluster; these tests drive it with the real
``ShardCoordinator`` of ``world.World`` and a second in-memory API server as the workload cluster.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.fleet.fencing import FencedClient, FencedError
from karpenter_capi.core.kube.client import JsonObject, KubeClient
from karpenter_capi.core.kube.errors import ServiceUnavailable, expected
from karpenter_capi.core.kube.resources import CONFIGMAPS, PODS
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.cluster import new_cluster

from .world import LEASE_DURATION, NAMESPACE, RETRY_PERIOD, World


def _config_map(name: str, data: dict[str, str] | None = None) -> JsonObject:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default"},
        "data": data or {},
    }


class _Cuttable:
    """A management-cluster client that can be cut off: every call then fails with 503."""

    def __init__(self, api: InMemoryAPIServer) -> None:
        self._api = api
        self.cut = False

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._api, name)
        if not callable(attribute):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            if self.cut:
                raise ServiceUnavailable("connection refused")
            return attribute(*args, **kwargs)

        return call


def _writes(
    fenced: FencedClient,
) -> dict[str, Callable[[], object]]:
    """One call of every write verb, on objects that exist."""
    return {
        "create": lambda: fenced.create(CONFIGMAPS, _config_map("new")),
        "update": lambda: fenced.update(CONFIGMAPS, _config_map("cm", {"k": "update"})),
        "patch": lambda: fenced.patch(CONFIGMAPS, "cm", {"data": {"k": "patch"}}, "default"),
        "status": lambda: fenced.update(
            PODS, fenced.get(PODS, "web", "default"), subresource="status"
        ),
        "delete": lambda: fenced.delete(CONFIGMAPS, "cm", "default"),
        "evict": lambda: fenced.evict("web", "default"),
    }


def _workload(clock: FakeClock) -> InMemoryAPIServer:
    workload = new_cluster(clock=clock)
    workload.create(CONFIGMAPS, _config_map("cm", {"k": "original"}))
    workload.create(
        PODS,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"containers": [{"name": "web", "image": "nginx"}]},
        },
    )
    return workload


def test_a_replica_that_lost_its_lease_writes_nothing_and_still_reads() -> None:
    world = World(1)
    (cluster,) = world.clusters
    management = _Cuttable(world.api)
    replica = world.join("a", management)  # type: ignore[arg-type]
    world.run(2 * RETRY_PERIOD)
    workload = _workload(world.clock)
    fenced = FencedClient(
        workload, lambda: replica.coordinator.holds(cluster), cluster, lease=f"{NAMESPACE}/x"
    )
    assert replica.coordinator.holds(cluster)
    fenced.patch(CONFIGMAPS, "cm", {"data": {"k": "while-held"}}, "default")

    management.cut = True  # partitioned from the Leases: it cannot renew
    world.run(LEASE_DURATION)

    for verb, write in _writes(fenced).items():
        with pytest.raises(FencedError) as refused:
            write()
        message = str(refused.value)
        assert message.startswith(
            f"cluster {cluster}: not sending {verb if verb != 'status' else 'update'}"
        )
        assert f"does not hold the cluster's Lease {NAMESPACE}/x" in message
        # Controllers log it as one expected line, as any conflict.
        assert expected(refused.value)
        assert refused.value.code == 409
    # Nothing was written; reads go on.
    assert fenced.get(CONFIGMAPS, "cm", "default")["data"] == {"k": "while-held"}
    assert [o["metadata"]["name"] for o in fenced.list(CONFIGMAPS, "default").items] == ["cm"]
    assert fenced.get(PODS, "web", "default")["metadata"]["name"] == "web"


def test_writes_pass_while_the_lease_is_held() -> None:
    clock = FakeClock()
    workload = _workload(clock)
    fenced = FencedClient(workload, lambda: True, "team/prod")
    for write in _writes(fenced).values():
        write()
    assert fenced.get(CONFIGMAPS, "new", "default")["data"] == {}
    assert fenced.drains_zero_timeout_watch == workload.drains_zero_timeout_watch


def test_the_default_lease_name_in_messages_is_the_clusters_lease() -> None:
    fenced = FencedClient(new_cluster(), lambda: False, "team/prod")
    with pytest.raises(FencedError, match=r"Lease karpenter-capi-cluster-team\.prod;"):
        fenced.delete(CONFIGMAPS, "cm", "default")


def test_a_partitioned_replicas_controller_never_writes_once_another_replica_does() -> None:
    """No double launch: each cluster's writes come from one replica, then only from the next.

    Every replica runs a toy controller that, every step, writes to each cluster it has *ever*
    served (a stuck controller that has not heard it lost the cluster), through that cluster's
    fenced client. One replica is cut off from the management cluster but still reaches the
    workload cluster.
    """
    world = World(6)
    management = _Cuttable(world.api)
    for identity in ("a", "b", "c"):
        world.join(identity, management if identity == "b" else None)  # type: ignore[arg-type]
    workload = _workload(world.clock)
    writers: dict[str, list[tuple[float, str]]] = {c: [] for c in world.clusters}
    ever: dict[str, set[str]] = {r: set() for r in world.replicas}
    clients: dict[tuple[str, str], KubeClient] = {}
    for identity, replica in world.replicas.items():
        for cluster in world.clusters:
            holds = functools.partial(replica.coordinator.holds, cluster)
            clients[identity, cluster] = FencedClient(workload, holds, cluster)

    def controllers() -> None:
        for identity, replica in world.replicas.items():
            ever[identity] |= replica.served
            for cluster in sorted(ever[identity]):
                name = f"{cluster.replace('/', '.')}.{identity}.{len(writers[cluster])}"
                try:
                    clients[identity, cluster].create(CONFIGMAPS, _config_map(name))
                except FencedError:
                    continue
                writers[cluster].append((world.elapsed, identity))

    for step in range(30):
        if step == 4:
            management.cut = True
        world.tick()
        controllers()

    b_served = {c for c in world.clusters if any(w == "b" for _, w in writers[c])}
    assert b_served
    for cluster, history in writers.items():
        # One writer per instant, and once a writer is replaced it never writes again.
        order = [w for i, (_, w) in enumerate(history) if i == 0 or history[i - 1][1] != w]
        assert len(order) == len(set(order)), (cluster, history)
        times = [t for t, _ in history]
        assert len(times) == len(set(times)), (cluster, history)
    for cluster in b_served:
        assert writers[cluster][-1][1] != "b"
