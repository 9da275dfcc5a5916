"""Fleet sharding over Leases: one holder per cluster, balance, stable moves, fast fail-over.

Replicas run in process against the in-memory API on a ``FakeClock`` (``world.World``), which
checks after every single step that no cluster has two holders at the same instant.
"""

from __future__ import annotations

import logging
import random
import re
from typing import Any

import pytest

from karpenter_capi.core.fleet.sharding import (
    ANNOTATION_CLUSTER,
    LABEL_SHARD,
    ShardCoordinator,
    assign,
    cluster_lease_name,
    member_lease_name,
)
from karpenter_capi.core.kube.client import JsonObject
from karpenter_capi.core.kube.errors import Forbidden, ServiceUnavailable
from karpenter_capi.core.kube.resources import LEASES
from karpenter_capi.sim.apiserver import InMemoryAPIServer

from .world import LEASE_DURATION, NAMESPACE, RENEW_DEADLINE, RETRY_PERIOD, World

_DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


def _balanced_world(replicas: int = 3, clusters: int = 10) -> World:
    world = World(clusters)
    for i in range(replicas):
        world.join(f"replica-{i}")
    world.run(3 * RETRY_PERIOD)
    assert world.balanced(), world.loads()
    return world


def _holder(api: InMemoryAPIServer, cluster: str) -> str:
    lease = api.get(LEASES, cluster_lease_name(cluster), NAMESPACE)
    return str(lease["spec"]["holderIdentity"])


def test_three_replicas_share_ten_clusters_within_one_of_even() -> None:
    world = World(10)
    for name in ("a", "b", "c"):
        world.join(name)

    world.run(3 * RETRY_PERIOD)

    assert sorted(world.loads().values()) == [3, 3, 4]
    owners = world.owners()
    assert sorted(owners) == sorted(world.clusters)
    # Each cluster's Lease names the replica that serves it, and says which cluster it is for.
    for cluster, owner in owners.items():
        assert _holder(world.api, cluster) == owner
        lease = world.api.get(LEASES, cluster_lease_name(cluster), NAMESPACE)
        assert lease["metadata"]["annotations"][ANNOTATION_CLUSTER] == cluster
        assert lease["metadata"]["labels"][LABEL_SHARD] == "cluster"
    # Replicas that start together see each other before taking anything: none ever took
    # more than its share and handed clusters back.
    assert sorted(r.peak for r in world.replicas.values()) == [3, 3, 4]


@pytest.mark.parametrize(("clusters", "loads"), [(10, [2, 2, 3, 3]), (100, [25, 25, 25, 25])])
def test_a_fourth_replica_moves_only_the_clusters_it_takes(clusters: int, loads: list[int]) -> None:
    world = _balanced_world(3, clusters)
    before = world.owners()

    world.join("replica-3")
    world.run(3 * RETRY_PERIOD)

    assert world.balanced(), world.loads()
    assert sorted(world.loads().values()) == loads
    moved = {c for c, owner in world.owners().items() if before[c] != owner}
    # Only the newcomer's clusters moved, as few as its share: the minimum any balanced
    # assignment needs (rebalancing from scratch would move a third more).
    assert moved == {c for c, owner in world.owners().items() if owner == "replica-3"}
    assert len(moved) == min(loads)


