"""Every shipped scenario reaches its documented outcome.

Each run must end with every pod bound (unless the scenario documents pods that cannot fit), no
errors, a positive cost, and no empty node: once scale-up settles, every Node holds at least one
pod that is not a DaemonSet's. ``runner.run`` returns figures only, so the API server it builds
is captured by replacing the ``InMemoryAPIServer`` name the runner module looks up with a
subclass that remembers its instances; the final cluster is then read from it.
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.clock import parse_timestamp
from karpenter_capi.core.kube.resources import (
    MACHINE_POOLS,
    MACHINES,
    NODECLAIMS,
    NODEPOOLS,
    NODES,
    PODS,
)
from karpenter_capi.plugins.generic_capi.binding import ANNOTATION_SCALABLE_RESOURCE
from karpenter_capi.sim.apiserver.server import InMemoryAPIServer
from karpenter_capi.sim.invariants import check_invariants
from karpenter_capi.sim.scenario import runner
from karpenter_capi.sim.scenario.fleet import run_fleet
from karpenter_capi.sim.scenario.schema import Scenario, load_scenario, shipped_scenarios

ZONE_LABEL = "topology.kubernetes.io/zone"


@dataclass(frozen=True)
class Expected:
    """How long to run a scenario (virtual seconds) and what it must end with."""

    until: float
    pods_total: int
    unschedulable: int = 0  # pods the scenario documents as unable to fit


# `until` is the shortest virtual time that gives a settled result (pods bind ~16 s after
# creation; scenarios with a timeline run ~30 s past their last action). wide-deployments and
# spot-and-on-demand take a second provisioning round: the controller packs nodes to the
# kubeadm allocatable the emulated kubelet reports, with no slack, and the scheduler stand-in
# (which does not follow nominations) strands a few pods, which get a node ~30 s later.
EXPECTED: dict[str, Expected] = {
    "scale-from-zero": Expected(until=600, pods_total=13),
    "basic-1000": Expected(until=900, pods_total=700),
    "consolidation": Expected(until=600, pods_total=40),
    "drift": Expected(until=600, pods_total=12),
    "hostname-spread": Expected(until=30, pods_total=20),
    # 45 s: kube-scheduler's default scoring spreads the 30 Deployments over every node, not as
    # planned, and the fragments strand 3 pods, bound on a NodeClaim launched for them at ~17 s.
    "wide-deployments": Expected(until=45, pods_total=1000),
    "anti-affinity-500": Expected(until=30, pods_total=500),
    "zonal-spread": Expected(until=30, pods_total=60),
    "spot-and-on-demand": Expected(until=45, pods_total=40),
    "machinepool": Expected(until=30, pods_total=24),
    "on-demand-mds": Expected(until=600, pods_total=4),
    "kubeadm-reserved": Expected(until=30, pods_total=12),
    "static-pool": Expected(until=360, pods_total=8),
    # The capz plugin over the simulated Azure; consolidation after the 5m scale-down settles
    # by ~10 m (tests/plugins/capz/test_azure_vmss_scenario.py checks the details).
    "azure-vmss": Expected(until=900, pods_total=2),
    # moto's EC2 behind the capa plugin's CAPAFleet mode; the consolidation at 5m settles ~6m.
    "aws-fleet": Expected(until=480, pods_total=5),
    # A day of churn, one hour of it: the hour ends quiet, with the pods it began with
    # (tests/reliability/soak runs three hours of it and checks much more).
    "soak-day": Expected(until=3600, pods_total=13),
    # Interrupted at 2m; replaced and drained by ~2m20s, the deadline is at 4m.
    "spot-interruption": Expected(until=300, pods_total=12),
    # capa's SQS path on moto: warned at 2m, replaced by ~2m15s, deadline at 4m.
    "aws-spot-interruption": Expected(until=300, pods_total=10),
    # 24 workload clusters behind one fleet controller (sim.scenario.fleet); shop-2's outage
    # ends at 3m, its pods are bound by ~3m30s (tests/sim/test_fleet_scenario.py runs a
    # smaller copy and checks the outage in detail).
    "fleet": Expected(until=240, pods_total=135),
}

# Kept out of the quick suite (`-m "not slow"`): anti-affinity-500 provisions 500 one-pod nodes
# (~20 s), basic-1000 runs 15 virtual minutes of consolidation (~20 s), soak-day an hour of
# churn (~25 s).
SLOW = {"anti-affinity-500", "basic-1000", "soak-day", "fleet"}


@dataclass
class Run:
    result: runner.ScenarioResult
    server: InMemoryAPIServer

    def live(self, resource: Any) -> list[dict[str, Any]]:
        return [
            obj
            for obj in self.server.list(resource).items
            if not obj["metadata"].get("deletionTimestamp")
        ]

    def pods(self) -> list[dict[str, Any]]:
        return [
            p
            for p in self.live(PODS)
            if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        ]

    def node_zones(self) -> dict[str, str]:
        return {
            n["metadata"]["name"]: (n["metadata"].get("labels") or {}).get(ZONE_LABEL, "")
            for n in self.live(NODES)
        }


@pytest.fixture
def capture(monkeypatch: pytest.MonkeyPatch) -> list[InMemoryAPIServer]:
    """The API servers ``runner.run`` builds while the test runs."""
    servers: list[InMemoryAPIServer] = []

    class Capturing(InMemoryAPIServer):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            servers.append(self)

    monkeypatch.setattr(runner, "InMemoryAPIServer", Capturing)
    return servers


def _run(scenario: Scenario, servers: list[InMemoryAPIServer], until: float) -> Run:
    if scenario.name in _SAMPLED:
        return _sampled(scenario.name, until)
    result = runner.run(scenario, until=until, sample_every=until)
    return Run(result, servers[-1])


# Scenarios whose outcome is judged over time (cost at the peak versus at the end): run once
# with samples every 15 s, shared by the tests that look at them.
_SAMPLED = {"basic-1000", "consolidation", "drift", "on-demand-mds"}


@functools.cache
def _sampled(name: str, until: float) -> Run:
    servers: list[InMemoryAPIServer] = []
    result = runner.run(load_scenario(name), until=until, on_cluster=servers.append)
    return Run(result, servers[-1])


def _is_daemonset_pod(pod: dict[str, Any]) -> bool:
    owners = pod["metadata"].get("ownerReferences") or []
    return any(owner.get("kind") == "DaemonSet" for owner in owners)


def _params() -> list[Any]:
    return [
        pytest.param(name, marks=[pytest.mark.slow, pytest.mark.timeout(300)])
        if name in SLOW
        else name
        for name in shipped_scenarios()
    ]


def test_every_shipped_scenario_has_an_expected_outcome() -> None:
    assert set(shipped_scenarios()) == set(EXPECTED)


@pytest.mark.parametrize("name", _params())
def test_shipped_scenario_outcome(name: str, capture: list[InMemoryAPIServer]) -> None:
    expected = EXPECTED.get(name)
    assert expected is not None, f"add {name!r} to EXPECTED in {__file__}"
    scenario = load_scenario(name)
    if scenario.fleet is not None:
        _check_fleet(scenario, expected)
        return
    run = _run(load_scenario(name), capture, expected.until)
    result = run.result

    assert result.errors == []
    assert result.pods_total == expected.pods_total
    assert result.pods_pending == expected.unschedulable
    assert result.pods_bound == expected.pods_total - expected.unschedulable
    assert result.cost_per_hour > 0
    assert result.nodes == result.nodeclaims > 0

    # No node left empty after scale-up settles (a static NodePool's may be: it keeps its count).
    per_node = Counter(
        p["spec"]["nodeName"]
        for p in run.pods()
        if p["spec"].get("nodeName") and not _is_daemonset_pod(p)
    )
    static = {
        str(pool["metadata"]["name"])
        for pool in run.live(NODEPOOLS)
        if pool["spec"].get("replicas") is not None
    }
    dynamic = {
        str(node["metadata"]["name"])
        for node in run.live(NODES)
        if node["metadata"].get("labels", {}).get(wellknown.LABEL_NODEPOOL) not in static
    }
    empty = sorted(node for node in run.node_zones() if per_node[node] == 0 and node in dynamic)
    assert empty == []
    # Nothing leaked, claimed twice or stuck, and no pending pod an existing node could hold.
    assert [str(v) for v in check_invariants(run.server, clock=run.server.clock)] == []


def _check_fleet(scenario: Scenario, expected: Expected) -> None:
    """A fleet scenario: every cluster's pods bound, none stranded, no error, every cluster
    with capacity and a positive cost for the fleet."""
    fleet = run_fleet(scenario, until=expected.until)
    assert fleet.all_errors() == []
    assert fleet.pods_bound + fleet.pods_pending == expected.pods_total
    assert fleet.pods_pending == fleet.pods_stranded == expected.unschedulable
    assert fleet.cost_per_hour > 0
    assert all(c.nodes > 0 and c.pods_bound > 0 for c in fleet.clusters)
    assert all(o.others_pending == 0 for o in fleet.outages)


def test_kubeadm_reserved_nodes_keep_what_the_bootstrap_config_says_and_both_sides_agree(
    capture: list[InMemoryAPIServer],
) -> None:
    run = _run(load_scenario("kubeadm-reserved"), capture, EXPECTED["kubeadm-reserved"].until)
    # 4 CPU / 16Gi less 500m CPU and 3.5Gi: three 1 CPU / 3Gi pods per node, so four nodes.
    nodes = run.live(NODES)
    assert len(nodes) == 4
    for node in nodes:
        allocatable = node["status"]["allocatable"]
        assert allocatable["cpu"] == "3500m"
        assert int(allocatable["memory"]) == (16 * 1024 - 3584) * 1024**2
    # The controller read the same template: its NodeClaims expect what the Nodes report.
    for claim in run.live(NODECLAIMS):
        assert claim["status"]["allocatable"]["cpu"] == "3500m"
        assert claim["status"]["allocatable"]["memory"] == "12800Mi"


def test_zonal_spread_counts_per_zone_differ_by_at_most_one(
    capture: list[InMemoryAPIServer],
) -> None:
    scenario = load_scenario("zonal-spread")
    catalog = scenario.infrastructure.catalog
    assert catalog is not None
    run = _run(scenario, capture, EXPECTED["zonal-spread"].until)
    zones = run.node_zones()
    counts = Counter(
        zones[p["spec"]["nodeName"]]
        for p in run.pods()
        if p["metadata"]["labels"].get("app") == "zonal" and p["spec"].get("nodeName")
    )
    per_zone = [counts.get(zone, 0) for zone in catalog.zones]
    assert sum(per_zone) == 60
    assert max(per_zone) - min(per_zone) <= 1


def test_spot_and_on_demand_uses_the_cheaper_spot_capacity(
    capture: list[InMemoryAPIServer],
) -> None:
    scenario = load_scenario("spot-and-on-demand")
    catalog = scenario.infrastructure.catalog
    assert catalog is not None
    assert set(catalog.capacity_types) == {"on-demand", "spot"}
    until = EXPECTED["spot-and-on-demand"].until
    mixed = _run(scenario, capture, until)
    claims = mixed.live(NODECLAIMS)
    assert claims
    assert {
        (c["metadata"].get("labels") or {}).get(wellknown.LABEL_CAPACITY_TYPE) for c in claims
    } == {"spot"}

    on_demand_only = scenario.model_copy(
        update={
            "infrastructure": scenario.infrastructure.model_copy(
                update={"catalog": catalog.model_copy(update={"capacity_types": ["on-demand"]})}
            )
        }
    )
    baseline = _run(on_demand_only, capture, until).result
    assert baseline.errors == []
    assert baseline.pods_pending == 0
    assert 0 < mixed.result.cost_per_hour < baseline.cost_per_hour


def test_anti_affinity_puts_one_pod_on_each_node(capture: list[InMemoryAPIServer]) -> None:
    """Required hostname anti-affinity: one pod per node (a quick 40-replica copy)."""
    scenario = load_scenario("anti-affinity-500")
    small = scenario.model_copy(
        update={"workloads": [scenario.workloads[0].model_copy(update={"replicas": 40})]}
    )
    run = _run(small, capture, 30)
    assert run.result.errors == []
    assert run.result.pods_pending == 0
    per_node = Counter(p["spec"]["nodeName"] for p in run.pods() if p["spec"].get("nodeName"))
    assert len(per_node) == 40
    assert set(per_node.values()) == {1}
    assert run.result.nodes == 40


def test_machinepool_capacity_comes_from_machine_pools(capture: list[InMemoryAPIServer]) -> None:
    run = _run(load_scenario("machinepool"), capture, EXPECTED["machinepool"].until)
    claims = run.live(NODECLAIMS)
    assert claims
    sources = {
        (c["metadata"].get("annotations") or {}).get(ANNOTATION_SCALABLE_RESOURCE, "")
        for c in claims
    }
    assert all(source.startswith("MachinePool/") for source in sources), sources
    replicas = sum(p["spec"].get("replicas") or 0 for p in run.live(MACHINE_POOLS))
    assert replicas == len(claims) == run.result.nodes


def test_basic_1000_binds_all_1000_pods_before_the_scale_down() -> None:
    # The shared run's sample at 4 minutes, a minute before the scale-down to 700.
    run = _sampled("basic-1000", EXPECTED["basic-1000"].until)
    [before] = [sample for sample in run.result.samples if sample.at == 240]
    assert (before.pods_bound, before.pods_pending) == (1000, 0)


def test_consolidation_shrinks_the_cluster_after_the_scale_down() -> None:
    run = _sampled("consolidation", EXPECTED["consolidation"].until)
    result = run.result
    assert result.errors == []
    assert result.pods_pending == 0
    assert result.cost_per_hour < 0.5 * result.cost_per_hour_peak
    assert result.disruptions.get("Underutilized", 0) + result.disruptions.get("Empty", 0) > 0


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_basic_1000_settles_within_ten_percent_of_fresh_provisioning() -> None:
    """Issue 8's target: after the scale-down to 700 pods, consolidation brings the cluster's
    price within 10% of what provisioning those 700 pods from scratch costs."""
    scenario = load_scenario("basic-1000")
    settled = _sampled("basic-1000", EXPECTED["basic-1000"].until).result
    fresh_scenario = scenario.model_copy(
        update={
            "workloads": [w.model_copy(update={"replicas": 350}) for w in scenario.workloads],
            "timeline": [],
        }
    )
    fresh = runner.run(fresh_scenario, until=120, sample_every=120)
    assert fresh.pods_bound == settled.pods_bound == 700
    assert settled.cost_per_hour <= 1.10 * fresh.cost_per_hour
    assert settled.cost_per_hour < settled.cost_per_hour_peak


def test_drift_replaces_every_machine_made_from_the_old_template() -> None:
    run = _sampled("drift", EXPECTED["drift"].until)
    result = run.result
    assert result.errors == []
    assert result.pods_pending == 0
    assert result.disruptions.get("Drifted", 0) >= 1
    machines = run.live(MACHINES)
    assert machines
    assert {m["spec"]["version"] for m in machines} == {"v1.32.0"}
    # Every NodeClaim now standing was launched after the upgrade, at 2 minutes.
    [pool] = run.live(NODEPOOLS)  # created when the run starts
    start = parse_timestamp(pool["metadata"]["creationTimestamp"])
    for claim in run.live(NODECLAIMS):
        created = parse_timestamp(claim["metadata"]["creationTimestamp"])
        assert (created - start).total_seconds() >= 120


def test_on_demand_catalog_replaces_the_big_node_with_the_cheapest_that_holds_the_rest() -> None:
    """Four on-demand MachineDeployments, a NodePool blind to capacity type: once the batch job
    goes, the four 600m web pods end on one 4-CPU node (the cheapest that holds them), through
    a replacement launched after the scale-down, instead of keeping a 16-CPU node for good."""
    run = _sampled("on-demand-mds", EXPECTED["on-demand-mds"].until)
    result = run.result
    assert result.errors == []
    assert result.pods_pending == 0
    assert result.disruptions.get("Underutilized", 0) >= 1
    [node] = run.live(NODES)
    labels = node["metadata"]["labels"]
    assert labels[wellknown.LABEL_INSTANCE_TYPE] == "capi-4cpu-16gib-amd64"
    assert labels[wellknown.LABEL_CAPACITY_TYPE] == wellknown.CAPACITY_TYPE_ON_DEMAND
    assert round(result.cost_per_hour, 3) == 0.192
    [pool] = run.live(NODEPOOLS)
    start = parse_timestamp(pool["metadata"]["creationTimestamp"])
    [claim] = run.live(NODECLAIMS)
    created = parse_timestamp(claim["metadata"]["creationTimestamp"])
    assert (created - start).total_seconds() > 180  # launched as the replacement
