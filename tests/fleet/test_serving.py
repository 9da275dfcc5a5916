"""One process serves every workload cluster of a fleet from the management cluster."""

from __future__ import annotations

from tests.fleet.world import FleetWorld, until


def test_the_fleet_provisions_pending_pods_in_each_workload_cluster(world: FleetWorld) -> None:
    world.add_cluster("alpha")
    world.add_cluster("beta")
    world.start()
    assert world.served() == [world.key("alpha"), world.key("beta")]
    world.deploy("alpha", "web", 4)
    world.deploy("beta", "api", 6)
    assert until(world, lambda: world.bound("alpha") == 4 and world.bound("beta") == 6)
    assert world.pending("alpha") == world.pending("beta") == []
    # Each cluster's capacity came from its own MachineDeployments, in its own namespace.
    assert world.replicas("alpha") == len(world.nodeclaims("alpha")) > 0
    assert world.replicas("beta") == len(world.nodeclaims("beta")) > 0