def test_a_killed_replicas_clusters_are_served_again_within_lease_duration_and_a_step() -> None:
    world = _balanced_world(3, 10)
    orphans = {c for c, owner in world.owners().items() if owner == "replica-1"}
    killed_at = world.elapsed
    world.kill("replica-1")

    taken_at: dict[str, float] = {}
    while len(taken_at) < len(orphans) and world.elapsed < killed_at + 3 * LEASE_DURATION:
        world.tick()
        owners = world.owners()
        for cluster in orphans - set(taken_at):
            if owners.get(cluster, "replica-1") != "replica-1":
                taken_at[cluster] = world.elapsed - RETRY_PERIOD  # when it stepped

    assert set(taken_at) == orphans
    assert max(taken_at.values()) - killed_at <= LEASE_DURATION + RETRY_PERIOD
    # The dead replica stopped holding them (by its own clock) before anyone took one.
    assert not any(world.replicas["replica-1"].coordinator.holds(c) for c in orphans)
    world.run(2 * RETRY_PERIOD)
    assert world.balanced(), world.loads()
    # Its membership Lease, expired, is deleted so a restarted pod leaves nothing behind.
    names = {lease["metadata"]["name"] for lease in world.api.list(LEASES, NAMESPACE).items}
    assert member_lease_name("replica-1") not in names
    assert member_lease_name("replica-0") in names


def test_a_survivor_stepping_at_next_expiry_takes_a_killed_replicas_clusters_then() -> None:
    """``next_expiry`` is when the killed replica's Leases expire on the survivor's clock (a
    lease after it first saw their last renewal); the threaded fleet steps then
    (``ShardLoop``), not up to a retry period later."""
    world = _balanced_world(3, 10)
    orphans = {c for c, owner in world.owners().items() if owner == "replica-1"}
    killed_at = world.clock.monotonic()
    world.kill("replica-1")
    survivors = world.live()

    def expiry(replica: Any) -> float:
        found = replica.coordinator.next_expiry()
        assert found is not None
        return float(found)

    while min(map(expiry, survivors)) >= world.clock.monotonic() + RETRY_PERIOD:
        world.tick()  # the others' Leases, renewed every step, expire later than the dead one's
    for replica in sorted(survivors, key=expiry):
        at = expiry(replica)
        # Its last renewal was in the step before the kill: seen then or a step later.
        assert killed_at - RETRY_PERIOD + LEASE_DURATION <= at <= killed_at + LEASE_DURATION
        world.clock.advance(max(0.0, at + 0.01 - world.clock.monotonic()))
        replica.served = replica.coordinator.step(world.clusters)
        world.check_one_holder()
    assert {world.owners().get(c) for c in orphans} <= {"replica-0", "replica-2"}
    assert world.clock.monotonic() <= killed_at + LEASE_DURATION + 0.01


def test_a_graceful_stop_hands_every_cluster_over_within_one_step() -> None:
    world = _balanced_world(3, 10)
    leaving = {c for c, owner in world.owners().items() if owner == "replica-2"}

    world.stop("replica-2")
    assert not any(world.replicas["replica-2"].coordinator.holds(c) for c in leaving)
    for cluster in leaving:
        assert _holder(world.api, cluster) == ""
    world.tick()

    owners = world.owners()
    assert leaving <= set(owners)
    assert {owners[c] for c in leaving} <= {"replica-0", "replica-1"}
    assert world.balanced(), world.loads()
    assert world.replicas["replica-2"].coordinator.step(world.clusters) == frozenset()


def test_a_rebalanced_cluster_stops_being_served_a_step_before_its_lease_is_released() -> None:
    world = _balanced_world(3, 10)
    world.join("replica-3")
    handed: dict[str, tuple[str, float]] = {}
    released: dict[str, float] = {}
    for _ in range(4):
        before = world.owners()
        world.tick()
        after = world.owners()
        for cluster, owner in before.items():
            if after.get(cluster) != owner and cluster not in handed:
                handed[cluster] = (owner, world.elapsed)
        for cluster, (_, _at) in handed.items():
            if cluster not in released and _holder(world.api, cluster) in ("", "replica-3"):
                released[cluster] = world.elapsed
    assert handed
    # The old holder's fenced clients had a whole step to stop before the Lease went back.
    for cluster, (_, fenced_at) in handed.items():
        assert released[cluster] > fenced_at


