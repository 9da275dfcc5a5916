"""The stand-in picks among fitting nodes as kube-scheduler's default profile scores them."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from karpenter_capi.core.kube import PODS
from karpenter_capi.sim.scheduler import scoring
from tests.sim.scheduler.harness import HOSTNAME, ZONE, Sim, new_sim


@pytest.fixture
def sim() -> Sim:
    return new_sim()


def _placement(sim: Sim, prefix: str) -> Counter[str | None]:
    return Counter(
        p["spec"].get("nodeName")
        for p in sim.api.list(PODS, "default").items
        if p["metadata"]["name"].startswith(prefix)
    )


def test_least_allocated_spreads_pods_across_two_equal_nodes(sim: Sim) -> None:
    sim.node("a")
    sim.node("b")
    for i in range(6):
        sim.pod(f"web-{i}", cpu="500m", memory="1Gi")
    sim.settle()
    assert _placement(sim, "web-") == Counter({"a": 3, "b": 3})


def test_a_small_pod_placed_first_takes_the_roomier_node_meant_for_a_big_one(sim: Sim) -> None:
    """Stranding in miniature: the plan was the small pod on a-small, the big one on b-big."""
    sim.node("a-small", cpu="2", memory="8Gi")
    sim.node("b-big", cpu="4", memory="16Gi")
    sim.pod("small", cpu="1", memory="1Gi")
    sim.settle()
    assert sim.node_of("small") == "b-big"  # LeastAllocated: 84 there, 68 on a-small
    sim.pod("big", cpu="3500m", memory="1Gi")
    sim.settle()
    condition = sim.scheduled("big")
    assert condition is not None
    assert condition["message"] == "0/2 nodes are available: 2 Insufficient cpu."


def test_balanced_allocation_prefers_the_node_whose_fractions_stay_even(sim: Sim) -> None:
    sim.node("a-unbalanced", cpu="4", memory="16Gi")
    sim.node("b-balanced", cpu="4", memory="16Gi")
    sim.pod("cpu-heavy", cpu="2", memory="2Gi", node_name="a-unbalanced")
    sim.pod("memory-heavy", cpu="1", memory="6Gi", node_name="b-balanced")
    # Either node ends at LeastAllocated 50 with it; only on b do cpu and memory both reach 50%.
    sim.pod("web", cpu="1", memory="2Gi")
    sim.settle()
    assert sim.node_of("web") == "b-balanced"


def test_a_prefer_no_schedule_taint_is_avoided_while_another_node_fits(sim: Sim) -> None:
    sim.node("a-soft", taints=[{"key": "spot", "value": "yes", "effect": "PreferNoSchedule"}])
    sim.node("b-plain")
    for i in range(4):
        sim.pod(f"web-{i}", cpu="500m", memory="1Gi")
    sim.settle()
    tolerant = [{"key": "spot", "operator": "Exists", "effect": "PreferNoSchedule"}]
    for i in range(2):
        sim.pod(f"batch-{i}", cpu="500m", memory="1Gi", tolerations=tolerant)
    sim.settle()
    assert _placement(sim, "web-") == Counter({"b-plain": 4})
    # A pod tolerating the taint scores both nodes alike there, so it goes to the emptier one.
    assert _placement(sim, "batch-") == Counter({"a-soft": 2})


def test_preferred_node_affinity_outweighs_a_small_allocation_difference(sim: Sim) -> None:
    sim.node("a-plain")
    sim.node("b-fast", labels={"disk": "ssd"})
    sim.pod("other", cpu="1", memory="2Gi", node_name="b-fast")
    prefer = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 10,
                    "preference": {
                        "matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]
                    },
                }
            ]
        }
    }
    sim.pod("db", cpu="500m", memory="1Gi", affinity=prefer)
    sim.settle()
    assert sim.node_of("db") == "b-fast"


def test_schedule_anyway_spread_outweighs_a_roomier_zone(sim: Sim) -> None:
    sim.node("a1", cpu="64", memory="256Gi", zone="a")
    sim.node("b1", cpu="8", memory="32Gi", zone="b")
    soft = [
        {
            "maxSkew": 1,
            "topologyKey": ZONE,
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"app": "web"}},
        }
    ]
    for i in range(4):
        sim.pod(
            f"web-{i}",
            cpu="500m",
            memory="1Gi",
            labels={"app": "web"},
            topologySpreadConstraints=soft,
        )
    sim.settle()
    assert _placement(sim, "web-") == Counter({"a1": 2, "b1": 2})


def test_pods_of_one_owner_spread_by_default_across_hosts(sim: Sim) -> None:
    """The default profile's system spreading (hostname maxSkew 3) for a ReplicaSet's pods."""
    sim.node("a-big", cpu="32", memory="128Gi")
    sim.node("b-small", cpu="4", memory="16Gi")
    owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "rs-web"}
    for i in range(4):
        body = {
            "metadata": {
                "name": f"web-{i}",
                "ownerReferences": [{**owner, "controller": True}],
            },
            "spec": {
                "containers": [
                    {
                        "name": "c",
                        "image": "app",
                        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                    }
                ]
            },
        }
        sim.api.create(PODS, body, "default")
    for i in range(3):  # the same pods without an owner: LeastAllocated alone decides
        sim.pod(f"bare-{i}", cpu="100m", memory="128Mi")
    sim.settle()
    assert _placement(sim, "bare-") == Counter({"a-big": 3})
    assert _placement(sim, "web-") == Counter({"a-big": 2, "b-small": 2})


def _preferred(kind: str, weight: int, labels: dict[str, str]) -> dict[str, object]:
    """An affinity with one preferred hostname term of ``kind`` for pods with ``labels``."""
    term = {"labelSelector": {"matchLabels": labels}, "topologyKey": HOSTNAME}
    preferred = [{"weight": weight, "podAffinityTerm": term}]
    return {kind: {"preferredDuringSchedulingIgnoredDuringExecution": preferred}}


def test_preferred_pod_affinity_draws_a_pod_to_its_partner_s_node(sim: Sim) -> None:
    sim.node("a-empty")
    sim.node("b-cache")
    sim.pod("cache", cpu="2", memory="8Gi", labels={"app": "cache"}, node_name="b-cache")
    near = _preferred("podAffinity", 50, {"app": "cache"})
    sim.pod("web", cpu="500m", memory="1Gi", affinity=near)
    sim.settle()
    assert sim.node_of("web") == "b-cache"


def test_an_existing_pod_s_preferred_anti_affinity_repels_newcomers(sim: Sim) -> None:
    sim.node("a-loner")
    sim.node("b-busy")
    sim.pod("filler", cpu="1", memory="4Gi", node_name="b-busy")
    away = _preferred("podAntiAffinity", 100, {"noisy": "yes"})
    sim.pod("loner", cpu="100m", memory="128Mi", affinity=away, node_name="a-loner")
    sim.pod("noisy", cpu="500m", memory="1Gi", labels={"noisy": "yes"})
    sim.settle()
    assert sim.node_of("noisy") == "b-busy"  # the emptier node holds the loner


def test_ties_are_broken_by_the_seeded_generator_not_by_name() -> None:
    def choice(seed: int) -> str | None:
        sim = new_sim(seed)
        for name in ("a", "b", "c"):
            sim.node(name)
        sim.pod("web")
        sim.settle()
        return sim.node_of("web")

    choices = {seed: choice(seed) for seed in range(12)}
    assert {seed: choice(seed) for seed in range(12)} == choices  # repeatable per seed
    assert set(choices.values()) == {"a", "b", "c"}  # and not always the first by name


def test_higher_priority_pods_are_scheduled_first(sim: Sim) -> None:
    sim.node("only", cpu="2")
    sim.pod("early-low", cpu="2", priority=0)
    sim.pod("late-high", cpu="2", priority=1000)
    sim.settle()
    assert sim.node_of("late-high") == "only"
    assert sim.node_of("early-low") is None


def test_select_host_draws_uniformly_among_the_best() -> None:
    rng = random.Random(7)
    picks = Counter(scoring.select_host([90, 120, 50, 120, 120], rng) for _ in range(3000))
    assert set(picks) == {1, 3, 4}
    assert min(picks.values()) > 900  # about a third each


def test_normalizations_follow_kube() -> None:
    # TaintToleration: fewer untolerated PreferNoSchedule taints is better.
    assert scoring.normalize_to_max([0, 1, 2], reverse=True) == [100, 50, 0]
    assert scoring.normalize_to_max([0, 0], reverse=True) == [100, 100]
    assert scoring.normalize_to_max([0, 0]) == [0, 0]
    # PodTopologySpread: the fewest matching pods scores 100; ignored nodes 0.
    assert scoring.normalize_spread([2, 6, None]) == [100, 33, 0]
    assert scoring.normalize_min_max([-5, 0, 5]) == [0, 50, 100]
    assert scoring.least_allocated(3, 10, 4, 0) == 25  # a resource the node lacks is skipped
    assert scoring.least_allocated(5, 1, 4, 4) == 37  # over on cpu: 0 there, 75 for memory
    assert scoring.balanced_allocation(2, 8, 4, 16) == 100
    assert scoring.balanced_allocation(4, 0, 4, 16) == 50
