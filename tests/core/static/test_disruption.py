"""How the rest of the controller treats a static NodePool: capacity to use, never to shrink.

Pods land on its nodes and provisioning never launches for it; consolidation never picks its
nodes; drift replaces them one for one within the disruption budget and ``limits.nodes``
(upstream's static drift); an expired node is replaced by static provisioning.
"""

from __future__ import annotations

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.kube.resources import NODEPOOLS, NODES

from .world import STATIC, TEAM, claims_of, condition, nodes_of, static_world


def test_pods_land_on_static_nodes_and_no_round_launches_for_a_static_nodepool() -> None:
    world = static_world(2)
    # Two pods per node fit: all four run on the static nodes, nothing new is launched.
    world.deploy("web", 4, "800m", "512Mi", node_selector=TEAM)
    world.advance(60)
    assert len(world.running_pods()) == 4
    assert {p["spec"]["nodeName"] for p in world.running_pods()} == {
        n["metadata"]["name"] for n in nodes_of(world)
    }
    assert len(world.nodeclaims()) == 2
    # More than the static nodes hold: only the static pool's label fits them, and a static
    # pool is never launched for, so they stay pending (and the dynamic pool cannot help).
    world.scale("web", 8)
    world.advance(120)
    assert len(world.pending_pods()) == 4
    assert len(claims_of(world)) == 2
    assert claims_of(world, "catalog") == []
    reasons = {e["message"] for e in world.events("FailedScheduling")}
    assert any("catalog" in r for r in reasons)


def test_consolidation_never_picks_a_static_node_even_when_empty() -> None:
    world = static_world(
        2,
        catalog_disruption={
            "consolidationPolicy": "WhenEmptyOrUnderutilized",
            "consolidateAfter": "0s",
        },
    )
    world.advance(600)
    claims = claims_of(world)
    assert len(claims) == 2
    assert all(condition(c, "Consolidatable") is None for c in claims)
    assert not world.events("DisruptionTerminating")


def test_drift_replaces_static_nodes_one_for_one_within_limits_nodes() -> None:
    world = static_world(3, limit=4)
    before = {c["metadata"]["name"] for c in claims_of(world)}
    world.deploy("web", 3, "800m", "512Mi", node_selector=TEAM)
    world.advance(30)
    world.server.patch(
        NODEPOOLS, STATIC, {"spec": {"template": {"metadata": {"labels": {"release": "b"}}}}}
    )
    most = 0
    tainted_at_once = 0
    for _ in range(600):
        world.advance(1)
        most = max(most, len(claims_of(world, live=False)))
        tainted = [
            n
            for n in world.server.list(NODES).items
            if any(t["key"] == wellknown.TAINT_DISRUPTED_KEY for t in n["spec"].get("taints") or [])
        ]
        tainted_at_once = max(tainted_at_once, len(tainted))
        claims = claims_of(world)
        if len(claims) == 3 and all(c["metadata"]["labels"].get("release") == "b" for c in claims):
            break
    claims = claims_of(world)
    assert len(claims) == 3
    assert not before & {c["metadata"]["name"] for c in claims}
    assert all(c["metadata"]["labels"]["release"] == "b" for c in claims)
    assert most <= 4  # limits.nodes: one replacement at a time
    assert tainted_at_once <= 1
    world.advance(60)
    assert len(nodes_of(world)) == 3
    assert len(world.running_pods()) == 3
    launching = list(world.events("DisruptionLaunching"))
    assert len(launching) == 3
    assert all("Drifted/Replace" in e["message"] for e in launching)


def test_drift_waits_while_limits_nodes_leaves_no_room_for_a_replacement() -> None:
    world = static_world(2, limit=2)
    world.server.patch(
        NODEPOOLS, STATIC, {"spec": {"template": {"metadata": {"labels": {"release": "b"}}}}}
    )
    world.advance(300)
    claims = claims_of(world)
    assert len(claims) == 2
    assert all(condition(c, "Drifted") is not None for c in claims)
    assert not world.events("DisruptionLaunching")


def test_drift_respects_the_disruption_budget() -> None:
    world = static_world(4, budget="1")
    world.server.patch(
        NODEPOOLS, STATIC, {"spec": {"template": {"metadata": {"labels": {"release": "b"}}}}}
    )
    busy = 0
    for _ in range(400):
        world.advance(1)
        claims = claims_of(world, live=False)
        disrupting = [c for c in claims if condition(c, "DisruptionReason") is not None]
        busy = max(busy, len(disrupting))
    assert busy == 1
    claims = claims_of(world)
    assert len(claims) == 4
    assert all(c["metadata"]["labels"].get("release") == "b" for c in claims)


def test_an_expired_static_node_is_replaced() -> None:
    world = static_world(2, template={"expireAfter": "10m"})
    first = {c["metadata"]["name"] for c in claims_of(world)}
    world.advance(600)
    claims = claims_of(world)
    assert len(claims) == 2
    assert not first & {c["metadata"]["name"] for c in claims}
    world.advance(60)
    assert len(nodes_of(world)) == 2
