"""Replicas of a fleet controller sharing clusters through Leases, on one in-memory API server.

Every replica steps every ``retry_period`` of a ``FakeClock``, in a fixed order, and after every
single step the world checks the safety property that matters: no cluster is held by two
replicas at the same instant (a killed or partitioned replica counts too: its ``holds()`` is what
its fenced clients would ask).
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.fleet.sharding import ShardCoordinator
from karpenter_capi.core.kube.client import KubeClient
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.cluster import new_cluster

NAMESPACE = "kube-system"
LEASE_DURATION = 15.0
RENEW_DEADLINE = 10.0
RETRY_PERIOD = 2.0


def clusters(count: int) -> list[str]:
    return [f"team-{i % 3}/cluster-{i:03d}" for i in range(count)]


class Replica:
    def __init__(self, world: World, identity: str, client: KubeClient, **options: Any) -> None:
        self.identity = identity
        self.alive = True  # still stepping
        self.served: frozenset[str] = frozenset()
        self.peak = 0  # the most clusters it ever served at once
        self.coordinator = ShardCoordinator(
            client,
            world.clock,
            namespace=NAMESPACE,
            identity=identity,
            lease_duration=LEASE_DURATION,
            renew_deadline=RENEW_DEADLINE,
            retry_period=RETRY_PERIOD,
            **options,
        )


class World:
    def __init__(self, cluster_count: int = 10, api: InMemoryAPIServer | None = None) -> None:
        self.clock = FakeClock()
        self.api = api or new_cluster(clock=self.clock)
        self.clusters = clusters(cluster_count)
        self.replicas: dict[str, Replica] = {}
        self.start = self.clock.monotonic()
        self.unserved_since: dict[str, float] = {}
        self.longest_gap = 0.0

    @property
    def elapsed(self) -> float:
        return self.clock.monotonic() - self.start

    def join(self, identity: str, client: KubeClient | None = None) -> Replica:
        replica = Replica(self, identity, client or self.api)
        self.replicas[identity] = replica
        return replica

    def kill(self, identity: str) -> None:
        """The process dies: it stops stepping and releases nothing."""
        self.replicas[identity].alive = False

    def stop(self, identity: str) -> None:
        """A graceful stop: its controllers are stopped, then its Leases released."""
        replica = self.replicas[identity]
        replica.alive = False
        replica.coordinator.release_all()

    def live(self) -> list[Replica]:
        return [r for r in self.replicas.values() if r.alive]

    def tick(self) -> None:
        """Every live replica steps once, then time moves on by one retry period."""
        for replica in self.live():
            replica.served = replica.coordinator.step(self.clusters)
            assert replica.served == replica.coordinator.held()
            replica.peak = max(replica.peak, len(replica.served))
            self.check_one_holder()
        self.clock.advance(RETRY_PERIOD)
        self.check_one_holder()

    def run(self, seconds: float) -> None:
        for _ in range(math.ceil(seconds / RETRY_PERIOD)):
            self.tick()

    def check_one_holder(self) -> None:
        now = self.clock.monotonic()
        for cluster in self.clusters:
            holders = [i for i, r in self.replicas.items() if r.coordinator.holds(cluster)]
            assert len(holders) <= 1, f"{cluster} held by {holders} at {self.elapsed}s"
            if holders:
                since = self.unserved_since.pop(cluster, None)
                if since is not None:
                    self.longest_gap = max(self.longest_gap, now - since)
            else:
                self.unserved_since.setdefault(cluster, now)

    def owners(self) -> dict[str, str]:
        return {
            cluster: identity
            for identity, r in self.replicas.items()
            for cluster in self.clusters
            if r.coordinator.holds(cluster)
        }

    def loads(self) -> Counter[str]:
        counts = Counter(self.owners().values())
        for replica in self.live():
            counts.setdefault(replica.identity, 0)
        return counts

    def balanced(self) -> bool:
        """Every cluster held by a live replica, each within one of even."""
        owners = self.owners()
        live = {r.identity for r in self.live()}
        if set(owners) != set(self.clusters) or not set(owners.values()) <= live:
            return False
        floor, extra = divmod(len(self.clusters), len(live))
        loads = [self.loads()[i] for i in live]
        return all(floor <= n <= floor + (extra > 0) for n in loads)
