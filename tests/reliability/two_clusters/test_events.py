"""Events about Cluster API objects are written where those objects live: the management
cluster, in the object's namespace, where ``kubectl describe machinedeployment`` shows them.

The management cluster's RBAC used to grant no Events, so with two clusters a resource left out
of a NodeClass was told only on the NodeClass (in the workload cluster); ``kubectl describe``
on the resource itself, the first place a Cluster API user looks, said nothing.
"""

from __future__ import annotations

import copy
from typing import Any

from karpenter_capi.core.kube.resources import EVENTS, MACHINE_DEPLOYMENTS
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from tests.reliability.two_clusters.env import NAMESPACE, TwoClusters


def _events(server: InMemoryAPIServer, kind: str) -> list[dict[str, Any]]:
    return [e for e in server.list(EVENTS).items if e["involvedObject"]["kind"] == kind]


def test_a_left_out_machine_deployment_is_told_on_itself_in_the_management_cluster(
    env: TwoClusters,
) -> None:
    good = env.management.list(MACHINE_DEPLOYMENTS, NAMESPACE).items[0]
    broken = copy.deepcopy(good)
    broken["metadata"] = {
        "name": "clusterless",
        "namespace": NAMESPACE,
        "labels": dict(good["metadata"]["labels"]),
        "annotations": dict(good["metadata"]["annotations"]),
    }
    broken.pop("status", None)
    broken["spec"]["clusterName"] = "ghost"
    broken["spec"]["template"]["spec"]["clusterName"] = "ghost"
    env.management.create(MACHINE_DEPLOYMENTS, broken, NAMESPACE)
    env.start()
    env.deploy("web", 2)
    env.advance(60)

    assert env.pending() == []
    (event,) = [
        e
        for e in _events(env.management, "MachineDeployment")
        if e["involvedObject"]["name"] == "clusterless"
    ]
    assert event["type"] == "Warning"
    assert event["metadata"]["namespace"] == NAMESPACE
    assert "left out of ClusterAPINodeClass" in str(event["message"])
    assert "ghost" in str(event["message"])
    # Nothing about a Cluster API object lands in the workload cluster.
    assert _events(env.workload, "MachineDeployment") == []
