"""What a pass decides for ``consolidationPolicy: Balanced`` NodePools, next to the same cluster
under ``WhenEmptyOrUnderutilized``; small clusters whose scores can be checked by hand.

Instance types: small 2 CPU $0.10/h, trio 3 CPU $0.15/h, medium 4 CPU $0.20/h, large 8 CPU
$0.40/h. Trio is the "other family": replacing a medium by it saves only a quarter.
"""

from __future__ import annotations

from karpenter_capi.core.api.nodepool import NodePool
from karpenter_capi.core.disruption.balanced import PoolTotals
from karpenter_capi.core.disruption.methods import EMPTINESS, MULTI_NODE, SINGLE_NODE
from karpenter_capi.core.disruption.verdicts import KEPT, node_verdicts
from karpenter_capi.core.provisioning.state import ClusterSnapshot

from .builders import NOW, Cluster, instance_type

DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
PRECIOUS = {DELETION_COST: "2147483647"}  # the highest cost a pod can declare: 10 pods' worth
EXPENDABLE = {DELETION_COST: "-2147483647"}


def _cluster(policy: str) -> Cluster:
    cluster = Cluster(
        types=[
            instance_type("small", 2, 4, 0.10),
            instance_type("trio", 3, 6, 0.15),
            instance_type("medium", 4, 8, 0.20),
            instance_type("large", 8, 16, 0.40),
        ]
    )
    cluster.disruption["consolidationPolicy"] = policy
    return cluster


def _full_nodes(cluster: Cluster, count: int, nodepool: str = "default") -> None:
    """Medium nodes with 0.4 CPU free: nothing fits on them, nothing cheaper holds their pods."""
    for index in range(count):
        node = cluster.node(f"full-{nodepool}-{index}", "medium", nodepool=nodepool)
        cluster.pod(f"{node}-a", node, cpu="1800m")
        cluster.pod(f"{node}-b", node, cpu="1800m")


def _marginal(policy: str) -> Cluster:
    """Four mediums; one holds 2.4 CPU, which a trio holds too: $0.05/h saved for 2 pods."""
    cluster = _cluster(policy)
    _full_nodes(cluster, 3)
    cluster.node("x", "medium")
    cluster.pod("x-0", "x", cpu="1200m")
    cluster.pod("x-1", "x", cpu="1200m")
    return cluster


def test_a_small_saving_replace_is_made_by_when_empty_or_underutilized_not_by_balanced() -> None:
    eager = _marginal("WhenEmptyOrUnderutilized").plan().command
    assert eager is not None
    assert [c.name for c in eager.candidates] == ["x"]
    assert [r.cheapest()[0].name for r in eager.replacements] == ["trio"]
    assert eager.scores == {}

    report = _marginal("Balanced").plan()

    assert report.command is None
    # Pool: $0.80/h, move cost 12 (4 nodes + 8 pods). The move: $0.05/h (6.25%) for cost 3 (25%).
    assert report.totals == {"default": PoolTotals(price=0.8, move_cost=12.0)}
    assert report.kept["x"] == (
        "replacing it with one cheaper node saves $0.0500/h, which does not outweigh "
        "disruption cost 3.0 in NodePool default (consolidationPolicy Balanced): score 0.25 < "
        "threshold 0.50 (k: 2, savings 6.3%, disruption 25.0%)"
    )


def test_the_reason_is_what_the_unconsolidatable_event_and_explain_say() -> None:
    cluster = _marginal("Balanced")
    report = cluster.plan()
    snapshot = ClusterSnapshot(
        pods=cluster.pods, nodes=cluster.nodes, nodeclaims=cluster.nodeclaims, daemonsets=[]
    )
    pools = {"default": NodePool.model_validate(cluster.pool())}

    [verdict] = [v for v in node_verdicts(report, snapshot, pools, NOW) if v.nodeclaim == "x"]

    assert verdict.verdict == KEPT
    assert verdict.unconsolidatable
    assert "does not outweigh disruption cost 3.0" in verdict.reason


def test_balanced_still_takes_a_replace_that_saves_at_least_half() -> None:
    cluster = _cluster("Balanced")
    _full_nodes(cluster, 3)
    cluster.node("x", "medium")
    cluster.pod("x-0", "x", cpu="900m")
    cluster.pod("x-1", "x", cpu="900m")  # 1.8 CPU: a small holds them, half the price

    command = cluster.plan().command

    # $0.10/h is 12.5% of the pool for 25% of its move cost: exactly the 0.5 threshold.
    assert command is not None
    assert command.method == SINGLE_NODE
    assert [r.cheapest()[0].name for r in command.replacements] == ["small"]
    assert command.scores["default"].summary() == (
        "score 0.50 >= threshold 0.50 (k: 2, savings 12.5%, disruption 25.0%)"
    )
    assert "NodePool default (Balanced): score 0.50 >= threshold 0.50" in command.describe()


def _precious(policy: str) -> Cluster:
    """Three full mediums and one running 3 pods that declare the highest deletion cost."""
    cluster = _cluster(policy)
    _full_nodes(cluster, 3)
    cluster.node("models", "medium")
    for index in range(3):
        cluster.pod(f"model-{index}", "models", cpu="1", annotations=PRECIOUS)
    return cluster


