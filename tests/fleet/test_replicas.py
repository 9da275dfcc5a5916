"""Two replicas of the fleet share its Clusters through shard Leases (``core.fleet.sharding``):
each Cluster is served by one of them, and a killed replica's Clusters are served again by
the other, with every write fenced on the Lease, so nothing is launched twice."""

from __future__ import annotations

import pytest

from karpenter_capi.core.fleet import Fleet, FleetOptions, SteppedFleet
from karpenter_capi.core.kube import EVENTS, SECRETS
from karpenter_capi.core.operator import OperatorOptions
from tests.fleet.world import FleetWorld, kubeconfig_secret

pytest.importorskip("karpenter_capi.core.fleet.sharding")

NAMES = ("alpha", "beta", "gamma", "delta")
LEASE = 6.0


def _replica(world: FleetWorld, identity: str) -> SteppedFleet:
    fleet = Fleet(
        world.management,
        clock=world.clock,
        connect=world.connect,
        options=FleetOptions(
            identity=identity,
            lease_namespace="default",
            lease_duration=LEASE,
            renew_deadline=4.0,
            retry_period=1.0,
        ),
        operator_options=OperatorOptions(leader_elect=False, metrics_port=None),
        on_member=world.add_emulation,
    )
    return fleet.stepped()


def _run(world: FleetWorld, replicas: list[SteppedFleet], seconds: float) -> None:
    """Both replicas in turn on the one virtual clock, half a second at a time."""
    for _ in range(int(seconds * 2)):
        for replica in replicas:
            replica.run_until_quiet()
        world.clock.advance(0.5)


def _served(replica: SteppedFleet) -> set[str]:
    return set(replica.fleet.members)


def test_replicas_split_the_clusters_and_take_over_a_killed_ones(world: FleetWorld) -> None:
    for name in NAMES:
        world.add_cluster(name)
    a, b = _replica(world, "replica-a"), _replica(world, "replica-b")
    _run(world, [a, b], 10)
    everything = {world.key(name) for name in NAMES}
    assert _served(a) | _served(b) == everything
    assert not _served(a) & _served(b)
    assert len(_served(a)) == len(_served(b)) == 2
    # replica-a dies without a word: its Leases lapse, replica-b takes its clusters over.
    orphaned = _served(a)
    _run(world, [b], LEASE + 5)
    assert _served(b) == everything
    for key in sorted(orphaned):
        name = key.split("/")[1]
        world.deploy(name, "web", 3)
    _run(world, [b], 90)
    for key in sorted(orphaned):
        name = key.split("/")[1]
        assert world.bound(name) == 3
        # One NodeClaim per Machine asked for: no double launch across the handover.
        assert len(world.nodeclaims(name)) == world.replicas(name)


def test_a_handover_counts_the_clusters_event_again_instead_of_writing_a_second_one(
    world: FleetWorld,
) -> None:
    """A broken kubeconfig Secret is told once on its Cluster by the replica holding it; the
    replica taking the Cluster over finds the same Event there and bumps its count (as
    client-go's EventCorrelator does), so ``kubectl describe cluster`` shows one line."""
    world.add_cluster("alpha", secret=False)
    world.management.create(
        SECRETS, kubeconfig_secret(world.namespace("alpha"), "alpha", "", value="%%%")
    )
    a = _replica(world, "replica-a")
    _run(world, [a], 10)
    [(kind, reason, message)] = world.cluster_events("alpha")
    assert (kind, reason) == ("Warning", "KubeconfigInvalid")
    # replica-a dies; replica-b takes alpha's Lease over and finds the Secret just as broken.
    b = _replica(world, "replica-b")
    _run(world, [b], LEASE + 5)
    assert b.fleet.coordinator.holds(world.key("alpha"))
    assert world.cluster_events("alpha") == [(kind, reason, message)]
    [event] = [
        e
        for e in world.management.list(EVENTS, world.namespace("alpha")).items
        if e["reason"] == reason
    ]
    assert event["count"] == 2
    assert event["lastTimestamp"] > event["firstTimestamp"]
