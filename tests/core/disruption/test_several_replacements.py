"""Consolidation beyond upstream: one node replaced by several cheaper ones (1->N), and several
by fewer or cheaper ones (N->M), under the same price, budget and validation rules.

The issue's case: 20 pods of 1.5 CPU scaled to 5 stay on one 16-CPU node ($0.768/h) while two
4-CPU nodes and one 2-CPU node ($0.480/h) hold them; upstream's rule (at most one replacement)
keeps the big node for good.
"""

from __future__ import annotations

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.disruption.methods import MULTI_NODE, SINGLE_NODE
from karpenter_capi.core.scheduling.solver_io import ProposedNodeClaim, compatible_offerings
from karpenter_capi.sim.scenario.schema import Catalog

from .builders import Cluster, instance_type
from .sim_world import SimWorld

ISSUE_TYPES = [
    instance_type("c2", 2, 8, 0.096),
    instance_type("c4", 4, 16, 0.192),
    instance_type("c16", 16, 64, 0.768),
]


def _issue_cluster(policy: str = "WhenEmptyOrUnderutilized") -> Cluster:
    cluster = Cluster(types=list(ISSUE_TYPES))
    cluster.disruption["consolidationPolicy"] = policy
    cluster.node("big", "c16")
    for i in range(5):
        cluster.pod(f"web-{i}", "big", cpu="1500m", memory="1Gi")
    return cluster


def _dearest_launch(replacement: ProposedNodeClaim) -> float:
    """The most the replacement's launch can cost, whatever offering it falls back to."""
    return max(
        o.price
        for it in replacement.instance_types
        for o in compatible_offerings(it, replacement.requirements)
    )


def test_one_node_is_replaced_by_several_cheaper_ones() -> None:
    report = _issue_cluster().plan()

    command = report.command
    assert command is not None
    assert command.method == SINGLE_NODE
    assert [c.name for c in command.candidates] == ["big"]
    assert sorted(r.cheapest()[0].name for r in command.replacements) == ["c2", "c4", "c4"]
    assert sorted(len(r.pods) for r in command.replacements) == [1, 2, 2]
    assert round(command.savings, 3) == 0.288
    assert command.describe().endswith("launching c4, c4, c2; saves 0.2880/h")


def test_several_replacements_cannot_end_dearer_whatever_each_launch_falls_back_to() -> None:
    # A dearer 4-CPU type is a fallback one replacement may take, but not so many that the new
    # nodes together reach the old node's price.
    cluster = _issue_cluster()
    cluster.types.append(instance_type("c4-old", 4, 16, 0.25))

    command = cluster.plan().command

    assert command is not None
    assert len(command.replacements) == 3
    assert sum(_dearest_launch(r) for r in command.replacements) < 0.768
    for replacement in command.replacements:
        names = {it.name for it in replacement.instance_types}
        allowed = replacement.requirements.get(wellknown.LABEL_INSTANCE_TYPE)
        assert allowed is not None
        assert set(allowed.values) == names  # the launch cannot leave the list
        assert "c16" not in names


def test_a_split_that_costs_no_less_keeps_the_node_and_says_why() -> None:
    cluster = _issue_cluster()
    cluster.types[2] = instance_type("c16", 16, 64, 0.45)  # cheaper than 2 x c4 + c2 now

    report = cluster.plan()

    assert report.command is None
    assert report.kept == {"big": "no replacement cheaper than 0.4500/h"}


def test_a_split_must_save_more_than_its_cheapest_new_node_costs() -> None:
    # Three nodes for $0.480/h instead of one at $0.500/h: $0.02/h for five restarted pods and
    # two more nodes, each with its own reserved room, that a later scale-up would buy back.
    cluster = _issue_cluster()
    cluster.types[2] = instance_type("c16", 16, 64, 0.50)

    report = cluster.plan()

    assert report.command is None
    assert report.kept == {
        "big": "3 new nodes would save 0.0200/h, no more than the cheapest of them costs (0.0960/h)"
    }


def test_a_balanced_nodepool_weighs_a_split_like_any_replacement() -> None:
    cluster = _issue_cluster("Balanced")

    report = cluster.plan()

    # A NodePool of one node: 37.5% saved for 100% of its pods restarted.
    assert report.command is None
    assert report.kept["big"].startswith(
        "replacing it with 3 cheaper nodes saves $0.2880/h, which does not outweigh"
    )


def _four_memory_nodes(cluster: Cluster) -> None:
    """Four 4-CPU memory-heavy nodes with one 2.5-CPU pod each ($1.04/h): no pod fits beside
    another, and no type holds all four, so upstream (at most one new node) merges three into a
    c8 and keeps the fourth ($0.56/h); a c8 and a c4 hold all four ($0.50/h)."""
    cluster.types = [
        instance_type("c4", 4, 8, 0.20),
        instance_type("m4", 4, 32, 0.26),
        instance_type("c8", 8, 16, 0.30),
    ]
    for name in ("a", "b", "c", "d"):
        cluster.node(name, "m4")
        cluster.pod(f"{name}-app-0", name, cpu="2500m")


