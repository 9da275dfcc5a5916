"""The plugin under the core's NodeClaim lifecycle and termination controllers and the CAPI
emulation, all on one stepped driver: what a real cluster would see, minus the threads."""

from __future__ import annotations

import pytest

from karpenter_capi.core.kube import NODECLAIMS
from tests.plugins.generic_capi.env import SHAPES, Env, names, new_env

LAUNCHED = "Launched"


def launched(env: Env, name: str) -> bool:
    for condition in (env.claim(name).get("status") or {}).get("conditions") or []:
        if condition["type"] == LAUNCHED:
            return bool(condition["status"] == "True")
    return False


@pytest.mark.parametrize("shape", SHAPES)
def test_fifty_nodeclaims_launch_through_the_lifecycle_controller(
    shape: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = new_env(shape, monkeypatch=monkeypatch)
    env.deployment("md-a")
    env.with_core()
    claims = names("nc", 50)
    for name in claims:
        env.nodeclaim(name)

    env.driver.advance(60)

    assert all(launched(env, name) for name in claims)
    assert env.replicas("md-a") == 50
    bindings = env.bindings()
    assert sorted(bindings) == claims
    assert len({machines[0] for machines in bindings.values()}) == 50
    for name in claims:
        assert env.provider_id(name) == f"sim://default/{bindings[name][0]}"
        annotations = env.claim(name)["metadata"]["annotations"]
        assert annotations["cluster.x-k8s.io/machine"] == f"default/{bindings[name][0]}"

    # Writes per launched node. The plugin: one bind, at most one scale.
    assert env.machine_writes() == 50
    assert env.scale_writes() <= 50
    plugin_writes = len(env.plugin_management.writes)
    assert plugin_writes <= 100
    # The core records the results: the intent (labels and annotations), then the launch
    # (the Machine annotation and the provider ID, with the Launched condition).
    nodeclaim_writes = env.core.count(plural=NODECLAIMS.plural)
    print(
        f"\n{shape}: per launched node: plugin {plugin_writes / 50:.2f} "
        f"({env.scale_writes() / 50:.2f} scale, {env.machine_writes() / 50:.2f} bind), "
        f"core NodeClaim writes {nodeclaim_writes / 50:.2f} ({dict(env.core.summary())})"
    )


@pytest.mark.parametrize("shape", SHAPES)
def test_a_burst_scales_once_and_every_nodeclaim_launches_when_its_machine_is_provisioned(
    shape: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 7 s is no multiple of the 5 s poll: a NodeClaim that only polled would learn its
    # provider ID up to 5 s late, the last ones of a round a whole poll after the first.
    env = new_env(shape, monkeypatch=monkeypatch, provision_delay=7)
    env.deployment("md-a")
    env.with_core()
    claims = names("nc", 10)
    for name in claims:
        env.nodeclaim(name)

    env.driver.run_until_quiet()
    assert env.replicas("md-a") == 10
    assert env.scale_writes() == 1  # one replica write for the round, by its whole shortfall
    # The new Machines woke the NodeClaims: all bound now, not at their next poll.
    assert sorted(env.bindings()) == claims
    env.driver.advance(6.9)
    assert not any(env.provider_id(name) for name in claims)
    env.driver.advance(0.1)

    # Each NodeClaim has its provider ID the moment its Machine got one: no poll in between.
    assert all(launched(env, name) for name in claims)
    assert env.scale_writes() == 1


def test_deleting_a_launched_nodeclaim_removes_exactly_its_machine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = new_env(monkeypatch=monkeypatch, delete_delay=5)
    env.deployment("md-a")
    env.with_core()
    claims = names("nc", 5)
    for name in claims:
        env.nodeclaim(name)
    env.driver.advance(60)
    bindings = env.bindings()
    victim = bindings["nc-002"][0]

    env.api.delete(NODECLAIMS, "nc-002")
    env.driver.advance(60)

    assert env.replicas("md-a") == 4
    survivors = sorted(m["metadata"]["name"] for m in env.machines(live=False))
    assert victim not in survivors
    assert survivors == sorted(bindings[n][0] for n in claims if n != "nc-002")
    assert [c["metadata"]["name"] for c in env.api.list(NODECLAIMS).items] == [
        n for n in claims if n != "nc-002"
    ]


def test_a_nodeclaim_deleted_while_waiting_withdraws_its_replica(
    env: Env,
) -> None:
    env.deployment("md-a")
    env.with_core()
    env.nodeclaim("nc-0")
    env.nodeclaim("nc-1")
    env.driver.run_until_quiet()
    assert env.replicas("md-a") == 2

    env.api.delete(NODECLAIMS, "nc-1")
    env.driver.advance(60)

    assert env.replicas("md-a") == 1
    assert list(env.bindings()) == ["nc-0"]
    assert len(env.machines()) == 1
    assert [c["metadata"]["name"] for c in env.api.list(NODECLAIMS).items] == ["nc-0"]


def test_nodeclaims_that_fill_a_resource_to_its_max_size_are_launched(
    env: Env,
) -> None:
    env.deployment(
        "md-a", annotations={"cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size": "2"}
    )
    env.with_core()
    claims = names("nc", 2)
    for name in claims:
        env.nodeclaim(name)

    env.driver.advance(60)

    assert all(launched(env, name) for name in claims)


@pytest.mark.parametrize(
    "labels",
    [{"karpenter.sh/nodepool": "ghost"}, {}],
    ids=["nodepool-missing", "no-nodepool-label"],
)
def test_a_hand_made_nodeclaim_the_core_cannot_launch_holds_back_no_scale_up(
    env: Env, labels: dict[str, str]
) -> None:
    """A NodeClaim whose NodePool does not exist never reaches ``create``: the NodeClaims
    launched next to it must not leave their scale-up to it as to the last of their round,
    or every launch in the cluster waits a whole poll (5 s) for as long as the hand-made
    NodeClaim is younger than the round window (issue 24: the workload bound 5 s late)."""
    env.deployment("md-a")
    env.with_core()
    env.nodeclaim("hand-made")
    env.api.patch(
        NODECLAIMS, "hand-made", {"metadata": {"labels": {"karpenter.sh/nodepool": None}}}
    )
    if labels:
        env.api.patch(NODECLAIMS, "hand-made", {"metadata": {"labels": labels}})
    env.driver.run_until_quiet()
    condition = next(
        c for c in env.claim("hand-made")["status"]["conditions"] if c["type"] == LAUNCHED
    )
    assert (condition["status"], condition["reason"]) == ("Unknown", "NodePoolNotFound")

    env.nodeclaim("nc-0")
    env.driver.run_until_quiet()

    # Raised at nc-0's first call, not at its next poll.
    assert env.replicas("md-a") == 1
    assert list(env.bindings()) == ["nc-0"]
    assert env.scale_writes() == 1
