"""``Balanced`` against ``WhenEmptyOrUnderutilized`` on the simulated cluster, end to end.

The same workloads, the same scale-down, the two policies: what a user sees is which pods were
evicted (their Deployment recreates them under new names), what the cluster costs afterwards,
and the Events saying why. Catalog prices (kwok's: $0.025 per vCPU, $0.001 per GiB an hour):
c-2x (2 vCPU, 4 GiB) $0.054, s-2x (2 vCPU, 8 GiB) $0.058.
"""

from __future__ import annotations

from typing import Any

import pytest

from karpenter_capi.sim.scenario.runner import deployment
from karpenter_capi.sim.scenario.schema import Catalog, Workload

from .sim_world import SimWorld

CATALOG = Catalog(cpus=[2, 4, 8], zones=["zone-a"], capacity_types=["on-demand"])
PRICES = {"c-2x-amd64-linux": 0.054, "s-2x-amd64-linux": 0.058}


def _world(policy: str) -> SimWorld:
    return SimWorld.build(
        CATALOG,
        disruption={
            "consolidationPolicy": policy,
            "consolidateAfter": "30s",
            "budgets": [{"nodes": "100%"}],
        },
    )


def _pod_names(world: SimWorld) -> set[str]:
    return {p["metadata"]["name"] for p in world.running_pods()}


def _cost(world: SimWorld) -> float:
    return round(sum(PRICES[t] for t in world.instance_types()), 3)


def _messages(world: SimWorld, reason: str) -> list[str]:
    return [str(e["message"]) for e in world.events(reason)]


def _after_cache_leaves(policy: str) -> tuple[SimWorld, set[str]]:
    """Four web pods (1.8 vCPU, 3 GiB) share an s-2x with a 4.5 GiB cache, which then goes:
    the web pods would fit a c-2x, $0.004/h cheaper."""
    world = _world(policy)
    world.server.apply_manifests(
        [
            deployment(Workload(name="web", replicas=4, cpu="450m", memory="768Mi")),
            deployment(Workload(name="cache", replicas=1, cpu="200m", memory="4608Mi")),
        ]
    )
    world.driver.run_until_quiet()
    world.advance(60)
    assert world.instance_types() == ["s-2x-amd64-linux"]
    world.scale("cache", 0)
    web = _pod_names(world)
    world.advance(240)  # consolidateAfter, the 15 s validation, a replacement, the drain
    assert not world.pending_pods()
    return world, web


@pytest.mark.parametrize("policy", ["WhenEmptyOrUnderutilized", "Balanced"])
def test_a_small_saving_is_not_worth_evicting_every_pod_under_balanced(policy: str) -> None:
    world, web = _after_cache_leaves(policy)

    evicted = web - _pod_names(world)
    if policy == "WhenEmptyOrUnderutilized":
        # Every web pod restarted, for $0.004/h.
        assert world.instance_types() == ["c-2x-amd64-linux"]
        assert len(evicted) == 4
        assert _cost(world) == 0.054
    else:
        assert world.instance_types() == ["s-2x-amd64-linux"]
        assert evicted == set()
        assert _cost(world) == 0.058
        # The node and its NodeClaim say why: 6.9% of the pool's cost for all of its pods.
        kept = [m for m in _messages(world, "Unconsolidatable") if "does not outweigh" in m]
        assert kept
        assert kept[0] == (
            "replacing it with one cheaper node saves $0.0040/h, which does not outweigh "
            "disruption cost 5.0 in NodePool catalog (consolidationPolicy Balanced): score 0.07 "
            "< threshold 0.50 (k: 2, savings 6.9%, disruption 100.0%)"
        )


def _after_scale_down(policy: str) -> tuple[SimWorld, set[str]]:
    """Six web pods (0.5 vCPU, 1.5 GiB) on an s-2x (four) and a c-2x (two), scaled to four:
    one pod left on the c-2x, room for it on the s-2x."""
    world = _world(policy)
    world.deploy("web", 6, "500m", "1536Mi")
    world.advance(60)
    assert world.instance_types() == ["c-2x-amd64-linux", "s-2x-amd64-linux"]
    world.scale("web", 4)
    web = _pod_names(world)
    world.advance(300)
    assert not world.pending_pods()
    return world, web


def _by_node(world: SimWorld) -> dict[str, Any]:
    return {p["metadata"]["name"]: p["spec"]["nodeName"] for p in world.running_pods()}


@pytest.mark.parametrize("policy", ["WhenEmptyOrUnderutilized", "Balanced"])
def test_balanced_reaches_the_same_cost_moving_one_pod_instead_of_four(policy: str) -> None:
    world, web = _after_scale_down(policy)

    # Both end on one s-2x: $0.054/h saved, 48% of what the two nodes cost.
    assert world.instance_types() == ["s-2x-amd64-linux"]
    assert _cost(world) == 0.058
    evicted = web - _pod_names(world)
    if policy == "WhenEmptyOrUnderutilized":
        # The multi-node merge of both nodes into a new s-2x: all four pods restart.
        assert len(evicted) == 4
        assert _messages(world, "ConsolidationApproved") == []
    else:
        # The merge would disrupt every pod of the pool (score 0.48), so the c-2x alone is
        # deleted and its one pod moves into the s-2x's room (2 of the pool's 6: score 1.45).
        assert len(evicted) == 1
        assert len(set(_by_node(world).values())) == 1
        approved = _messages(world, "ConsolidationApproved")
        assert approved
        assert set(approved) == {
            "score 1.45 >= threshold 0.50 (k: 2, savings 48.2%, disruption 33.3%)"
        }


def test_a_multi_node_move_tells_its_score_on_the_nodepool() -> None:
    world = _world("Balanced")
    world.deploy("web", 12, "500m", "1Gi")
    world.advance(60)
    assert world.instance_types() == ["s-2x-amd64-linux", "s-4x-amd64-linux"]
    world.scale("web", 4)
    world.advance(400)

    # Both nodes ($0.174/h) merge into one s-2x: two thirds saved, every pod of the pool moved.
    assert world.instance_types() == ["s-2x-amd64-linux"]
    assert not world.pending_pods()
    [event] = world.events("ConsolidationApproved")
    assert event["involvedObject"]["kind"] == "NodePool"
    assert event["involvedObject"]["name"] == "catalog"
    assert event["message"] == (
        "score 0.67 >= threshold 0.50 (k: 2, savings 66.7%, disruption 100.0%)"
    )
