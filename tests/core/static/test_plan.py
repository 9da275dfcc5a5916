"""The static NodePool arithmetic and choices, as upstream Karpenter's suites expect them.

``plan`` (counting, scale-up under ``limits.nodes``, the scale-down order) and the static drift
method of a disruption pass, on clusters built as plain data.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.api.nodepool import NodePool
from karpenter_capi.core.clock import format_timestamp
from karpenter_capi.core.provisioning.inventory import NodePoolInventory
from karpenter_capi.core.provisioning.nodepools import nodepool_option
from karpenter_capi.core.provisioning.state import ClusterSnapshot
from karpenter_capi.core.static.plan import (
    count_nodeclaims,
    plan_replicas,
    scale_down_choice,
    static_nodeclaim,
)
from tests.core.disruption.builders import NOW, Cluster


@dataclass
class StaticCluster(Cluster):
    """``Cluster`` whose NodePool ``default`` is static."""

    replicas: int = 3
    limit: int | None = None

    def pool(self, name: str = "default") -> dict[str, Any]:
        raw = super().pool(name)
        if name != "default":
            return raw
        raw["spec"]["replicas"] = self.replicas
        if self.limit is not None:
            raw["spec"]["limits"] = {"nodes": str(self.limit)}
        return raw

    def model(self) -> NodePool:
        return NodePool.model_validate(self.pool())

    def unresolved(self, name: str) -> None:
        """A NodeClaim created but not launched yet (no provider ID, no Node)."""
        self.nodeclaims.append(
            {
                "metadata": {
                    "name": name,
                    "labels": {wellknown.LABEL_NODEPOOL: "default"},
                    "creationTimestamp": format_timestamp(NOW - timedelta(seconds=5)),
                },
                "spec": {},
                "status": {},
            }
        )

    def delete(self, name: str) -> None:
        claim = next(c for c in self.nodeclaims if c["metadata"]["name"] == name)
        claim["metadata"]["deletionTimestamp"] = format_timestamp(NOW)

    def choose(self, count: int) -> list[str]:
        by_node: dict[str, list[Any]] = {}
        for pod in self.pods:
            by_node.setdefault(pod["spec"].get("nodeName", ""), []).append(pod)
        chosen = scale_down_choice(
            "default",
            count,
            nodeclaims=self.nodeclaims,
            nodes=self.nodes,
            pods_by_node=by_node,
            now=NOW,
        )
        return [c.name for c in chosen]


# -- counting and scale-up -------------------------------------------------------------------


def test_missing_replicas_are_created_up_to_limits_nodes() -> None:
    cluster = StaticCluster(replicas=10, limit=10)
    for i in range(3):
        cluster.node(f"n{i}", "small")
    plan = plan_replicas(cluster.model(), cluster.nodeclaims, cluster.nodes)
    assert (plan.create, plan.delete, plan.held) == (7, 0, "")

    capped = StaticCluster(replicas=3, limit=1)
    capped.node("n0", "small")
    plan = plan_replicas(capped.model(), capped.nodeclaims, capped.nodes)
    assert plan.create == 0
    assert plan.held.startswith("limits.nodes 1 reached")


def test_deleting_nodeclaims_count_against_the_limit_but_not_as_replicas() -> None:
    cluster = StaticCluster(replicas=2, limit=3)
    cluster.node("n0", "small")
    cluster.node("n1", "small")
    cluster.delete("n1")
    plan = plan_replicas(cluster.model(), cluster.nodeclaims, cluster.nodes)
    assert (plan.count.active, plan.count.deleting) == (1, 1)
    assert plan.create == 1
    cluster.limit = 2
    assert plan_replicas(cluster.model(), cluster.nodeclaims, cluster.nodes).create == 0


def test_nodes_being_replaced_count_as_present_for_scale_up_but_not_for_scale_down() -> None:
    cluster = StaticCluster(replicas=2)
    cluster.node("old", "small", tainted=True)  # a drift command holds it
    cluster.node("new", "small")
    count = count_nodeclaims("default", cluster.nodeclaims, cluster.nodes)
    assert (count.active, count.pending_disruption) == (1, 1)
    plan = plan_replicas(cluster.model(), cluster.nodeclaims, cluster.nodes)
    assert (plan.create, plan.delete) == (0, 0)
    cluster.replicas = 1
    plan = plan_replicas(cluster.model(), cluster.nodeclaims, cluster.nodes)
    assert (plan.create, plan.delete) == (0, 0)


def test_zero_replicas_deletes_every_active_nodeclaim_and_none_already_deleting() -> None:
    cluster = StaticCluster(replicas=1)
    for i in range(4):
        cluster.node(f"n{i}", "small")
    for i in range(3):
        cluster.delete(f"n{i}")
    assert plan_replicas(cluster.model(), cluster.nodeclaims, cluster.nodes).delete == 0
    cluster.replicas = 0
    assert plan_replicas(cluster.model(), cluster.nodeclaims, cluster.nodes).delete == 1
    assert cluster.choose(1) == ["n3"]


# -- which NodeClaims go -----------------------------------------------------------------------


def test_nodeclaims_not_launched_yet_go_first() -> None:
    cluster = StaticCluster(replicas=2)
    cluster.node("n0", "small")
    cluster.node("n1", "small")
    cluster.unresolved("u0")
    cluster.unresolved("u1")
    assert plan_replicas(cluster.model(), cluster.nodeclaims, cluster.nodes).delete == 2
    assert sorted(cluster.choose(2)) == ["u0", "u1"]


def _eight_nodes() -> StaticCluster:
    """Upstream's table: two nodes each of one kube-system pod (low), two pods (high), a
    do-not-disrupt pod (dnd) and a DaemonSet pod only (ds); indices 0..7 in that order."""
    cluster = StaticCluster(replicas=8)
    for i in range(2):
        for kind in ("low", "high", "dnd", "ds"):
            node = cluster.node(
                f"{i * 4 + ('low', 'high', 'dnd', 'ds').index(kind)}-{kind}", "small"
            )
            if kind == "low":
                cluster.pod(f"system-low-{i}", node)
            elif kind == "high":
                cluster.pod(f"system-high-{i}", node)
                cluster.pod(f"app-high-{i}", node)
            elif kind == "dnd":
                cluster.pod(
                    f"app-dnd-{i}", node, annotations={wellknown.ANNOTATION_DO_NOT_DISRUPT: "true"}
                )
            else:
                cluster.pod(f"dmn-{i}", node, daemonset=True)
    return cluster


@pytest.mark.parametrize(
    ("replicas", "kept"),
    [
        (6, {0, 1, 2, 4, 5, 6}),  # DaemonSet-only nodes go first
        (4, {1, 2, 5, 6}),  # then the cheapest to move
        (2, {2, 6}),  # then the dearer
        (0, set()),  # do-not-disrupt last
    ],
)
def test_scale_down_goes_in_disruption_cost_order(replicas: int, kept: set[int]) -> None:
    cluster = _eight_nodes()
    names = [c["metadata"]["name"] for c in cluster.nodeclaims]
    chosen = set(cluster.choose(8 - replicas))
    assert {i for i, n in enumerate(names) if n not in chosen} == kept


# -- the NodeClaim a static pool launches ------------------------------------------------------


def test_a_static_nodeclaim_has_the_template_requirements_and_the_cheapest_types_first() -> None:
    cluster = StaticCluster()
    raw = cluster.pool()
    inventory = NodePoolInventory(
        "default", "default", NodePool.model_validate(raw), raw, cluster.types
    )
    option = nodepool_option(inventory, ClusterSnapshot([], [], [], []))
    proposal = static_nodeclaim(option)
    assert not isinstance(proposal, str)
    assert [t.name for t in proposal.instance_types] == ["small", "medium", "large"]
    assert proposal.pods == []
    capacity = proposal.requirements.get(wellknown.LABEL_CAPACITY_TYPE)
    assert capacity is not None
    assert capacity.has("on-demand")
    assert not capacity.has("spot")
    assert proposal.cheapest()[1].price == 0.10


# -- static drift in a disruption pass ---------------------------------------------------------


def _drifted(
    replicas: int, nodes: int, *, limit: int | None = None, budget: str = "100%"
) -> StaticCluster:
    cluster = StaticCluster(replicas=replicas, limit=limit)
    cluster.disruption = {"consolidateAfter": "0s", "budgets": [{"nodes": budget}]}
    for i in range(nodes):
        cluster.node(f"n{i}", "medium", drifted=True)
    return cluster


def test_static_drift_replaces_one_for_one_within_the_budget() -> None:
    report = _drifted(5, 5, budget="2").plan()
    assert report.command is not None
    assert report.command.method == "static-drift"
    assert len(report.command.candidates) == 2
    assert len(report.command.replacements) == 2
    assert all(r.nodepool.name == "default" for r in report.command.replacements)


def test_static_drift_acquires_only_what_limits_nodes_leaves() -> None:
    assert _drifted(5, 5, limit=5).plan().command is None
    partial = _drifted(5, 5, limit=7).plan().command
    assert partial is not None
    assert len(partial.candidates) == 2
    some = _drifted(5, 2, limit=5).plan().command
    assert some is not None
    assert len(some.candidates) == 2


def test_static_drift_waits_for_a_scale_down_to_finish() -> None:
    report = _drifted(1, 2).plan()
    assert report.command is None
    assert "scaling down to 1 replicas first" in str(report.outcomes["static-drift"])


def test_static_nodes_are_never_consolidated_nor_dynamically_drifted() -> None:
    cluster = StaticCluster(replicas=2)
    cluster.node("a", "large")
    cluster.node("b", "large")  # both empty and consolidatable: a dynamic pool would lose them
    report = cluster.plan()
    assert report.command is None
    assert report.outcomes.get("emptiness") is None


def test_a_do_not_disrupt_node_is_not_replaced_for_drift() -> None:
    cluster = _drifted(2, 0)
    cluster.node(
        "n0", "medium", drifted=True, node_annotations={wellknown.ANNOTATION_DO_NOT_DISRUPT: "true"}
    )
    assert cluster.plan().command is None
