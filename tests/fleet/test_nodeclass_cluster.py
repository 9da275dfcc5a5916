"""A NodeClass in a served workload cluster launches only into that cluster's own Cluster."""

from __future__ import annotations

import pytest

from karpenter_capi.core.kube import CLUSTER_API_NODE_CLASSES, NODEPOOLS, JsonObject
from tests.fleet.world import FleetWorld, until


def _launching(cluster: str, namespace: str) -> JsonObject:
    return {
        "apiVersion": "karpenter.cluster.x-k8s.io/v1alpha1",
        "kind": "ClusterAPINodeClass",
        "metadata": {"name": "native"},
        "spec": {
            "launch": {
                "mode": "CAPAFleet",
                "clusterName": cluster,
                "namespace": namespace,
                "infrastructureTemplateRef": {"kind": "AWSMachineTemplate", "name": "workers"},
                "bootstrapConfigTemplateRef": {"kind": "KubeadmConfigTemplate", "name": "workers"},
            }
        },
    }


def _pool() -> JsonObject:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "native"},
        "spec": {
            "template": {
                "spec": {
                    "nodeClassRef": {
                        "group": "karpenter.cluster.x-k8s.io",
                        "kind": "ClusterAPINodeClass",
                        "name": "native",
                    },
                    "requirements": [],
                }
            }
        },
    }


def _ready(world: FleetWorld) -> JsonObject:
    nodeclass = world.workloads["alpha"].get(CLUSTER_API_NODE_CLASSES, "native")
    found = [
        c for c in (nodeclass.get("status") or {}).get("conditions") or [] if c["type"] == "Ready"
    ]
    return found[0] if found else {}


def test_a_nodeclass_naming_another_cluster_is_not_ready_and_launches_nothing(
    world: FleetWorld,
) -> None:
    world.add_cluster("alpha")
    world.add_cluster("beta")
    alpha = world.workloads["alpha"]
    alpha.create(CLUSTER_API_NODE_CLASSES, _launching("beta", "team-beta"))
    alpha.create(NODEPOOLS, _pool())
    world.start()
    world.deploy("alpha", "web", 3)
    assert until(world, lambda: world.bound("alpha") == 3)
    ready = _ready(world)
    assert ready["status"] == "False"
    assert ready["reason"] == "ClusterMismatch"
    assert ready["message"].startswith(
        "spec.launch names Cluster team-beta/beta, but this workload cluster is served as "
        "Cluster team-alpha/alpha: set spec.launch.clusterName to 'alpha'"
    )
    # Nothing was launched through it: every NodeClaim came from the catalog's NodePool.
    pools = {c["metadata"]["labels"]["karpenter.sh/nodepool"] for c in world.nodeclaims("alpha")}
    assert pools == {"catalog"}
    assert world.nodeclaims("beta") == []


def test_a_nodeclaim_made_before_the_nodeclass_changed_is_not_launched_either() -> None:
    from karpenter_capi.core.api.nodeclass import ClusterAPINodeClass
    from karpenter_capi.core.errors import NodeClassNotReadyError
    from karpenter_capi.core.fleet.guard import ClusterGuard

    guard = ClusterGuard("team-alpha", "alpha")
    other = ClusterAPINodeClass.model_validate(_launching("beta", "team-beta"))
    own = ClusterAPINodeClass.model_validate(_launching("alpha", "team-alpha"))
    with pytest.raises(NodeClassNotReadyError, match=r"spec\.launch names Cluster team-beta/beta"):
        guard.karpenter_capi_create(None, [], other, None)
    # Its own Cluster is left to the plugin that launches it.
    assert guard.karpenter_capi_create(None, [], own, None) is None
