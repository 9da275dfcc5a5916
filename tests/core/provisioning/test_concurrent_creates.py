"""A round's NodeClaims are created together, not one API round-trip after another (issue 25).

Over a real API each create costs a round-trip plus the server's admission; created one by
one, with the pods' ``Nominated`` Events in between, the 20 NodeClaims of a 1,000-pod round
appeared 0.4 to 2.4 s apart and their nodes over 45 s. These tests hold every NodeClaim create
at a barrier that opens only when all of them are in flight at once, so a round that creates
them one by one never gets past its first (the barrier's timeout only keeps a failing run from
hanging), and check what a user sees: the NodeClaims, their Events after them, and NodePool
limits still kept. The round's first NodeClaim is created alone, before the others: it carries
the rest of the round's plan, which no other NodeClaim of the round may exist without
(``core/provisioning/plans.py``).
"""

from __future__ import annotations

import copy
import logging
import threading
from pathlib import Path
from typing import Any

import pytest

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube.resources import EVENTS, NODECLAIMS, NODEPOOLS, Resource
from karpenter_capi.core.plugin_host import PluginEnvironment, Plugins
from karpenter_capi.core.provisioning.batcher import Batcher
from karpenter_capi.core.provisioning.provisioner import Provisioner
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.cluster import new_cluster
from karpenter_capi.sim.demo import DEMO_SCENARIO, mark_unschedulable
from karpenter_capi.sim.manifests import load_manifest_files

DEMO_NODECLAIMS = 5
"""What the demo's first round launches (four m6g.xlarge and a g5.xlarge)."""


class GatedClient:
    """The server, but after the first ``free`` NodeClaim creates the next ``gated`` wait at a
    barrier of ``parties``; records the order of NodeClaim and Event creates, and the most
    NodeClaim creates in flight at once."""

    def __init__(self, server: InMemoryAPIServer, parties: int, gated: int, free: int = 0) -> None:
        self._server = server
        self._barrier = threading.Barrier(parties, timeout=10)
        self._gated = gated
        self._free = free
        self._lock = threading.Lock()
        self.order: list[str] = []
        self.in_flight = 0
        self.most_in_flight = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._server, name)

    def create(self, resource: Resource, obj: Any, namespace: str | None = None) -> Any:
        if resource == NODECLAIMS:
            with self._lock:
                self.in_flight += 1
                self.most_in_flight = max(self.most_in_flight, self.in_flight)
                self._free -= 1
                if self._free < 0:
                    self._gated -= 1
                gated = self._free < 0 and self._gated >= 0
            try:
                if gated:
                    self._barrier.wait()
                created = self._server.create(resource, obj, namespace)
            finally:
                with self._lock:
                    self.in_flight -= 1
        else:
            created = self._server.create(resource, obj, namespace)
        with self._lock:
            self.order.append(resource.kind)
        return created


def _world() -> tuple[InMemoryAPIServer, FakeClock]:
    clock = FakeClock()
    server = new_cluster(clock=clock)
    server.apply_manifests(load_manifest_files([Path(DEMO_SCENARIO)]))
    mark_unschedulable(server)
    return server, clock


def _provisioner(client: Any, server: InMemoryAPIServer, clock: FakeClock, **kw: Any) -> Any:
    plugins = Plugins.load(
        ["generic_capi"],
        PluginEnvironment(
            workload=server, management=server, clock=clock, logger=logging.getLogger("t")
        ),
    )
    return Provisioner(client, plugins, clock, **kw)


