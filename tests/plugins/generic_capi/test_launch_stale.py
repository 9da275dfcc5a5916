"""Launch against a watch-fed copy that lags the API (issue 25): an optimistic-concurrency write
made from a stale copy answers 409 Conflict, and what launch does then decides whether the
NodeClaim gets the Machine it asked for or a second Node is bought elsewhere.

Each test holds the plugin's copy of the Machines behind the API (``LaggingApi``) or makes the
API answer 409 (``Conflicting``) and asserts what a user sees: the replicas of each
MachineDeployment and which Machine the NodeClaim is bound to.
"""

from __future__ import annotations

from typing import Any

import pytest

from karpenter_capi.core.errors import InstanceNotFoundError
from karpenter_capi.core.kube import MACHINES, Conflict, Resource
from karpenter_capi.plugins.generic_capi.binding import machine_facts
from karpenter_capi.plugins.generic_capi.mirror import Mirror
from tests.plugins.generic_capi.env import CountingClient, Env
from tests.plugins.generic_capi.lagging import LaggingApi
from tests.plugins.generic_capi.test_launch_mirror import INTENT, machine


def lagging(env: Env) -> LaggingApi:
    """Give the plugin a management client whose watches lag others' writes."""
    client = LaggingApi(env.api)
    env.plugin_management = CountingClient(client)
    env.restart()
    return client


class Conflicting(CountingClient):
    """Answers 409 to the next ``conflicts`` writes through the scale subresource."""

    def __init__(self, inner: Any, conflicts: int) -> None:
        super().__init__(inner)
        self.conflicts = conflicts

    def patch(self, resource: Resource, name: str, patch: Any, *a: Any, **kw: Any) -> Any:
        if kw.get("subresource") == "scale" and self.conflicts > 0:
            self.conflicts -= 1
            raise Conflict(f"{name} changed (injected)")
        return super().patch(resource, name, patch, *a, **kw)


def test_a_bind_refused_by_a_stale_copy_reads_the_machine_and_binds_it(env: Env) -> None:
    # nc-1 asked md-a for a replica; CAPI made m-1, then changed it (its provider ID, its
    # status) while the plugin's copy still showed the first version. The bind made from that
    # copy answers 409; retrying on the same copy failed five times and moved nc-1 to md-b,
    # whose replica was a second Node for one NodeClaim (md-a's stayed).
    env.deployment("md-a", price=0.1)
    env.deployment("md-b", price=0.2)
    api = lagging(env)
    env.nodeclaim("nc-1")
    env.launch("nc-1")
    assert env.replicas("md-a") == 1
    env.driver.advance(1)  # CAPI makes m-1 ...
    assert len(env.machines()) == 1
    api.deliver()  # ... and the plugin's copy shows it,
    env.driver.advance(15)  # but not what CAPI wrote on it since
    env.launch("nc-1")
    assert (env.replicas("md-a"), env.replicas("md-b")) == (1, 0)
    assert env.bindings() == {"nc-1": [env.machines()[0]["metadata"]["name"]]}


def test_the_copy_keeps_what_the_api_said_over_the_watch_s_older_events(env: Env) -> None:
    client = LaggingApi(env.api)
    selector = "cluster.x-k8s.io/deployment-name=md-a"
    mirror = Mirror(client, MACHINES, machine_facts, namespace="default", label_selector=selector)
    env.api.create(MACHINES, machine("m-1", "md-a"), "default")
    env.api.create(MACHINES, machine("m-2", "md-a"), "default")
    try:
        assert [m.name for m in mirror.read()] == ["m-1", "m-2"]
        for value in ("1", "2"):
            note = {"metadata": {"annotations": {"note": value}}}
            env.api.patch(MACHINES, "m-1", note, "default")
        assert mirror.read()[0].annotations.get("note") is None  # the watch lags
        fresh = mirror.saw(env.api.get(MACHINES, "m-1", "default"))
        assert fresh.annotations["note"] == "2"
        assert mirror.read()[0].annotations["note"] == "2"  # at once, no wait, no list
        client.deliver()  # the watch's events, the older one first: nothing goes back
        assert mirror.read()[0].annotations["note"] == "2"
        env.api.delete(MACHINES, "m-2", "default")
        mirror.gone("default/m-2")
        env.api.patch(MACHINES, "m-1", {"metadata": {"annotations": {"note": "3"}}}, "default")
        assert [m.name for m in mirror.read()] == ["m-1"]
        client.deliver()
        assert [(m.name, m.annotations["note"]) for m in mirror.read()] == [("m-1", "3")]
    finally:
        mirror.close()
    assert mirror.lists == 1


