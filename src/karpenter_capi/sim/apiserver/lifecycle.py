"""Deletion as Kubernetes does it: finalizers, ownerReference cascades, namespace teardown.

Karpenter's termination flow is built on these rules (a NodeClaim with the
``karpenter.sh/termination`` finalizer stays, with a deletionTimestamp, until the controller
has drained and removed the instance), and CAPI objects form ownership chains
(MachineDeployment -> MachineSet -> Machine) that garbage collection tears down. Here the
garbage collector runs synchronously inside the write that triggers it, so tests and the
simulation see the cascade's outcome immediately and deterministically; kube's is
asynchronous, which only changes when, not what.

Pods are deleted immediately unless they carry finalizers (no kubelet-driven grace period):
the simulated kubelet has nothing to shut down, and a deterministic simulation wants the pod
gone when the eviction or delete returns.
"""

from __future__ import annotations

from typing import Any

from karpenter_capi.core.kube.client import PropagationPolicy, WatchEventType
from karpenter_capi.sim.apiserver.engine import Engine
from karpenter_capi.sim.apiserver.store import Table, key_of

JsonObject = dict[str, Any]

FOREGROUND_FINALIZER = "foregroundDeletion"


class Lifecycle(Engine):
    """Delete, finalize, and garbage-collect. The lock must be held by every caller."""

    def _delete_object(
        self,
        table: Table,
        stored: JsonObject,
        policy: PropagationPolicy,
        grace_period_seconds: int | None,
    ) -> JsonObject:
        meta = stored["metadata"]
        uid = str(meta["uid"])
        if policy == PropagationPolicy.ORPHAN:
            self._orphan_dependents(uid)
            stored = table.objects.get(key_of(stored), stored)
            meta = stored["metadata"]
        if table.definition.group == "" and table.definition.plural == "namespaces":
            return self._delete_namespace(table, stored)
        finalizers = list(meta.get("finalizers") or [])
        if policy == PropagationPolicy.FOREGROUND and FOREGROUND_FINALIZER not in finalizers:
            finalizers.append(FOREGROUND_FINALIZER)
        if not finalizers:
            return self._finish_deletion(table, stored, stored)
        if not meta.get("deletionTimestamp") or finalizers != list(meta.get("finalizers") or []):
            new_meta = {**meta, "finalizers": finalizers}
            if not meta.get("deletionTimestamp"):
                new_meta["deletionTimestamp"] = self._now()
                new_meta["deletionGracePeriodSeconds"] = grace_period_seconds or 0
                new_meta["generation"] = int(meta.get("generation") or 1) + 1
            stored = self._commit(table, "MODIFIED", {**stored, "metadata": new_meta}, stored)
        if FOREGROUND_FINALIZER in finalizers:
            for dependent_table, dependent in self._store.dependents_of(uid):
                if not dependent["metadata"].get("deletionTimestamp"):
                    self._delete_object(
                        dependent_table, dependent, PropagationPolicy.BACKGROUND, None
                    )
            self._release_foreground_owner(uid)
        return table.objects.get(key_of(stored), stored)

    def _finish_deletion(self, table: Table, final: JsonObject, stored: JsonObject) -> JsonObject:
        return self._commit(table, "DELETED", final, stored)

    def _after_commit(
        self, table: Table, event_type: WatchEventType, stored: JsonObject, prev: JsonObject | None
    ) -> None:
        if event_type == "DELETED":
            self._collect_dependents(str(stored["metadata"].get("uid")))
            for owner_uid in _owner_uids(stored):
                self._release_foreground_owner(owner_uid)
            namespace = stored["metadata"].get("namespace")
            if namespace:
                self._maybe_finalize_namespace(str(namespace))
        elif event_type == "MODIFIED" and prev is not None:
            for owner_uid in _owner_uids(prev) - _owner_uids(stored):
                self._release_foreground_owner(owner_uid)

    # --------------------------------------------------------------------- garbage collection

    def _orphan_dependents(self, owner_uid: str) -> None:
        for dependent_table, dependent in self._store.dependents_of(owner_uid):
            meta = dependent["metadata"]
            refs = [r for r in meta.get("ownerReferences") or [] if r.get("uid") != owner_uid]
            new_meta = {**meta, "ownerReferences": refs}
            if not refs:
                new_meta.pop("ownerReferences")
            self._commit(
                dependent_table, "MODIFIED", {**dependent, "metadata": new_meta}, dependent
            )

    def _collect_dependents(self, owner_uid: str) -> None:
        """Background cascade: delete dependents none of whose owners exist any more."""
        for dependent_table, dependent in self._store.dependents_of(owner_uid):
            if dependent["metadata"].get("deletionTimestamp"):
                continue
            if any(self._store.lookup_uid(uid) is not None for uid in _owner_uids(dependent)):
                continue
            current = dependent_table.objects.get(key_of(dependent))
            if current is not None:
                self._delete_object(dependent_table, current, PropagationPolicy.BACKGROUND, None)

    def _release_foreground_owner(self, owner_uid: str) -> None:
        """Drop ``foregroundDeletion`` once no dependent blocks the owner's deletion."""
        owner = self._store.lookup_uid(owner_uid)
        if owner is None:
            return
        meta = owner["metadata"]
        finalizers = list(meta.get("finalizers") or [])
        if not meta.get("deletionTimestamp") or FOREGROUND_FINALIZER not in finalizers:
            return
        for _table, dependent in self._store.dependents_of(owner_uid):
            for ref in dependent["metadata"].get("ownerReferences") or []:
                if ref.get("uid") == owner_uid and ref.get("blockOwnerDeletion"):
                    return
        ref = self._store.by_uid[owner_uid]
        owner_table = self._store.tables[ref[0]]
        finalizers.remove(FOREGROUND_FINALIZER)
        new = {**owner, "metadata": {**meta, "finalizers": finalizers}}
        if not finalizers:
            new["metadata"].pop("finalizers")
            self._finish_deletion(owner_table, new, owner)
        else:
            self._commit(owner_table, "MODIFIED", new, owner)

    # ---------------------------------------------------------------------------- namespaces

    def _delete_namespace(self, table: Table, stored: JsonObject) -> JsonObject:
        """Mark the namespace Terminating, delete its content, remove it once empty."""
        name = str(stored["metadata"]["name"])
        if not stored["metadata"].get("deletionTimestamp"):
            meta = {
                **stored["metadata"],
                "deletionTimestamp": self._now(),
                "deletionGracePeriodSeconds": 0,
            }
            status = {**(stored.get("status") or {}), "phase": "Terminating"}
            stored = self._commit(
                table, "MODIFIED", {**stored, "metadata": meta, "status": status}, stored
            )
        for content_table in list(self._store.tables.values()):
            if not content_table.definition.namespaced:
                continue
            prefix = f"{name}/"
            for key in [k for k in content_table.objects if k.startswith(prefix)]:
                obj = content_table.objects.get(key)
                if obj is not None and not obj["metadata"].get("deletionTimestamp"):
                    self._delete_object(content_table, obj, PropagationPolicy.BACKGROUND, None)
        self._maybe_finalize_namespace(name)
        return table.objects.get(name, stored)

    def _maybe_finalize_namespace(self, name: str) -> None:
        namespaces = self._store.tables["namespaces"]
        namespace = namespaces.objects.get(name)
        if namespace is None or not namespace["metadata"].get("deletionTimestamp"):
            return
        if self._store.namespace_counts.get(name, 0) > 0:
            return
        if namespace["metadata"].get("finalizers"):
            return
        self._finish_deletion(namespaces, namespace, namespace)


def _owner_uids(obj: JsonObject) -> set[str]:
    refs = obj["metadata"].get("ownerReferences") or []
    return {str(ref["uid"]) for ref in refs if ref.get("uid")}