def test_several_nodes_are_replaced_by_fewer_in_one_command(cluster: Cluster) -> None:
    _four_memory_nodes(cluster)

    command = cluster.plan().command

    assert command is not None
    assert command.method == MULTI_NODE
    assert sorted(c.name for c in command.candidates) == ["a", "b", "c", "d"]
    assert sorted(r.cheapest()[0].name for r in command.replacements) == ["c4", "c8"]
    assert round(command.savings, 2) == 0.54


def test_a_replacement_of_a_candidates_own_type_must_be_cheaper_than_it(cluster: Cluster) -> None:
    # A large with two pods and a small with one, across zones: replacing both by two smalls
    # saves what replacing the large alone saves, and restarts the small's pod for nothing.
    cluster.node("a", "large", zone="zone-a")
    cluster.node("b", "small", zone="zone-b")
    for index, node in enumerate(("a", "a", "b")):
        cluster.pod(f"web-{index}", node, cpu="500m", labels={"app": "web"}, spread_zones=True)

    report = cluster.plan()

    assert report.outcomes[MULTI_NODE] == "2 nodes: no replacement cheaper than 0.1000/h"
    command = report.command
    assert command is not None
    assert [c.name for c in command.candidates] == ["a"]
    assert [r.cheapest()[0].name for r in command.replacements] == ["small"]


def test_the_budget_counts_every_node_a_command_disrupts(cluster: Cluster) -> None:
    _four_memory_nodes(cluster)
    cluster.disruption["budgets"] = [{"nodes": "2"}]

    command = cluster.plan().command

    assert command is not None
    assert len(command.candidates) == 2
    assert [r.cheapest()[0].name for r in command.replacements] == ["c8"]


def test_on_the_simulated_cluster_the_big_node_goes_only_after_its_replacements_are_up() -> None:
    world = SimWorld.build(
        Catalog(cpus=[2, 4, 16], families={"c": 2}, zones=["zone-a"], capacity_types=["on-demand"]),
        disruption={
            "consolidationPolicy": "WhenEmptyOrUnderutilized",
            "consolidateAfter": "30s",
            "budgets": [{"nodes": "100%"}],
        },
    )
    world.deploy("web", 20, "1500m", "1Gi")
    world.advance(60)
    big = {n["metadata"]["name"] for n in world.nodes()}
    assert world.instance_types() == ["c-16x-amd64-linux"] * 2
    world.scale("web", 5)

    for _ in range(60):
        world.advance(5)
        # A node being deleted, or gone, has been drained (or is being): by then its
        # replacements must all be initialized.
        staying = {n["metadata"]["name"] for n in world.nodes()}
        if not big <= staying:
            new = [c for c in world.nodeclaims() if c["status"].get("nodeName") not in big]
            assert len(new) == 3
            assert all(
                any(
                    cond["type"] == "Initialized" and cond["status"] == "True"
                    for cond in c["status"].get("conditions", [])
                )
                for c in new
            )

    # $0.270/h instead of $0.864/h, every pod running, nothing stranded on the way.
    assert world.instance_types() == ["c-2x-amd64-linux", "c-4x-amd64-linux", "c-4x-amd64-linux"]
    assert len(world.running_pods()) == 5
    assert world.pending_pods() == []
    [launching] = {e["message"] for e in world.events("DisruptionLaunching")}
    assert launching.startswith("Disrupting NodeClaim: Underutilized/Replace, waiting for ")
    assert len(launching.split("waiting for ")[1].split(", ")) == 3


def test_a_spot_node_split_into_spot_nodes_follows_the_spot_to_spot_rules() -> None:
    cluster = Cluster(
        types=[
            instance_type("c2", 2, 8, 0.096, spot=0.03),
            instance_type("c4", 4, 16, 0.192, spot=0.06),
            instance_type("c16", 16, 64, 0.768, spot=0.24),
        ],
        requirements=[],
    )
    cluster.node("big", "c16", capacity_type=wellknown.CAPACITY_TYPE_SPOT)
    for i in range(5):
        cluster.pod(f"web-{i}", "big", cpu="1500m", memory="1Gi")

    # Each replacement is pinned to spot (a spot offering within its allowance exists), so the
    # feature gate decides, and then upstream's floor of 15 cheaper types, per replacement.
    assert cluster.plan().kept == {"big": "spot-to-spot consolidation is disabled"}
    assert cluster.plan(spot_to_spot=True).kept == {
        "big": "spot-to-spot needs 15 cheaper instance types, found 1"
    }
