"""Fleet sharding when the management cluster answers Lease writes slowly (issue 28 item 3).

A replica under load once renewed its held Leases one after another: a step of 30 or more
clusters took longer than the renew deadline, so the replica fenced clusters it held itself and
a killed replica's clusters waited 50 s for a survivor. Here every Lease write takes ``LATENCY``
of the ``FakeClock`` from when it is sent, however many are in flight (a server answering
round trips side by side), so a step's length is what its writes in a row add up to.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.fleet.sharding import ANNOTATION_CLUSTER, ShardCoordinator
from karpenter_capi.core.kube.resources import LEASES
from karpenter_capi.sim.apiserver import InMemoryAPIServer

from .world import LEASE_DURATION, NAMESPACE, RENEW_DEADLINE, RETRY_PERIOD, World

LATENCY = 0.5
"""Fake seconds each Lease write takes: 40 of them in a row are twice the renew deadline."""


class _SlowLeaseWrites:
    """The in-memory API, with every Lease create, update and delete ``latency`` long."""

    def __init__(self, api: InMemoryAPIServer, clock: FakeClock, latency: float) -> None:
        self._api = api
        self._clock = clock
        self._latency = latency
        self._lock = threading.Lock()
        self._in_flight = 0
        self.most_in_flight = 0

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._api, name)
        if name not in ("create", "update", "delete"):
            return attribute

        def call(resource: Any, *args: Any, **kwargs: Any) -> Any:
            if resource != LEASES:
                return attribute(resource, *args, **kwargs)
            sent = self._clock.monotonic()
            with self._lock:
                self._in_flight += 1
                self.most_in_flight = max(self.most_in_flight, self._in_flight)
            try:
                return attribute(resource, *args, **kwargs)
            finally:
                # Real time (test only): the writes sent together all start at ``sent``
                # before the first answer moves the clock on.
                threading.Event().wait(0.02)
                with self._lock:
                    self._in_flight -= 1
                    late = sent + self._latency - self._clock.monotonic()
                    if late > 0:
                        self._clock.advance(late)

        return call


def test_a_replica_with_slow_lease_writes_renews_every_lease_before_its_deadline(
    caplog: pytest.LogCaptureFixture,
) -> None:
    world = World(40)
    slow = _SlowLeaseWrites(world.api, world.clock, LATENCY)
    replica = world.join("a", slow)  # type: ignore[arg-type]
    coordinator = replica.coordinator
    assert 40 * LATENCY > RENEW_DEADLINE  # one after another, a step would outlast it

    with caplog.at_level(logging.INFO, logger="karpenter_capi.core.fleet.sharding"):
        coordinator.step(world.clusters)  # joins
        world.clock.advance(RETRY_PERIOD)
        for _ in range(int(3 * LEASE_DURATION / RETRY_PERIOD)):
            began = world.clock.monotonic()
            assert coordinator.step(world.clusters) == set(world.clusters)
            # The step's writes went out side by side: it lasted a few round trips, not 40.
            assert world.clock.monotonic() - began <= RENEW_DEADLINE / 2
            world.clock.advance(RETRY_PERIOD)
            world.check_one_holder()
            assert coordinator.held() == set(world.clusters)

    assert slow.most_in_flight > 1
    lapsed = [r.getMessage() for r in caplog.records if "stops serving" in r.getMessage()]
    assert lapsed == []
    # No write of a held cluster was ever fenced: it was held at every step of the world.
    assert world.unserved_since == {}


def test_a_killed_replicas_clusters_are_taken_within_lease_duration_despite_slow_writes() -> None:
    world = World(60)
    slow = _SlowLeaseWrites(world.api, world.clock, LATENCY)
    for name in ("a", "b", "c"):
        world.join(name, slow)  # type: ignore[arg-type]
    world.run(4 * RETRY_PERIOD)
    assert world.balanced(), world.loads()
    victim = {c for c, owner in world.owners().items() if owner == "a"}

    world.kill("a")
    killed = world.clock.monotonic()
    while not world.balanced():
        world.tick()
        assert world.clock.monotonic() - killed < 4 * LEASE_DURATION, world.loads()

    # Survivors never lost their own clusters meanwhile, and took the victim's within the
    # lease duration and a few slow steps (each step also pays for its writes).
    assert victim <= set(world.owners())
    assert world.clock.monotonic() - killed <= LEASE_DURATION + 4 * RETRY_PERIOD


def test_the_lease_renewed_longest_ago_is_renewed_first() -> None:
    world = World(0)
    slow = _SlowLeaseWrites(world.api, world.clock, LATENCY)
    written: list[str] = []
    update = slow.__getattr__("update")

    def recording(resource: Any, obj: Any, **kwargs: Any) -> Any:
        written.append(obj["metadata"].get("annotations", {}).get(ANNOTATION_CLUSTER, ""))
        return update(resource, obj, **kwargs)

    slow.update = recording  # type: ignore[attr-defined]
    coordinator = ShardCoordinator(
        slow,  # type: ignore[arg-type]
        world.clock,
        namespace=NAMESPACE,
        identity="b",
        lease_duration=LEASE_DURATION,
        renew_deadline=RENEW_DEADLINE,
        retry_period=RETRY_PERIOD,
        renew_workers=1,
    )
    old, new = "team-0/z-held-first", "team-0/a-taken-later"
    for clusters in ([], [old], [old, new]):
        coordinator.step(clusters)
        world.clock.advance(RETRY_PERIOD)
    written.clear()

    coordinator.step([old, new])

    # By name ``new`` would come first; renewed longest ago, ``old`` does.
    assert [c for c in written if c in (old, new)] == [old, new]
