"""Why a pass keeps each node: the planner's per-candidate reasons and the verdicts built on them.

These are the words a user reads in ``Unconsolidatable`` Events and ``karpenter-capi explain``;
each must name the actual obstacle the pass met, not a summary of the method.
"""

from __future__ import annotations

from datetime import timedelta

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.api.nodepool import NodePool
from karpenter_capi.core.clock import format_timestamp
from karpenter_capi.core.disruption.methods import NO_ROOM, SINGLE_NODE
from karpenter_capi.core.disruption.planner import PassReport
from karpenter_capi.core.disruption.verdicts import (
    DISRUPT,
    KEPT,
    NOT_A_CANDIDATE,
    NOT_EVALUATED,
    NodeVerdict,
    node_verdicts,
)
from karpenter_capi.core.provisioning.state import ClusterSnapshot

from .builders import NOW, Cluster


def _verdicts(cluster: Cluster, report: PassReport) -> dict[str, NodeVerdict]:
    snapshot = ClusterSnapshot(
        pods=cluster.pods, nodes=cluster.nodes, nodeclaims=cluster.nodeclaims, daemonsets=[]
    )
    pools = {"default": NodePool.model_validate(cluster.pool())}
    return {v.nodeclaim: v for v in node_verdicts(report, snapshot, pools, NOW)}


def test_a_node_whose_pods_fit_nowhere_cheaper_is_kept_with_that_reason(cluster: Cluster) -> None:
    node = cluster.node("full", "large")
    cluster.pod("a-0", node, cpu="3", labels={"app": "a"})
    cluster.pod("a-1", node, cpu="3", labels={"app": "a"})

    report = cluster.plan()

    assert report.command is None
    # The method's summary stays a summary; the node's own reason is kept apart.
    assert "none of 1 candidates" in str(report.outcomes[SINGLE_NODE])
    assert report.kept == {"full": NO_ROOM}
    verdict = _verdicts(cluster, report)["full"]
    assert (verdict.verdict, verdict.reason) == (KEPT, NO_ROOM)
    assert verdict.unconsolidatable


def test_an_exhausted_budget_is_the_reason_for_empty_and_underused_nodes_alike(
    cluster: Cluster,
) -> None:
    cluster.disruption["budgets"] = [{"nodes": "0"}]
    cluster.node("idle", "small")
    cluster.node("big", "large")
    cluster.pod("app-0", "big", cpu="500m")

    report = cluster.plan()

    assert report.command is None
    assert report.kept == {
        "idle": "the disruption budget of NodePool default allows no more Empty disruptions now",
        "big": "the disruption budget of NodePool default allows no more Underutilized "
        "disruptions now",
    }


def test_when_empty_keeps_a_node_with_pods_and_says_so(cluster: Cluster) -> None:
    cluster.disruption["consolidationPolicy"] = "WhenEmpty"
    cluster.node("big", "large")
    cluster.pod("app-0", "big", cpu="500m")

    report = cluster.plan()

    assert report.command is None
    assert report.kept["big"] == (
        "NodePool default consolidates only empty nodes (consolidationPolicy WhenEmpty) "
        "and this one has 1 pod(s)"
    )


def test_a_node_in_the_command_is_never_also_kept(cluster: Cluster) -> None:
    cluster.node("big", "large")
    cluster.pod("app-0", "big", cpu="1")

    report = cluster.plan()

    assert report.command is not None
    assert "big" not in report.kept
    verdict = _verdicts(cluster, report)["big"]
    assert verdict.verdict == DISRUPT
    assert verdict.reason == report.command.describe()
    assert not verdict.unconsolidatable


def test_protected_nodes_are_not_candidates_and_say_what_protects_them(cluster: Cluster) -> None:
    cluster.node("pinned", "large", node_annotations={wellknown.ANNOTATION_DO_NOT_DISRUPT: "true"})
    cluster.node("guarded", "large")
    cluster.pod("db-0", "guarded", cpu="1", labels={"app": "db"})
    cluster.pdb("db", {"app": "db"}, allowed=0)

    report = cluster.plan()
    verdicts = _verdicts(cluster, report)

    assert verdicts["pinned"].verdict == NOT_A_CANDIDATE
    assert verdicts["pinned"].reason == 'Node has "karpenter.sh/do-not-disrupt: true"'
    assert verdicts["guarded"].reason == "PDB default/db allows no disruption now"
    # Both were quiet long enough: kept for a reason worth an Event.
    assert verdicts["pinned"].unconsolidatable
    assert verdicts["guarded"].unconsolidatable


def test_a_node_not_quiet_for_consolidate_after_says_how_long_is_left(cluster: Cluster) -> None:
    cluster.disruption["consolidateAfter"] = "10m"
    cluster.node("busy", "large", consolidatable=False)
    [claim] = cluster.nodeclaims
    claim["status"]["lastPodEventTime"] = format_timestamp(NOW - timedelta(minutes=4))

    report = cluster.plan()
    verdict = _verdicts(cluster, report)["busy"]

    assert verdict.verdict == KEPT
    assert verdict.reason == "consolidateAfter 10m not elapsed yet: 6m0s left"
    assert not verdict.unconsolidatable  # not consolidatable yet: no Event for it


def test_a_node_the_pass_did_not_get_to_has_no_reason_and_no_event(cluster: Cluster) -> None:
    cluster.node("idle", "small")
    cluster.node("big", "large")
    cluster.pod("app-0", "big", cpu="1")

    report = cluster.plan()  # emptiness finds a command: consolidation never runs

    assert report.command is not None
    assert [c.name for c in report.command.candidates] == ["idle"]
    verdict = _verdicts(cluster, report)["big"]
    assert verdict.verdict == NOT_EVALUATED
    assert verdict.reason == "the pass chose another command first"
    assert not verdict.unconsolidatable
