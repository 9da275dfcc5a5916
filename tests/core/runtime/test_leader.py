"""Leader election over a Lease: one leader, safe failover, prompt release, honest renewals.

Most tests run replicas in process against the in-memory API on a ``FakeClock``, driven by a
tiny scheduler that steps each live replica when the delay it returned has passed, so every
hand-over happens at an exact, asserted moment. One test runs two replicas in threads over the
HTTP front with the official client and real time.
"""

from __future__ import annotations

import functools
import math
import queue
import re
import threading
import time
from collections.abc import Callable
from typing import Any, cast

import pytest

from karpenter_capi.core.clock import FakeClock, SystemClock, format_micro_time
from karpenter_capi.core.kube.client import JsonObject, KubeClient
from karpenter_capi.core.kube.errors import Conflict
from karpenter_capi.core.kube.resources import LEASES
from karpenter_capi.core.runtime.leader import LeaderElector, make_identity
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.cluster import new_cluster

NAME = "karpenter-capi-leader"
NAMESPACE = "kube-system"
MICRO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


class Replica:
    """One controller replica: an elector plus the record of its callbacks."""

    def __init__(
        self,
        client: KubeClient,
        clock: FakeClock,
        identity: str,
        log: list[tuple[float, str, str]],
        on_stopped: Callable[[], None] | None = None,
        **options: Any,
    ) -> None:
        self.identity = identity
        self.clock = clock
        self.alive = True
        self.due = clock.monotonic()
        self._log = log
        self._on_stopped_extra = on_stopped
        self.elector = LeaderElector(
            client,
            clock,
            name=NAME,
            namespace=NAMESPACE,
            identity=identity,
            on_started_leading=lambda: self._record("started"),
            on_stopped_leading=self._stopped,
            rand=lambda: 0.0,
            **options,
        )

    def _record(self, what: str) -> None:
        self._log.append((self.clock.monotonic(), self.identity, what))

    def _stopped(self) -> None:
        self._record("stopped")
        if self._on_stopped_extra is not None:
            self._on_stopped_extra()

    def step(self) -> None:
        self.due = self.clock.monotonic() + self.elector.step()


class World:
    """An API server, a fake clock, replicas, and a scheduler that steps them when due."""

    def __init__(self) -> None:
        self.clock = FakeClock()
        self.api = new_cluster(clock=self.clock)
        self.start = self.clock.monotonic()
        self.log: list[tuple[float, str, str]] = []
        self.replicas: list[Replica] = []

    def replica(self, identity: str, client: KubeClient | None = None, **options: Any) -> Replica:
        replica = Replica(client or self.api, self.clock, identity, self.log, **options)
        self.replicas.append(replica)
        return replica

    @property
    def elapsed(self) -> float:
        return self.clock.monotonic() - self.start

    def run_until(self, elapsed: float) -> None:
        """Step every live replica that falls due up to ``elapsed`` seconds (inclusive)."""
        until = self.start + elapsed
        while True:
            live = [r for r in self.replicas if r.alive]
            due = min((r.due for r in live), default=math.inf)
            if due > until:
                self.clock.advance(max(0.0, until - self.clock.monotonic()))
                return
            self.clock.advance(max(0.0, due - self.clock.monotonic()))
            next(r for r in live if r.due == due).step()

    def lease(self) -> JsonObject:
        return self.api.get(LEASES, NAME, NAMESPACE)

    def spec(self) -> JsonObject:
        return cast(JsonObject, self.lease()["spec"])

    def events(self) -> list[tuple[float, str, str]]:
        """The callbacks so far, with times relative to the start."""
        return [(round(t - self.start, 6), who, what) for t, who, what in self.log]


def test_of_two_replicas_exactly_one_leads_and_keeps_renewing() -> None:
    world = World()
    a, b = world.replica("a"), world.replica("b")

    world.run_until(60)

    assert (a.elector.is_leader, b.elector.is_leader) == (True, False)
    assert a.elector.leader_identity == b.elector.leader_identity == "a"
    assert world.events() == [(0, "a", "started")]
    spec = world.spec()
    assert spec["holderIdentity"] == "a"
    assert spec["leaseDurationSeconds"] == 15
    assert spec["leaseTransitions"] == 0
    assert MICRO_TIME.match(spec["acquireTime"])
    assert MICRO_TIME.match(spec["renewTime"])
    assert spec["renewTime"] == format_micro_time(world.clock.now())  # renewed on the last step


def test_when_the_leader_dies_the_other_takes_over_after_the_lease_duration_not_before() -> None:
    world = World()
    a, b = world.replica("a"), world.replica("b")
    world.run_until(10)  # a renewed at 10, and b saw that renewal at 10
    a.alive = False  # crashed: no more steps, no release

    world.run_until(10 + 14.999)
    assert not b.elector.is_leader
    assert world.spec()["holderIdentity"] == "a"

    world.run_until(10 + 15)
    assert b.elector.is_leader
    assert world.events() == [(0, "a", "started"), (25, "b", "started")]
    spec = world.spec()
    assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("b", 1)


