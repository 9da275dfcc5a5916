"""A Cluster that cannot be served (kubeconfig Secret missing or malformed, workload cluster
unreachable) is told so on itself, once per change, and never holds up another."""

from __future__ import annotations

import base64
import logging

import pytest
import yaml

from karpenter_capi.core.fleet import Fleet, FleetOptions, Kubeconfig
from karpenter_capi.core.kube import SECRETS, KubeClient
from karpenter_capi.core.kube.config import connect_kubeconfig
from karpenter_capi.core.kube.errors import ServiceUnavailable
from karpenter_capi.core.operator import OperatorOptions
from karpenter_capi.sim.apiserver.faulty_client import FaultyClient, throttled
from tests.fleet.world import FleetWorld, kubeconfig_secret, server_url, until


def _warnings(caplog: pytest.LogCaptureFixture, cluster: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and cluster in r.getMessage()
    ]


@pytest.mark.parametrize(
    ("value", "reason", "says"),
    [
        (None, "KubeconfigMissing", "Secret team-alpha/alpha-kubeconfig not found"),
        ("%%%", "KubeconfigInvalid", "data.value is not base64-encoded UTF-8"),
        (
            base64.b64encode(b"clusters: [oops").decode(),
            "KubeconfigInvalid",
            "data.value is not a YAML kubeconfig",
        ),
        (
            base64.b64encode(b"apiVersion: v1\nkind: Config\n").decode(),
            "KubeconfigInvalid",
            "expected clusters[].cluster.server",
        ),
    ],
)
def test_a_bad_kubeconfig_secret_is_an_event_on_the_cluster_and_the_other_provisions(
    world: FleetWorld,
    caplog: pytest.LogCaptureFixture,
    value: str | None,
    reason: str,
    says: str,
) -> None:
    world.add_cluster("alpha", secret=False)
    if value is not None:
        world.management.create(
            SECRETS, kubeconfig_secret("team-alpha", "alpha", "unused", value=value)
        )
    world.add_cluster("beta")
    with caplog.at_level(logging.WARNING):
        world.start()
        world.deploy("beta", "api", 3)
        assert until(world, lambda: world.bound("beta") == 3)
    assert world.served() == [world.key("beta")]
    events = world.cluster_events("alpha")
    assert [(kind, why) for kind, why, _ in events] == [("Warning", reason)]
    assert says in events[0][2]
    # Said once, however many syncs saw it.
    assert len(_warnings(caplog, "team-alpha/alpha")) == 1
    assert not any(r.exc_info for r in caplog.records)


def test_an_unreachable_workload_cluster_is_retried_and_served_once_it_answers(
    world: FleetWorld, caplog: pytest.LogCaptureFixture
) -> None:
    world.add_cluster("alpha")
    world.add_cluster("beta")
    world.unreachable.add("alpha")
    with caplog.at_level(logging.WARNING):
        world.start()
        world.deploy("beta", "api", 3)
        assert until(world, lambda: world.bound("beta") == 3)
    assert world.served() == [world.key("beta")]
    (event,) = world.cluster_events("alpha")
    assert event[:2] == ("Warning", "WorkloadUnreachable")
    assert f"cannot reach the workload cluster at {server_url('alpha')}" in event[2]
    assert "connection refused" in event[2]
    assert len(_warnings(caplog, "team-alpha/alpha")) == 1
    # Retried with backoff, not at every sync.
    tries = world.connects.count(server_url("alpha"))
    assert 1 < tries < 20
    world.unreachable.discard("alpha")
    world.advance(120)
    assert world.served() == [world.key("alpha"), world.key("beta")]
    assert ("Normal", "FleetServing") in [e[:2] for e in world.cluster_events("alpha")]
    world.deploy("alpha", "web", 2)
    assert until(world, lambda: world.bound("alpha") == 2)


def test_a_secret_fixed_after_it_was_missing_is_served_at_once(world: FleetWorld) -> None:
    world.add_cluster("alpha", secret=False)
    world.start()
    assert world.served() == []
    world.management.create(SECRETS, kubeconfig_secret("team-alpha", "alpha", server_url("alpha")))
    world.advance(1)
    assert world.served() == [world.key("alpha")]


