"""Namespace lifecycle: kube's NamespaceLifecycle admission plus the namespace controller.

In a real cluster two components own a namespace's end. The ``NamespaceLifecycle`` admission
plugin refuses content for a namespace that does not exist or is being terminated; the
namespace controller, once a namespace is marked for deletion (phase ``Terminating``), deletes
everything in it and removes the namespace when it is empty and has no finalizers left. Both
run here, synchronously: ``require_open_namespace`` is the admission check the engine makes on
create, ``NamespaceLifecycle`` the write hook doing the teardown.
"""

from __future__ import annotations

from typing import Any

from karpenter_capi.core.kube.client import PropagationPolicy, WatchEventType
from karpenter_capi.sim.apiserver import messages
from karpenter_capi.sim.apiserver.definitions import ResourceDefinition
from karpenter_capi.sim.apiserver.store import Store, Table
from karpenter_capi.sim.apiserver.write_hook import Deletion, WriteHook

JsonObject = dict[str, Any]


def require_open_namespace(
    store: Store, definition: ResourceDefinition, namespace: str, meta: JsonObject
) -> None:
    """Refuse a create into a namespace that is missing (404) or terminating (403)."""
    found = store.tables["namespaces"].objects.get(namespace)
    if found is None:
        raise messages.namespace_not_found(namespace)
    if found["metadata"].get("deletionTimestamp"):
        raise messages.forbidden(
            definition,
            str(meta.get("name") or meta.get("generateName") or ""),
            f"unable to create new content in namespace {namespace} because it is being terminated",
        )


def _is_namespaces(table: Table) -> bool:
    return table.definition.group == "" and table.definition.plural == "namespaces"


class NamespaceLifecycle(WriteHook):
    """Deleting a namespace empties it; the last object going removes the namespace."""

    def delete(self, table: Table, stored: JsonObject) -> Deletion | None:
        if not _is_namespaces(table):
            return None
        return self._delete_namespace(table, stored), False

    def after_commit(
        self, table: Table, event_type: WatchEventType, stored: JsonObject, prev: JsonObject | None
    ) -> None:
        if event_type != "DELETED":
            return
        namespace = stored["metadata"].get("namespace")
        if namespace:
            self._maybe_finalize(str(namespace))

    def _delete_namespace(self, table: Table, stored: JsonObject) -> JsonObject:
        """Mark the namespace Terminating, delete its content, remove it once empty."""
        engine = self.engine
        name = str(stored["metadata"]["name"])
        if not stored["metadata"].get("deletionTimestamp"):
            meta = {
                **stored["metadata"],
                "deletionTimestamp": engine.now(),
                "deletionGracePeriodSeconds": 0,
            }
            status = {**(stored.get("status") or {}), "phase": "Terminating"}
            stored = engine.commit(
                table, "MODIFIED", {**stored, "metadata": meta, "status": status}, stored
            )
        for content_table in list(engine.store.tables.values()):
            if not content_table.definition.namespaced:
                continue
            prefix = f"{name}/"
            for key in [k for k in content_table.objects if k.startswith(prefix)]:
                obj = content_table.objects.get(key)
                if obj is not None and not obj["metadata"].get("deletionTimestamp"):
                    engine.delete_object(content_table, obj, PropagationPolicy.BACKGROUND, None)
        self._maybe_finalize(name)
        return stored

    def _maybe_finalize(self, name: str) -> None:
        store = self.engine.store
        namespaces = store.tables["namespaces"]
        namespace = namespaces.objects.get(name)
        if namespace is None or not namespace["metadata"].get("deletionTimestamp"):
            return
        if store.namespace_counts.get(name, 0) > 0:
            return
        if namespace["metadata"].get("finalizers"):
            return
        self.engine.finish_deletion(namespaces, namespace, namespace)