def test_a_lease_taken_by_someone_else_stops_service_at_once_and_is_won_back_later(
    caplog: pytest.LogCaptureFixture,
) -> None:
    world = _balanced_world(2, 4)
    cluster, owner = sorted(world.owners().items())[0]
    # An outsider (a human, another tool) writes itself in as the holder.
    world.api.patch(
        LEASES,
        cluster_lease_name(cluster),
        {"spec": {"holderIdentity": "intruder"}},
        NAMESPACE,
    )

    with caplog.at_level(logging.WARNING, logger="karpenter_capi.core.fleet.sharding"):
        world.tick()
    assert not world.replicas[owner].coordinator.holds(cluster)
    assert f"{owner} stops serving cluster {cluster}" in caplog.text
    assert "is now held by intruder" in caplog.text

    world.run(LEASE_DURATION + 2 * RETRY_PERIOD)
    assert world.balanced(), world.loads()


class _Interfering:
    """A client that loses a race for one Lease once a step: an editor touches it just before
    the replica's update (a label added by hand, another tool), so the update meets a 409."""

    def __init__(self, api: InMemoryAPIServer, lease: str) -> None:
        self._api = api
        self._lease = lease
        self.interfered = 0
        self.armed = False  # re-armed by the test every step

    def __getattr__(self, name: str) -> Any:
        return getattr(self._api, name)

    def update(self, resource: Any, obj: JsonObject, **kwargs: Any) -> JsonObject:
        meta = obj["metadata"]
        if self.armed and meta["name"] == self._lease:
            self.armed = False
            self.interfered += 1
            edit = {"metadata": {"labels": {"edited": str(self.interfered)}}}
            self._api.patch(LEASES, meta["name"], edit, meta["namespace"])
        return self._api.update(resource, obj, **kwargs)


def test_a_conflict_on_renew_from_a_harmless_edit_is_retried_and_service_goes_on() -> None:
    world = World(4)
    client = _Interfering(world.api, cluster_lease_name(world.clusters[0]))
    replica = world.join("solo", client)  # type: ignore[arg-type]
    world.run(2 * RETRY_PERIOD)
    served = set(replica.served)
    assert served == set(world.clusters)

    for _ in range(int(LEASE_DURATION / RETRY_PERIOD)):
        client.armed = True
        world.tick()
        assert set(replica.served) == served

    assert client.interfered == int(LEASE_DURATION / RETRY_PERIOD)
    lease = world.api.get(LEASES, cluster_lease_name(world.clusters[0]), NAMESPACE)
    assert lease["metadata"]["labels"]["edited"] == str(client.interfered)  # the edit stays


def test_of_two_replicas_racing_for_a_free_lease_exactly_one_wins() -> None:
    world = World(1)
    (cluster,) = world.clusters
    a, b = world.join("a"), world.join("b")
    world.run(RETRY_PERIOD)  # both join

    # Both read the Lease missing and create it; then both see it free and update it.
    for replica in (a, b):
        replica.served = replica.coordinator.step(world.clusters)
    assert [a.coordinator.holds(cluster), b.coordinator.holds(cluster)].count(True) == 1
    world.run(4 * RETRY_PERIOD)
    assert world.balanced()


class _Partitionable:
    """A client that can be cut off from the API server: every call then fails with 503."""

    def __init__(self, api: InMemoryAPIServer) -> None:
        self._api = api
        self.cut = False
        self.calls_while_cut = 0

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._api, name)
        if not callable(attribute):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            if self.cut:
                self.calls_while_cut += 1
                raise ServiceUnavailable("connection refused")
            return attribute(*args, **kwargs)

        return call