def test_pods_expensive_to_restart_keep_their_node_without_a_simulation() -> None:
    eager = _precious("WhenEmptyOrUnderutilized").plan().command
    assert eager is not None
    assert [c.name for c in eager.candidates] == ["models"]  # to a trio, $0.05/h saved

    report = _precious("Balanced").plan()

    assert report.command is None
    # Move cost 31 of the pool's 40: even deleting it ($0.20/h, 25%) scores 0.32.
    assert report.totals["default"] == PoolTotals(price=0.8, move_cost=40.0)
    assert report.kept["models"].startswith(
        "even deleting it saves $0.2000/h, which does not outweigh disruption cost 31.0"
    )
    assert "score 0.32 < threshold 0.50" in report.kept["models"]
    assert "(0 simulated)" in str(report.outcomes[SINGLE_NODE])


def test_an_empty_node_of_a_balanced_pool_goes_like_any_empty_node() -> None:
    cluster = _cluster("Balanced")
    _full_nodes(cluster, 3)
    cluster.node("idle", "large")

    command = cluster.plan().command

    assert command is not None
    assert command.method == EMPTINESS
    assert [c.name for c in command.candidates] == ["idle"]


def test_a_node_whose_pods_all_declare_themselves_free_to_disrupt_counts_as_empty() -> None:
    for policy in ("WhenEmpty", "Balanced"):
        cluster = _cluster(policy)
        _full_nodes(cluster, 1)
        cluster.node("scratch", "medium")
        cluster.pod("scratch-0", "scratch", cpu="1", annotations=EXPENDABLE)

        command = cluster.plan().command

        assert command is not None, policy
        assert command.method == EMPTINESS
        assert [c.name for c in command.candidates] == ["scratch"]


def _two_pools(b_annotations: dict[str, str]) -> Cluster:
    """NodePool default (Balanced) and other (WhenEmptyOrUnderutilized), one half-used medium
    each (b, o) that a trio could hold together; default also has a node nothing may disrupt."""
    cluster = _cluster("Balanced")
    cluster.others = {
        "other": {**cluster.disruption, "consolidationPolicy": "WhenEmptyOrUnderutilized"}
    }
    held = cluster.node("held", "medium", node_annotations={"karpenter.sh/do-not-disrupt": "true"})
    cluster.pod("held-a", held, cpu="1800m")
    cluster.pod("held-b", held, cpu="1800m")
    cluster.node("b", "medium")
    cluster.pod("b-0", "b", cpu="1500m", annotations=b_annotations)
    cluster.node("o", "medium", nodepool="other")
    cluster.pod("o-0", "o", cpu="1500m")
    return cluster


def test_a_move_over_two_pools_is_scored_by_the_balanced_one_on_its_share() -> None:
    report = _two_pools({}).plan()

    command = report.command
    assert command is not None
    assert command.method == MULTI_NODE
    assert sorted(c.name for c in command.candidates) == ["b", "o"]
    assert [r.cheapest()[0].name for r in command.replacements] == ["trio"]
    # The held node counts in default's totals though it is no candidate: $0.40/h, cost 5.
    assert report.totals["default"] == PoolTotals(price=0.4, move_cost=5.0)
    # $0.25/h saved, half of it default's (b was half the price removed): 31.25% for 40%.
    assert list(command.scores) == ["default"]
    assert command.scores["default"].summary() == (
        "score 0.78 >= threshold 0.50 (k: 2, savings 31.2%, disruption 40.0%)"
    )


def test_the_balanced_pool_can_veto_a_move_the_other_pool_would_take() -> None:
    report = _two_pools(PRECIOUS).plan()

    # b's pod now costs 10: default's share of the merge scores 0.40, so no merge...
    assert "removing them saves $0.1250/h, which does not outweigh disruption cost 11.0" in (
        str(report.outcomes[MULTI_NODE])
    )
    # ...and other's node alone is deleted instead, its pod moving to b's free room.
    command = report.command
    assert command is not None
    assert command.method == SINGLE_NODE
    assert [c.name for c in command.candidates] == ["o"]
    assert command.decision == "delete"
    assert command.scores == {}


def test_a_balanced_pool_at_its_budget_is_kept_for_the_budget_not_scored() -> None:
    cluster = _marginal("Balanced")
    cluster.disruption["budgets"] = [{"nodes": "0", "reasons": ["Underutilized"]}]

    report = cluster.plan()

    assert report.command is None
    assert report.kept["x"] == (
        "the disruption budget of NodePool default allows no more Underutilized disruptions now"
    )


def test_consolidation_tries_the_node_worth_most_per_pod_moved_first() -> None:
    cluster = _cluster("WhenEmptyOrUnderutilized")
    cluster.disruption["budgets"] = [{"nodes": "1"}]
    _full_nodes(cluster, 2)
    # Either could go into the other's room; "crowded" moves 6 pods for the same $0.20/h as
    # "sparse" moves 1 for (and the full nodes 2, into the room of both).
    cluster.node("crowded", "medium")
    for index in range(6):
        cluster.pod(f"crowded-{index}", "crowded", cpu="250m")
    cluster.node("sparse", "medium")
    cluster.pod("sparse-0", "sparse", cpu="1500m")

    command = cluster.plan().command

    assert command is not None
    assert [c.name for c in command.candidates] == ["sparse"]