def test_a_served_cluster_that_stops_answering_is_told_and_holds_up_no_other(
    world: FleetWorld, caplog: pytest.LogCaptureFixture
) -> None:
    world.add_cluster("alpha")
    world.add_cluster("beta")
    world.start()
    alpha = world.workloads["alpha"]
    outage = alpha.faults.fail(
        "*", "*", ServiceUnavailable("connection refused"), times=None, duration=120
    )
    with caplog.at_level(logging.WARNING):
        world.deploy("beta", "api", 3)
        assert until(world, lambda: world.bound("beta") == 3, seconds=60)
        world.advance(60)
    assert world.served() == [world.key("alpha"), world.key("beta")]
    reasons = [e[1] for e in world.cluster_events("alpha")]
    assert reasons[-1] == "WorkloadUnreachable"
    (said,) = [e[2] for e in world.cluster_events("alpha") if e[1] == "WorkloadUnreachable"]
    assert f"the workload cluster at {server_url('alpha')} has not answered" in said
    assert len(_warnings(caplog, "Cluster team-alpha/alpha: WorkloadUnreachable")) == 1
    alpha.faults.remove(outage)
    world.advance(30)
    assert [e[1] for e in world.cluster_events("alpha")][-1] == "FleetServing"
    world.deploy("alpha", "web", 2)
    assert until(world, lambda: world.bound("alpha") == 2)


def test_a_kubeconfig_the_client_refuses_is_invalid_not_unreachable(world: FleetWorld) -> None:
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "alpha", "cluster": {"server": server_url("alpha")}}],
        "contexts": [],
        "current-context": "admin@alpha",
        "users": [],
    }
    value = base64.b64encode(yaml.safe_dump(document).encode()).decode()
    world.add_cluster("alpha", secret=False)
    world.management.create(SECRETS, kubeconfig_secret("team-alpha", "alpha", "", value=value))

    def connect(kubeconfig: Kubeconfig) -> KubeClient:
        connect_kubeconfig(kubeconfig.document)  # what run --fleet does with it
        return world.connect(kubeconfig)

    fleet = Fleet(
        world.management,
        clock=world.clock,
        connect=connect,
        options=FleetOptions(shards=False),
        operator_options=OperatorOptions(leader_elect=False, metrics_port=None),
    )
    fleet.stepped().advance(30)
    assert fleet.members == {}
    (event,) = world.cluster_events("alpha")
    assert event[:2] == ("Warning", "KubeconfigInvalid")
    assert event[2].startswith(
        "Secret team-alpha/alpha-kubeconfig: the client cannot use its kubeconfig: "
        "ConfigException: Invalid kube-config file. Expected object with name admin@alpha"
    )


def _storming_world(storm: bool) -> tuple[FleetWorld, FaultyClient]:
    """Clusters alpha and beta served; with ``storm``, every request of alpha's controllers
    gets 429 with ``Retry-After: 1`` from then on (alpha itself keeps running)."""
    world = FleetWorld()
    world.add_cluster("alpha")
    world.add_cluster("beta")
    clients: list[FaultyClient] = []
    storming = [False]
    connect = world.connect

    def connect_alpha(kubeconfig: Kubeconfig) -> KubeClient:
        client = connect(kubeconfig)
        if kubeconfig.server != server_url("alpha"):
            return client
        clients.append(FaultyClient(client, lambda: throttled(1) if storming[0] else None))
        return clients[-1]

    world.connect = connect_alpha  # type: ignore[method-assign]
    world.start()
    storming[0] = storm
    (alpha,) = clients
    return world, alpha


def test_a_cluster_storming_429s_retries_boundedly_and_delays_no_other() -> None:
    decided: dict[bool, float] = {}
    for storm in (False, True):
        world, alpha = _storming_world(storm)
        began = world.clock.monotonic()
        world.deploy("alpha", "api", 3)
        world.deploy("beta", "api", 3)
        refused: list[int] = []
        for _ in range(180):
            world.advance(1)
            if storm not in decided and world.nodeclaims("beta"):
                decided[storm] = world.clock.monotonic() - began
            refused.append(alpha.refused)
        assert world.bound("beta") == 3
        if not storm:
            continue
        assert world.nodeclaims("alpha") == []
        # Past the first minute (every cache and controller failing once, backing off), alpha
        # costs a bounded trickle: each informer about twice a minute at its 30 s cap, each
        # periodic controller at its own interval, Retry-After honoured. A retry loop would
        # be thousands a minute.
        per_minute = [refused[end] - refused[end - 60] for end in (119, 179)]
        assert all(0 < count <= 40 for count in per_minute), per_minute
    # The other cluster decides at the same virtual moment with or without the storm.
    assert decided[True] == decided[False]