def test_a_partitioned_replica_stops_serving_before_another_takes_over(
    caplog: pytest.LogCaptureFixture,
) -> None:
    world = World(10)
    client = _Partitionable(world.api)
    world.join("a")
    world.join("b", client)  # type: ignore[arg-type]
    world.join("c")
    world.run(3 * RETRY_PERIOD)
    assert world.balanced()
    cut_off = {c for c, owner in world.owners().items() if owner == "b"}

    client.cut = True
    with caplog.at_level(logging.WARNING, logger="karpenter_capi.core.fleet.sharding"):
        world.run(LEASE_DURATION + 2 * RETRY_PERIOD)  # it keeps stepping, every call failing

    b = world.replicas["b"].coordinator
    assert not any(b.holds(c) for c in cut_off)
    # Everything it served is served by the others (the world checked, at every step, that
    # no cluster ever had two holders).
    assert cut_off <= set(world.owners())
    assert world.longest_gap <= LEASE_DURATION - RENEW_DEADLINE + 2 * RETRY_PERIOD
    # The outage is said once, not every round.
    listing = [r for r in caplog.records if "cannot list Leases" in r.getMessage()]
    assert len(listing) == 1
    assert all(r.exc_info is None for r in caplog.records)

    client.cut = False
    world.run(LEASE_DURATION + 3 * RETRY_PERIOD)
    assert world.balanced(), world.loads()
    assert world.loads()["b"] >= 3


@pytest.mark.parametrize("seed", range(12))
def test_random_joins_kills_stops_and_partitions_never_give_a_cluster_two_holders(
    seed: int,
) -> None:
    rng = random.Random(seed)
    world = World(rng.randint(1, 14))
    links: dict[str, _Partitionable] = {}
    serial = 0

    def join() -> None:
        nonlocal serial
        identity = f"r{serial}"
        serial += 1
        links[identity] = _Partitionable(world.api)
        world.join(identity, links[identity])  # type: ignore[arg-type]

    for _ in range(rng.randint(1, 4)):
        join()
    for _ in range(25):
        event = rng.random()
        live = world.live()
        if event < 0.2 or not live:
            join()
        elif event < 0.25:
            links[rng.choice(live).identity].cut = True
        elif event < 0.3:
            links[rng.choice(live).identity].cut = False
        elif event < 0.35 and len(live) > 1:
            world.kill(rng.choice(live).identity)
        elif event < 0.4 and len(live) > 1:
            stopping = rng.choice(live).identity
            links[stopping].cut = False
            world.stop(stopping)
        elif event < 0.45:
            world.clusters = [*world.clusters, f"extra/c-{serial}"]
            serial += 1
        elif event < 0.5 and len(world.clusters) > 1:
            world.clusters = world.clusters[1:]
        world.run(rng.choice([RETRY_PERIOD, 3 * RETRY_PERIOD, LEASE_DURATION]))

    for link in links.values():
        link.cut = False
    world.run(LEASE_DURATION + 3 * RETRY_PERIOD)
    assert world.balanced(), (world.loads(), sorted(world.owners()))
    # Leases of clusters no longer served and of dead replicas are gone.
    names = {lease["metadata"]["name"] for lease in world.api.list(LEASES, NAMESPACE).items}
    expected = {cluster_lease_name(c) for c in world.clusters} | {
        member_lease_name(r.identity) for r in world.live()
    }
    assert names == expected


def test_assign_gives_floor_or_ceiling_and_keeps_holders_within_their_share() -> None:
    clusters = [f"ns/c{i}" for i in range(11)]
    members = ["a", "b", "c"]
    chosen = assign(clusters, members, {})
    loads = sorted(list(chosen.values()).count(m) for m in members)
    assert loads == [3, 4, 4]
    # Deterministic whatever order the inputs come in: every replica computes the same.
    assert assign(list(reversed(clusters)), list(reversed(members)), {}) == chosen
    # A holder of everything keeps its share; only the excess moves.
    sticky = assign(clusters, members, dict.fromkeys(clusters, "a"))
    assert list(sticky.values()).count("a") == 4
    assert assign(clusters, [], {}) == {}
    few = assign(["ns/x"], members, {})
    assert len(few) == 1


