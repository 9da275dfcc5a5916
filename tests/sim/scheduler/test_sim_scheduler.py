"""The simulated kube-scheduler places pods as kube-scheduler would, and says why when it can't."""

from __future__ import annotations

from collections import Counter

import pytest

from karpenter_capi.core.kube import NODES, PODS
from tests.sim.scheduler.harness import HOSTNAME, ZONE, Sim, new_sim

NO_SCHEDULE = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}


@pytest.fixture
def sim() -> Sim:
    return new_sim()


def test_binds_a_pending_pod_to_a_node_that_fits(sim: Sim) -> None:
    sim.node("small", cpu="1")
    sim.node("big", cpu="8")
    sim.pod("web", cpu="2")
    sim.settle()
    assert sim.node_of("web") == "big"
    condition = sim.scheduled("web")
    assert condition is not None
    assert condition["status"] == "True"


def test_prefers_the_least_allocated_node(sim: Sim) -> None:
    sim.node("b")
    sim.node("a")
    sim.pod("p1", cpu="1")
    sim.settle()
    first = sim.node_of("p1")
    assert first in ("a", "b")  # equal scores: the seeded tie-break (test_scoring.py)
    sim.pod("p2", cpu="1")
    sim.settle()
    assert sim.node_of("p2") == ({"a", "b"} - {first}).pop()  # now the emptier one


def test_insufficient_resources_leave_the_pod_unschedulable_with_kube_s_message(sim: Sim) -> None:
    sim.node("n1", cpu="1")
    sim.node("n2", cpu="1")
    sim.node("tainted", cpu="8", taints=[NO_SCHEDULE])
    sim.pod("huge", cpu="2")
    sim.settle()
    assert sim.node_of("huge") is None
    condition = sim.scheduled("huge")
    assert condition is not None
    assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")
    assert condition["message"] == (
        "0/3 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}, "
        "2 Insufficient cpu."
    )


def test_running_totals_within_one_cycle_do_not_overcommit(sim: Sim) -> None:
    sim.node("n1", cpu="2", pods="3")
    for i in range(5):
        sim.pod(f"p{i}", cpu="500m")
    sim.settle()
    placed = [i for i in range(5) if sim.node_of(f"p{i}")]
    assert placed == [0, 1, 2]  # creation (then name) order, and the pods limit
    condition = sim.scheduled("p3")
    assert condition is not None
    assert condition["message"] == "0/1 nodes are available: 1 Too many pods."


def test_extended_resources_and_memory_are_checked(sim: Sim) -> None:
    sim.node("plain", memory="1Gi")
    sim.node("gpu", memory="1Gi", extra={"nvidia.com/gpu": "1"})
    gpu = [{"name": "c", "image": "t", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]
    sim.pod("trainer-1", containers=gpu)
    sim.pod("trainer-2", containers=gpu)
    sim.pod("big", cpu=None, memory="1.5Gi")
    sim.settle()
    assert sim.node_of("trainer-1") == "gpu"
    assert sim.node_of("trainer-2") is None
    condition = sim.scheduled("trainer-2")
    assert condition is not None
    assert condition["message"] == "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
    condition = sim.scheduled("big")
    assert condition is not None
    assert condition["message"] == "0/2 nodes are available: 2 Insufficient memory."


def test_tolerated_taints_and_prefer_no_schedule(sim: Sim) -> None:
    sim.node("gpu", taints=[NO_SCHEDULE])
    sim.node("soft", cpu="1", taints=[{"key": "k", "effect": "PreferNoSchedule"}])
    sim.pod("plain", cpu="100m")
    sim.pod(
        "tolerant",
        cpu="2",
        tolerations=[{"key": "dedicated", "operator": "Equal", "value": "gpu"}],
    )
    sim.settle()
    assert sim.node_of("plain") == "soft"  # PreferNoSchedule does not filter; gpu does
    assert sim.node_of("tolerant") == "gpu"


def test_no_execute_taint_filters_and_exists_tolerates_everything(sim: Sim) -> None:
    sim.node("n", taints=[{"key": "a", "value": "b", "effect": "NoExecute"}])
    sim.pod("plain")
    sim.pod("any", tolerations=[{"operator": "Exists"}])
    sim.settle()
    assert sim.node_of("plain") is None
    assert sim.node_of("any") == "n"


def test_node_selector_and_required_node_affinity(sim: Sim) -> None:
    sim.node("a", labels={"tier": "web", "gen": "3"})
    sim.node("b", labels={"tier": "db", "gen": "5"})
    sim.pod("selected", nodeSelector={"tier": "db"})

    def affinity(*expressions: dict[str, object]) -> dict[str, object]:
        terms = [{"matchExpressions": list(expressions)}]
        required = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}
        return {"nodeAffinity": required}

    sim.pod("gt", affinity=affinity({"key": "gen", "operator": "Gt", "values": ["4"]}))
    sim.pod("notin", affinity=affinity({"key": "tier", "operator": "NotIn", "values": ["db"]}))
    sim.pod("missing", affinity=affinity({"key": "gpu", "operator": "Exists"}))
    sim.settle()
    assert sim.node_of("selected") == "b"
    assert sim.node_of("gt") == "b"
    assert sim.node_of("notin") == "a"
    condition = sim.scheduled("missing")
    assert condition is not None
    assert condition["message"] == (
        "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector."
    )


