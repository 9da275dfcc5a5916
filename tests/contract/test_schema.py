"""Contract: custom resources are pruned, defaulted and validated by their CRD's schema."""

from __future__ import annotations

from typing import Any

import pytest

from karpenter_capi.core.kube.client import KubeClient
from karpenter_capi.core.kube.errors import Invalid
from karpenter_capi.core.kube.resources import CUSTOM_RESOURCE_DEFINITIONS, Resource

WIDGETS = Resource("example.com", "v1", "widgets", "Widget", True)

_SPEC_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["size"],
    "properties": {
        "size": {"type": "integer", "minimum": 1, "maximum": 10},
        "colour": {"type": "string", "enum": ["red", "blue"], "default": "red"},
        "nickname": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 5},
        "tags": {
            "type": "array",
            "items": {"type": "string"},
            "maxItems": 3,
            "x-kubernetes-list-type": "set",
        },
        "budget": {"x-kubernetes-int-or-string": True},
        "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
    },
}


@pytest.fixture
def widgets(kube: KubeClient) -> KubeClient:
    kube.create(
        CUSTOM_RESOURCE_DEFINITIONS,
        {
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com",
                "scope": "Namespaced",
                "names": {"plural": "widgets", "kind": "Widget"},
                "versions": [
                    {
                        "name": "v1",
                        "served": True,
                        "storage": True,
                        "schema": {
                            "openAPIV3Schema": {
                                "type": "object",
                                "properties": {
                                    "apiVersion": {"type": "string"},
                                    "kind": {"type": "string"},
                                    "metadata": {"type": "object"},
                                    "spec": _SPEC_SCHEMA,
                                    "status": {
                                        "type": "object",
                                        "properties": {"ready": {"type": "boolean"}},
                                    },
                                },
                            }
                        },
                        "subresources": {"status": {}},
                    }
                ],
            },
        },
    )
    return kube


def _widget(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "namespace": "default"},
        "spec": spec,
    }


def test_unknown_fields_are_pruned_and_open_fields_kept(widgets: KubeClient) -> None:
    created = widgets.create(
        WIDGETS,
        {
            **_widget(size=2, typo=True, extra={"any": {"thing": 1}}, labels={"a": "b"}),
            "unknownTopLevel": 1,
        },
    )
    assert created["spec"] == {
        "size": 2,
        "colour": "red",
        "extra": {"any": {"thing": 1}},
        "labels": {"a": "b"},
    }
    assert "unknownTopLevel" not in created


def test_defaults_are_applied_on_create_and_update(widgets: KubeClient) -> None:
    created = widgets.create(WIDGETS, _widget(size=2))
    assert created["spec"]["colour"] == "red"

    blue = widgets.patch(WIDGETS, "w", {"spec": {"colour": "blue"}}, "default")
    assert blue["spec"]["colour"] == "blue"
    cleared = widgets.patch(WIDGETS, "w", {"spec": {"colour": None}}, "default")
    assert cleared["spec"]["colour"] == "red"


@pytest.mark.parametrize(
    ("spec", "field", "fragment"),
    [
        ({"size": "3"}, "spec.size", "spec.size in body must be of type integer"),
        ({"size": 0}, "spec.size", "should be greater than or equal to 1"),
        ({"size": 11}, "spec.size", "should be less than or equal to 10"),
        ({"size": 1, "colour": "green"}, "spec.colour", 'supported values: "red", "blue"'),
        ({"size": 1, "nickname": "Bob"}, "spec.nickname", "should match '^[a-z]+$'"),
        ({"size": 1, "nickname": "abcdefg"}, "spec.nickname", "Too long"),
        ({"size": 1, "tags": ["a", "a"]}, "spec.tags[1]", "Duplicate value"),
        ({"size": 1, "tags": ["a", "b", "c", "d"]}, "spec.tags", "must have at most 3 items"),
        ({"size": 1, "budget": True}, "spec.budget", "must be of type integer or string"),
        ({"size": 1, "labels": {"a": 1}}, "spec.labels.a", "must be of type string"),
        ({}, "spec.size", "Required value"),
    ],
)
def test_schema_violations_are_422(
    widgets: KubeClient, spec: dict[str, Any], field: str, fragment: str
) -> None:
    with pytest.raises(Invalid) as raised:
        widgets.create(WIDGETS, _widget(**spec))
    error = raised.value
    assert error.message.startswith('Widget.example.com "w" is invalid: ')
    assert fragment in error.message
    assert [c["field"] for c in error.details["causes"]] == [field]


def test_status_writes_are_validated_too(widgets: KubeClient) -> None:
    widgets.create(WIDGETS, _widget(size=1))
    with pytest.raises(Invalid, match=r"status\.ready in body must be of type boolean"):
        widgets.patch(WIDGETS, "w", {"status": {"ready": "yes"}}, "default", subresource="status")
    ready = widgets.patch(
        WIDGETS, "w", {"status": {"ready": True}}, "default", subresource="status"
    )
    assert ready["status"] == {"ready": True}


def test_int_or_string_accepts_both(widgets: KubeClient) -> None:
    assert widgets.create(WIDGETS, _widget(size=1, budget="10%"))["spec"]["budget"] == "10%"
    assert widgets.patch(WIDGETS, "w", {"spec": {"budget": 3}}, "default")["spec"]["budget"] == 3
