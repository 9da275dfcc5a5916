"""Clusters appear, disappear, pause and rotate their kubeconfig while the fleet runs: each
change is picked up at the next sync, without a restart, and touches no other cluster."""

from __future__ import annotations

import base64

import yaml

from karpenter_capi.core.kube import CLUSTERS, SECRETS
from karpenter_capi.sim.apiserver.kubeconfig import kubeconfig_document
from tests.fleet.world import FleetWorld, server_url, until


def test_a_cluster_created_while_running_is_served_at_the_next_sync(world: FleetWorld) -> None:
    world.add_cluster("alpha")
    world.start()
    assert world.served() == [world.key("alpha")]
    world.add_cluster("beta")
    world.advance(3)
    assert world.served() == [world.key("alpha"), world.key("beta")]
    world.deploy("beta", "api", 3)
    assert until(world, lambda: world.bound("beta") == 3)


def test_a_deleted_cluster_is_no_longer_served_and_the_others_go_on(world: FleetWorld) -> None:
    world.add_cluster("alpha")
    world.add_cluster("beta")
    world.start()
    world.management.delete(CLUSTERS, "alpha", world.namespace("alpha"))
    world.advance(3)
    assert world.served() == [world.key("beta")]
    world.deploy("beta", "api", 2)
    assert until(world, lambda: world.bound("beta") == 2)


def test_a_paused_cluster_gets_no_new_node_until_it_is_resumed(world: FleetWorld) -> None:
    world.add_cluster("alpha")
    world.add_cluster("beta")
    world.start()
    world.patch_cluster("alpha", {"spec": {"paused": True}})
    world.advance(3)
    assert world.served() == [world.key("beta")]
    world.deploy("alpha", "web", 3)
    world.deploy("beta", "api", 3)
    assert until(world, lambda: world.bound("beta") == 3)
    # Nothing acted for alpha: no NodeClaim, no MachineDeployment scaled.
    assert world.nodeclaims("alpha") == []
    assert world.replicas("alpha") == 0
    assert ("Normal", "FleetPaused") in [e[:2] for e in world.cluster_events("alpha")]
    world.patch_cluster("alpha", {"spec": {"paused": False}})
    world.advance(3)
    assert world.key("alpha") in world.served()


def _rotate(world: FleetWorld, name: str, token: str) -> None:
    document = kubeconfig_document(server_url(name), name)
    document["users"] = [{"name": name, "user": {"token": token}}]
    value = base64.b64encode(yaml.safe_dump(document).encode()).decode()
    world.management.patch(
        SECRETS, f"{name}-kubeconfig", {"data": {"value": value}}, world.namespace(name)
    )


def test_a_rotated_kubeconfig_rebuilds_that_cluster_only(world: FleetWorld) -> None:
    world.add_cluster("alpha")
    world.add_cluster("beta")
    world.start()
    assert world.fleet is not None
    before = dict(world.fleet.members)
    _rotate(world, "alpha", "new-token")
    world.advance(3)
    after = world.fleet.members
    assert after[world.key("alpha")] is not before[world.key("alpha")]
    assert after[world.key("beta")] is before[world.key("beta")]
    assert world.connects.count(server_url("alpha")) == 2
    # A rewrite with the same content (a new resourceVersion only) rebuilds nothing.
    rebuilt = after[world.key("alpha")]
    world.management.patch(
        SECRETS, "alpha-kubeconfig", {"metadata": {"annotations": {"x": "y"}}}, "team-alpha"
    )
    world.advance(3)
    assert world.fleet.members[world.key("alpha")] is rebuilt
    world.deploy("alpha", "web", 2)
    assert until(world, lambda: world.bound("alpha") == 2)


def test_only_clusters_matching_the_selector_and_namespaces_are_served(world: FleetWorld) -> None:
    from karpenter_capi.core.fleet import FleetOptions

    world.add_cluster("alpha", labels={"autoscale": "karpenter"})
    world.add_cluster("beta", labels={"autoscale": "karpenter"})
    world.add_cluster("gamma")
    world.start(
        FleetOptions(
            shards=False,
            cluster_selector="autoscale=karpenter",
            namespaces=(world.namespace("alpha"), world.namespace("gamma")),
        )
    )
    assert world.served() == [world.key("alpha")]