def test_lease_names_are_dns_subdomains_and_long_ones_are_hashed() -> None:
    assert cluster_lease_name("team-a/prod") == "karpenter-capi-cluster-team-a.prod"
    long_a = cluster_lease_name("ns/" + "a" * 250)
    long_b = cluster_lease_name("ns/" + "a" * 249 + "b")
    for name in (long_a, long_b, member_lease_name("host-1_0b9e7c1e-uuid")):
        assert len(name) <= 253
        assert re.match(_DNS_SUBDOMAIN, name)
    assert long_a != long_b
    assert member_lease_name("x_1") != member_lease_name("x-1")


def test_bad_cluster_keys_are_skipped_with_one_warning_and_the_rest_served(
    caplog: pytest.LogCaptureFixture,
) -> None:
    world = World(3)
    world.clusters = [*world.clusters, "no-namespace"]
    replica = world.join("solo")
    with caplog.at_level(logging.WARNING, logger="karpenter_capi.core.fleet.sharding"):
        world.run(3 * RETRY_PERIOD)
    assert replica.served == frozenset(world.clusters[:3])
    warnings = [r.getMessage() for r in caplog.records if "no-namespace" in r.getMessage()]
    assert warnings == ["fleet sharding skips cluster key 'no-namespace': expected namespace/name"]


def test_settings_that_could_give_two_holders_are_refused() -> None:
    world = World(1)
    with pytest.raises(ValueError, match="lease_duration must be greater than renew_deadline"):
        ShardCoordinator(
            world.api, world.clock, namespace=NAMESPACE, identity="x", lease_duration=5.0
        )
    with pytest.raises(ValueError, match="renew_deadline must be greater than retry_period"):
        ShardCoordinator(
            world.api, world.clock, namespace=NAMESPACE, identity="x", retry_period=10.0
        )


class _Forbidding:
    """A client whose ServiceAccount may not touch Leases (RBAC not granted yet)."""

    def __init__(self, api: InMemoryAPIServer) -> None:
        self._api = api
        self.forbidden = True

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._api, name)
        if not callable(attribute):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            if self.forbidden and args and args[0] == LEASES:
                raise Forbidden(
                    'leases.coordination.k8s.io is forbidden: User "system:serviceaccount:'
                    'kube-system:karpenter-capi" cannot list resource "leases"'
                )
            return attribute(*args, **kwargs)

        return call


def test_missing_lease_permissions_are_said_once_with_the_fix(
    caplog: pytest.LogCaptureFixture,
) -> None:
    world = World(3)
    client = _Forbidding(world.api)
    replica = world.join("solo", client)  # type: ignore[arg-type]
    with caplog.at_level(logging.DEBUG, logger="karpenter_capi.core.fleet.sharding"):
        world.run(5 * RETRY_PERIOD)

    assert replica.served == frozenset()
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    message = warnings[0].getMessage()
    assert message.startswith("solo cannot list Leases in kube-system: Forbidden(403")
    assert message.endswith(
        "; grant the controller's ServiceAccount get, list, create, update and delete on "
        "leases (coordination.k8s.io) in namespace kube-system"
    )
    assert warnings[0].exc_info is None

    client.forbidden = False
    world.run(3 * RETRY_PERIOD)
    assert replica.served == frozenset(world.clusters)


def test_over_http_through_the_official_client_two_replicas_share_and_hand_over() -> None:
    """The same Lease writes on the wire: label selector, annotations, preconditioned deletes."""
    from karpenter_capi.core.kube.official import OfficialClient
    from karpenter_capi.sim.apiserver.http import HttpFront

    world = World(4)
    with HttpFront(world.api) as front:
        for name in ("a", "b"):
            world.join(name, OfficialClient.from_url(front.url))
        world.run(3 * RETRY_PERIOD)
        assert world.balanced(), world.loads()
        assert sorted(world.loads().values()) == [2, 2]

        world.stop("a")
        world.tick()
        assert world.balanced(), world.loads()
        assert world.loads()["b"] == 4
        names = {lease["metadata"]["name"] for lease in world.api.list(LEASES, NAMESPACE).items}
        assert member_lease_name("a") not in names