def test_a_rounds_nodeclaims_are_created_at_once_and_events_follow_them() -> None:
    server, clock = _world()
    # The first alone, then the four others at once.
    client = GatedClient(server, parties=DEMO_NODECLAIMS - 1, gated=DEMO_NODECLAIMS - 1, free=1)
    report = _provisioner(client, server, clock, create_concurrency=8).reconcile()
    assert len(report.launched) == DEMO_NODECLAIMS
    assert client.most_in_flight == DEMO_NODECLAIMS - 1
    claims = {c["metadata"]["name"] for c in server.list(NODECLAIMS).items}
    assert claims == {d.nodeclaim for d in report.launched}
    # The pods' Events are written once every node is on its way, not between them.
    first_event = client.order.index("Event")
    assert client.order[:first_event] == ["NodeClaim"] * DEMO_NODECLAIMS
    # As many as upstream's shared bucket lets through (burst 10), every one for a planned pod.
    nominated = {
        e["involvedObject"]["name"]
        for e in server.list(EVENTS).items
        if e.get("reason") == "Nominated"
    }
    planned = {pod.split("/")[1] for d in report.launched for pod in d.pods}
    assert nominated <= planned
    assert len(nominated) == min(10, len(planned))


class _Said(logging.Handler):
    """Puts each ``created nodeclaim`` line in the client's order of requests."""

    def __init__(self, client: GatedClient) -> None:
        super().__init__(logging.INFO)
        self._client = client

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage() == "created nodeclaim":
            with self._client._lock:
                self._client.order.append("said")


def test_every_nodeclaim_is_said_created_before_the_pods_events_are_written() -> None:
    """A 1,000-pod round writes as many Events: the log said ``created nodeclaim`` seconds
    after the NodeClaim was created, between its pods' Events."""
    server, clock = _world()
    client = GatedClient(server, parties=1, gated=0)
    said = _Said(client)
    logger = logging.getLogger("karpenter_capi.core.provisioning.provisioner")
    logger.addHandler(said)
    old_level = logger.level
    logger.setLevel(logging.INFO)
    try:
        _provisioner(client, server, clock, create_concurrency=8).reconcile()
    finally:
        logger.removeHandler(said)
        logger.setLevel(old_level)
    first_event = client.order.index("Event")
    assert (
        client.order[:first_event] == ["NodeClaim"] * DEMO_NODECLAIMS + ["said"] * DEMO_NODECLAIMS
    )
    assert client.order.count("Event") >= DEMO_NODECLAIMS


def test_creates_in_flight_stay_within_the_bound() -> None:
    server, clock = _world()
    # Five creates, the first alone, then two at a time: the barrier opens for each pair.
    client = GatedClient(server, parties=2, gated=4, free=1)
    report = _provisioner(client, server, clock, create_concurrency=2).reconcile()
    assert client.most_in_flight == 2
    assert len(report.launched) == len(server.list(NODECLAIMS).items) == DEMO_NODECLAIMS


def test_nodepool_limits_are_kept_when_creating_at_once() -> None:
    server, clock = _world()
    limited = copy.deepcopy(server.get(NODEPOOLS, "general"))
    limited["spec"]["limits"] = {"cpu": "12"}
    server.update(NODEPOOLS, limited)
    report = _provisioner(server, server, clock, create_concurrency=8).reconcile()
    assert 0 < len(report.launched) < DEMO_NODECLAIMS
    assert any("limits would be exceeded" in why for why in report.unschedulable.values())


def test_a_pending_pods_event_opens_the_window_from_the_pod_itself() -> None:
    """Against a real API each pending pod's event feeds the window (``karpenter-capi run``):
    it opens at the pod, not at the provisioner's next look, and a look that finds the same
    pods does not hold it open longer."""
    clock = FakeClock()
    batcher = Batcher(clock, idle=1.0, max_duration=10.0)
    assert batcher.saw("default/a") == 1.0
    clock.advance(0.4)
    assert batcher.saw("default/b") == 1.0
    assert batcher.saw("default/b") is None  # seen: the window stays as it is
    clock.advance(0.5)
    batcher.observe(["default/a", "default/b"])  # the look finds nothing new
    assert batcher.seconds_until_ready() == pytest.approx(0.5)
    clock.advance(0.5)
    assert batcher.ready()
