"""Telling v1beta1 from v1beta2 objects, and reading settings from either layout."""

from __future__ import annotations

import pytest

from karpenter_capi.sim.capi import ANNOTATION_SHAPE
from karpenter_capi.sim.capi.shapes import (
    failure_of,
    md_deletion_order,
    ms_deletion_order,
    rollout_strategy,
    shape_of,
)
from karpenter_capi.sim.capi.templates import template_hash


@pytest.mark.parametrize(
    ("obj", "shape"),
    [
        ({"kind": "MachineDeployment", "spec": {"strategy": {"type": "OnDelete"}}}, "v1beta1"),
        ({"kind": "MachineDeployment", "spec": {"rollout": {"after": "x"}}}, "v1beta2"),
        ({"kind": "MachineSet", "spec": {"deletePolicy": "Oldest"}}, "v1beta1"),
        ({"kind": "MachineSet", "spec": {"deletion": {"order": "Oldest"}}}, "v1beta2"),
        (
            {
                "kind": "MachineSet",
                "spec": {"template": {"spec": {"infrastructureRef": {"apiVersion": "a/v1"}}}},
            },
            "v1beta1",
        ),
        ({"kind": "Machine", "spec": {"infrastructureRef": {"apiGroup": "a"}}}, "v1beta2"),
        ({"kind": "Machine", "spec": {"nodeDrainTimeout": "10s"}}, "v1beta1"),
        ({"kind": "Machine", "status": {"v1beta2": {}}}, "v1beta1"),
        ({"kind": "Machine", "status": {"deprecated": {}}}, "v1beta2"),
        ({"kind": "MachinePool", "spec": {"minReadySeconds": 0}}, "v1beta1"),
        ({"kind": "Machine", "spec": {"minReadySeconds": 0}}, "default"),
        ({"kind": "Machine", "spec": {}}, "default"),
    ],
)
def test_the_layout_is_told_by_a_field_only_one_version_has(obj: dict, shape: str) -> None:
    assert shape_of(obj, "default") == shape


def test_the_shape_annotation_wins_over_fields() -> None:
    obj = {
        "kind": "MachineSet",
        "metadata": {"annotations": {ANNOTATION_SHAPE: "v1beta2"}},
        "spec": {"deletePolicy": "Oldest"},
    }
    assert shape_of(obj, "v1beta1") == "v1beta2"
    assert ms_deletion_order(obj, "v1beta2") == "Oldest"  # the other layout's field, as fallback


def test_settings_are_read_where_each_layout_keeps_them() -> None:
    v1 = {
        "spec": {
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": "50%", "maxUnavailable": 1, "deletePolicy": "Newest"},
            }
        }
    }
    v2 = {
        "spec": {
            "rollout": {"strategy": {"type": "OnDelete"}},
            "deletion": {"order": "Oldest"},
        }
    }
    strategy = rollout_strategy(v1, "v1beta1")
    assert (strategy.type, strategy.max_surge, strategy.max_unavailable) == (
        "RollingUpdate",
        "50%",
        1,
    )
    assert rollout_strategy(v2, "v1beta2").type == "OnDelete"
    assert rollout_strategy({"spec": {}}, "v1beta2").type == "RollingUpdate"
    assert md_deletion_order(v1, "v1beta1") == "Newest"
    assert md_deletion_order(v2, "v1beta2") == "Oldest"


def test_failures_are_found_in_either_place() -> None:
    assert failure_of({"status": {"failureReason": "R", "failureMessage": "m"}}) == ("R", "m")
    deprecated = {"status": {"deprecated": {"v1beta1": {"failureReason": "R"}}}}
    assert failure_of(deprecated) == ("R", "")
    assert failure_of({"status": {"phase": "Running"}}) is None


def test_the_template_hash_ignores_layout_and_in_place_fields() -> None:
    def md(ref: dict, **extra: object) -> dict:
        return {
            "spec": {"template": {"spec": {"version": "v1", "infrastructureRef": ref, **extra}}}
        }

    v1 = md({"apiVersion": "infra.x/v1beta1", "kind": "T", "name": "n"})
    v2 = md({"apiGroup": "infra.x", "kind": "T", "name": "n"}, nodeDrainTimeoutSeconds=5)
    assert template_hash(v1) == template_hash(v2)
    assert len(template_hash(v1)) == 10
    assert template_hash(v1) != template_hash(md({"apiGroup": "infra.x", "kind": "T", "name": "m"}))
