"""A round reads its NodePools and NodeClasses from the informers' caches, not the API.

Upstream's provisioner reads them through controller-runtime's cached client; here a round did a
list of NodePools and a get of each NodeClass, and the disruption pass the same: at 100 clusters
thousands of requests per scale-up wave, each a round trip inside a decision. These tests hold
what a user sees: a round on an unchanged cluster sends no read, a NodePool created later is
used, and a NodeClass that is gone is still said to be gone.
"""

from __future__ import annotations

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube.resources import (
    CLUSTER_API_NODE_CLASSES,
    EVENTS,
    NODECLAIMS,
    NODEPOOLS,
)
from karpenter_capi.core.runtime.stepped import SteppedDriver
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.cluster import new_cluster
from tests.support import operator_world as world
from tests.support.provider import FakeProvider

_READS = ("get", "list")


def _started(*objects: dict[str, object]) -> tuple[InMemoryAPIServer, SteppedDriver]:
    clock = FakeClock()
    api = new_cluster(clock=clock)
    for obj in objects:
        resource = NODEPOOLS if obj["kind"] == "NodePool" else CLUSTER_API_NODE_CLASSES
        api.create(resource, obj)
    operator = world.operator(api, clock, FakeProvider(clock, bind_after_polls=10**6))
    driver = operator.stepped()
    driver.run_until_quiet()
    return api, driver


def _reads(api: InMemoryAPIServer, before: dict[str, int]) -> dict[str, int]:
    now = api.requests.by_resource()
    return {
        key: count - before.get(key, 0)
        for key, count in sorted(now.items())
        if key.split(" ", 1)[0] in _READS and count > before.get(key, 0)
    }


def test_rounds_on_an_unchanged_cluster_read_nothing_from_the_api() -> None:
    api, driver = _started(world.nodeclass(), world.nodepool())
    # Too big for any instance type: every round leaves it pending and looks again 10 s on.
    world.pending_pod(api, "huge", cpu="64")
    driver.advance(5)
    assert not api.list(NODECLAIMS).items
    before = api.requests.by_resource()
    driver.advance(35)  # three more rounds and seventy looks, nothing changed
    assert _reads(api, before) == {}


def test_a_nodepool_created_after_start_is_used() -> None:
    api, driver = _started(world.nodeclass())
    world.pending_pod(api, "web-0")
    driver.advance(5)
    assert not api.list(NODECLAIMS).items  # no NodePool yet
    before = api.requests.by_resource()
    api.create(NODEPOOLS, world.nodepool("late"))
    driver.advance(15)
    (claim,) = api.list(NODECLAIMS).items
    assert claim["metadata"]["labels"]["karpenter.sh/nodepool"] == "late"
    # Found by the informer (the look is woken by its event), not by a list.
    assert "list nodepools" not in _reads(api, before)


def test_a_deleted_nodeclass_is_said_not_found() -> None:
    api, driver = _started(world.nodeclass("gone"), world.nodepool(nodeclass="gone"))
    api.delete(CLUSTER_API_NODE_CLASSES, "gone")
    driver.advance(2)
    before = api.requests.by_resource()
    world.pending_pod(api, "web-0")
    driver.advance(5)
    assert not api.list(NODECLAIMS).items
    said = [
        e["message"]
        for e in api.list(EVENTS, "default").items + api.list(EVENTS).items
        if e["reason"] == "NodePoolNotReady"
    ]
    assert "ClusterAPINodeClass gone not found" in said
    assert "get clusterapinodeclasses" not in _reads(api, before)  # the cache says so
