"""Scale-down deletes NodeClaims past the disruption budget, and drains them past no PDB.

On the fake provider rather than the simulated cluster: the test plays the kubelets itself, so
a pod stays on its draining Node until an eviction takes it (the simulator's pod garbage
collection removes pods from a Node as soon as it is being deleted, which would hide whether the
drain waited).
"""

from __future__ import annotations

from typing import Any

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube.resources import (
    CLUSTER_API_NODE_CLASSES,
    EVENTS,
    NODECLAIMS,
    NODEPOOLS,
    NODES,
    POD_DISRUPTION_BUDGETS,
    PODS,
)
from karpenter_capi.core.operator import Operator
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.cluster import new_cluster
from tests.support import operator_world as world
from tests.support.provider import FakeProvider


def _world(replicas: int) -> tuple[InMemoryAPIServer, Operator, Any]:
    clock = FakeClock()
    api = new_cluster(clock=clock)
    provider = FakeProvider(clock, bind_after_polls=1)
    api.create(CLUSTER_API_NODE_CLASSES, world.nodeclass())
    api.create(
        NODEPOOLS,
        world.nodepool(
            "static",
            replicas=replicas,
            # A zero budget: scale-down is the user's request and does not wait for it.
            disruption={"consolidateAfter": "0s", "budgets": [{"nodes": "0"}]},
        ),
    )
    operator = world.operator(api, clock, provider)
    return api, operator, operator.stepped()


def _join(api: InMemoryAPIServer, claim: dict[str, Any]) -> str:
    """The kubelet of the claim's machine registers its Node."""
    name = f"node-{claim['metadata']['name']}"
    api.create(
        NODES,
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {wellknown.LABEL_HOSTNAME: name}},
            "spec": {
                "providerID": claim["status"]["providerID"],
                "taints": [
                    {
                        "key": wellknown.TAINT_UNREGISTERED_KEY,
                        "effect": wellknown.TAINT_UNREGISTERED_EFFECT,
                    }
                ],
            },
            "status": {
                "allocatable": {"cpu": "1930m", "memory": "3Gi", "pods": "110"},
                "capacity": {"cpu": "2", "memory": "4Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        },
    )
    return name


def _running_pod(api: InMemoryAPIServer, name: str, node: str) -> None:
    api.create(
        PODS,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": "db"}},
            "spec": {"nodeName": node, "containers": [{"name": "app", "image": "db"}]},
        },
        "default",
    )
    api.patch(
        PODS,
        name,
        {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}},
        "default",
        subresource="status",
    )


def test_scale_down_to_zero_drains_through_the_normal_path_and_waits_for_the_pdb() -> None:
    api, _, driver = _world(2)
    driver.advance(15)
    claims = api.list(NODECLAIMS).items
    assert len(claims) == 2
    nodes = [_join(api, c) for c in claims]
    driver.advance(5)
    _running_pod(api, "db-0", nodes[0])
    api.create(
        POD_DISRUPTION_BUDGETS,
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "db"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}},
        },
        "default",
    )
    driver.advance(5)
    assert api.get(NODEPOOLS, "static")["status"]["nodes"] == 2

    api.patch(NODEPOOLS, "static", {"spec": {"replicas": 0}})
    driver.advance(60)
    # Both NodeClaims are going despite the zero budget; the empty node is gone already, the
    # one whose pod the PDB protects is still draining.
    remaining = api.list(NODECLAIMS).items
    assert [c["metadata"]["name"] for c in remaining] == [claims[0]["metadata"]["name"]]
    assert remaining[0]["metadata"].get("deletionTimestamp")
    assert [n["metadata"]["name"] for n in api.list(NODES).items] == [nodes[0]]
    assert api.get(PODS, "db-0", "default")["spec"]["nodeName"] == nodes[0]
    refused = [e for e in api.list(EVENTS).items if e["reason"] == "FailedDraining"]
    assert refused
    assert "PDB" in refused[0]["message"]
    assert api.get(NODEPOOLS, "static")["status"]["nodes"] == 0

    api.delete(POD_DISRUPTION_BUDGETS, "db", "default")
    driver.advance(60)
    assert api.list(NODECLAIMS).items == []
    assert api.list(NODES).items == []