@pytest.mark.parametrize("conflicts", [5, 12])
def test_a_resource_that_keeps_changing_keeps_its_nodeclaim(env: Env, conflicts: int) -> None:
    # Conflicts say md-a changed, not that it cannot make the Node: moving nc-1 to md-b after
    # five of them bought md-b's Node while md-a might have its replica already.
    env.deployment("md-a", price=0.1)
    env.deployment("md-b", price=0.2)
    env.plugin_management = Conflicting(env.api, conflicts)
    env.restart()
    env.nodeclaim("nc-1")
    env.launch_all(["nc-1"])
    assert (env.replicas("md-a"), env.replicas("md-b")) == (1, 0)
    machine = env.machines()[0]["metadata"]["name"]
    assert env.bindings() == {"nc-1": [machine]}


def test_a_replica_that_could_not_be_given_back_keeps_its_nodeclaim(env: Env) -> None:
    # md-a made no Machine within machine_timeout, so nc-1 gives its replica back before it
    # looks elsewhere; when every give-back write answered 409, nc-1 still moved on: md-a's
    # replica stood, and md-b's made a second Node.
    env.deployment("md-a", price=0.1)
    env.deployment("md-b", price=0.2)
    client = Conflicting(env.api, 0)
    env.plugin_management = client
    env.restart()
    env.nodeclaim("nc-1")
    env.launch("nc-1")
    assert env.replicas("md-a") == 1
    env.clock.advance(3600)  # and CAPI made nothing meanwhile
    client.conflicts = 5
    env.launch("nc-1")
    assert (env.replicas("md-a"), env.replicas("md-b")) == (1, 0)
    assert env.claim("nc-1")["metadata"]["annotations"][INTENT] == "MachineDeployment/default/md-a"


def test_past_machine_timeout_a_machine_the_copy_misses_is_bound_not_given_back(
    env: Env,
) -> None:
    # CAPI made m-1 for nc-1 but the plugin's copy of md-a's Machines has not shown it by the
    # time machine_timeout is up. Giving the replica back then removed m-1 and bought md-b's
    # Node instead; the list made before giving back finds m-1, and nc-1 binds it.
    env.deployment("md-a", price=0.1)
    env.deployment("md-b", price=0.2)
    lagging(env)
    env.nodeclaim("nc-1")
    env.launch("nc-1")
    env.driver.advance(1)  # CAPI makes m-1; the copy does not show it
    [m1] = [m["metadata"]["name"] for m in env.machines()]
    env.clock.advance(3600)
    env.launch("nc-1")
    env.launch("nc-1")
    assert (env.replicas("md-a"), env.replicas("md-b")) == (1, 0)
    assert env.bindings() == {"nc-1": [m1]}


def test_a_deleted_nodeclaim_a_lagging_copy_still_shows_gets_no_replica(env: Env) -> None:
    # nc-1 was deleted (its replica given back), but the plugin's copy of the NodeClaims has
    # not shown that yet: counted waiting on md-a there, it made nc-2's scale-up ask for two
    # replicas, one of them a Node for a NodeClaim that was gone.
    env.deployment("md-a")
    client = LaggingApi(env.api)
    env.plugin_workload = CountingClient(client)
    env.restart()
    env.nodeclaim("nc-1")
    env.launch("nc-1")
    env.nodeclaim("nc-2")
    client.deliver()  # the copy shows nc-1 waiting on md-a, and nc-2
    with pytest.raises(InstanceNotFoundError):
        env.delete("nc-1")
    assert env.replicas("md-a") == 0
    env.launch("nc-2")
    assert env.replicas("md-a") == 1
