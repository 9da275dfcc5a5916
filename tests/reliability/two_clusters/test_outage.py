"""The management cluster out of reach for a minute of virtual time.

The promise: launches fail with a condition on the ClusterAPINodeClass and the NodePool and a
Warning Event each; nothing is deleted because it cannot be seen (no NodeClaim garbage
collected for a Machine it cannot list, no Node drained, no Machine removed); provisioning
resumes when the management cluster answers again, and the invariants hold at the end.

In process, the management API server answers every request with 503, so Cluster API (which
runs there) stops too. Over HTTP its front is closed (connection refused) while the emulated
Cluster API keeps running on the server: a partition between the controller and the
management cluster, so Nodes of Machines the controller can no longer see keep appearing in
the workload cluster.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from karpenter_capi.core.kube import CLUSTER_API_NODE_CLASSES, EVENTS, NODEPOOLS, JsonObject
from karpenter_capi.core.kube.errors import ServiceUnavailable
from karpenter_capi.sim.apiserver.http import HttpFront
from karpenter_capi.sim.invariants import assert_invariants
from tests.reliability.two_clusters.env import (
    TwoClusters,
    condition,
    http_fronts,
    names,
    ready_nodeclaims,
)

OUTAGE_SECONDS = 60.0


def _seen(env: TwoClusters, *, machines: bool = True) -> dict[str, set[str]]:
    """Everything alive now, by kind (a name stays until its object is gone or deleting).
    ``machines=False`` while the management server itself answers nothing (nobody can delete
    a Machine then; whether one was is checked once it is back)."""

    def alive(objects: list[JsonObject]) -> set[str]:
        return {
            o["metadata"]["name"] for o in objects if not o["metadata"].get("deletionTimestamp")
        }

    seen = {"NodeClaim": alive(env.nodeclaims()), "Node": alive(env.nodes())}
    if machines:
        seen["Machine"] = alive(env.machines())
    return seen


def _ready(obj: JsonObject) -> JsonObject:
    found = condition(obj, "Ready")
    assert found is not None, f"{obj['kind']} {obj['metadata']['name']} has no Ready condition"
    return found


def _events(env: TwoClusters, kind: str, reason: str) -> list[JsonObject]:
    return [
        e
        for e in env.workload.list(EVENTS).items
        if e["involvedObject"]["kind"] == kind and e.get("reason") == reason
    ]


def _nodeclass(env: TwoClusters) -> JsonObject:
    (nodeclass,) = env.workload.list(CLUSTER_API_NODE_CLASSES).items
    return nodeclass


def _nodepool(env: TwoClusters) -> JsonObject:
    (nodepool,) = env.workload.list(NODEPOOLS).items
    return nodepool


def _settle_three_pods(env: TwoClusters) -> dict[str, set[str]]:
    env.deploy("web", 3)
    env.advance(60)
    assert env.pending() == []
    before = _seen(env)
    assert before["NodeClaim"]
    assert _ready(_nodeclass(env))["status"] == "True"
    return before


def _through_the_outage(
    env: TwoClusters,
    before: dict[str, set[str]],
    cut: Callable[[], None],
    heal: Callable[[], None],
    *,
    server_down: bool,
) -> None:
    cut()
    env.scale("web", 9)  # more pods than the existing nodes hold
    for _ in range(int(OUTAGE_SECONDS / 5)):
        env.advance(5)
        now = _seen(env, machines=not server_down)
        for kind, names_now in now.items():
            gone = before[kind] - names_now
            assert not gone, f"{kind}s deleted while the management cluster was out: {gone}"
    assert env.pending(), "the scale-up should be waiting for the management cluster"
    assert len(env.nodeclaims()) == len(before["NodeClaim"]), "a NodeClaim launched blind"

    ready = _ready(_nodeclass(env))
    assert (ready["status"], ready["reason"]) == ("False", "ManagementClusterUnreachable")
    assert "management cluster cannot be reached" in ready["message"]
    pool_ready = _ready(_nodepool(env))
    assert pool_ready["status"] == "False"
    assert (
        "management cluster cannot be reached"
        in condition(_nodepool(env), "NodeClassReady")["message"]
    )
    (unreachable,) = _events(env, "ClusterAPINodeClass", "ManagementClusterUnreachable")
    assert unreachable["type"] == "Warning"
    assert _events(env, "NodePool", "NodePoolNotReady")
    # The earlier nodes kept running their pods all along.
    assert set(ready_nodeclaims(env)) == before["NodeClaim"]

    heal()
    env.advance(60)
    assert env.pending() == []
    assert _ready(_nodeclass(env))["status"] == "True"
    assert _ready(_nodepool(env))["status"] == "True"
    assert _events(env, "NodePool", "NodePoolReady")
    after = _seen(env)
    for kind, names_before in before.items():
        assert names_before < after[kind], f"{kind}s before the outage are gone"
    assert ready_nodeclaims(env) == names(env.nodeclaims())
    assert len(after["Machine"]) == len(after["NodeClaim"]) == len(after["Node"])


def test_in_process_the_management_server_answering_503_for_a_minute(env: TwoClusters) -> None:
    env.start()
    before = _settle_three_pods(env)
    rules = []

    def cut() -> None:
        error = ServiceUnavailable("the management API server is unavailable")
        rules.append(env.management.faults.fail("*", "*", error, times=None))

    def heal() -> None:
        env.management.faults.remove(rules.pop())

    _through_the_outage(env, before, cut, heal, server_down=True)
    assert_invariants(env.workload, env.management, clock=env.clock, plugins=env.plugins)


def test_over_http_the_management_front_refusing_connections_for_a_minute(
    env: TwoClusters,
    tmp_path: Path,
) -> None:
    with http_fronts(env, tmp_path) as (_, management_front):
        before = _settle_three_pods(env)
        port = management_front.port
        restarted: list[HttpFront] = []

        def heal() -> None:
            restarted.append(HttpFront(env.management, port=port).start())

        try:
            _through_the_outage(env, before, management_front.close, heal, server_down=False)
        finally:
            for front in restarted:
                front.close()
    assert_invariants(env.workload, env.management, clock=env.clock, plugins=env.plugins)


def test_a_launch_in_flight_when_the_management_cluster_goes_waits_and_completes_once(
    env: TwoClusters,
) -> None:
    driver = env.start()
    env.deploy("web", 3)
    # Step until the NodeClaim exists: its launch has begun (a replica asked for), no Machine
    # is bound to it yet.
    while not env.nodeclaims():
        if not driver.step():
            driver.advance(0.25)
    (claim,) = env.nodeclaims()
    name = claim["metadata"]["name"]
    assert (condition(claim, "Launched") or {}).get("status") != "True"
    rule = env.management.faults.fail(
        "*", "*", ServiceUnavailable("the management API server is unavailable"), times=None
    )
    env.advance(OUTAGE_SECONDS)
    (claim,) = env.nodeclaims()
    assert claim["metadata"]["name"] == name
    assert not claim["metadata"].get("deletionTimestamp")
    assert (condition(claim, "Launched") or {}).get("status") != "True"
    env.management.faults.remove(rule)
    env.advance(60)
    assert env.pending() == []
    assert ready_nodeclaims(env) == [name]
    (machine,) = env.machines()  # launched once, not again after the outage
    assert env.replicas() == {machine["metadata"]["labels"]["cluster.x-k8s.io/deployment-name"]: 1}
    assert_invariants(env.workload, env.management, clock=env.clock, plugins=env.plugins)
