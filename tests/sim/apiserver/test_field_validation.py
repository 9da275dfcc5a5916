"""In process: ``fieldValidation`` (Strict, Warn, Ignore) on the write verbs.

The HTTP front passes the query parameter through (kube's default there is Warn); in process
the default is Ignore, the silent pruning controllers have always seen.
"""

from __future__ import annotations

from typing import Any

import pytest

from karpenter_capi.core.kube.errors import BadRequest, Invalid
from karpenter_capi.core.kube.resources import CONFIGMAPS
from karpenter_capi.sim.apiserver import InMemoryAPIServer

_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "properties": {
                "ports": {
                    "type": "array",
                    "items": {"type": "object", "properties": {"port": {"type": "integer"}}},
                },
                "limits": {
                    "type": "object",
                    "additionalProperties": {
                        "type": "object",
                        "properties": {"max": {"type": "integer"}},
                    },
                },
                "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "note": {"type": "string"},
            },
        }
    },
}


@pytest.fixture
def gizmos(apiserver: InMemoryAPIServer) -> InMemoryAPIServer:
    apiserver.apply_manifests(
        [
            {
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition",
                "metadata": {"name": "gizmos.example.com"},
                "spec": {
                    "group": "example.com",
                    "scope": "Namespaced",
                    "names": {"plural": "gizmos", "kind": "Gizmo"},
                    "versions": [
                        {
                            "name": "v1",
                            "served": True,
                            "storage": True,
                            "schema": {"openAPIV3Schema": _SCHEMA},
                        }
                    ],
                },
            }
        ]
    )
    return apiserver


def _gizmo(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "g", "namespace": "default"}, "spec": spec}


UNKNOWN_EVERYWHERE = {
    "ports": [{"port": 80}, {"port": 443, "name": "https"}],
    "limits": {"cpu": {"max": 2, "min": 1}},
    "extra": {"anything": {"goes": True}},
    "note": None,
    "colour": "red",
}


def test_strict_names_every_unknown_field_by_its_path(gizmos: InMemoryAPIServer) -> None:
    resource = gizmos.resource("example.com", "v1", "gizmos")
    with pytest.raises(BadRequest) as raised:
        gizmos.create(resource, _gizmo(**UNKNOWN_EVERYWHERE), field_validation="Strict")
    assert raised.value.message == (
        'Gizmo in version "v1" cannot be handled as a Gizmo: strict decoding error: '
        'unknown field "spec.colour", unknown field "spec.limits.cpu.min", '
        'unknown field "spec.ports[1].name"'
    )
    assert gizmos.list(resource).items == []


def test_warn_reports_and_prunes_and_ignore_only_prunes(gizmos: InMemoryAPIServer) -> None:
    resource = gizmos.resource("example.com", "v1", "gizmos")
    warnings: list[str] = []
    created = gizmos.create(
        resource, _gizmo(**UNKNOWN_EVERYWHERE), field_validation="Warn", warnings=warnings
    )
    assert warnings == [
        'unknown field "spec.colour"',
        'unknown field "spec.limits.cpu.min"',
        'unknown field "spec.ports[1].name"',
    ]
    assert created["spec"] == {
        "ports": [{"port": 80}, {"port": 443}],
        "limits": {"cpu": {"max": 2}},
        "extra": {"anything": {"goes": True}},
    }

    quiet: list[str] = []
    gizmos.patch(resource, "g", {"spec": {"colour": "blue"}}, "default", warnings=quiet)
    assert quiet == []  # in process the default is Ignore


def test_object_meta_is_checked_for_every_kind(apiserver: InMemoryAPIServer) -> None:
    body = {"metadata": {"name": "c", "namespace": "default", "lables": {"a": "b"}}}
    with pytest.raises(BadRequest, match=r'unknown field "metadata\.lables"'):
        apiserver.create(CONFIGMAPS, body, field_validation="Strict")
    warnings: list[str] = []
    created = apiserver.create(CONFIGMAPS, body, field_validation="Warn", warnings=warnings)
    assert warnings == ['unknown field "metadata.lables"']
    assert "lables" not in created["metadata"]  # dropped, as ObjectMeta has no such field
    updated = apiserver.update(CONFIGMAPS, {**created, "metadata": {**body["metadata"]}})
    assert "lables" not in updated["metadata"]


def test_an_unknown_directive_is_invalid(apiserver: InMemoryAPIServer) -> None:
    body = {"metadata": {"name": "c", "namespace": "default"}}
    with pytest.raises(Invalid, match=r'PatchOptions\.meta\.k8s\.io "" is invalid'):
        apiserver.patch(CONFIGMAPS, "c", body, "default", field_validation="strict")
