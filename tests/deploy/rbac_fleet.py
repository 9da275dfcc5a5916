"""Every request a fleet-mode controller makes, recorded for the RBAC proof (issue 28 item 5).

Two replicas of ``core.fleet.Fleet`` share the Clusters of a management cluster through shard
Leases, over ``AuditingClient``s: one for the management cluster (labelled
``MANAGEMENT_CLUSTER``), one per workload cluster (labelled ``workload/<name>``). The run reaches
what a fleet meets in its life: two workload clusters provisioning and deprovisioning, a Cluster
appearing, one paused, one whose kubeconfig Secret is rotated and one whose Secret is malformed
(an Event on it), a replica killed (its Leases expire and are deleted, the other takes its
Clusters over) and the last one stopping gracefully (its Leases released, its membership
deleted). The emulated clusters (Cluster API, Deployments, the scheduler) talk to the servers
directly, so only the controller's requests are recorded.
"""

from __future__ import annotations

import base64

from karpenter_capi.core.fleet import Fleet, FleetOptions, Kubeconfig, SteppedFleet
from karpenter_capi.core.kube import DEPLOYMENTS, NAMESPACES, NODEPOOLS, SECRETS, KubeClient
from karpenter_capi.core.operator import OperatorOptions
from karpenter_capi.sim.apiserver.audit import MANAGEMENT_CLUSTER, AuditingClient, AuditLog
from tests.fleet.world import WORKLOAD_NAMESPACE, FleetWorld, kubeconfig_secret, server_url

from .rbac_recording import LEASE_NAMESPACE

SERVED = ("alpha", "beta", "gamma", "paused", "broken")
"""The fleet's Clusters, each in its namespace ``team-<name>``."""

LEASE_SECONDS = 6.0


def served_namespaces() -> list[str]:
    return [FleetWorld.namespace(name) for name in SERVED]


def workload_label(name: str) -> str:
    return f"workload/{name}"


def _replica(world: FleetWorld, log: AuditLog, identity: str) -> SteppedFleet:
    management = AuditingClient(world.management, log, MANAGEMENT_CLUSTER)

    def connect(kubeconfig: Kubeconfig) -> KubeClient:
        server = world.connect(kubeconfig)
        name = kubeconfig.server.removeprefix("https://").removesuffix(".fleet.test")
        return AuditingClient(server, log, workload_label(name))

    fleet = Fleet(
        management,
        clock=world.clock,
        connect=connect,
        options=FleetOptions(
            namespaces=tuple(served_namespaces()),
            identity=identity,
            lease_namespace=LEASE_NAMESPACE,
            lease_duration=LEASE_SECONDS,
            renew_deadline=4.0,
            retry_period=1.0,
        ),
        # As `karpenter-capi run --fleet`: bursts by ReplicaSet (list and watch ReplicaSets).
        operator_options=OperatorOptions(
            leader_elect=False, metrics_port=None, batch_complete_idle=0.2
        ),
        on_member=world.add_emulation,
    )
    return fleet.stepped()


def _run(world: FleetWorld, replicas: list[SteppedFleet], seconds: float) -> None:
    """The replicas in turn on the one virtual clock, a second at a time."""
    for _ in range(int(seconds)):
        for replica in replicas:
            replica.run_until_quiet()
        world.clock.advance(1.0)


def _consolidate_when_empty(world: FleetWorld, name: str) -> None:
    """The catalog's NodePool never consolidates; this one removes empty nodes at once, so
    the run deprovisions (drain, scale down, NodeClaim deleted)."""
    server = world.workloads[name]
    for pool in server.list(NODEPOOLS).items:
        patch = {"spec": {"disruption": {"consolidateAfter": "0s"}}}
        server.patch(NODEPOOLS, pool["metadata"]["name"], patch)


def record_fleet(log: AuditLog) -> FleetWorld:
    """The fleet's life as the module docstring tells it; returns the world for checks."""
    world = FleetWorld()
    world.management.create(
        NAMESPACES,
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": LEASE_NAMESPACE}},
    )
    # A namespace the fleet does not serve, with a kubeconfig Secret the controller must not read.
    world.management.create(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "elsewhere"}}
    )
    world.management.create(SECRETS, kubeconfig_secret("elsewhere", "other", server_url("x")))
    for name in ("alpha", "beta", "paused"):
        world.add_cluster(name)
    world.add_cluster("broken", secret=False)
    world.management.create(
        SECRETS, kubeconfig_secret(world.namespace("broken"), "broken", "", value="%%%")
    )
    replicas = [_replica(world, log, identity) for identity in ("replica-a", "replica-b")]
    _run(world, replicas, 10)
    world.patch_cluster("paused", {"spec": {"paused": True}})
    for name in ("alpha", "beta"):
        _consolidate_when_empty(world, name)
        world.deploy(name, "web", 3)
    _run(world, replicas, 60)
    for name in ("alpha", "beta"):
        assert world.bound(name) == 3, f"{name}: pods never bound: {world.pending(name)}"
    # A Cluster appears; alpha's kubeconfig is rotated (a new credential, the same server).
    world.add_cluster("gamma")
    rotated = kubeconfig_secret(world.namespace("alpha"), "alpha", server_url("alpha"))
    rotated["data"]["value"] = base64.b64encode(
        base64.b64decode(rotated["data"]["value"]) + b"\n# rotated\n"
    ).decode()
    world.management.update(
        SECRETS,
        {
            **rotated,
            "metadata": world.management.get(SECRETS, "alpha-kubeconfig", world.namespace("alpha"))[
                "metadata"
            ],
        },
    )
    connected = world.connects.count(server_url("alpha"))
    world.deploy("gamma", "web", 2)
    _run(world, replicas, 60)
    assert world.connects.count(server_url("alpha")) > connected, "rotation never picked up"
    assert world.bound("gamma") == 2, world.pending("gamma")
    # Deprovisioning: the workloads go, their empty nodes are consolidated away.
    for name in ("alpha", "beta"):
        world.workloads[name].delete(DEPLOYMENTS, "web", WORKLOAD_NAMESPACE)
    # replica-a dies without a word: its Leases expire and replica-b takes its Clusters over.
    _run(world, replicas[1:], 2 * LEASE_SECONDS + 60)
    for name in ("alpha", "beta"):
        assert world.nodeclaims(name) == [], f"{name}: never deprovisioned"
    # replica-b stops gracefully, as `run --fleet` does on SIGTERM.
    replicas[1].fleet.coordinator.release_all()
    return world
