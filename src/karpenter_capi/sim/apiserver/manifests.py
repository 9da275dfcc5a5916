"""Loading YAML-style manifests into the in-memory API server (``kubectl apply`` for fixtures).

Scenario files and tests describe a cluster as a list of documents: CRDs, namespaces, CAPI
objects, nodes. Applying them must work in one pass even when a custom resource comes before
its CRD in the file, so documents are ordered the way ``kubectl apply`` users expect
(CRDs, then namespaces, then everything else) before each is created or replaced.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from karpenter_capi.core.kube.errors import BadRequest, NotFound
from karpenter_capi.core.kube.resources import Resource

if TYPE_CHECKING:
    from karpenter_capi.sim.apiserver.server import InMemoryAPIServer

JsonObject = dict[str, Any]


def _flatten(docs: Iterable[JsonObject | None]) -> list[JsonObject]:
    flat: list[JsonObject] = []
    for doc in docs:
        if not doc:
            continue
        if not isinstance(doc, dict):
            raise BadRequest(f"a manifest must be a mapping, got {type(doc).__name__}")
        if str(doc.get("kind", "")).endswith("List") and isinstance(doc.get("items"), list):
            flat.extend(_flatten(doc["items"]))
        else:
            flat.append(doc)
    return flat


def _order(doc: JsonObject) -> int:
    kind = doc.get("kind")
    if kind == "CustomResourceDefinition":
        return 0
    return 1 if kind == "Namespace" else 2


def _resource_for(server: InMemoryAPIServer, doc: JsonObject) -> Resource:
    api_version = str(doc.get("apiVersion") or "")
    kind = str(doc.get("kind") or "")
    group, _, version = api_version.rpartition("/")
    for definition in server.definitions():
        if definition.group == group and definition.kind == kind and version in definition.versions:
            return definition.resource(version)
    raise NotFound(f'no matches for kind "{kind}" in version "{api_version}"')


def apply_manifests(
    server: InMemoryAPIServer, docs: Iterable[JsonObject | None]
) -> list[JsonObject]:
    """Create or replace every document; a ``status`` in a document is kept."""
    applied: list[JsonObject] = []
    for doc in sorted(_flatten(docs), key=_order):
        resource = _resource_for(server, doc)
        meta = doc.get("metadata") or {}
        namespace = (meta.get("namespace") or "default") if resource.namespaced else None
        try:
            current = server.get(resource, str(meta.get("name", "")), namespace)
        except NotFound:
            current = None
        if current is None or not meta.get("name"):
            applied.append(server.seed(resource, doc, namespace))
            continue
        body = {
            **doc,
            "metadata": {**meta, "resourceVersion": current["metadata"]["resourceVersion"]},
        }
        if namespace:
            body["metadata"]["namespace"] = namespace
        written = server.update(resource, body)
        definition = server.definition(resource.group, resource.version, resource.plural)
        if definition.has_status and "status" in doc:
            status_body = {
                **written,
                "status": doc["status"],
            }
            written = server.update(resource, status_body, subresource="status")
        applied.append(written)
    return applied
