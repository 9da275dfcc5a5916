"""No leaked Machine with the whole controller (the real ``Operator`` with ``generic_capi``, the
emulated Cluster API and kubelets, on a fake clock).

A NodeClaim removed without its finalizer while CAPI has not made its Machine yet leaves the
plugin nothing to give the replica back from; the Machine CAPI makes afterwards is claimed by
no NodeClaim, and with the pods gone no NodeClaim will ever want it. The old code left it
running for good; the safety net removes it once it has been unclaimed for ``unclaimed_ttl``.
"""

from __future__ import annotations

from karpenter_capi.core.kube.resources import MACHINE_SETS, MACHINES, NODECLAIMS
from karpenter_capi.sim.invariants import LEAKED_MACHINE
from tests.reliability.malformed.world import GOOD, NAMESPACE, World

PAUSED = "cluster.x-k8s.io/paused"


def _pause(world: World, paused: bool) -> None:
    """Pause (or resume) GOOD's MachineSets: as a stuck infrastructure provider, no Machine."""
    for machine_set in world.server.list(MACHINE_SETS, NAMESPACE).items:
        annotations = {PAUSED: "true" if paused else None}
        world.server.patch(
            MACHINE_SETS,
            machine_set["metadata"]["name"],
            {"metadata": {"annotations": annotations}},
            NAMESPACE,
        )


def test_a_replica_whose_nodeclaim_was_removed_by_hand_leaks_no_machine() -> None:
    world = World()
    world.run(30)
    _pause(world, True)
    world.deploy("web", 1)
    world.run(20)
    (claim,) = world.nodeclaims()
    assert world.replicas(GOOD) == 1
    assert world.server.list(MACHINES, NAMESPACE).items == []

    # The pods go, and a user removes the NodeClaim without its finalizer.
    world.sim.scale("web", 0)
    name = claim["metadata"]["name"]
    world.server.patch(NODECLAIMS, name, {"metadata": {"finalizers": None}})
    world.server.delete(NODECLAIMS, name)
    _pause(world, False)
    world.run(60)
    (machine,) = world.server.list(MACHINES, NAMESPACE).items
    assert [v for v in world.violations() if LEAKED_MACHINE in v]  # a leak, for now

    world.run(20 * 60)

    assert world.violations() == []
    assert world.replicas(GOOD) == 0
    assert world.server.list(MACHINES, NAMESPACE).items == []
    (event,) = [e for e in world.events("UnclaimedMachine") if e.kind == "Machine"]
    assert event.name == machine["metadata"]["name"]
