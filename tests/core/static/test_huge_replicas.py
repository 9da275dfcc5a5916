"""A static NodePool asking for more replicas than any cluster holds.

The CRD admits any ``replicas`` up to 2^63-1 (upstream's too), and upstream creates every
missing NodeClaim in one reconcile, bounded only by ``limits.nodes``. Here one round creates at
most ``CREATE_PER_ROUND`` NodeClaims and the next waits ``CAPPED_RETRY`` seconds, so a pool of
2^31-1 replicas neither stalls the controller nor floods the API, and the NodePool says so
(once per change) with the way out: ``limits.nodes``.
"""

from __future__ import annotations

from typing import Any

import pytest

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube.resources import (
    CLUSTER_API_NODE_CLASSES,
    EVENTS,
    NODECLAIMS,
    NODEPOOLS,
)
from karpenter_capi.core.runtime.stepped import SteppedDriver
from karpenter_capi.core.static.plan import CREATE_PER_ROUND
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.cluster import new_cluster
from tests.support import operator_world as world
from tests.support.provider import FakeProvider


def _world(replicas: int, **spec: Any) -> tuple[InMemoryAPIServer, SteppedDriver]:
    clock = FakeClock()
    api = new_cluster(clock=clock)
    provider = FakeProvider(clock)
    api.create(CLUSTER_API_NODE_CLASSES, world.nodeclass())
    api.create(NODEPOOLS, world.nodepool("static", replicas=replicas, **spec))
    return api, world.operator(api, clock, provider).stepped()


def _claims(api: InMemoryAPIServer) -> int:
    return len(api.list(NODECLAIMS).items)


def _events(api: InMemoryAPIServer, reason: str) -> list[dict[str, Any]]:
    return [
        e
        for e in api.list(EVENTS).items
        if e["involvedObject"]["kind"] == "NodePool" and e["reason"] == reason
    ]


@pytest.mark.parametrize("replicas", [3 * CREATE_PER_ROUND, 2**31 - 1])
def test_a_huge_replica_count_is_created_a_round_at_a_time_and_said_on_the_nodepool(
    replicas: int,
) -> None:
    api, driver = _world(replicas)

    driver.advance(2)

    assert _claims(api) == CREATE_PER_ROUND
    (event,) = _events(api, "ScaleUpLimited")
    assert event["type"] == "Warning"
    assert f"{replicas} replicas" in event["message"]
    assert f"at most {CREATE_PER_ROUND}" in event["message"]
    assert "limits.nodes" in event["message"]

    driver.advance(60)

    # A round each CAPPED_RETRY (10 s): the 300 are all there, the 2^31-1 come 100 at a time.
    assert _claims(api) == min(replicas, 7 * CREATE_PER_ROUND)
    assert len(_events(api, "ScaleUpLimited")) == 1


def test_limits_nodes_bounds_a_huge_replica_count() -> None:
    api, driver = _world(2**31 - 1, limits={"nodes": "5"})

    driver.advance(60)

    assert _claims(api) == 5
    assert _events(api, "NodeLimitReached")
