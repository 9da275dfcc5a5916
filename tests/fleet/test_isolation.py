"""What one cluster's controllers can reach, and what the fleet's one endpoint reports."""

from __future__ import annotations

import pytest

from karpenter_capi.core.fleet import ScopedClient
from karpenter_capi.core.kube import MACHINE_DEPLOYMENTS, SECRETS
from karpenter_capi.core.kube.errors import Forbidden
from tests.fleet.world import FleetWorld, until


def test_a_scoped_management_client_sees_and_writes_only_its_cluster(world: FleetWorld) -> None:
    world.add_cluster("alpha")
    world.add_cluster("beta")
    scoped = ScopedClient(world.management, "team-alpha", "alpha")
    names = {md["metadata"]["name"] for md in scoped.list(MACHINE_DEPLOYMENTS).items}
    everything = world.management.list(MACHINE_DEPLOYMENTS).items
    assert names == {
        md["metadata"]["name"] for md in everything if md["metadata"]["namespace"] == "team-alpha"
    }
    assert len(everything) > len(names) > 0
    with pytest.raises(Forbidden, match="confines Cluster team-alpha/alpha to namespace"):
        scoped.list(MACHINE_DEPLOYMENTS, "team-beta")
    with pytest.raises(Forbidden, match="patch machinedeployments in namespace 'team-beta'"):
        scoped.patch(MACHINE_DEPLOYMENTS, "x", {"spec": {"replicas": 1}}, "team-beta")
    with pytest.raises(Forbidden):
        scoped.get(SECRETS, "beta-kubeconfig", "team-beta")


def test_every_metric_carries_its_cluster_label_on_the_one_endpoint(world: FleetWorld) -> None:
    world.add_cluster("alpha")
    world.add_cluster("beta")
    world.start()
    world.deploy("alpha", "web", 2)
    assert until(world, lambda: world.bound("alpha") == 2)
    assert world.fleet is not None
    text = world.fleet.metrics.render().decode()
    created = [
        line for line in text.splitlines() if line.startswith("karpenter_nodeclaims_created_total{")
    ]
    assert created
    assert all('cluster="team-alpha/alpha"' in line for line in created)
    reconciles = [
        line for line in text.splitlines() if line.startswith("controller_runtime_reconcile_total{")
    ]
    assert any('cluster="team-beta/beta"' in line for line in reconciles)
    assert all("cluster=" in line for line in reconciles)
    assert "karpenter_fleet_clusters_served 2.0" in text
    # Each family is declared once, however many clusters report it.
    assert text.count("# TYPE karpenter_nodeclaims_created_total counter") == 1
    # A cluster's own registry keeps upstream's labels: single-cluster mode is unchanged.
    own = world.fleet.members[world.key("alpha")].operator.metrics.render().decode()
    assert "cluster=" not in own


def test_the_fleet_endpoint_has_no_created_series(world: FleetWorld) -> None:
    world.add_cluster("alpha")
    world.start()
    assert world.fleet is not None
    text = world.fleet.metrics.render().decode()
    assert "_created{" not in text
    assert "controller_runtime_reconcile_total{" in text
