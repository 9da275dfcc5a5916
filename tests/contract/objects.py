"""Object builders and stream helpers shared by the contract tests.

Kept tiny on purpose: each test should show the object it sends, so only the boilerplate every
pod, node and owner needs lives here.
"""

from __future__ import annotations

from typing import Any

from karpenter_capi.core.kube.client import WatchEvent, WatchStream

JsonObject = dict[str, Any]


def pod(
    name: str,
    namespace: str = "default",
    *,
    labels: dict[str, str] | None = None,
    node: str | None = None,
    owners: list[JsonObject] | None = None,
    finalizers: list[str] | None = None,
) -> JsonObject:
    metadata: JsonObject = {"name": name, "namespace": namespace, "labels": labels or {}}
    if owners:
        metadata["ownerReferences"] = owners
    if finalizers:
        metadata["finalizers"] = finalizers
    spec: JsonObject = {"containers": [{"name": "app", "image": "nginx"}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def node(name: str, *, labels: dict[str, str] | None = None) -> JsonObject:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"providerID": f"sim:///{name}"},
    }


def configmap(name: str, namespace: str = "default", **data: str) -> JsonObject:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": dict(data),
    }


def owner_ref(owner: JsonObject, *, block: bool = False) -> JsonObject:
    ref: JsonObject = {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
    }
    if block:
        ref["blockOwnerDeletion"] = True
    return ref


def take(stream: WatchStream, count: int) -> list[WatchEvent]:
    """Read ``count`` events (fewer if the stream ends first), then close the stream."""
    events: list[WatchEvent] = []
    try:
        if count > 0:
            for event in stream:
                events.append(event)
                if len(events) >= count:
                    break
    finally:
        stream.close()
    return events


def summary(events: list[WatchEvent]) -> list[tuple[str, str]]:
    """``(type, name)`` pairs, bookmarks shown with an empty name."""
    return [(e.type, str(e.object.get("metadata", {}).get("name", ""))) for e in events]
