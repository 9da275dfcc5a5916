"""The emulated Cluster topology controller: a ClusterClass Cluster's worker ``replicas`` win.

Where ``spec.topology.workers.machineDeployments[].replicas`` (or ``machinePools[]``) is set,
any other writer's replica change is reverted, as upstream's ``computeMachineDeployment``
applied with server-side apply does; where unset, the change stands (the autoscaler case).
The topology's metadata lands on the owned object and its template. Both Cluster layouts.
"""

from __future__ import annotations

from typing import Any

import pytest

from karpenter_capi.core.kube import MACHINE_DEPLOYMENTS, MACHINE_POOLS, JsonObject
from karpenter_capi.core.kube.resources import CLUSTERS

from .harness import CLUSTER, NAMESPACE, SHAPES, Sim, at, machine_deployment, machine_pool, new_sim

OWNED = "topology.cluster.x-k8s.io/owned"
MD_NAME = "topology.cluster.x-k8s.io/deployment-name"
MP_NAME = "topology.cluster.x-k8s.io/pool-name"


def topology_cluster(shape: str, workers: JsonObject) -> JsonObject:
    """A Cluster built from a ClusterClass, in ``shape``'s layout (v1beta1 ``class``, v1beta2
    ``classRef``)."""
    topology: JsonObject = {"version": "v1.31.0", "workers": workers}
    if shape == "v1beta2":
        topology["classRef"] = {"name": "quick-start"}
    else:
        topology["class"] = "quick-start"
    return {
        "apiVersion": f"cluster.x-k8s.io/{shape}",
        "kind": "Cluster",
        "metadata": {"name": CLUSTER, "namespace": NAMESPACE},
        "spec": {"topology": topology},
    }


def owned_labels(label: str, worker: str) -> dict[str, str]:
    return {"cluster.x-k8s.io/cluster-name": CLUSTER, OWNED: "", label: worker}


def _world(shape: str, worker: dict[str, Any], *, pool: bool = False) -> Sim:
    sim = new_sim(version=shape)
    field = "machinePools" if pool else "machineDeployments"
    sim.api.create(
        at(CLUSTERS, shape),
        topology_cluster(shape, {field: [{"class": "default-worker", **worker}]}),
        NAMESPACE,
    )
    if pool:
        sim.create(machine_pool("md-0", shape, labels=owned_labels(MP_NAME, worker["name"])))
    else:
        sim.create(machine_deployment("md-0", shape, labels=owned_labels(MD_NAME, worker["name"])))
    sim.settle()
    return sim


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("pool", [False, True], ids=["deployment", "pool"])
def test_a_replica_change_is_reverted_where_the_topology_sets_replicas(
    shape: str, pool: bool
) -> None:
    sim = _world(shape, {"name": "workers", "replicas": 2}, pool=pool)
    resource = at(MACHINE_POOLS if pool else MACHINE_DEPLOYMENTS, shape)
    assert sim.get(resource, "md-0")["spec"]["replicas"] == 2

    sim.scale(resource, "md-0", 5)
    sim.settle()

    assert sim.get(resource, "md-0")["spec"]["replicas"] == 2


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("pool", [False, True], ids=["deployment", "pool"])
def test_a_replica_change_stands_where_the_topology_leaves_replicas_unset(
    shape: str, pool: bool
) -> None:
    sim = _world(shape, {"name": "workers"}, pool=pool)
    resource = at(MACHINE_POOLS if pool else MACHINE_DEPLOYMENTS, shape)

    sim.scale(resource, "md-0", 3)
    sim.settle()

    assert sim.get(resource, "md-0")["spec"]["replicas"] == 3


@pytest.mark.parametrize("shape", SHAPES)
def test_the_topology_metadata_lands_on_the_owned_deployment_and_its_template(
    shape: str,
) -> None:
    metadata = {
        "labels": {"node.cluster.x-k8s.io/karpenter-member": ""},
        "annotations": {
            "capacity.cluster-autoscaler.kubernetes.io/cpu": "4",
            "topology.cluster.x-k8s.io/defer-upgrade": "",
        },
    }
    sim = _world(shape, {"name": "workers", "metadata": metadata})

    md = sim.get(at(MACHINE_DEPLOYMENTS, shape), "md-0")

    for meta in (md["metadata"], md["spec"]["template"]["metadata"]):
        assert meta["labels"]["node.cluster.x-k8s.io/karpenter-member"] == ""
        assert meta["labels"][MD_NAME] == "workers"
        assert meta["annotations"]["capacity.cluster-autoscaler.kubernetes.io/cpu"] == "4"
        # Upgrade-sequencing annotations stay on the Cluster, as upstream.
        assert "topology.cluster.x-k8s.io/defer-upgrade" not in meta["annotations"]


def test_a_paused_cluster_is_not_reconciled() -> None:
    sim = _world("v1beta2", {"name": "workers", "replicas": 2})
    sim.api.patch(at(CLUSTERS, "v1beta2"), CLUSTER, {"spec": {"paused": True}}, NAMESPACE)
    resource = at(MACHINE_DEPLOYMENTS, "v1beta2")

    sim.scale(resource, "md-0", 4)
    sim.settle()

    assert sim.get(resource, "md-0")["spec"]["replicas"] == 4