def test_graceful_release_lets_the_other_replica_take_over_at_once() -> None:
    world = World()
    holder_while_stopping: list[str] = []
    a = world.replica(
        "a", on_stopped=lambda: holder_while_stopping.append(world.spec()["holderIdentity"])
    )
    b = world.replica("b")
    world.run_until(5)

    a.elector.shutdown()

    # The old leader stopped acting while it still held the Lease, then handed it back.
    assert holder_while_stopping == ["a"]
    spec = world.spec()
    assert (spec["holderIdentity"], spec["leaseDurationSeconds"]) == ("", 1)
    assert not a.elector.is_leader
    assert a.elector.step() == math.inf  # a stopped elector stays stopped

    b.step()  # no time passes
    assert b.elector.is_leader
    assert world.spec()["holderIdentity"] == "b"
    assert world.spec()["leaseTransitions"] == 1


def test_without_release_on_stop_the_lease_is_left_to_expire() -> None:
    world = World()
    a = world.replica("a", release_on_stop=False)
    b = world.replica("b")
    world.run_until(4)

    a.elector.shutdown()
    a.alive = False
    b.step()

    assert world.spec()["holderIdentity"] == "a"
    assert not b.elector.is_leader
    world.run_until(4 + 15)
    assert b.elector.is_leader


def test_a_leader_that_cannot_renew_stops_at_the_renew_deadline_before_anyone_takes_over() -> None:
    world = World()
    a, b = world.replica("a"), world.replica("b")
    world.run_until(4)  # a's last successful renew is sent at 4; b observes it at 4
    rule = world.api.faults.internal_error("update", "leases", times=None)

    world.run_until(4 + 9.999)
    assert a.elector.is_leader
    assert rule.hits >= 4  # renewals at 6, 8, 10 and 12 each failed (fast and slow path)

    world.run_until(4 + 10)
    assert not a.elector.is_leader
    assert world.events()[-1] == (14, "a", "stopped")
    assert not b.elector.is_leader  # the Lease is still a's until it expires for b

    # a exits on losing the Lease, as Karpenter does; the API server recovers.
    a.alive = False
    world.api.faults.remove(rule)
    world.run_until(4 + 14.999)
    assert not b.elector.is_leader
    world.run_until(4 + 15)
    assert b.elector.is_leader
    assert world.events() == [(0, "a", "started"), (14, "a", "stopped"), (19, "b", "started")]


def test_is_leader_turns_false_at_the_renew_deadline_even_if_the_loop_is_stuck() -> None:
    world = World()
    a = world.replica("a")
    world.run_until(0)
    assert a.elector.is_leader

    world.clock.advance(10)  # no step: the driving thread is blocked somewhere

    assert not a.elector.is_leader
    assert world.events() == [(0, "a", "started")]  # the callback waits for the next step
    a.step()
    assert world.events()[-1] == (10, "a", "stopped")


def test_a_leader_that_finds_another_holder_stops_at_once() -> None:
    world = World()
    a = world.replica("a")
    world.run_until(2)
    world.api.patch(LEASES, NAME, {"spec": {"holderIdentity": "intruder"}}, NAMESPACE)

    world.run_until(4)  # the next renewal; the renew deadline is still 8 s away

    assert not a.elector.is_leader
    assert a.elector.leader_identity == "intruder"
    assert world.events() == [(0, "a", "started"), (4, "a", "stopped")]
    assert world.spec()["holderIdentity"] == "intruder"


class Interleaving:
    """A client that lets another replica act just before this one's next update."""

    def __init__(self, api: InMemoryAPIServer) -> None:
        self._api = api
        self.before_next_update: Callable[[], None] | None = None
        self.update_errors: list[Exception] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._api, name)

    def update(self, resource: Any, obj: JsonObject, **kwargs: Any) -> JsonObject:
        hook, self.before_next_update = self.before_next_update, None
        if hook is not None:
            hook()
        try:
            return self._api.update(resource, obj, **kwargs)
        except Exception as err:
            self.update_errors.append(err)
            raise


def test_two_candidates_racing_for_an_expired_lease_one_wins_the_other_gets_409() -> None:
    world = World()
    world.api.create(
        LEASES,
        {
            "metadata": {"name": NAME, "namespace": NAMESPACE},
            "spec": {
                "holderIdentity": "departed",
                "leaseDurationSeconds": 15,
                "renewTime": "2025-12-31T23:59:59.000000Z",
                "leaseTransitions": 4,
            },
        },
        NAMESPACE,
    )
    slow = Interleaving(world.api)
    a = world.replica("a")
    b = world.replica("b", client=cast(KubeClient, slow))
    a.step()
    b.step()
    assert not a.elector.is_leader
    assert not b.elector.is_leader
    world.clock.advance(15)

    # b reads the expired Lease, then a reads and takes it before b's write lands.
    slow.before_next_update = a.step
    b.step()

    assert a.elector.is_leader
    assert not b.elector.is_leader
    assert [type(err) for err in slow.update_errors] == [Conflict]
    assert world.spec()["holderIdentity"] == "a"
    assert world.spec()["leaseTransitions"] == 5  # one holder change, counted once

    b.step()  # b now sees a's fresh record and waits a full lease duration again
    assert b.elector.leader_identity == "a"
    assert not b.elector.is_leader


