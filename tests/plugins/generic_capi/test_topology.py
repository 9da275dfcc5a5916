"""ClusterClass-managed workers under the whole controller (the real ``Operator`` with
``generic_capi``, the emulated Cluster API with its topology controller, kubelets and the
scheduler, on a fake clock).

Where the Cluster's topology sets a worker's ``replicas``, Cluster API reverts every replica
change: the old controller scaled, was reverted, and scaled again, for as long as the pods
waited. Now it leaves the worker alone and says which field to remove, on the NodeClass, the
MachineDeployment and the Cluster. Where the topology leaves ``replicas`` unset, the worker is
scaled like any other, with its opt-in label and scale-from-zero annotations coming from the
topology's metadata. Both Cluster layouts (v1beta1 ``class``, v1beta2 ``classRef``).
"""

from __future__ import annotations

import io
import logging
from typing import Any

import pytest

from karpenter_capi.cli.explain import explain
from karpenter_capi.core.api import wellknown
from karpenter_capi.core.kube.resources import CLUSTERS, MACHINE_DEPLOYMENTS
from karpenter_capi.core.plugin_host import PluginEnvironment, Plugins
from tests.reliability.malformed.world import GOOD, NAMESPACE, World

OWNED = "topology.cluster.x-k8s.io/owned"
WORKER = "topology.cluster.x-k8s.io/deployment-name"
FIELD = "spec.topology.workers.machineDeployments[name=workers].replicas"
SHAPES = ("v1beta1", "v1beta2")


def _adopt(world: World, shape: str, worker: dict[str, Any], md_metadata: dict[str, Any]) -> None:
    """Make Cluster ``sim`` a ClusterClass Cluster (in ``shape``'s layout) owning GOOD as its
    worker ``workers``; ``md_metadata`` is merged into GOOD's metadata first."""
    topology: dict[str, Any] = {
        "version": "v1.31.0",
        "workers": {
            "machineDeployments": [{"class": "default-worker", "name": "workers"} | worker]
        },
    }
    if shape == "v1beta2":
        topology["classRef"] = {"name": "quick-start"}
    else:
        topology["class"] = "quick-start"
    md_metadata.setdefault("labels", {}).update(
        {"cluster.x-k8s.io/cluster-name": "sim", OWNED: "", WORKER: "workers"}
    )
    world.server.patch(
        MACHINE_DEPLOYMENTS.with_version("v1beta2"), GOOD, {"metadata": md_metadata}, NAMESPACE
    )
    world.server.patch(
        CLUSTERS.with_version(shape), "sim", {"spec": {"topology": topology}}, NAMESPACE
    )
    world.sim.driver.run_until_quiet()


@pytest.mark.parametrize("shape", SHAPES)
def test_a_worker_whose_replicas_the_topology_sets_is_not_fought_over(shape: str) -> None:
    world = World()
    _adopt(world, shape, {"replicas": 0}, {})
    generation = world.server.get(MACHINE_DEPLOYMENTS, GOOD, NAMESPACE)["metadata"]["generation"]

    world.deploy("web", 2)
    for _ in range(10):
        world.run(120)

    # Nobody wrote the worker's replicas: no scale, no revert, no scale again.
    md = world.server.get(MACHINE_DEPLOYMENTS, GOOD, NAMESPACE)
    assert md["metadata"]["generation"] == generation
    assert world.nodeclaims() == [] or all(
        c["metadata"].get("deletionTimestamp") for c in world.nodeclaims()
    )
    assert world.pending("web") != []
    ready = world.nodeclass_ready()
    assert (ready["status"], ready["reason"]) == ("False", "NoUsableScalableResources")
    assert FIELD in ready["message"], ready["message"]
    assert f"remove {FIELD} from the Cluster" in ready["message"]
    on_cluster = [e for e in world.events("TopologyManagedReplicas") if e.kind == "Cluster"]
    assert len(on_cluster) == 1, world.events()
    assert on_cluster[0].type == "Warning"
    assert on_cluster[0].name == "sim"
    assert FIELD in on_cluster[0].message
    on_md = [e for e in world.events("TopologyManagedReplicas") if e.kind == "MachineDeployment"]
    assert [e.name for e in on_md] == [GOOD]
    # explain says the same, in the condition's words.
    text = _explain(world)
    assert f"ClusterAPINodeClass catalog: left out MachineDeployment {NAMESPACE}/{GOOD}: " in text
    assert f"remove {FIELD} from the Cluster" in text, text


def _explain(world: World) -> str:
    environment = PluginEnvironment(
        workload=world.server,
        management=world.server,
        clock=world.clock,
        dry_run=True,
        logger=logging.getLogger("karpenter_capi.plugins"),
    )
    plugins = Plugins.load(["generic_capi"], environment)
    version = world.server.resource_version
    out = io.StringIO()
    result = explain(world.server, plugins, world.clock)
    result.write_text(out)
    assert world.server.resource_version == version
    assert result.as_dict()["provisioning"]["nodeclassProblems"]["catalog"]
    return out.getvalue()


@pytest.mark.parametrize("shape", SHAPES)
def test_removing_the_field_lets_the_worker_be_scaled(shape: str) -> None:
    world = World()
    _adopt(world, shape, {"replicas": 0}, {})
    world.deploy("web", 2)
    world.run(120)
    assert world.nodeclass_ready()["status"] == "False"

    cluster = world.server.get(CLUSTERS, "sim", NAMESPACE)
    workers = cluster["spec"]["topology"]["workers"]["machineDeployments"]
    del workers[0]["replicas"]
    world.server.update(CLUSTERS, cluster)
    for _ in range(3):
        world.run(120)

    world.assert_good_resource_served()
    assert world.nodeclass_ready()["status"] == "True"


@pytest.mark.parametrize("shape", SHAPES)
def test_opt_in_and_scale_from_zero_set_through_the_topology_metadata_work(shape: str) -> None:
    world = World()
    good = world.server.get(MACHINE_DEPLOYMENTS, GOOD, NAMESPACE)
    labels = {
        k: v
        for k, v in good["metadata"]["labels"].items()
        if k.startswith(("node.cluster.x-k8s.io/", "karpenter"))
    }
    capacity = {
        k: v
        for k, v in good["metadata"]["annotations"].items()
        if k.startswith(wellknown.CAPACITY_ANNOTATION_PREFIX)
    }
    assert labels
    assert capacity
    # The MachineDeployment as the topology would create it, before its metadata is applied:
    # without the opt-in label and the capacity annotations.
    stripped = {
        "labels": dict.fromkeys(labels),
        "annotations": dict.fromkeys(capacity),
    }
    _adopt(world, shape, {"metadata": {"labels": labels, "annotations": capacity}}, stripped)

    world.deploy("web", 2)
    for _ in range(3):
        world.run(120)

    world.assert_good_resource_served()
    md = world.server.get(MACHINE_DEPLOYMENTS, GOOD, NAMESPACE)
    assert wellknown.LABEL_KARPENTER_MEMBER in md["metadata"]["labels"]
