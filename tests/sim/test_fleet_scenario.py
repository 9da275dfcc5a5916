"""The ``fleet`` scenario: many workload clusters, one fleet-mode controller, one outage.

The shipped scenario has 24 clusters and takes minutes; these tests run a smaller copy of it
(one or two clusters of each shape, the outage on ``shop-2`` kept) and check what a fleet's
operator would: every cluster's pods bound, the cut-off cluster's pods bound once it is back
and none stranded, the other clusters served while it was away, and the same figures twice.
The full scenario runs in ``test_shipped_scenarios`` (slow).
"""

from __future__ import annotations

import functools
import io
import json
from pathlib import Path

import pytest

from karpenter_capi.cli.entry import main
from karpenter_capi.core.api import wellknown
from karpenter_capi.core.kube.resources import EVENTS, MACHINE_POOLS, NODECLAIMS, NODES
from karpenter_capi.sim.scenario.fleet import FleetWorld, run_fleet
from karpenter_capi.sim.scenario.fleet_result import FleetResult
from karpenter_capi.sim.scenario.schema import (
    Scenario,
    ScenarioError,
    load_scenario,
    parse_scenario,
)

UNTIL = 240.0  # the outage ends at 3m; a minute after it is enough to settle


def _small() -> Scenario:
    scenario = load_scenario("fleet")
    assert scenario.fleet is not None
    groups = [
        group.model_copy(update={"count": 2 if group.name == "shop" else 1})
        for group in scenario.fleet.groups
    ]
    return scenario.model_copy(
        update={"fleet": scenario.fleet.model_copy(update={"groups": groups})}
    )


@functools.cache
def _run() -> tuple[FleetResult, FleetWorld]:
    worlds: list[FleetWorld] = []
    result = run_fleet(_small(), until=UNTIL, on_world=worlds.append)
    return result, worlds[0]


def test_every_cluster_of_the_fleet_gets_its_pods_bound() -> None:
    result, _ = _run()
    assert [c.name for c in result.clusters] == [
        "shop-1",
        "shop-2",
        "batch",
        "pool",
        "legacy",
        "data",
        "edge",
    ]
    assert result.all_errors() == []
    for cluster in result.clusters:
        assert cluster.pods_bound > 0, cluster
        assert cluster.pods_pending == cluster.pods_stranded == 0, cluster
        assert cluster.nodes > 0, cluster
    assert result.pods_pending == 0
    assert result.cost_per_hour > 0
    text = result.summary()
    assert "fleet" in text
    assert "7 clusters" in text
    assert "shop-2" in text


def test_the_unreachable_clusters_pods_are_bound_after_the_outage_the_others_during_it() -> None:
    result, world = _run()
    [outage] = result.outages
    assert (outage.cluster, outage.at, outage.until) == ("shop-2", 60.0, 180.0)
    # While shop-2 was away every other cluster was served: shop-1's cart pods (scaled up at
    # 2m) and edge's (deployed at 2m) were bound before the outage ended.
    assert outage.others_pending == 0
    shop_1 = world.clusters["https://shop-1.fleet.sim"].observer.samples
    assert [s.pods_bound for s in shop_1 if s.at == outage.until - 1] == [7]
    # shop-2's cart pods (scaled up at 2m05s, during the outage) were bound only after it.
    shop_2_samples = world.clusters["https://shop-2.fleet.sim"].observer.samples
    assert [s.pods_bound for s in shop_2_samples if s.at == outage.until - 1] == [4]
    assert min(s.at for s in shop_2_samples if s.pods_bound == 7) > outage.until
    shop_2 = result.cluster("shop-2")
    assert shop_2.refused > 0  # the controller did try, and was refused
    assert shop_2.pods_bound == 7
    assert shop_2.pods_pending == shop_2.pods_stranded == 0
    assert shop_2.unreachable_seconds == 120


def test_the_clusters_have_the_shapes_the_scenario_gives_them() -> None:
    _, world = _run()
    servers = {c.name: c.server for c in world.clusters.values()}
    # A spot and on-demand catalog: the cheaper spot capacity.
    batch_claims = servers["batch"].list(NODECLAIMS).items
    assert batch_claims
    assert {c["metadata"]["labels"][wellknown.LABEL_CAPACITY_TYPE] for c in batch_claims} == {
        "spot"
    }
    # MachinePools, scaled in the management cluster, in the Cluster's namespace.
    pools = world.management.list(MACHINE_POOLS, "pool").items
    assert (
        sum(int(p["spec"].get("replicas") or 0) for p in pools)
        == len(servers["pool"].list(NODECLAIMS).items)
        > 0
    )
    # Existing nodes Karpenter did not launch, used before new capacity.
    nodes = servers["legacy"].list(NODES).items
    unmanaged = [n for n in nodes if wellknown.LABEL_NODEPOOL not in n["metadata"]["labels"]]
    assert len(unmanaged) == 2
    assert len(nodes) > len(unmanaged)