def test_cordoned_and_not_ready_nodes_are_skipped(sim: Sim) -> None:
    sim.node("cordoned", unschedulable=True)
    sim.node("booting", ready=False)
    sim.pod("web")
    sim.settle()
    condition = sim.scheduled("web")
    assert condition is not None
    assert condition["message"] == (
        "0/2 nodes are available: 1 node(s) were not ready, 1 node(s) were unschedulable."
    )
    # A node becoming Ready wakes the scheduler: the pending pod lands there.
    node = sim.api.get(NODES, "booting")
    node["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    sim.api.update(NODES, node, subresource="status")
    sim.settle()
    assert sim.node_of("web") == "booting"


def test_hostname_anti_affinity_spreads_one_per_node(sim: Sim) -> None:
    for name in ("n1", "n2", "n3"):
        sim.node(name)
    anti = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": HOSTNAME}
            ]
        }
    }
    for i in range(4):
        sim.pod(f"db-{i}", labels={"app": "db"}, affinity=anti)
    sim.settle()
    nodes = [sim.node_of(f"db-{i}") for i in range(4)]
    assert sorted(n for n in nodes if n) == ["n1", "n2", "n3"]
    assert nodes[3] is None
    condition = sim.scheduled("db-3")
    assert condition is not None
    assert condition["message"] == (
        "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules."
    )


def test_existing_pods_anti_affinity_repels_matching_newcomers(sim: Sim) -> None:
    sim.node("z1", zone="a")
    sim.node("z2", zone="b")
    loner = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"noisy": "yes"}}, "topologyKey": ZONE}
            ]
        }
    }
    sim.pod("loner", cpu="1", affinity=loner)
    sim.settle()
    assert sim.node_of("loner") == "z1"
    sim.pod("noisy", cpu="1", labels={"noisy": "yes"})
    sim.settle()
    assert sim.node_of("noisy") == "z2"  # less allocated z1 is in the loner's zone


def test_pod_affinity_co_locates_with_its_group(sim: Sim) -> None:
    sim.node("a", zone="a")
    sim.node("b", zone="b")
    sim.pod("cache", cpu="1", labels={"app": "cache"}, nodeSelector={ZONE: "b"})
    near = {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": ZONE}
            ]
        }
    }
    sim.pod("web", cpu="1", affinity=near)
    sim.settle()
    assert sim.node_of("web") == "b"


