"""Scenario files: errors name the bad path, the catalog matches upstream's kwok, runs bind."""

from __future__ import annotations

import pytest

from karpenter_capi.plugins.generic_capi.shape import PRICE_ANNOTATION
from karpenter_capi.sim.scenario.catalog import generate_catalog
from karpenter_capi.sim.scenario.runner import run
from karpenter_capi.sim.scenario.schema import (
    Catalog,
    ScenarioError,
    load_scenario,
    parse_scenario_text,
    shipped_scenarios,
)

BASE = """
name: t
description: a test
infrastructure:
  catalog: {}
workloads:
- {name: web, replicas: 2, cpu: 500m, memory: 1Gi}
"""


def _problems(text: str) -> list[str]:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario_text(text, "t.yaml")
    return caught.value.problems


def test_a_bad_field_is_named_by_its_path() -> None:
    text = BASE + "timeline:\n- {at: soon, action: scale, target: web, replicas: 1}\n"
    assert any(p.startswith("timeline[0].at:") for p in _problems(text))


def test_a_bad_quantity_and_an_unknown_field_are_named() -> None:
    text = BASE.replace("cpu: 500m", "cpu: lots, colour: red")
    problems = _problems(text)
    assert any(p.startswith("workloads[0].cpu:") for p in problems)
    assert any(p.startswith("workloads[0].colour:") for p in problems)


def test_infrastructure_needs_exactly_one_source() -> None:
    text = BASE.replace("catalog: {}", "catalog: {}\n  manifests: []")
    assert any(p.startswith("infrastructure:") for p in _problems(text))


def test_an_action_must_name_a_workload() -> None:
    text = BASE + "timeline:\n- {at: 1m, action: delete, target: nope}\n"
    assert _problems(text) == ["timeline[0].target: no workload named 'nope'"]


def test_a_patch_action_needs_a_kind_and_a_patch_and_names_no_workload() -> None:
    good = BASE + (
        "timeline:\n- {at: 2m, action: patch, kind: MachineDeployment, target: '*', "
        "patch: {spec: {template: {spec: {version: v1.32.0}}}}}\n"
    )
    [action] = parse_scenario_text(good, "t.yaml").timeline
    assert action.kind == "MachineDeployment"
    assert action.patch == {"spec": {"template": {"spec": {"version": "v1.32.0"}}}}
    missing = BASE + "timeline:\n- {at: 2m, action: patch, target: web}\n"
    assert any("patch needs kind and patch" in p for p in _problems(missing))
    wrong = BASE + "timeline:\n- {at: 2m, action: delete, target: web, kind: NodePool}\n"
    assert any("only patch and scale take kind" in p for p in _problems(wrong))
    patched = BASE + "timeline:\n- {at: 2m, action: scale, target: web, replicas: 1, patch: {}}\n"
    assert any("only patch takes patch" in p for p in _problems(patched))


def test_a_scale_action_on_a_nodepool_names_the_nodepool_not_a_workload() -> None:
    good = (
        BASE + "timeline:\n- {at: 2m, action: scale, kind: NodePool, target: static, replicas: 4}\n"
    )
    [action] = parse_scenario_text(good, "t.yaml").timeline
    assert (action.kind, action.target, action.replicas) == ("NodePool", "static", 4)
    other = (
        BASE + "timeline:\n- {at: 2m, action: scale, kind: MachineDeployment, target: md, "
        "replicas: 4}\n"
    )
    assert any("scale takes kind NodePool" in p for p in _problems(other))


def test_the_catalog_has_one_machine_deployment_per_combination_with_kwok_prices() -> None:
    catalog = Catalog(
        cpus=[2, 4], archs=["amd64", "arm64"], zones=["a"], capacity_types=["on-demand", "spot"]
    )
    objects = generate_catalog(catalog)
    kinds = [o["kind"] for o in objects]
    assert kinds.count("MachineDeployment") == 3 * 2 * 2 * 1 * 2
    assert kinds.count("ClusterAPINodeClass") == 1
    assert kinds.count("NodePool") == 1
    by_name = {o["metadata"]["name"]: o for o in objects}
    m4 = by_name["m-4x-amd64-a-on-demand"]
    # 4 vCPU x 0.025 + 32 GiB x 0.001
    assert m4["metadata"]["annotations"][PRICE_ANNOTATION] == "0.132"
    spot = by_name["m-4x-amd64-a-spot"]["metadata"]["annotations"][PRICE_ANNOTATION]
    assert float(spot) == pytest.approx(0.132 * 0.7)
    assert m4["spec"]["template"]["spec"]["failureDomain"] == "a"
    assert m4["metadata"]["annotations"]["capacity.cluster-autoscaler.kubernetes.io/memory"] == (
        "32Gi"
    )
    assert "node.cluster.x-k8s.io/karpenter-member" in m4["metadata"]["labels"]


def test_shipped_scenarios_load_by_name() -> None:
    assert {"scale-from-zero", "basic-1000", "hostname-spread"} <= set(shipped_scenarios())
    assert load_scenario("scale-from-zero").name == "scale-from-zero"
    with pytest.raises(ScenarioError, match="shipped scenarios"):
        load_scenario("no-such-scenario")


def test_scale_from_zero_binds_every_pod_without_errors() -> None:
    result = run(load_scenario("scale-from-zero"), until=300)
    assert result.errors == []
    # 10 web + 3 api: the batch job is scaled to zero at 5 minutes.
    assert result.pods_total == 13
    assert result.pods_bound == 13
    assert result.pods_pending == 0
    assert result.nodes == result.nodeclaims > 0
    assert result.cost_per_hour > 0
    assert result.cost_per_hour_peak >= result.cost_per_hour
    assert result.pod_bound_seconds["p50"] <= result.pod_bound_seconds["max"] < 120
    assert result.samples[-1].at == result.virtual_seconds == 300
    assert result.to_json()["pods_bound"] == 13


def test_the_same_seed_gives_the_same_run() -> None:
    first = run(load_scenario("scale-from-zero"), until=120, seed=3).to_json()
    second = run(load_scenario("scale-from-zero"), until=120, seed=3).to_json()
    first.pop("wall_seconds"), second.pop("wall_seconds")
    assert first == second


def test_hostname_spread_puts_each_spread_pod_on_its_own_node() -> None:
    result = run(load_scenario("hostname-spread"), until=300)
    assert result.errors == []
    assert result.pods_pending == 0
    assert result.nodes >= 12
