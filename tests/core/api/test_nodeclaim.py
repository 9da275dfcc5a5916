"""NodeClaim and ClusterAPINodeClass: upstream-shaped objects round-trip; typed accessors read
conditions, labels and durations; invalid ones are refused with a path and a reason."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.api.meta import (
    Condition,
    ConditionStatus,
    LabelSelector,
    validation_problems,
)
from karpenter_capi.core.api.nodeclaim import (
    READINESS_CONDITIONS,
    NodeClaim,
    NodeClaimConditionType,
)
from karpenter_capi.core.api.nodeclass import ClusterAPINodeClass

from .examples import NODECLAIM_YAML, NODECLASS_YAML, load


def test_upstream_nodeclaim_round_trips_unchanged() -> None:
    raw = load(NODECLAIM_YAML)
    claim = NodeClaim.model_validate(raw)
    assert claim.model_dump(by_alias=True, exclude_none=True) == raw
    assert NodeClaim.model_validate(claim.model_dump()) == claim


def test_nodeclaim_fields_are_typed() -> None:
    claim = NodeClaim.model_validate(load(NODECLAIM_YAML))
    assert claim.spec.expire_after.is_never
    assert claim.spec.resources.requests["cpu"] == "1510m"
    assert claim.status.provider_id == "aws:///us-west-2b/i-0d8e1d8d4f9a1a2b3"
    assert claim.status.image_id == "ami-0c3f8d3b4e5a6f7a8"
    assert claim.status.last_pod_event_time == datetime(2024, 2, 2, 20, 1, 2, tzinfo=UTC)
    assert claim.nodepool_name == "default"
    assert claim.metadata.finalizers == [wellknown.FINALIZER_TERMINATION]
    assert claim.metadata.owner_references[0].block_owner_deletion is True
    assert claim.is_condition_true(NodeClaimConditionType.REGISTERED)
    assert not claim.is_condition_true(NodeClaimConditionType.INITIALIZED)
    assert claim.spec.startup_taints[0].key == wellknown.TAINT_UNREGISTERED_KEY
    assert not claim.is_deleting


def test_nodeclaim_built_in_code_gets_type_meta_and_defaults() -> None:
    claim = NodeClaim.model_validate(
        {
            "metadata": {"generateName": "default-"},
            "spec": {
                "nodeClassRef": {
                    "group": wellknown.NODECLASS_GROUP,
                    "kind": wellknown.NODECLASS_KIND,
                    "name": "default",
                },
                "requirements": [],
            },
        }
    )
    dumped = claim.model_dump(exclude_none=True)
    assert dumped["apiVersion"] == "karpenter.sh/v1"
    assert dumped["kind"] == "NodeClaim"
    assert dumped["spec"]["expireAfter"] == "720h"
    assert claim.spec.expire_after.value == timedelta(hours=720)


def test_nodeclaim_may_require_its_nodepool_label_but_not_hostname() -> None:
    raw = load(NODECLAIM_YAML)
    raw["spec"]["requirements"].append({"key": "kubernetes.io/hostname", "operator": "Exists"})
    with pytest.raises(ValidationError) as info:
        NodeClaim.model_validate(raw)
    (problem,) = validation_problems(info.value)
    assert problem == (
        "spec.requirements[2]: key 'kubernetes.io/hostname': "
        'label "kubernetes.io/hostname" is restricted'
    )


def test_validation_problems_are_one_line_each_with_a_path() -> None:
    raw = load(NODECLAIM_YAML)
    raw["spec"]["requirements"][1]["minValues"] = 0
    raw["status"]["conditions"][0]["status"] = "Maybe"
    with pytest.raises(ValidationError) as info:
        NodeClaim.model_validate(raw)
    assert validation_problems(info.value) == [
        "spec.requirements[1].minValues: Input should be greater than or equal to 1",
        "status.conditions[0].status: Input should be 'True', 'False' or 'Unknown'",
    ]


def test_condition_requires_a_reason_and_writes_rfc3339() -> None:
    condition = Condition(
        type="Launched",
        status=ConditionStatus.TRUE,
        reason="Launched",
        last_transition_time=datetime(2026, 1, 1, 12, 0, 0, 500000, tzinfo=UTC),
    )
    assert condition.model_dump(exclude_none=True) == {
        "type": "Launched",
        "status": "True",
        "lastTransitionTime": "2026-01-01T12:00:00Z",
        "reason": "Launched",
        "message": "",
    }
    with pytest.raises(ValidationError, match="reason"):
        Condition.model_validate(
            {
                "type": "Launched",
                "status": "True",
                "reason": "",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        )


def test_readiness_is_launched_registered_initialized() -> None:
    assert [c.value for c in READINESS_CONDITIONS] == ["Launched", "Registered", "Initialized"]


def test_nodeclass_round_trips_and_selects() -> None:
    raw = load(NODECLASS_YAML)
    nodeclass = ClusterAPINodeClass.model_validate(raw)
    assert nodeclass.model_dump(exclude_none=True) == raw
    selector = nodeclass.spec.scalable_resource_selector
    member = {wellknown.LABEL_KARPENTER_MEMBER: "", wellknown.LABEL_CAPI_CLUSTER_NAME: "prod"}
    assert selector.matches(member)
    assert not selector.matches({wellknown.LABEL_KARPENTER_MEMBER: ""})
    assert not selector.matches({**member, wellknown.LABEL_KARPENTER_MEMBER: "no"})


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ({}, {"a": "1"}, True),
        ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {}, True),
        (
            {"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]},
            {"a": "1"},
            False,
        ),
        ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"a": ""}, True),
        ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": ""}, False),
    ],
)
def test_label_selector_semantics(
    selector: dict[str, object], labels: dict[str, str], expected: bool
) -> None:
    assert LabelSelector.model_validate(selector).matches(labels) is expected


def test_label_selector_operator_values_are_checked() -> None:
    with pytest.raises(ValidationError, match="operator 'Exists' takes no values"):
        LabelSelector.model_validate(
            {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}
        )
