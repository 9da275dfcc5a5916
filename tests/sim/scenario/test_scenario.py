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


def test_an_interrupt_action_names_a_capacity_type_and_takes_a_notice() -> None:
    good = BASE + "timeline:\n- {at: 2m, action: interrupt, target: spot, notice: 90s}\n"
    [action] = parse_scenario_text(good, "t.yaml").timeline
    assert (action.action, action.target, action.notice) == ("interrupt", "spot", 90)
    bad = BASE + "timeline:\n- {at: 2m, action: interrupt, target: web}\n"
    assert any("interrupt takes a capacity type as target" in p for p in _problems(bad))
    notice = BASE + "timeline:\n- {at: 2m, action: delete, target: web, notice: 2m}\n"
    assert any("only interrupt takes notice" in p for p in _problems(notice))


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


def test_a_repeating_scale_takes_its_counts_in_turn_until_the_end() -> None:
    text = BASE + (
        "timeline:\n- {at: 2m, every: 5m, until: 22m, action: scale, target: web, "
        "replicas: [4, 9, 1]}\n"
    )
    scenario = parse_scenario_text(text, "t.yaml")
    actions = scenario.actions(3600)
    assert [(a.at, a.count) for a in actions] == [
        (120, 4),
        (420, 9),
        (720, 1),
        (1020, 4),
        (1320, 9),
    ]
    # The run's end cuts it too.
    assert len(scenario.actions(500)) == 2


def test_a_window_keeps_repetitions_to_part_of_every_period_and_counts_only_those() -> None:
    text = BASE + (
        "timeline:\n- {at: 0s, every: 10m, window: {first: 25m, of: 1h}, action: scale, "
        "target: web, replicas: [1, 2, 3]}\n"
    )
    actions = parse_scenario_text(text, "t.yaml").actions(2 * 3600 - 1)
    # :00 :10 :20 of each hour; the list goes round once an hour.
    assert [(a.at / 60, a.count) for a in actions] == [
        (0, 1),
        (10, 2),
        (20, 3),
        (60, 1),
        (70, 2),
        (80, 3),
    ]


def test_a_repeating_patch_numbers_each_repetition() -> None:
    text = BASE + (
        "timeline:\n- {at: 1h, every: 6h, action: patch, kind: MachineDeployment, target: '*', "
        "patch: {spec: {template: {spec: {version: 'v1.31.${n}'}}}}}\n"
    )
    actions = parse_scenario_text(text, "t.yaml").actions(24 * 3600)
    versions = [a.patch["spec"]["template"]["spec"]["version"] for a in actions if a.patch]
    assert versions == ["v1.31.1", "v1.31.2", "v1.31.3", "v1.31.4"]
    assert [a.at / 3600 for a in actions] == [1, 7, 13, 19]


def test_repetition_fields_need_every_and_sensible_durations() -> None:
    listed = BASE + "timeline:\n- {at: 1m, action: scale, target: web, replicas: [1, 2]}\n"
    assert any("need every" in p for p in _problems(listed))
    backwards = BASE + (
        "timeline:\n- {at: 1h, every: 5m, until: 30m, action: scale, target: web, replicas: 1}\n"
    )
    assert any("until comes before at" in p for p in _problems(backwards))
    window = BASE + (
        "timeline:\n- {at: 0s, every: 5m, window: {first: 2h, of: 1h}, action: scale, "
        "target: web, replicas: 1}\n"
    )
    assert any(p.startswith("timeline[0].window") for p in _problems(window))
    negative = BASE + (
        "timeline:\n- {at: 0s, every: 5m, action: scale, target: web, replicas: [1, -2]}\n"
    )
    assert any("negative" in p for p in _problems(negative))


def test_the_soak_day_scenario_asks_for_the_same_pods_at_every_hour_mark() -> None:
    scenario = load_scenario("soak-day")
    final: dict[str, int] = {w.name: w.replicas for w in scenario.workloads}
    by_hour: list[dict[str, int]] = []
    actions = scenario.actions(24 * 3600)
    for hour in range(1, 25):
        for action in actions:
            if (hour - 1) * 3600 <= action.at < hour * 3600 and action.action == "scale":
                final[action.target] = action.count or 0
        by_hour.append(dict(final, report=0))
    assert all(counts == by_hour[0] for counts in by_hour)
    # Nothing happens in the last 20 minutes of any hour (the six-hourly drift falls at :05).
    assert all(action.at % 3600 < 40 * 60 for action in actions)