def test_lease_transitions_count_holder_changes_and_renewals_keep_the_acquire_time() -> None:
    world = World()
    a, b = world.replica("a"), world.replica("b")
    world.run_until(0)
    first = world.spec()
    world.run_until(6)
    renewed = world.spec()
    assert renewed["acquireTime"] == first["acquireTime"]
    assert renewed["renewTime"] > first["renewTime"]
    assert renewed["leaseTransitions"] == 0

    a.elector.shutdown()  # released: b takes it on its next step
    a.alive = False
    world.run_until(8)
    assert world.spec()["leaseTransitions"] == 1

    c = world.replica("c")
    world.run_until(10)
    b.alive = False  # crashed
    world.run_until(10 + 15)
    assert c.elector.is_leader
    last = world.spec()
    assert (last["holderIdentity"], last["leaseTransitions"]) == ("c", 2)
    assert last["acquireTime"] == format_micro_time(world.clock.now())


def test_a_malformed_lease_is_read_as_free_rather_than_crashing() -> None:
    world = World()
    world.api.create(
        LEASES,
        {
            "metadata": {"name": NAME, "namespace": NAMESPACE},
            "spec": {"holderIdentity": 42, "leaseDurationSeconds": "soon", "renewTime": 7},
        },
        NAMESPACE,
    )
    a = world.replica("a")

    a.step()

    assert a.elector.is_leader
    spec = world.spec()
    assert (spec["holderIdentity"], spec["leaseDurationSeconds"]) == ("a", 15)
    assert spec["leaseTransitions"] == 1


@pytest.mark.parametrize(
    ("lease_duration", "renew_deadline", "retry_period"),
    [(10.0, 10.0, 2.0), (15.0, 2.0, 2.0), (15.0, 10.0, 0.0)],
)
def test_inconsistent_timings_are_refused(
    lease_duration: float, renew_deadline: float, retry_period: float
) -> None:
    with pytest.raises(ValueError, match="must be greater"):
        LeaderElector(
            InMemoryAPIServer(),
            FakeClock(),
            name=NAME,
            namespace=NAMESPACE,
            identity="a",
            lease_duration=lease_duration,
            renew_deadline=renew_deadline,
            retry_period=retry_period,
        )


def test_identities_name_the_host_and_differ_per_process() -> None:
    first, second = make_identity("node-1"), make_identity("node-1")
    assert first.startswith("node-1_")
    assert second.startswith("node-1_")
    assert first != second
    assert make_identity()  # the real hostname


def test_over_http_in_threads_one_leads_and_the_other_takes_over_when_it_stops() -> None:
    from karpenter_capi.core.kube.official import OfficialClient
    from karpenter_capi.sim.apiserver.http import HttpFront

    lease_duration = 1.0
    lock = threading.Lock()
    leading: set[str] = set()
    overlaps: list[set[str]] = []
    started: queue.Queue[tuple[str, float]] = queue.Queue()

    def on_started(identity: str) -> None:
        with lock:
            leading.add(identity)
            if len(leading) > 1:
                overlaps.append(set(leading))
        started.put((identity, time.monotonic()))

    def on_stopped(identity: str) -> None:
        with lock:
            leading.discard(identity)

    with HttpFront(InMemoryAPIServer()) as front:
        clients = {name: OfficialClient.from_url(front.url) for name in ("r1", "r2")}
        electors = {
            name: LeaderElector(
                client,
                SystemClock(),
                name=NAME,
                namespace="default",
                identity=name,
                lease_duration=lease_duration,
                renew_deadline=0.7,
                retry_period=0.2,
                release_on_stop=False,
                on_started_leading=functools.partial(on_started, name),
                on_stopped_leading=functools.partial(on_stopped, name),
            )
            for name, client in clients.items()
        }
        stops = {name: threading.Event() for name in electors}
        threads = {
            name: threading.Thread(target=elector.run, args=(stops[name],), daemon=True)
            for name, elector in electors.items()
        }
        try:
            for thread in threads.values():
                thread.start()
            first, _ = started.get(timeout=5)
            second = "r2" if first == "r1" else "r1"

            # Longer than a lease duration: renewals keep the follower out.
            with pytest.raises(queue.Empty):
                started.get(timeout=1.2 * lease_duration)
            assert electors[first].is_leader
            assert not electors[second].is_leader

            stops[first].set()  # stops leading without releasing the Lease
            threads[first].join(timeout=5)
            stopped_at = time.monotonic()
            assert not electors[first].is_leader

            who, when = started.get(timeout=lease_duration + 3)
            assert who == second
            # The Lease must expire first, but the follower notices within a poll or two.
            assert 0.5 < when - stopped_at < lease_duration + 1.5
            assert not overlaps
        finally:
            for stop in stops.values():
                stop.set()
            for thread in threads.values():
                thread.join(timeout=5)
            for client in clients.values():
                client.close()
