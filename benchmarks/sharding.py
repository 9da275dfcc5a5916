"""Fleet sharding at fleet size: 3 replicas sharing 100 workload clusters through Leases, one
killed, one joining, and what a step costs (issue 28 item 3).

Why: the tests prove the rules at 10 clusters; the issue's target is about a fleet ("with 3
replicas and a replica killed, every cluster served again within lease duration + 5 s, 0 double
launches"), and every replica renews one Lease per cluster it serves every step, so the cost
of a step grows with the fleet. Here the replicas run ``ShardCoordinator`` in process against
the in-memory API server on a ``FakeClock``, stepping every retry period in turn; after every
single step the benchmark counts the clusters held by two replicas at once (a double launch's
precondition) and the clusters held by none.

Figures, not assertions: virtual seconds until the fleet is balanced, until a killed replica's
clusters are all served again (measured from its first missed step) and how many clusters
moved that did not have to; the clusters a fourth replica moves when it joins; and the
wall-clock milliseconds and API requests of one step of a replica holding its share of the
100 Leases.

    .venv/bin/python benchmarks/sharding.py [--clusters 100] [--replicas 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter
from typing import Any

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.fleet.sharding import ShardCoordinator
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.cluster import new_cluster

NAMESPACE = "kube-system"
LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 15.0, 10.0, 2.0


class Counting:
    """The in-memory API, counting the requests made through it."""

    def __init__(self, api: InMemoryAPIServer) -> None:
        self._api = api
        self.requests = 0

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._api, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            self.requests += 1
            return attribute(*args, **kwargs)

        return call if callable(attribute) else attribute


class Fleet:
    def __init__(self, clusters: int) -> None:
        self.clock = FakeClock()
        self.api: InMemoryAPIServer = new_cluster(clock=self.clock)
        self.clusters = [f"team-{i % 7}/cluster-{i:03d}" for i in range(clusters)]
        self.replicas: dict[str, ShardCoordinator] = {}
        self.alive: set[str] = set()
        self.start = self.clock.monotonic()
        self.double_held = 0  # (step, cluster) pairs with two holders: must stay 0
        self.step_seconds: list[float] = []

    def join(self, identity: str, client: Counting | None = None) -> None:
        self.replicas[identity] = ShardCoordinator(
            client or self.api,  # type: ignore[arg-type]
            self.clock,
            namespace=NAMESPACE,
            identity=identity,
            lease_duration=LEASE_DURATION,
            renew_deadline=RENEW_DEADLINE,
            retry_period=RETRY_PERIOD,
        )
        self.alive.add(identity)

    @property
    def elapsed(self) -> float:
        return self.clock.monotonic() - self.start

    def tick(self) -> None:
        for identity in sorted(self.alive):
            began = time.perf_counter()
            self.replicas[identity].step(self.clusters)
            self.step_seconds.append(time.perf_counter() - began)
            self.double_held += sum(n > 1 for n in self._holders().values())
        self.clock.advance(RETRY_PERIOD)

    def _holders(self) -> Counter[str]:
        counts: Counter[str] = Counter()
        for coordinator in self.replicas.values():
            counts.update(coordinator.held())
        return counts

    def owners(self) -> dict[str, str]:
        return {c: i for i, r in self.replicas.items() for c in r.held()}

    def balanced(self) -> bool:
        owners = self.owners()
        if set(owners) != set(self.clusters) or not set(owners.values()) <= self.alive:
            return False
        loads = Counter(owners.values())
        floor, extra = divmod(len(self.clusters), len(self.alive))
        return all(floor <= loads[i] <= floor + (extra > 0) for i in self.alive)

    def run_until_balanced(self, limit: float = 120.0) -> float:
        began = self.elapsed
        while not self.balanced() and self.elapsed - began < limit:
            self.tick()
        return self.elapsed - began


def measure(clusters: int, replicas: int) -> dict[str, Any]:
    fleet = Fleet(clusters)
    for i in range(replicas):
        fleet.join(f"replica-{i}")
    to_balance = fleet.run_until_balanced()
    loads = sorted(Counter(fleet.owners().values()).values())

    # Kill one: it stops stepping and releases nothing.
    victim = "replica-1"
    before = fleet.owners()
    orphans = {c for c, o in before.items() if o == victim}
    fleet.alive.discard(victim)
    killed_at = fleet.elapsed
    served_again: dict[str, float] = {}
    while len(served_again) < len(orphans) and fleet.elapsed - killed_at < 120:
        fleet.tick()
        owners = fleet.owners()
        for cluster in orphans - set(served_again):
            if owners.get(cluster, victim) != victim:
                served_again[cluster] = fleet.elapsed - RETRY_PERIOD - killed_at
    after = fleet.owners()
    needless = sum(1 for c, o in before.items() if o != victim and after.get(c) != o)

    # A new replica joins (its requests are counted, for a step's cost once it serves).
    fleet.run_until_balanced()
    before = fleet.owners()
    counting = Counting(fleet.api)
    fleet.join("replica-new", counting)
    to_rebalance = fleet.run_until_balanced()
    moved = sum(1 for c, o in fleet.owners().items() if before.get(c) != o)
    counting.requests = 0
    fleet.step_seconds.clear()
    steps = 20
    for _ in range(steps):
        fleet.tick()
    per_step_ms = sorted(s * 1000 for s in fleet.step_seconds)
    return {
        "clusters": clusters,
        "replicas": replicas,
        "balanced_after_s": to_balance,
        "loads": loads,
        "killed_served_again_max_s": max(served_again.values(), default=0.0),
        "killed_served_again_bound_s": LEASE_DURATION + RETRY_PERIOD,
        "killed_unserved_left": len(orphans) - len(served_again),
        "needless_moves_on_kill": needless,
        "join_rebalanced_after_s": to_rebalance,
        "join_moved": moved,
        "join_moved_minimum": len(fleet.owners()) // len(fleet.alive),
        "double_held": fleet.double_held,
        "step_ms_median": statistics.median(per_step_ms),
        "step_ms_p99": per_step_ms[int(0.99 * (len(per_step_ms) - 1))],
        "requests_per_step_of_new_replica": counting.requests / steps,
        "held_by_new_replica": len(fleet.replicas["replica-new"].held()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--clusters", type=int, default=100)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    figures = measure(args.clusters, args.replicas)
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    print(f"{figures['clusters']} clusters, {figures['replicas']} replicas")
    print(
        f"  balanced after {figures['balanced_after_s']:.0f} s (virtual): loads {figures['loads']}"
    )
    print(
        f"  replica killed: its clusters served again within "
        f"{figures['killed_served_again_max_s']:.0f} s (bound: lease "
        f"{LEASE_DURATION:.0f} s + one step = {figures['killed_served_again_bound_s']:.0f} s), "
        f"{figures['killed_unserved_left']} left unserved, "
        f"{figures['needless_moves_on_kill']} other clusters moved"
    )
    print(
        f"  replica joined: {figures['join_moved']} clusters moved (its share: "
        f"{figures['join_moved_minimum']}), balanced after "
        f"{figures['join_rebalanced_after_s']:.0f} s"
    )
    print(f"  clusters ever held by two replicas at once: {figures['double_held']}")
    print(
        f"  one step (wall clock, in-memory API): median {figures['step_ms_median']:.2f} ms, "
        f"p99 {figures['step_ms_p99']:.2f} ms; a replica holding "
        f"{figures['held_by_new_replica']} Leases sends "
        f"{figures['requests_per_step_of_new_replica']:.0f} requests a step"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
