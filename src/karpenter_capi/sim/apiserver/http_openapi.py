"""The smallest OpenAPI v3 documents that let ``kubectl create/apply`` validate server-side.

kubectl validates manifests before sending them. It first reads ``/openapi/v3`` to learn
whether the server checks fields itself (the ``fieldValidation`` query parameter on each kind's
PATCH operation); if it cannot tell, it falls back to downloading the full v2 schema and fails
without it. The simulated server publishes, per group-version, one PATCH operation per kind
that declares ``fieldValidation``, so kubectl hands validation to the server: it sends
``fieldValidation=Strict`` (``--validate=strict``, its default) or ``Warn``, which the server
honours for what it can tell is unknown (fields outside a custom resource's schema, keys outside
ObjectMeta). No schemas are published: nothing here pretends to describe the types.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import TYPE_CHECKING

from karpenter_capi.core.kube.client import JsonObject

if TYPE_CHECKING:
    from karpenter_capi.sim.apiserver.definitions import ResourceDefinition


def _gv_key(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def openapi_root(definitions: Iterable[ResourceDefinition]) -> JsonObject:
    """``/openapi/v3``: where each group-version's document lives."""
    paths: JsonObject = {}
    for definition in definitions:
        for version in definition.versions:
            key = _gv_key(definition.group, version)
            digest = hashlib.sha256(key.encode()).hexdigest()[:16].upper()
            paths[key] = {"serverRelativeURL": f"/openapi/v3/{key}?hash={digest}"}
    return {"paths": dict(sorted(paths.items()))}


def openapi_group_version(
    definitions: Iterable[ResourceDefinition], group: str, version: str, server_version: str
) -> JsonObject | None:
    """``/openapi/v3/api/v1`` and ``/openapi/v3/apis/<g>/<v>``; ``None`` when not served."""
    paths: JsonObject = {}
    for definition in definitions:
        if definition.group != group or version not in definition.versions:
            continue
        prefix = f"/apis/{group}/{version}" if group else f"/api/{version}"
        scope = "/namespaces/{namespace}" if definition.namespaced else ""
        paths[f"{prefix}{scope}/{definition.plural}/{{name}}"] = {
            "patch": {
                "operationId": f"patch{definition.kind}",
                "x-kubernetes-group-version-kind": {
                    "group": group,
                    "version": version,
                    "kind": definition.kind,
                },
                "parameters": [
                    {
                        "name": "fieldValidation",
                        "in": "query",
                        "description": "Strict, Warn or Ignore: how to treat unknown fields.",
                        "schema": {"type": "string", "uniqueItems": True},
                    }
                ],
                "responses": {"200": {"description": "OK"}},
            }
        }
    if not paths:
        return None
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": server_version},
        "paths": paths,
        "components": {"schemas": {}},
    }