def _events(world: FleetWorld) -> list[tuple[str, str, str, str, int]]:
    """Every Event of the run, in the management cluster and each workload cluster."""
    servers = [("management", world.management)] + [
        (c.name, c.server) for c in world.clusters.values()
    ]
    return sorted(
        (where, e["involvedObject"]["name"], e["reason"], e["message"], e["count"])
        for where, server in servers
        for e in server.list(EVENTS).items
    )


def test_a_fleet_run_is_deterministic_and_polling_every_cluster_changes_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run skips the watches of clusters without news (``FleetWorld.stepped``); one that
    polls every cluster at every pass, as a fleet without a change feed does, ends alike."""
    first, world = _run()
    monkeypatch.setattr(FleetWorld, "stepped", lambda self: self.fleet.stepped())
    worlds: list[FleetWorld] = []
    again = run_fleet(_small(), until=UNTIL, on_world=worlds.append)
    assert again.to_json() == first.to_json()
    assert _events(worlds[0]) == _events(world)


def test_a_quiet_clusters_api_server_is_not_polled_while_the_others_work() -> None:
    """``edge`` has nothing to run until 2m; meanwhile the other clusters launch nodes (and
    shop-2 goes away), and not one request reaches edge's API server: its watches wait for
    news rather than being polled at every other cluster's requeue."""
    world = FleetWorld(_small())
    driver = world.stepped()
    driver.advance(60)
    edge = world.cluster("edge").server
    before = edge.requests.snapshot()
    driver.advance(30)
    assert edge.requests.since(before) == {}


def test_simulate_runs_a_fleet_scenario_file_and_prints_json(tmp_path: Path) -> None:
    scenario = {
        "name": "two-clusters",
        "description": "two workload clusters, one controller",
        "infrastructure": {"catalog": {"cpus": [2], "families": {"c": 2}, "zones": ["z"]}},
        "fleet": {
            "groups": [
                {
                    "name": "team",
                    "count": 2,
                    "workloads": [{"name": "web", "replicas": 2, "cpu": "500m", "memory": "1Gi"}],
                }
            ]
        },
    }
    path = tmp_path / "two.yaml"
    path.write_text(json.dumps(scenario))
    out = io.StringIO()
    assert main(["simulate", str(path), "--until", "30s", "--json"], out=out) == 0
    data = json.loads(out.getvalue())
    assert data["fleet"]["clusters"] == 2
    assert data["fleet"]["pods_bound"] == 4
    assert [c["name"] for c in data["clusters"]] == ["team-1", "team-2"]


def test_simulate_refuses_single_cluster_flags_for_a_fleet_scenario(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["simulate", "fleet", "--check"], out=io.StringIO()) == 1
    assert (
        "scenario fleet is a fleet scenario: --check apply to single-cluster scenarios only"
        in capsys.readouterr().err
    )


@pytest.mark.parametrize(
    ("fleet", "problem"),
    [
        (
            {"groups": [{"name": "a"}], "outages": [{"cluster": "b", "at": "1m", "until": "2m"}]},
            "fleet.outages[0].cluster: no cluster named 'b'",
        ),
        (
            {
                "groups": [
                    {
                        "name": "a",
                        "timeline": [{"at": 1, "action": "scale", "target": "x", "replicas": 1}],
                    }
                ]
            },
            "fleet.groups[0].timeline[0].target: no workload named 'x'",
        ),
        (
            {"groups": [{"name": "a", "count": 2}, {"name": "a-1"}]},
            "fleet.groups[1].name: cluster 'a-1' is named twice",
        ),
        (
            {"groups": [{"name": "a", "catalog": {"cpus": [0]}}]},
            "fleet.groups[0].catalog.cpus",
        ),
    ],
)
def test_a_malformed_fleet_scenario_names_the_field_to_fix(
    fleet: dict[str, object], problem: str
) -> None:
    data = {
        "name": "bad",
        "description": "bad",
        "infrastructure": {"catalog": {}},
        "fleet": fleet,
    }
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(data, "bad.yaml")
    assert any(line.startswith(problem) for line in caught.value.problems), caught.value.problems
