"""Launch and drift read the CAPI objects of a NodeClaim from the plugin's watch-fed mirrors
(issue 28): once the mirrors are warm, a NodeClaim's launch and its drift check ask the API for
no Machine, MachineDeployment or MachineSet, yet decide as live reads would.

The plugin's management client here is ``LaggingApi``: its watches cannot be drained, so the
mirrors follow them and wait only for this process's own writes (``mirror`` docstring), and
others' writes reach them only when the test calls ``deliver``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from karpenter_capi.core.kube import MACHINE_DEPLOYMENTS, MACHINE_SETS, Conflict, Resource
from karpenter_capi.plugins.generic_capi.drift import REASON_VERSION
from tests.plugins.generic_capi.env import CountingClient, Env, new_env
from tests.plugins.generic_capi.lagging import LaggingApi
from tests.plugins.generic_capi.test_drift import drifted

CAPI_OBJECTS = ("machines", "machinedeployments", "machinesets")


class Reads(CountingClient):
    """Also counts every ``GET`` by plural (but while ``quiet``), and every write answered
    409."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.gets: Counter[str] = Counter()
        self.conflicts = 0
        self.quiet = False

    def get(self, resource: Resource, name: str, *a: Any, **kw: Any) -> Any:
        if not self.quiet:
            self.gets[resource.plural] += 1
        return super().get(resource, name, *a, **kw)

    def patch(self, resource: Resource, name: str, patch: Any, *a: Any, **kw: Any) -> Any:
        try:
            return super().patch(resource, name, patch, *a, **kw)
        except Conflict:
            self.conflicts += 1
            raise

    def capi_gets(self) -> dict[str, int]:
        return {plural: self.gets[plural] for plural in CAPI_OBJECTS if self.gets[plural]}


def watched(env: Env) -> tuple[LaggingApi, Reads]:
    """Give the plugin a management client whose mirrors follow (lagging) watches."""
    api = LaggingApi(env.api)
    client = Reads(api)
    env.plugin_management = client
    env.restart()
    # The offerings the core asks for before each create come through a cache of their own
    # with a TTL (``instances``), not from a NodeClaim's reads: not counted here.
    offerings = env.plugins.instance_types

    def uncounted(*args: Any) -> Any:
        client.quiet = True
        try:
            return offerings(*args)
        finally:
            client.quiet = False

    env.plugins.instance_types = uncounted  # type: ignore[method-assign]
    return api, client


def settle(env: Env, api: LaggingApi, names: list[str], rounds: int = 10) -> None:
    """The core's polls until every NodeClaim has its Node's provider ID, CAPI working and the
    watches delivering between them."""
    for _ in range(rounds):
        pending = [n for n in names if not env.provider_id(n)]
        if not pending:
            return
        for name in pending:
            env.launch(name)
        env.driver.advance(5)
        api.deliver()
    raise AssertionError(f"not launched: {[n for n in names if not env.provider_id(n)]}")


@pytest.mark.parametrize("kind", ["MachineDeployment", "MachineSet"])
def test_a_launch_and_its_drift_check_read_no_capi_object_once_the_mirrors_are_warm(
    env: Env, kind: str
) -> None:
    if kind == "MachineDeployment":
        env.deployment("md-a")
    else:
        env.machine_set("ms-a")
    api, client = watched(env)
    env.nodeclaim("nc-000")
    settle(env, api, ["nc-000"])
    assert drifted(env, "nc-000") is None  # the mirrors are warm from here on

    client.gets.clear()
    env.nodeclaim("nc-001")
    settle(env, api, ["nc-001"])
    assert drifted(env, "nc-001") is None
    assert client.capi_gets() == {}
    if kind == "MachineDeployment":
        assert env.replicas("md-a") == 2
    else:
        assert env.replicas("ms-a", env.res(MACHINE_SETS)) == 2
    assert sorted(env.bindings()) == ["nc-000", "nc-001"]


def test_drift_sees_a_changed_template_once_its_event_arrives(env: Env) -> None:
    env.deployment("md-a")
    api, client = watched(env)
    env.nodeclaim("nc-000")
    settle(env, api, ["nc-000"])
    assert drifted(env, "nc-000") is None

    client.gets.clear()
    template = {"spec": {"template": {"spec": {"version": "v1.32.0"}}}}
    env.api.patch(env.res(MACHINE_DEPLOYMENTS), "md-a", template, "default")
    # A moment's lag only delays the verdict: drift is checked again at the next poll.
    assert drifted(env, "nc-000") is None
    api.deliver()
    assert drifted(env, "nc-000") == REASON_VERSION
    assert client.capi_gets() == {}


def _launch_behind_another_actor(env: Env, api: LaggingApi | None) -> None:
    """nc-1 asked md-a for a replica; then another actor (a controller process before a
    restart, say) raised md-a to 2 for nc-2, which its copy does not show; nc-2's launch must
    find that replica and ask for no third."""
    env.deployment("md-a")
    env.nodeclaim("nc-1")
    env.launch("nc-1")
    assert env.replicas("md-a") == 1
    env.nodeclaim("nc-2")
    scale = {"spec": {"replicas": 2}}
    env.api.patch(env.res(MACHINE_DEPLOYMENTS), "md-a", scale, "default", subresource="scale")
    env.launch("nc-2")
    assert env.replicas("md-a") == 2
    for _ in range(6):
        env.driver.advance(5)
        if api is not None:
            api.deliver()
        for name in ("nc-1", "nc-2"):
            if not env.provider_id(name):
                env.launch(name)


def test_a_launch_from_a_copy_behind_another_actor_s_scale_launches_as_a_live_read(
    monkeypatch: Any,
) -> None:
    live = new_env(monkeypatch=monkeypatch)
    live_reads = Reads(live.api)
    live.plugin_management = live_reads
    live.restart()
    _launch_behind_another_actor(live, None)

    env = new_env(monkeypatch=monkeypatch)
    api, client = watched(env)
    _launch_behind_another_actor(env, api)

    # The copy said 1 replica: the raise to 2 made from it answered 409, the retry read md-a
    # from the API (one GET) and found the replica nc-2 needs. Same outcome as live reads.
    assert client.conflicts == 1
    assert client.gets["machinedeployments"] == 1
    assert live_reads.conflicts == 0
    for run in (live, env):
        assert run.replicas("md-a") == 2
        assert len(run.machines()) == 2
        assert sorted(run.bindings()) == ["nc-1", "nc-2"]
        assert all(run.provider_id(name) for name in ("nc-1", "nc-2"))
    assert env.scale_writes() - client.conflicts == live.scale_writes() == 1
