"""NodePool: upstream manifests round-trip, defaults match Karpenter's, bad input is refused
with a message naming the field and the reason."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.api.meta import NodeSelectorOperator, TaintEffect
from karpenter_capi.core.api.nodepool import (
    Budget,
    ConsolidationPolicy,
    DisruptionReason,
    NodePool,
    NodePoolConditionType,
    nodepool_json,
    order_by_weight,
)
from karpenter_capi.core.api.runtime_validation import runtime_problems

from .examples import NODEPOOL_YAML, load


def _minimal(**spec_overrides: Any) -> dict[str, Any]:
    obj = nodepool_json(
        "np",
        requirements=[{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}],
    )
    obj["spec"].update(spec_overrides)
    return obj


def _error(obj: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as info:
        NodePool.model_validate(obj)
    return str(info.value)


def test_upstream_example_round_trips_unchanged() -> None:
    raw = load(NODEPOOL_YAML)
    nodepool = NodePool.model_validate(raw)
    dumped = nodepool.model_dump(by_alias=True, exclude_none=True)
    assert dumped == raw
    # Plain data: JSON and safe YAML serialise it without custom encoders.
    assert json.loads(json.dumps(dumped)) == raw
    assert yaml.safe_load(yaml.safe_dump(dumped)) == raw
    assert NodePool.model_validate(dumped) == nodepool


def test_upstream_example_is_read_into_typed_fields() -> None:
    nodepool = NodePool.model_validate(load(NODEPOOL_YAML))
    template = nodepool.spec.template.spec
    assert template.expire_after.value == timedelta(hours=720)
    assert template.termination_grace_period is not None
    assert template.termination_grace_period.value == timedelta(hours=48)
    assert template.requirements[0].min_values == 2
    assert template.requirements[1].operator is NodeSelectorOperator.GT
    assert template.taints[0].effect is TaintEffect.NO_SCHEDULE
    assert template.node_class_ref.kind == "ClusterAPINodeClass"
    disruption = nodepool.spec.disruption
    assert disruption.consolidate_after.value == timedelta(minutes=1)
    assert disruption.budgets[1].reasons == [
        DisruptionReason.DRIFTED,
        DisruptionReason.UNDERUTILIZED,
    ]
    assert nodepool.spec.limits == {"cpu": "1000", "memory": "1000Gi"}
    assert nodepool.weight == 10
    ready = nodepool.condition(NodePoolConditionType.READY)
    assert ready is not None
    assert ready.is_true
    assert ready.last_transition_time == datetime(2024, 2, 2, 19, 54, 34, tzinfo=UTC)
    assert nodepool.status.nodes == 5


def test_defaults_match_upstream() -> None:
    nodepool = NodePool.model_validate(_minimal())
    assert nodepool.spec.template.spec.expire_after.value == timedelta(hours=720)
    assert nodepool.spec.disruption.consolidate_after.value == timedelta(0)
    assert nodepool.spec.disruption.consolidation_policy is (
        ConsolidationPolicy.WHEN_EMPTY_OR_UNDERUTILIZED
    )
    assert [b.nodes for b in nodepool.spec.disruption.budgets] == ["10%"]
    assert nodepool.spec.weight is None
    assert nodepool.weight == 0
    dumped = nodepool.model_dump(exclude_none=True)
    assert dumped["spec"]["disruption"] == {
        "consolidateAfter": "0s",
        "consolidationPolicy": "WhenEmptyOrUnderutilized",
        "budgets": [{"nodes": "10%"}],
    }
    assert dumped["spec"]["template"]["spec"]["expireAfter"] == "720h"
    # Empty optional collections are omitted like Go's omitempty, not written as {} / [].
    assert "status" not in dumped
    assert "limits" not in dumped["spec"]
    assert "taints" not in dumped["spec"]["template"]["spec"]


def test_never_survives_exclude_none() -> None:
    obj = _minimal(disruption={"consolidateAfter": "Never", "consolidationPolicy": "WhenEmpty"})
    obj["spec"]["template"]["spec"]["expireAfter"] = "Never"
    nodepool = NodePool.model_validate(obj)
    assert nodepool.spec.template.spec.expire_after.is_never
    assert nodepool.spec.disruption.consolidate_after.value is None
    dumped = nodepool.model_dump(exclude_none=True)
    assert dumped["spec"]["template"]["spec"]["expireAfter"] == "Never"
    assert dumped["spec"]["disruption"]["consolidateAfter"] == "Never"


def test_integer_quantities_are_accepted_and_written_as_strings() -> None:
    nodepool = NodePool.model_validate(_minimal(limits={"cpu": 100, "memory": "1Ti"}))
    assert nodepool.spec.limits == {"cpu": "100", "memory": "1Ti"}


@pytest.mark.parametrize(
    ("mutate", "fragments"),
    [
        (lambda o: o["spec"].update(weight=0), ["spec.weight", "greater than or equal to 1"]),
        (lambda o: o["spec"].update(weight=101), ["spec.weight", "less than or equal to 100"]),
        (
            lambda o: o["spec"]["template"]["spec"]["requirements"][0].update(
                minValues=51, values=[str(i) for i in range(60)]
            ),
            ["requirements.0.minValues", "less than or equal to 50"],
        ),
        (
            lambda o: o["spec"]["template"]["spec"]["requirements"][0].update(minValues=2),
            ["requirements with 'minValues' must have at least that many values specified"],
        ),
        (
            lambda o: o["spec"]["template"]["spec"].update(
                requirements=[
                    {"key": f"example.com/k{i}", "operator": "Exists"} for i in range(101)
                ]
            ),
            ["spec.template.spec.requirements", "at most 100 items"],
        ),
        (
            lambda o: o["spec"]["template"]["spec"]["requirements"][0].update(operator="Like"),
            ["requirements.0.operator", "'In', 'NotIn', 'Exists', 'DoesNotExist', 'Gt', 'Lt'"],
        ),
        (
            lambda o: o["spec"]["template"]["spec"]["requirements"].append(
                {"key": "example.com/generation", "operator": "Gt", "values": ["two"]}
            ),
            ["requirements.1", "operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive"],
        ),
        (
            lambda o: o["spec"]["template"]["spec"]["requirements"].append(
                {"key": "example.com/generation", "operator": "Lte", "values": ["1", "2"]}
            ),
            ["operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value"],
        ),
        (
            lambda o: o["spec"]["template"]["spec"]["requirements"].append(
                {"key": "example.com/zone", "operator": "In", "values": []}
            ),
            ["operator 'In' must have a value defined"],
        ),
        (
            lambda o: o["spec"].update(
                disruption={
                    "consolidateAfter": "0s",
                    "budgets": [{"nodes": "10%", "schedule": "@daily"}],
                }
            ),
            ["spec.disruption.budgets.0", "'schedule' must be set with 'duration'"],
        ),
        (
            lambda o: o["spec"].update(
                disruption={
                    "consolidateAfter": "0s",
                    "budgets": [{"nodes": "10%", "duration": "1h"}],
                }
            ),
            ["'schedule' must be set with 'duration'"],
        ),
        (
            lambda o: o["spec"].update(
                disruption={"consolidateAfter": "0s", "budgets": [{"nodes": "110%"}]}
            ),
            ["budgets.0.nodes", "should match pattern"],
        ),
        (
            lambda o: o["spec"].update(
                disruption={
                    "consolidateAfter": "0s",
                    "budgets": [{"nodes": "1", "schedule": "not a cron", "duration": "1h"}],
                }
            ),
            ["budgets.0.schedule"],
        ),
        (
            lambda o: o["spec"].update(
                disruption={
                    "consolidateAfter": "0s",
                    "budgets": [{"nodes": "1", "schedule": "@daily", "duration": "30s"}],
                }
            ),
            ["budgets.0.duration", "minutes and/or hours"],
        ),
        (
            lambda o: o["spec"].update(disruption={"consolidateAfter": "1 hour"}),
            ["spec.disruption.consolidateAfter", "invalid duration '1 hour'", "'Never'"],
        ),
        (
            lambda o: o["spec"]["template"]["spec"].update(expireAfter="30d"),
            ["expireAfter", "invalid duration '30d'"],
        ),
        (
            lambda o: o["spec"].update(disruption={"consolidateAfter": "FooNever"}),
            ["spec.disruption.consolidateAfter", "invalid duration 'FooNever'"],
        ),
        (
            lambda o: o["spec"].update(replicas=3, limits={"cpu": "100"}),
            ["only 'limits.nodes' is supported on static NodePools"],
        ),
        (
            lambda o: o["spec"].update(replicas=3, weight=10),
            ["'weight' is not supported on static NodePools"],
        ),
        (
            lambda o: o["spec"].update(
                disruption={"budgets": [{"nodes": "1", "reasons": ["Empty", "Drifted", "Empty"]}]}
            ),
            ["budgets.0.reasons", "duplicate reasons: Empty"],
        ),
        (
            lambda o: o["spec"]["template"]["spec"].pop("nodeClassRef"),
            ["spec.template.spec.nodeClassRef", "Field required"],
        ),
        (
            lambda o: (
                o["spec"]["template"]["spec"]["taints"].append({"key": "a", "effect": "NoWhere"})
                if "taints" in o["spec"]["template"]["spec"]
                else o["spec"]["template"]["spec"].update(
                    taints=[{"key": "a", "effect": "NoWhere"}]
                )
            ),
            ["taints.0.effect", "'NoSchedule', 'PreferNoSchedule' or 'NoExecute'"],
        ),
    ],
)
def test_invalid_nodepools_are_refused_with_path_and_reason(
    mutate: Any, fragments: list[str]
) -> None:
    obj = copy.deepcopy(_minimal())
    mutate(obj)
    message = _error(obj)
    for fragment in fragments:
        assert fragment in message, message


@pytest.mark.parametrize(
    ("key", "allowed"),
    [
        ("team", True),
        ("example.com/team", True),
        ("node.kubernetes.io/role", True),
        ("kops.k8s.io/instancegroup", True),
        ("topology.kubernetes.io/zone", True),
        ("karpenter.sh/capacity-type", True),
        # Allowed since upstream v1.9: the kubernetes.io and k8s.io domains are the user's.
        ("kubernetes.io/custom", True),
        ("foo.k8s.io/bar", True),
        ("example.kubernetes.io/team", True),
        ("kubernetes.io/hostname", False),
        ("karpenter.sh/nodepool", False),
        ("karpenter.sh/custom", False),
        ("sub.karpenter.sh/custom", False),
    ],
)
def test_restricted_template_labels(key: str, allowed: bool) -> None:
    obj = _minimal()
    obj["spec"]["template"]["metadata"] = {"labels": {key: "x"}}
    if allowed:
        NodePool.model_validate(obj)
    else:
        message = _error(obj)
        assert "spec.template.metadata.labels" in message
        assert f"{key}: label" in message
        assert "is restricted" in message


def test_requirement_on_restricted_or_nodepool_key_is_refused() -> None:
    obj = _minimal()
    obj["spec"]["template"]["spec"]["requirements"] += [
        {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["x"]},
        {"key": "kubernetes.io/hostname", "operator": "Exists"},
        {"key": "beta.kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
        {"key": "kubernetes.io/custom", "operator": "Exists"},
    ]
    message = _error(obj)
    assert 'label "karpenter.sh/nodepool" is restricted' in message
    assert 'label "kubernetes.io/hostname" is restricted' in message
    # The deprecated alias and the kubernetes.io domain are the user's.
    assert "requirements.3" not in message
    assert "requirements.4" not in message


def test_duplicate_taints_fail_runtime_validation_not_admission() -> None:
    obj = _minimal()
    spec = obj["spec"]["template"]["spec"]
    spec["taints"] = [{"key": "a", "effect": "NoSchedule"}]
    spec["startupTaints"] = [{"key": "a", "value": "other", "effect": "NoSchedule"}]
    problems = runtime_problems(NodePool.model_validate(obj))
    assert problems == [
        "spec.template.spec.startupTaints[0]: duplicate taint Key/Effect pair a=NoSchedule"
    ]
    spec["startupTaints"][0]["effect"] = "NoExecute"
    assert runtime_problems(NodePool.model_validate(obj)) == []


@pytest.mark.parametrize("disruption", [{}, {"consolidationPolicy": "WhenEmpty"}])
def test_disruption_without_consolidate_after_defaults_it_to_zero(
    disruption: dict[str, Any],
) -> None:
    pool = NodePool.model_validate(_minimal(disruption=disruption))
    assert pool.spec.disruption.consolidate_after.value == timedelta(0)


def test_wrong_kind_or_version_is_refused() -> None:
    obj = _minimal()
    obj["apiVersion"] = "karpenter.sh/v1beta1"
    assert "expected apiVersion 'karpenter.sh/v1'" in _error(obj)


def test_budget_activity_follows_the_cron_window() -> None:
    budget = Budget.model_validate({"nodes": "0", "schedule": "0 9 * * *", "duration": "8h"})
    day = datetime(2026, 3, 2, tzinfo=UTC)
    assert not budget.is_active(day.replace(hour=8, minute=59))
    assert budget.is_active(day.replace(hour=9))
    assert budget.is_active(day.replace(hour=16, minute=59))
    assert not budget.is_active(day.replace(hour=17, minute=1))
    assert Budget(nodes="3").is_active(day)


def test_budget_allowance_rounds_percentages_up() -> None:
    assert Budget(nodes="10%").allowed_disruptions(5) == 1
    assert Budget(nodes="10%").allowed_disruptions(0) == 0
    assert Budget(nodes="50%").allowed_disruptions(7) == 4
    assert Budget(nodes="3").allowed_disruptions(100) == 3


def test_disruption_takes_the_most_restrictive_active_budget() -> None:
    nodepool = NodePool.model_validate(load(NODEPOOL_YAML))
    disruption = nodepool.spec.disruption
    monday_10am = datetime(2026, 3, 2, 10, tzinfo=UTC)
    sunday_10am = datetime(2026, 3, 1, 10, tzinfo=UTC)
    assert disruption.allowed_disruptions(monday_10am, 20, DisruptionReason.DRIFTED) == 0
    assert disruption.allowed_disruptions(monday_10am, 20, DisruptionReason.EMPTY) == 2
    assert disruption.allowed_disruptions(sunday_10am, 20, DisruptionReason.DRIFTED) == 2


def test_order_by_weight_puts_heavier_first_then_later_names() -> None:
    def pool(name: str, weight: int | None) -> NodePool:
        return NodePool.model_validate(_minimal(weight=weight) | {"metadata": {"name": name}})

    ordered = order_by_weight([pool("a", None), pool("b", 50), pool("c", 50), pool("d", 10)])
    assert [p.name for p in ordered] == ["c", "b", "d", "a"]


def test_model_dump_is_api_json_without_exclude_none() -> None:
    raw = load(NODEPOOL_YAML)
    assert NodePool.model_validate(raw).model_dump() == raw


def test_template_hash_tracks_what_drift_compares() -> None:
    base = NodePool.model_validate(load(NODEPOOL_YAML))
    same = load(NODEPOOL_YAML)
    template = same["spec"]["template"]
    template["spec"]["expireAfter"] = "720h0m0s"
    template["spec"]["taints"] = list(reversed(template["spec"]["taints"]))
    template["spec"]["requirements"].pop()
    same["spec"]["weight"] = 99
    assert NodePool.model_validate(same).template_hash() == base.template_hash()
    changed = load(NODEPOOL_YAML)
    changed["spec"]["template"]["metadata"]["labels"]["billing-team"] = "other"
    assert NodePool.model_validate(changed).template_hash() != base.template_hash()
    changed = load(NODEPOOL_YAML)
    changed["spec"]["template"]["spec"]["expireAfter"] = "Never"
    assert NodePool.model_validate(changed).template_hash() != base.template_hash()


def test_a_name_too_long_for_the_nodepool_label_fails_runtime_validation() -> None:
    obj = _minimal()
    obj["metadata"]["name"] = "b" * 64
    [problem] = runtime_problems(NodePool.model_validate(obj))
    assert problem.startswith("metadata.name: invalid value 'bbbbbbbbbbbbbbbbbbbb'...")
    assert "karpenter.sh/nodepool label" in problem
    assert "must be no more than 63 characters" in problem
    obj["metadata"]["name"] = "b" * 63
    assert runtime_problems(NodePool.model_validate(obj)) == []


def test_requirements_a_nodeclaim_could_not_carry_fail_runtime_validation() -> None:
    """A NodeClaim admits 100 requirements and gets the NodePool's, one per template label,
    and the NodePool, instance-type and capacity-type keys."""
    obj = _minimal()
    spec = obj["spec"]["template"]["spec"]
    spec["requirements"] = [{"key": f"example.com/k{i}", "operator": "Exists"} for i in range(97)]
    assert runtime_problems(NodePool.model_validate(obj)) == []
    obj["spec"]["template"]["metadata"] = {"labels": {"team": "a"}}
    [problem] = runtime_problems(NodePool.model_validate(obj))
    assert "would carry 101 requirements" in problem
    assert "keep at most 96 requirements here" in problem
    # Keys that repeat are one requirement; the instance-type key given is not added again.
    obj["spec"]["template"]["metadata"] = {}
    spec["requirements"][1:3] = [
        {"key": "example.com/k0", "operator": "NotIn", "values": ["x"]},
        {"key": wellknown.LABEL_INSTANCE_TYPE, "operator": "Exists"},
    ]
    spec["requirements"].append({"key": "example.com/k0", "operator": "Exists"})
    assert runtime_problems(NodePool.model_validate(obj)) == []
