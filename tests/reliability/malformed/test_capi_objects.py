"""Opted-in Cluster API objects that can never give a node, said on the object itself.

A MachineDeployment (or MachineSet, MachinePool) whose ``spec.clusterName`` names no Cluster
would take a replica and never make a Machine (the replica then leaked, issue 24); one whose
autoscaler max size is 0 can never be scaled. Each is left out of its NodeClass, listed in the
NodeClass's Ready message, and gets a Warning Event on itself (where ``kubectl describe
machinedeployment`` shows it) as every resource the NodeClass leaves out now does. A NodeClass
left with nothing else is not Ready. The good resource keeps provisioning in the same pass.
"""

from __future__ import annotations

import pytest

from karpenter_capi.core.api import wellknown

from .world import CA, GOOD, NODECLASS, World

MAX_SIZE = wellknown.ANNOTATION_AUTOSCALER_MAX_SIZE


def _ghost_cluster(world: World, kind: str, name: str = "bad") -> None:
    # Made so: CAPI's MachinePool webhook refuses changing spec.clusterName afterwards.
    world.scalable(kind, name, cluster="ghost")


def _on_resource(world: World, kind: str, name: str = "bad") -> list[str]:
    return [
        f"{e.type} {e.reason}: {e.message}"
        for e in world.events()
        if (e.kind, e.name) == (kind, name)
    ]


@pytest.mark.parametrize("kind", ["MachineDeployment", "MachineSet", "MachinePool"])
def test_a_resource_of_a_cluster_that_does_not_exist_is_left_out_and_told_so(kind: str) -> None:
    world = World()
    _ghost_cluster(world, kind)
    world.deploy()
    world.run()

    ready = world.nodeclass_ready()
    assert ready["status"] == "True", ready
    assert f"{kind} default/bad" in ready["message"], ready["message"]
    assert "Cluster default/ghost" in ready["message"], ready["message"]
    said = _on_resource(world, kind)
    assert len(said) == 1, said
    assert said[0].startswith("Warning ClusterNotFound: "), said
    assert f"left out of ClusterAPINodeClass {NODECLASS}" in said[0], said
    assert "spec.clusterName ghost" in said[0], said
    assert world.replicas("bad", kind) == 0
    world.assert_good_resource_served()


def test_a_resource_whose_max_size_is_zero_is_left_out_and_told_so() -> None:
    world = World()
    world.scalable("MachineDeployment", "bad", annotations={MAX_SIZE: "0"})
    world.deploy()
    world.run()

    ready = world.nodeclass_ready()
    assert "MachineDeployment default/bad" in ready["message"], ready["message"]
    said = _on_resource(world, "MachineDeployment")
    assert len(said) == 1, said
    assert said[0].startswith("Warning InvalidShape: "), said
    assert f"{MAX_SIZE}=0" in said[0], said
    world.assert_good_resource_served()


def test_a_malformed_annotation_is_said_on_the_resource_too() -> None:
    world = World()
    world.scalable("MachineDeployment", "bad", annotations={f"{CA}cpu": "two"})
    world.deploy()
    world.run()

    said = _on_resource(world, "MachineDeployment")
    assert len(said) == 1, said
    assert said[0].startswith("Warning InvalidShape: "), said
    assert "'two'" in said[0], said
    world.assert_good_resource_served()


def test_a_nodeclass_left_with_only_a_clusterless_resource_is_not_ready() -> None:
    world = World()
    # Made for a Cluster that does not exist (clusterName is immutable: CAPI's webhook refuses
    # changing it afterwards).
    world.scalable("MachineDeployment", "bad", labels={"only": "bad"}, cluster="ghost")
    world.nodeclass("lonely", {"scalableResourceSelector": {"matchLabels": {"only": "bad"}}})
    world.nodepool(
        "lonely",
        {
            "nodeClassRef": {
                "group": wellknown.NODECLASS_GROUP,
                "kind": wellknown.NODECLASS_KIND,
                "name": "lonely",
            }
        },
    )
    world.deploy("pinned", 1, node_selector={wellknown.LABEL_NODEPOOL: "lonely"})
    world.deploy()
    world.run()

    ready = world.nodeclass_ready("lonely")
    assert (ready["status"], ready["reason"]) == ("False", "NoUsableScalableResources"), ready
    assert "Cluster default/ghost" in ready["message"], ready["message"]
    assert world.nodepool_condition("lonely")["status"] == "False"
    assert world.replicas("bad") == 0
    assert world.replicas(GOOD) >= 1