def test_zonal_topology_spread_balances_zones(sim: Sim) -> None:
    sim.node("a1", cpu="16", zone="a")
    sim.node("a2", cpu="16", zone="a")
    sim.node("b1", cpu="2", zone="b")
    spread = [
        {
            "maxSkew": 1,
            "topologyKey": ZONE,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "web"}},
        }
    ]
    for i in range(6):
        sim.pod(f"web-{i}", cpu="500m", labels={"app": "web"}, topologySpreadConstraints=spread)
    sim.settle()
    zones = Counter(sim.node_of(f"web-{i}")[:1] for i in range(6) if sim.node_of(f"web-{i}"))
    # b fits four 500m pods; a is the roomier zone but may lead by at most one.
    assert zones == Counter({"a": 3, "b": 3})


def test_spread_is_per_namespace_and_min_domains_counts_missing_zones(sim: Sim) -> None:
    sim.node("a1", zone="a")
    spread = [
        {
            "maxSkew": 1,
            "topologyKey": ZONE,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "web"}},
            "minDomains": 2,
        }
    ]
    for i in range(3):
        sim.pod(f"web-{i}", labels={"app": "web"}, topologySpreadConstraints=spread)
    sim.settle()
    # With one zone of the two required, the global minimum is 0: one pod per existing zone.
    assert [sim.node_of(f"web-{i}") for i in range(3)] == ["a1", None, None]
    condition = sim.scheduled("web-1")
    assert condition is not None
    assert condition["message"] == (
        "0/1 nodes are available: 1 node(s) didn't match pod topology spread constraints."
    )


def test_daemonset_pods_count_against_capacity(sim: Sim) -> None:
    sim.node("n1", cpu="2")
    sim.node("n2", cpu="2")
    for node in ("n1", "n2"):
        sim.pod(f"agent-{node}", cpu="1500m", node_name=node, owner_kind="DaemonSet")
    sim.pod("web", cpu="1")
    sim.settle()
    assert sim.node_of("web") is None
    condition = sim.scheduled("web")
    assert condition is not None
    assert condition["message"] == "0/2 nodes are available: 2 Insufficient cpu."


def test_daemonset_pod_pinned_by_match_fields_lands_on_its_node(sim: Sim) -> None:
    sim.node("n1")
    sim.node("n2")
    pinned = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}
                ]
            }
        }
    }
    sim.pod("agent", owner_kind="DaemonSet", affinity=pinned)
    sim.settle()
    assert sim.node_of("agent") == "n2"


def test_unschedulable_pods_are_not_rewritten_and_the_system_settles(sim: Sim) -> None:
    sim.node("n1", cpu="1")
    sim.pod("huge", cpu="4")
    sim.settle()
    before = sim.get("huge")["metadata"]["resourceVersion"]
    sim.pod("other", cpu="100m")
    sim.settle()
    assert sim.get("huge")["metadata"]["resourceVersion"] == before
    assert sim.node_of("other") == "n1"


def test_terminating_and_foreign_scheduler_pods_are_left_alone(sim: Sim) -> None:
    sim.node("n1")
    sim.pod("custom", schedulerName="my-scheduler")
    sim.settle()
    assert sim.node_of("custom") is None
    assert sim.scheduled("custom") is None


def test_thousands_of_pods_in_one_cycle_never_overcommit(sim: Sim) -> None:
    for i in range(50):
        sim.node(f"n{i:02}", cpu="4", zone="abc"[i % 3])
    for i in range(2500):
        sim.pod(f"p{i:04}", cpu="100m", labels={"app": f"a{i % 5}"})
    sim.settle()
    per_node = Counter(p["spec"].get("nodeName") for p in sim.api.list(PODS, "default").items)
    assert per_node.pop(None) == 500  # 50 nodes x 40 pods of 100m
    assert set(per_node.values()) == {40}
    assert sim.scheduler.cycles <= 3


def test_quantities_in_any_spelling_compare_exactly(sim: Sim) -> None:
    sim.node("n", cpu="1", memory="1.5Gi")
    sim.pod("a", cpu="0.3", memory="1536Mi")
    sim.pod("b", cpu="700m", memory=None)
    sim.pod("c", cpu="1e-3", memory=None)
    sim.settle()
    assert sim.node_of("a") == "n"  # 1.5Gi == 1536Mi exactly
    assert sim.node_of("b") == "n"  # 0.3 + 700m == 1 exactly
    assert sim.node_of("c") is None
