"""Crash safety of the ``CAPZMachinePool`` launch mode: the controller dies between any two of
its writes, or right after one whose answer it never saw, and a new process takes over.

Seeded random runs, under the stepped driver: NodeClaims are launched (the core's record of a
result sometimes lost), deleted, pools swept, time advanced, and before any call the plugin's
client may be armed to crash at its k-th write (before or after the write reaches the API).
After settling without crashes, every live NodeClaim has exactly one Machine, no Machine is
bound to a NodeClaim that went, no pool asks for a VM nobody needs, and no pool is left
half-made.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from karpenter_capi.core.errors import InstanceNotFoundError, InsufficientCapacityError
from karpenter_capi.core.kube import NODECLAIMS
from karpenter_capi.core.kube.errors import NotFound
from karpenter_capi.core.plugin_host import NotHandledError, PluginCallError
from karpenter_capi.plugins.capz.pools import AZURE_MACHINE_POOLS, KUBEADM_CONFIGS, LABEL_LAUNCH
from tests.plugins.capz.pools_env import NAMESPACE, PoolsEnv, new_env

D4S = "Standard_D4s_v5"
E4S = "Standard_E4s_v5"
ZONES = ("eastus-1", "eastus-2", "eastus-3")


class Crash(Exception):
    """The process died."""


class CrashingClient:
    """Forwards to the API; once armed, its k-th write kills the process, before the write
    reaches the API or after (the answer lost)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.countdown: int | None = None
        self.after = False
        self.crashes = 0

    def arm(self, writes: int, *, after: bool) -> None:
        self.countdown, self.after = writes, after

    def disarm(self) -> None:
        self.countdown = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _write(self, verb: str, *args: Any, **kwargs: Any) -> Any:
        if self.countdown is not None:
            if self.countdown == 0:
                self.countdown = None
                self.crashes += 1
                if self.after:
                    getattr(self.inner, verb)(*args, **kwargs)
                raise Crash(verb)
            self.countdown -= 1
        return getattr(self.inner, verb)(*args, **kwargs)

    def create(self, *args: Any, **kwargs: Any) -> Any:
        return self._write("create", *args, **kwargs)

    def update(self, *args: Any, **kwargs: Any) -> Any:
        return self._write("update", *args, **kwargs)

    def patch(self, *args: Any, **kwargs: Any) -> Any:
        return self._write("patch", *args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> Any:
        return self._write("delete", *args, **kwargs)


def _live(env: PoolsEnv, names: list[str]) -> list[str]:
    present = {c["metadata"]["name"]: c for c in env.api.list(NODECLAIMS).items}
    return [
        n for n in names if n in present and not present[n]["metadata"].get("deletionTimestamp")
    ]


def _finish_delete(env: PoolsEnv, name: str) -> bool:
    """One termination pass: the hook, and the finalizer removed once the VM is gone."""
    try:
        env.delete(name)
    except (InstanceNotFoundError, NotHandledError):
        # Gone, or never recorded by any plugin: the core removes the finalizer.
        env.api.patch(NODECLAIMS, name, {"metadata": {"finalizers": None}})
        return True
    except NotFound:
        return True
    return False


def _deleting(env: PoolsEnv) -> list[str]:
    return [
        c["metadata"]["name"]
        for c in env.api.list(NODECLAIMS).items
        if c["metadata"].get("deletionTimestamp")
    ]


def _step(env: PoolsEnv, rng: random.Random, names: list[str]) -> None:
    roll = rng.random()
    live = _live(env, names)
    pending = [n for n in live if not env.provider_id(n)]
    if roll < 0.55 and pending:
        name = rng.choice(pending)
        try:
            env.launch(name, record=rng.random() < 0.7)
        except InsufficientCapacityError:
            env.api.delete(NODECLAIMS, name)  # the core gives up on it
    elif roll < 0.62 and len(live) > 3:
        _finish_delete(env, rng.choice(live))
    elif roll < 0.7:
        env.sweep()
    elif roll < 0.8 and _deleting(env):
        _finish_delete(env, rng.choice(_deleting(env)))
    else:
        env.driver.advance(rng.choice((1.0, 5.0, 10.0)))


def _settle(env: PoolsEnv, names: list[str]) -> None:
    for _ in range(40):
        for name in _live(env, names):
            if not env.provider_id(name):
                try:
                    env.launch(name)
                except InsufficientCapacityError:
                    env.api.delete(NODECLAIMS, name)
        for name in _deleting(env):
            _finish_delete(env, name)
        env.sweep()
        env.driver.advance(5)
        if all(env.provider_id(n) for n in _live(env, names)) and not _deleting(env):
            break
    env.sweep()
    env.driver.advance(30)


@pytest.mark.parametrize("seed", range(10))
def test_crashes_never_launch_twice_or_leak_a_replica(seed: int) -> None:
    rng = random.Random(seed)
    env = new_env(
        unavailable=frozenset({f"{D4S}@2"}),
        options={"machine_timeout": "40s", "pool_grace": "2m"},
    )
    client = CrashingClient(env.api)
    env.use_client(client)
    names = [f"c{i}" for i in range(6)]
    for name in names:
        env.nodeclaim(name, instance_types=(D4S, E4S), zones=ZONES)
    for _ in range(70):
        if rng.random() < 0.6:
            client.arm(rng.randrange(2), after=rng.random() < 0.5)
        try:
            _step(env, rng, names)
        except PluginCallError as exc:
            if not isinstance(exc.__cause__, Crash):
                raise
            env.restart()  # a new process
        client.disarm()
    _settle(env, names)
    assert client.crashes > 0

    live = _live(env, names)
    assert live, "every NodeClaim went; the run tests nothing"
    assert all(env.provider_id(n) for n in live)
    machines = env.machines()
    bound = env.bindings()
    for name in live:
        owned = [
            m for m in bound.get(name, []) if any(x["metadata"]["name"] == m for x in machines)
        ]
        assert len(owned) == 1, (name, bound.get(name))
    gone = set(names) - set(live)
    assert not [
        m for m in machines
        if (m["metadata"].get("annotations") or {}).get("karpenter.cluster.x-k8s.io/nodeclaim")
        in gone
    ]  # fmt: skip
    # No pool asks for a VM nobody needs, and every VM is a live NodeClaim's.
    replicas = sum(p["spec"]["replicas"] for p in env.pools().values())
    assert replicas == len(machines) == len(live)
    # Every pool is whole: its AzureMachinePool and KubeadmConfig exist.
    for name in env.pools():
        env.api.get(AZURE_MACHINE_POOLS, name, NAMESPACE)
        env.api.get(KUBEADM_CONFIGS, name, NAMESPACE)


def test_idempotent_retries_answer_from_the_work_done() -> None:
    env = new_env()
    env.nodeclaim("a", zones=("eastus-1",))
    first = env.launch("a", record=False)
    # The result was lost: the next call (a new process) finds the same pool, no second VM.
    env.restart()
    again = env.launch("a", record=False)
    assert (again.instance_type, again.zone) == (first.instance_type, first.zone)
    assert sum(p["spec"]["replicas"] for p in env.pools().values()) == 1
    env.launch_all(["a"])
    env.restart()
    assert env.launch("a").provider_id == env.provider_id("a")
    assert len(env.machines()) == 1
    labelled = env.api.list(
        AZURE_MACHINE_POOLS, NAMESPACE, label_selector=f"{LABEL_LAUNCH}=CAPZMachinePool"
    ).items
    assert len(labelled) == 1
