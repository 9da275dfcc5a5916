"""A crash at any point of a launch, then a new process, converges: no replica counted twice,
no Machine bound twice, no Machine left free while a NodeClaim waits.

"Crash" here is a ``create`` call whose writes happened but whose result the lifecycle
controller never recorded on the NodeClaim (``record=False``); "restart" is a new plugin
context with empty caches (``Env.restart``).
"""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor

import pytest

from karpenter_capi.plugins.generic_capi.binding import ANNOTATION_NODECLAIM, LABEL_MEMBER
from tests.plugins.generic_capi.env import SHAPES, Env, names, new_env


def assert_converged(env: Env, claims: list[str], deployment: str = "md-a") -> None:
    assert env.replicas(deployment) == len(claims)
    bindings = env.bindings()
    assert sorted(bindings) == sorted(claims)
    assert all(len(machines) == 1 for machines in bindings.values()), bindings
    assert len(env.machines()) == len(claims)
    for machine in env.machines():
        annotations = machine["metadata"].get("annotations") or {}
        assert annotations.get(ANNOTATION_NODECLAIM) in claims
        assert LABEL_MEMBER in machine["metadata"]["labels"]
    for name in claims:
        assert env.provider_id(name) == f"sim://default/{bindings[name][0]}"


@pytest.mark.parametrize("shape", SHAPES)
def test_restart_after_scale_before_bind(shape: str, monkeypatch: pytest.MonkeyPatch) -> None:
    env = new_env(shape, monkeypatch=monkeypatch)
    env.deployment("md-a")
    claims = names("nc", 20)
    for name in claims:
        env.nodeclaim(name)
    for name in claims:
        env.launch(name)
    assert env.replicas("md-a") == 20
    env.driver.advance(5)  # CAPI makes the Machines; nobody binds them: the process died

    env.restart()
    env.launch_all(claims)

    assert_converged(env, claims)


@pytest.mark.parametrize("shape", SHAPES)
def test_restart_after_scale_before_the_nodeclaims_recorded_anything(
    shape: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = new_env(shape, monkeypatch=monkeypatch)
    env.deployment("md-a")
    claims = names("nc", 20)
    for name in claims:
        env.nodeclaim(name)
    for name in claims:
        env.launch(name, record=False)
    env.driver.advance(5)

    env.restart()
    env.launch_all(claims)

    assert_converged(env, claims)


@pytest.mark.parametrize("shape", SHAPES)
def test_restart_after_bind_before_the_nodeclaim_update(
    shape: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = new_env(shape, monkeypatch=monkeypatch)
    env.deployment("md-a")
    claims = names("nc", 20)
    for name in claims:
        env.nodeclaim(name)
    for name in claims:
        env.launch(name)
    env.driver.advance(15)  # Machines exist and have provider IDs
    for name in claims:
        assert env.launch(name, record=False).provider_id  # bound, result lost
    before = env.bindings()

    env.restart()
    env.launch_all(claims)

    assert env.bindings() == before
    assert_converged(env, claims)
    # Exactly one bind per Machine: the new process found the bindings, it did not redo them.
    assert env.machine_writes() == 20


def test_intents_the_core_has_not_written_yet_are_counted_once(
    env: Env,
) -> None:
    # The core writes a result on the NodeClaim after create returns. Calls made before that
    # (the other NodeClaims of the round, other workers) count the intents this process sent
    # and the API does not show yet: the round asks for every replica it needs, in one write.
    env.deployment("md-a")
    claims = names("nc", 20)
    for name in claims:
        env.nodeclaim(name)
    results = {name: env.launch(name, record=False) for name in claims}
    assert env.replicas("md-a") == 20
    assert env.scale_writes() == 1
    for name, result in results.items():
        env.record(name, result)

    env.launch_all(claims)

    assert_converged(env, claims)
    assert env.scale_writes() == 1


def test_a_new_process_that_never_saw_the_intents_under_counts_and_catches_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Unwritten intents live only in the process that sent them: a restarted one counts what
    # the API shows, too few replicas at first, never too many.
    env = new_env(monkeypatch=monkeypatch, options={"round_window": "0"})
    env.deployment("md-a")
    claims = names("nc", 20)
    for name in claims:
        env.nodeclaim(name)
    results = {}
    for name in claims:
        results[name] = env.launch(name, record=False)
        env.restart()
    for name, result in results.items():
        env.record(name, result)
    assert env.replicas("md-a") == 1

    env.launch_all(claims)

    assert_converged(env, claims)


@pytest.mark.parametrize("seed", range(6))
def test_random_crashes_and_restarts_converge(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    env = new_env(monkeypatch=monkeypatch, provision_delay=rng.choice([0, 3, 10]))
    env.deployment("md-a")
    claims = names("nc", 12)
    for name in claims:
        env.nodeclaim(name)
    for _ in range(8):
        for name in rng.sample(claims, k=rng.randint(1, len(claims))):
            if not env.provider_id(name):
                env.launch(name, record=rng.random() < 0.6)
            if rng.random() < 0.1:
                env.restart()
        env.driver.advance(rng.choice([0, 1, 5]))
        # Never more replicas than NodeClaims, never a Machine bound twice, at every step.
        assert env.replicas("md-a") <= len(claims)
        assert all(len(m) == 1 for m in env.bindings().values())

    env.restart()
    env.launch_all(claims)

    assert_converged(env, claims)


def test_concurrent_creates_on_threads_never_over_count(env: Env) -> None:
    env.deployment("md-a")
    claims = names("nc", 30)
    for name in claims:
        env.nodeclaim(name)

    with ThreadPoolExecutor(max_workers=8) as pool:
        for _ in range(20):
            pending = [n for n in claims if not env.provider_id(n)]
            if not pending:
                break
            list(pool.map(env.launch, pending))
            assert env.replicas("md-a") <= len(claims)
            assert all(len(m) == 1 for m in env.bindings().values())
            env.driver.advance(5)

    assert_converged(env, claims)


def test_concurrent_first_calls_of_a_round_always_raise_every_replica_it_needs(
    env: Env,
) -> None:
    # Each first call records its choice before it looks for NodeClaims still choosing, so the
    # last of the round to record always sees none and raises the replicas for all of them.
    env.deployment("md-a")
    claims = names("nc", 30)
    for name in claims:
        env.nodeclaim(name)

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(env.launch, claims))

    assert env.replicas("md-a") == 30
    env.launch_all(claims)
    assert_converged(env, claims)
