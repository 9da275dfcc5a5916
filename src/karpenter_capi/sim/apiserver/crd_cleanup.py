"""Deleting a CRD: apiextensions-apiserver's ``customresourcecleanup`` finalizer controller.

A CRD is not removed at once: kube gives it the ``customresourcecleanup.apiextensions.k8s.io``
finalizer and a ``Terminating`` condition, deletes its objects (their own finalizers
honoured), refuses to create new ones (405), and removes the finalizer, so the CRD goes and its
resource stops being served, once the last object is gone. This hook does each of those steps
in the write that calls for it.
"""

from __future__ import annotations

from typing import Any

from karpenter_capi.core.kube.client import WatchEventType
from karpenter_capi.core.kube.errors import MethodNotAllowed
from karpenter_capi.sim.apiserver.apiextensions import CRD_GROUP, crd_key, is_crd
from karpenter_capi.sim.apiserver.definitions import ResourceDefinition
from karpenter_capi.sim.apiserver.store import Table
from karpenter_capi.sim.apiserver.write_hook import Deletion, WriteHook

JsonObject = dict[str, Any]

CRD_CLEANUP_FINALIZER = "customresourcecleanup.apiextensions.k8s.io"


class CrdCleanup(WriteHook):
    """Empties a CRD being deleted, then lets it go."""

    def refuse_create(self, definition: ResourceDefinition) -> None:
        if not definition.custom:
            return
        crd = self._crds().objects.get(f"{definition.plural}.{definition.group}")
        if crd is not None and crd["metadata"].get("deletionTimestamp"):
            raise MethodNotAllowed(
                "create not allowed while custom resource definition is terminating",
                details={"group": definition.group, "kind": definition.plural},
            )

    def delete(self, table: Table, stored: JsonObject) -> Deletion | None:
        if not is_crd(table.definition) or stored["metadata"].get("deletionTimestamp"):
            return None
        return self._delete_crd(table, stored), False

    def after_commit(
        self, table: Table, event_type: WatchEventType, stored: JsonObject, prev: JsonObject | None
    ) -> None:
        definition = table.definition
        if definition.custom and event_type == "DELETED":
            self._maybe_finish(f"{definition.plural}.{definition.group}")

    def _crds(self) -> Table:
        return self.engine.store.tables[f"customresourcedefinitions.{CRD_GROUP}"]

    def _delete_crd(self, table: Table, crd: JsonObject) -> JsonObject:
        """Mark the CRD, delete its objects, and remove it if none is held by a finalizer."""
        engine = self.engine
        meta = crd["metadata"]
        now = engine.now()
        finalizers = list(meta.get("finalizers") or [])
        if CRD_CLEANUP_FINALIZER not in finalizers:
            finalizers.append(CRD_CLEANUP_FINALIZER)
        in_progress = "True", "InstanceDeletionInProgress", "CustomResource deletion is in progress"
        marked = engine.commit(
            table,
            "MODIFIED",
            {
                **crd,
                "metadata": {**meta, "deletionTimestamp": now, "finalizers": finalizers},
                "status": _with_terminating(crd, now, in_progress),
            },
            crd,
        )
        served = engine.served.get(crd_key(marked))
        if served is not None and served.custom:
            instances = engine.store.tables[served.group_resource]
            for key in instances.sorted_keys():
                instance = instances.objects.get(key)
                if instance is not None and not instance["metadata"].get("deletionTimestamp"):
                    engine.delete_object(instances, instance, None, None)
        self._maybe_finish(str(meta["name"]))
        return marked

    def _maybe_finish(self, name: str) -> None:
        """Drop the cleanup finalizer of a terminating CRD whose objects are all gone."""
        engine = self.engine
        crds = self._crds()
        crd = crds.objects.get(name)
        if crd is None or not crd["metadata"].get("deletionTimestamp"):
            return
        finalizers = list(crd["metadata"].get("finalizers") or [])
        if CRD_CLEANUP_FINALIZER not in finalizers:
            return
        served = engine.served.get(crd_key(crd))
        instances = None if served is None else engine.store.tables[served.group_resource]
        if instances is not None and instances.objects:
            return
        finalizers.remove(CRD_CLEANUP_FINALIZER)
        meta = {**crd["metadata"], "finalizers": finalizers}
        if not finalizers:
            meta.pop("finalizers")
        status = _with_terminating(
            crd, engine.now(), ("False", "InstanceDeletionCompleted", "removed all instances")
        )
        new = {**crd, "metadata": meta, "status": status}
        if finalizers:
            engine.commit(crds, "MODIFIED", new, crd)
        else:
            engine.finish_deletion(crds, new, crd)


def _with_terminating(crd: JsonObject, now: str, condition_of: tuple[str, str, str]) -> JsonObject:
    """The CRD's status with its ``Terminating`` condition (status, reason, message) set."""
    status, reason, message = condition_of
    current = crd.get("status") or {}
    conditions = list(current.get("conditions") or [])
    previous = next((c for c in conditions if c.get("type") == "Terminating"), None)
    since = now
    if previous is not None and previous.get("status") == status:
        since = previous.get("lastTransitionTime") or now
    condition = {
        "type": "Terminating",
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since,
    }
    others = [c for c in conditions if c.get("type") != "Terminating"]
    return {**current, "conditions": [*others, condition]}
