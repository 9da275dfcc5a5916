"""Leadership when one replica's API calls fail, over HTTP, in virtual time.

Two electors, each with its own official client (told apart by User-Agent), campaign for one
Lease on the in-memory API behind its HTTP front. A storm cut off for one replica only makes its
renewals fail: it must stop acting within its renew deadline, before the Lease can expire; the
other must take over only after the Lease has expired on its own clock; at no instant may both
act. Then the roles swap back, and a graceful stop hands over at once.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube.official import OfficialClient
from karpenter_capi.core.runtime.leader import LeaderElector
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.apiserver.http import HttpFront

LEASE, RENEW_DEADLINE, RETRY = 15.0, 10.0, 2.0


@dataclass
class Replica:
    name: str
    elector: LeaderElector
    client: OfficialClient
    spans: list[list[float]] = field(default_factory=list)
    """[started, stopped] acting, in virtual seconds (stopped is inf while acting)."""
    next_at: float = 0.0


class Cluster:
    def __init__(self, clock: FakeClock, api: InMemoryAPIServer, front: HttpFront) -> None:
        self.clock, self.api, self.front = clock, api, front
        self.origin = clock.monotonic()
        self.replicas = {name: self._replica(name) for name in ("a", "b")}
        self.overlaps: list[float] = []

    def now(self) -> float:
        return self.clock.monotonic() - self.origin

    def _replica(self, name: str) -> Replica:
        client = OfficialClient.from_url(self.front.url)
        client.api_client.user_agent = f"replica-{name}"
        replica: Replica

        def started() -> None:
            replica.spans.append([self.now(), math.inf])

        def stopped() -> None:
            replica.spans[-1][1] = self.now()

        elector = LeaderElector(
            client,
            self.clock,
            name="karpenter-leader-election",
            namespace="kube-system",
            identity=f"replica-{name}",
            lease_duration=LEASE,
            renew_deadline=RENEW_DEADLINE,
            retry_period=RETRY,
            on_started_leading=started,
            on_stopped_leading=stopped,
            rand=lambda: 0.5,
        )
        replica = Replica(name, elector, client)
        return replica

    def leaders(self) -> list[str]:
        return [r.name for r in self.replicas.values() if r.elector.is_leader]

    def run_until(self, until: float, *, only: str | None = None) -> None:
        """Step the electors in virtual time, checking at every step that at most one acts."""
        while True:
            ready = [r for r in self.replicas.values() if only in (None, r.name)]
            replica = min(ready, key=lambda r: r.next_at)
            if replica.next_at > until:
                self.clock.advance(max(0.0, until - self.now()))
                return
            self.clock.advance(max(0.0, replica.next_at - self.now()))
            if len(self.leaders()) > 1:
                self.overlaps.append(self.now())
            replica.next_at = self.now() + replica.elector.step()
            if len(self.leaders()) > 1:
                self.overlaps.append(self.now())

    def close(self) -> None:
        for replica in self.replicas.values():
            replica.client.close()


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    clock = FakeClock()
    api = InMemoryAPIServer(clock=clock)
    with HttpFront(api, record_requests=True) as front:
        cluster = Cluster(clock, api, front)
        yield cluster
        cluster.close()


def _last_renewal(cluster: Cluster, agent: str, before: float) -> float:
    """When ``agent``'s last successful Lease write before ``before`` arrived (virtual s)."""
    times = [
        r.at - cluster.origin
        for r in cluster.front.requests
        if r.agent == agent
        and r.method == "PUT"
        and r.status == 200
        and r.at - cluster.origin < before
    ]
    return max(times)


def _cut_off(cluster: Cluster, name: str, seconds: float) -> float:
    cluster.api.faults.storm("internal_error", duration=seconds, agent=f"replica-{name}")
    return cluster.now()


def test_a_leader_cut_off_stops_before_the_lease_expires_and_the_other_takes_over(
    cluster: Cluster,
) -> None:
    a, b = cluster.replicas["a"], cluster.replicas["b"]
    cluster.run_until(1.0, only="a")
    b.next_at = cluster.now()
    cluster.run_until(30.0)
    assert cluster.leaders() == ["a"]

    cut_at = _cut_off(cluster, "a", 40.0)
    cluster.run_until(cut_at + 60.0)

    renewed = _last_renewal(cluster, "replica-a", cut_at + 1e-9)
    a_stopped = a.spans[0][1]
    b_started = b.spans[0][0]
    # a stops within its renew deadline of the last renewal that got through...
    assert a_stopped <= renewed + RENEW_DEADLINE + 1e-6
    # ...which is before b may take the Lease: the Lease must have expired on b's clock.
    assert b_started >= renewed + LEASE - 1e-6
    assert a_stopped < b_started
    assert cluster.overlaps == []
    assert cluster.leaders() == ["b"]
    assert cluster.api.faults.injected["InternalError"] > 0


def test_leadership_comes_back_when_the_other_side_is_cut_off_then_a_stop_hands_over(
    cluster: Cluster,
) -> None:
    a, b = cluster.replicas["a"], cluster.replicas["b"]
    cluster.run_until(1.0, only="a")
    b.next_at = cluster.now()
    cut_at = _cut_off(cluster, "a", 40.0)
    cluster.run_until(cut_at + 60.0)
    assert cluster.leaders() == ["b"]

    # a is reachable again and still a candidate; now b is cut off, and a regains the Lease.
    cut_at = _cut_off(cluster, "b", 40.0)
    cluster.run_until(cut_at + 60.0)
    assert cluster.leaders() == ["a"]
    assert len(a.spans) == 2
    assert b.spans[0][1] < a.spans[1][0]
    renewed = _last_renewal(cluster, "replica-b", cut_at + 1e-9)
    assert a.spans[1][0] >= renewed + LEASE - 1e-6

    # A graceful stop releases the Lease: b takes over at its next poll, not after 15 s.
    stopped_at = cluster.now()
    a.elector.shutdown()
    a.next_at = math.inf
    cluster.run_until(stopped_at + 10.0, only="b")
    assert cluster.leaders() == ["b"]
    assert b.spans[1][0] - stopped_at <= RETRY * 2.2
    assert cluster.overlaps == []
