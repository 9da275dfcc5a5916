"""Launch through the scale subresource: exactly one Machine per NodeClaim, on the cheapest
resource that can make it, falling back when a resource cannot."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from karpenter_capi.core.errors import InstanceNotFoundError, InsufficientCapacityError
from karpenter_capi.core.kube import MACHINE_DEPLOYMENTS, MACHINE_POOLS, MACHINE_SETS
from karpenter_capi.core.kube.official import OfficialClient
from karpenter_capi.plugins.generic_capi.binding import (
    ANNOTATION_NODECLAIM,
    ANNOTATION_SCALABLE_RESOURCE,
)
from karpenter_capi.plugins.generic_capi.inventory import UnavailableOfferings
from karpenter_capi.sim.apiserver.http import HttpFront
from karpenter_capi.sim.capi import ANNOTATION_OUT_OF_CAPACITY
from tests.plugins.generic_capi.env import MEMBER, SHAPES, Env, names, new_env

MAX_SIZE = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size"
DISABLE_CREATE = "machinedeployment.clusters.x-k8s.io/disable-machine-create"


@pytest.mark.parametrize("shape", SHAPES)
def test_fifty_nodeclaims_at_once_make_fifty_replicas_and_fifty_bindings(
    shape: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = new_env(shape, monkeypatch=monkeypatch)
    env.deployment("md-a")
    claims = names("nc", 50)
    for name in claims:
        env.nodeclaim(name)

    env.launch_all(claims)

    assert env.replicas("md-a") == 50
    bindings = env.bindings()
    assert sorted(bindings) == claims
    assert all(len(machines) == 1 for machines in bindings.values())
    assert len({machines[0] for machines in bindings.values()}) == 50
    assert len(env.machines()) == 50
    for name in claims:
        assert env.provider_id(name) == f"sim://default/{bindings[name][0]}"
    # One bind per node; at most one scale write per node.
    assert env.machine_writes() == 50
    assert env.scale_writes() <= 50


def test_a_round_of_nodeclaims_raises_the_replicas_once_by_its_whole_shortfall(
    env: Env,
) -> None:
    env.deployment("md-a")
    claims = names("nc", 10)
    for name in claims:
        env.nodeclaim(name)

    for name in claims[:-1]:
        env.launch(name)
        # Another NodeClaim of the round has yet to choose: the scale-up is left to the last.
        assert env.replicas("md-a") == 0
    env.launch(claims[-1])

    assert env.replicas("md-a") == 10
    assert env.scale_writes() == 1
    env.launch_all(claims)
    assert sorted(env.bindings()) == claims
    assert env.scale_writes() == 1


def test_the_last_nodeclaim_of_a_round_raises_the_resources_the_others_chose(
    env: Env,
) -> None:
    env.deployment("md-a", instance_type="m5.large", price=0.1)
    env.deployment("md-b", instance_type="m5.xlarge", price=0.2)
    env.nodeclaim("nc-0", instance_types=("m5.large",))
    env.nodeclaim("nc-1", instance_types=("m5.xlarge",))

    env.launch("nc-0")
    assert env.replicas("md-a") == 0
    env.launch("nc-1")

    assert (env.replicas("md-a"), env.replicas("md-b")) == (1, 1)
    assert env.scale_writes() == 2


def test_a_nodeclaim_stuck_before_choosing_holds_back_no_scale_up_past_the_round_window(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = new_env(monkeypatch=monkeypatch, options={"round_window": "10s"})
    env.deployment("md-a")
    env.nodeclaim("nc-stuck")  # its launch never gets as far as create
    env.clock.advance(11)
    env.nodeclaim("nc-0")

    env.launch("nc-0")

    assert env.replicas("md-a") == 1


def test_the_cheapest_offering_is_chosen_and_ties_are_broken_the_same_way_every_time(
    env: Env,
) -> None:
    env.deployment("md-pricey", instance_type="m5.xlarge", price=0.2)
    env.deployment("md-b", price=0.1, zone="zone-b")
    env.deployment("md-a2", price=0.1, zone="zone-a")
    env.deployment("md-a1", price=0.1, zone="zone-a")
    env.nodeclaim("nc", instance_types=("m5.large", "m5.xlarge"))

    result = env.launch("nc")

    # Cheapest price; then zone; then the resource key.
    assert result.annotations[ANNOTATION_SCALABLE_RESOURCE] == "MachineDeployment/default/md-a1"
    assert (result.instance_type, result.zone, result.capacity_type) == (
        "m5.large",
        "zone-a",
        "on-demand",
    )
    assert result.provider_id is None
    assert [env.replicas(md) for md in ("md-a1", "md-a2", "md-b", "md-pricey")] == [1, 0, 0, 0]


def test_machines_that_existed_before_are_never_claimed(env: Env) -> None:
    env.deployment("md-a", replicas=3)
    env.driver.advance(30)
    baseline = sorted(m["metadata"]["name"] for m in env.machines())
    assert len(baseline) == 3
    env.clock.advance(5)
    claims = names("nc", 4)
    for name in claims:
        env.nodeclaim(name)

    env.launch_all(claims)

    assert env.replicas("md-a") == 7
    bound = sorted(m for machines in env.bindings().values() for m in machines)
    assert len(bound) == 4
    assert not set(bound) & set(baseline)
    for machine in env.machines():
        if machine["metadata"]["name"] in baseline:
            assert MEMBER not in (machine["metadata"].get("labels") or {})


def test_a_nodeclaim_keeps_its_resource_between_polls_without_rereading_the_inventory(
    env: Env,
) -> None:
    env.deployment("md-a")
    env.nodeclaim("nc")
    env.launch("nc")
    # A cheaper resource appears: the NodeClaim already asked md-a and stays there.
    env.deployment("md-cheaper", price=0.01)

    result = env.launch("nc")

    assert result.annotations[ANNOTATION_SCALABLE_RESOURCE] == "MachineDeployment/default/md-a"
    assert (env.replicas("md-a"), env.replicas("md-cheaper")) == (1, 0)


def test_a_full_resource_sends_the_nodeclaims_beyond_its_max_size_to_the_next_offering(
    env: Env,
) -> None:
    env.deployment("md-cheap", price=0.1, annotations={MAX_SIZE: "2"})
    env.deployment("md-backup", price=0.2, zone="zone-b")
    claims = names("nc", 3)
    for name in claims:
        env.nodeclaim(name)

    env.launch_all(claims)

    assert (env.replicas("md-cheap"), env.replicas("md-backup")) == (2, 1)
    intents = {
        n: env.claim(n)["metadata"]["annotations"][ANNOTATION_SCALABLE_RESOURCE] for n in claims
    }
    # The newest NodeClaim is the one that moved.
    assert intents == {
        "nc-000": "MachineDeployment/default/md-cheap",
        "nc-001": "MachineDeployment/default/md-cheap",
        "nc-002": "MachineDeployment/default/md-backup",
    }
    assert env.claim("nc-002")["metadata"]["labels"]["topology.kubernetes.io/zone"] == "zone-b"


def test_a_waiting_nodeclaim_beyond_a_lowered_max_size_moves_and_gives_its_replica_back(
    env: Env,
) -> None:
    env.deployment("md-cheap", price=0.1)
    env.deployment("md-backup", price=0.2, zone="zone-b")
    env.nodeclaim("nc-0")
    env.nodeclaim("nc-1")
    env.launch("nc-0")
    env.launch("nc-1")
    assert env.replicas("md-cheap") == 2
    env.api.patch(
        env.res(MACHINE_DEPLOYMENTS),
        "md-cheap",
        {"metadata": {"annotations": {MAX_SIZE: "1"}}},
        "default",
    )

    assert env.launch("nc-0").annotations[ANNOTATION_SCALABLE_RESOURCE].endswith("md-cheap")
    moved = env.launch("nc-1")

    assert moved.annotations[ANNOTATION_SCALABLE_RESOURCE].endswith("md-backup")
    assert (env.replicas("md-cheap"), env.replicas("md-backup")) == (1, 1)
    unavailable = UnavailableOfferings.shared(env.plugins.context("generic_capi"))
    assert "maximum size" in (unavailable.reason("MachineDeployment/default/md-cheap") or "")
    env.launch_all(["nc-0", "nc-1"])
    assert len(env.machines()) == 2


def test_no_resource_left_is_insufficient_capacity(env: Env) -> None:
    env.deployment("md-a", annotations={MAX_SIZE: "1"})
    env.nodeclaim("nc-0")
    env.nodeclaim("nc-1")
    env.launch("nc-0")  # leaves the scale-up to nc-1, the last of the round to choose

    with pytest.raises(InsufficientCapacityError) as raised:
        env.launch("nc-1")

    assert "md-a is at its maximum size (1 replicas)" in str(raised.value)
    # Closing the round, nc-1 still raised the replica nc-0 needs.
    assert env.replicas("md-a") == 1


def test_a_resource_that_makes_no_machine_in_time_gives_its_replica_back_and_is_left(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = new_env(monkeypatch=monkeypatch, options={"machine_timeout": "1m"})
    # A MachineSet whose controller will not create Machines (as an OnDelete rollout does).
    env.machine_set("ms-stuck", price=0.05, annotations={DISABLE_CREATE: "true"})
    env.deployment("md-ok", price=0.1, zone="zone-b")
    env.nodeclaim("nc")
    first = env.launch("nc")
    assert first.annotations[ANNOTATION_SCALABLE_RESOURCE] == "MachineSet/default/ms-stuck"
    assert env.replicas("ms-stuck", MACHINE_SETS) == 1
    env.driver.advance(30)
    assert env.launch("nc").annotations[ANNOTATION_SCALABLE_RESOURCE].endswith("ms-stuck")

    env.driver.advance(35)
    moved = env.launch("nc")

    assert moved.annotations[ANNOTATION_SCALABLE_RESOURCE] == "MachineDeployment/default/md-ok"
    assert (env.replicas("ms-stuck", MACHINE_SETS), env.replicas("md-ok")) == (0, 1)
    unavailable = UnavailableOfferings.shared(env.plugins.context("generic_capi"))
    assert "no Machine within 60s" in (unavailable.reason("MachineSet/default/ms-stuck") or "")
    env.launch_all(["nc"])
    assert env.bindings()["nc"][0].startswith("md-ok")


def test_a_machine_that_fails_reports_insufficient_capacity_and_marks_its_resource(
    env: Env,
) -> None:
    env.deployment("md-a", annotations={ANNOTATION_OUT_OF_CAPACITY: "true"})
    env.nodeclaim("nc")
    env.launch("nc")
    env.driver.advance(5)
    env.launch("nc")
    assert "nc" in env.bindings()

    env.driver.advance(10)
    with pytest.raises(InsufficientCapacityError, match="failed"):
        env.launch("nc")

    unavailable = UnavailableOfferings.shared(env.plugins.context("generic_capi"))
    assert unavailable.is_unavailable("MachineDeployment/default/md-a")


def test_a_bound_machine_is_named_on_the_machine_at_once_and_on_the_nodeclaim_at_launch(
    env: Env,
) -> None:
    env.deployment("md-a")
    env.nodeclaim("nc")
    env.launch("nc")
    env.driver.advance(5)

    bound = env.launch("nc")

    (machine,) = env.machines()
    assert machine["metadata"]["annotations"][ANNOTATION_NODECLAIM] == "nc"
    assert machine["metadata"]["labels"][MEMBER] == ""
    assert bound.provider_id is None
    assert "cluster.x-k8s.io/machine" not in bound.annotations
    env.driver.advance(10)
    launched = env.launch("nc")
    (machine,) = env.machines()
    assert launched.provider_id == machine["spec"]["providerID"]
    assert (
        launched.annotations["cluster.x-k8s.io/machine"] == f"default/{machine['metadata']['name']}"
    )


def test_launch_and_delete_through_the_official_client(monkeypatch: pytest.MonkeyPatch) -> None:
    env = new_env(monkeypatch=monkeypatch, delete_delay=1)
    env.deployment("md-a")
    claims = names("nc", 3)
    for name in claims:
        env.nodeclaim(name)
    with HttpFront(env.api, host="127.0.0.1", port=0) as front:
        client = OfficialClient.from_url(front.url)
        try:
            env.use_client(client)
            env.launch_all(claims)
            victim = env.bindings()["nc-001"][0]
            assert env.delete("nc-001") is True
            assert env.replicas("md-a") == 2
            env.driver.advance(10)
            # The emulation removed the Machine in process; the plugin's watch over HTTP shows
            # another writer's change a moment later (``mirror`` module docstring), and until
            # then the Machine still reads as deleting.
            gone = _raises_within(5.0, lambda: env.delete("nc-001"))
            assert isinstance(gone, InstanceNotFoundError)
            assert env.get(env.provider_id("nc-000")).nodeclaim_name == "nc-000"
        finally:
            client.close()
    assert victim not in {m["metadata"]["name"] for m in env.machines(live=False)}
    assert len(env.bindings()) == 2


def _raises_within(seconds: float, call: Callable[[], object]) -> Exception | None:
    """The exception ``call`` raises within ``seconds`` of wall time (retried meanwhile), or
    None when it never did: for what a watch on another thread shows a moment later."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            call()
        except Exception as exc:  # the caller asserts which one
            return exc
        if time.monotonic() > deadline:
            return None
        threading.Event().wait(0.02)


@pytest.mark.parametrize("shape", SHAPES)
def test_a_machine_pool_with_machine_pool_machines_launches_and_deletes_by_machine(
    shape: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = new_env(shape, monkeypatch=monkeypatch, delete_delay=1)
    env.machine_pool("mp-a")
    claims = names("nc", 3)
    for name in claims:
        env.nodeclaim(name)

    env.launch_all(claims)

    assert env.replicas("mp-a", MACHINE_POOLS) == 3
    bindings = env.bindings()
    assert sorted(bindings) == claims
    assert len({m[0] for m in bindings.values()}) == 3
    assert env.delete("nc-001") is True
    assert env.replicas("mp-a", MACHINE_POOLS) == 2
    env.driver.advance(10)
    with pytest.raises(InstanceNotFoundError):
        env.delete("nc-001")
    live = {m["metadata"]["name"] for m in env.machines()}
    assert live == {bindings["nc-000"][0], bindings["nc-002"][0]}
