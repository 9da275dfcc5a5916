"""Deletion as Kubernetes does it: finalizers, ownerReference cascades, namespace teardown.

Karpenter's termination flow is built on these rules (a NodeClaim with the
``karpenter.sh/termination`` finalizer stays, with a deletionTimestamp, until the controller
has drained and removed the instance), and CAPI objects form ownership chains
(MachineDeployment -> MachineSet -> Machine) that garbage collection tears down. Here the
garbage collector runs synchronously inside the write that triggers it, so tests and the
simulation see the cascade's outcome immediately and deterministically; kube's is
asynchronous, which only changes when, not what.

The collector follows kube's ``attemptToDeleteItem``: a dependent with an owner that still
exists (and is not itself waiting for its dependents) is kept, minus its references to owners
that are gone or waiting; otherwise it is deleted, in the foreground when one of its owners is
being deleted in the foreground and it has dependents of its own, so a foreground deletion
waits for the whole blocking subtree. ``Orphan`` and ``Foreground`` mark the owner with the
``orphan`` or ``foregroundDeletion`` finalizer, as kube-apiserver does, and the collector
removes it once its work is done.

Pods are deleted immediately unless they carry finalizers (no kubelet-driven grace period):
the simulated kubelet has nothing to shut down, and a deterministic simulation wants the pod
gone when the eviction or delete returns.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from karpenter_capi.core.clock import format_timestamp
from karpenter_capi.core.kube.client import PropagationPolicy, WatchEventType
from karpenter_capi.sim.apiserver.engine import Engine
from karpenter_capi.sim.apiserver.store import Table, key_of

JsonObject = dict[str, Any]

FOREGROUND_FINALIZER = "foregroundDeletion"
ORPHAN_FINALIZER = "orphan"
_GC_FINALIZERS = (ORPHAN_FINALIZER, FOREGROUND_FINALIZER)

# What a delete answers: the object (as marked for deletion, or as last stored when it went at
# once) and whether it was removed by this very call (kube's ``wasDeleted``).
Deletion = tuple[JsonObject, bool]


def _grace_period(table: Table, stored: JsonObject, requested: int | None) -> int:
    """The grace period kube-apiserver records on a deletion it cannot finish at once.

    For pods it is what the request asked for, else ``spec.terminationGracePeriodSeconds``,
    else 30; 0 for a pod no kubelet runs (unbound, or already finished), as the pod strategy's
    ``CheckGracefulDelete``. ``deletionTimestamp`` is then that far in the future: the moment
    the kubelet is expected to be done. Other kinds have no grace period.
    """
    if table.definition.group != "" or table.definition.plural != "pods":
        return requested or 0
    spec, status = stored.get("spec") or {}, stored.get("status") or {}
    if not spec.get("nodeName") or status.get("phase") in ("Succeeded", "Failed"):
        return 0
    if requested is not None:
        return max(0, requested)
    configured = spec.get("terminationGracePeriodSeconds")
    return 30 if configured is None else max(0, int(configured))


class Lifecycle(Engine):
    """Delete, finalize, and garbage-collect. The lock must be held by every caller."""

    def _delete_object(
        self,
        table: Table,
        stored: JsonObject,
        policy: PropagationPolicy | None,
        grace_period_seconds: int | None,
    ) -> Deletion:
        """Delete ``stored``. ``policy=None`` keeps what the object's GC finalizers ask for."""
        special = self._delete_hook(table, stored)
        if special is not None:
            return special
        meta = stored["metadata"]
        existing = list(meta.get("finalizers") or [])
        finalizers = [f for f in existing if f not in _GC_FINALIZERS]
        orphan = policy == PropagationPolicy.ORPHAN or (
            policy is None and ORPHAN_FINALIZER in existing
        )
        foreground = policy == PropagationPolicy.FOREGROUND or (
            policy is None and FOREGROUND_FINALIZER in existing and not orphan
        )
        if orphan:
            finalizers.append(ORPHAN_FINALIZER)
        if foreground:
            finalizers.append(FOREGROUND_FINALIZER)
        deleting = bool(meta.get("deletionTimestamp"))
        if not finalizers:
            final = stored
            if existing:  # a re-delete that drops the last GC finalizer
                final = {**stored, "metadata": {k: v for k, v in meta.items() if k != "finalizers"}}
            return self._finish_deletion(table, final, stored), True
        if deleting and set(finalizers) == set(existing):
            return stored, False
        new_meta = {**meta, "finalizers": finalizers}
        if not deleting:
            grace = _grace_period(table, stored, grace_period_seconds)
            moment = self.clock.now() + timedelta(seconds=grace)
            new_meta["deletionTimestamp"] = format_timestamp(moment)
            new_meta["deletionGracePeriodSeconds"] = grace
            if meta.get("generation"):  # kube bumps generation only where it is tracked
                new_meta["generation"] = int(meta["generation"]) + 1
        marked = self._commit(table, "MODIFIED", {**stored, "metadata": new_meta}, stored)
        uid = str(meta["uid"])
        if orphan:
            self._orphan_dependents(uid)
            self._remove_gc_finalizer(uid, ORPHAN_FINALIZER)
        elif foreground:
            self._delete_dependents_in_foreground(uid)
        return marked, False

    def _delete_hook(self, table: Table, stored: JsonObject) -> Deletion | None:
        """Kinds whose deletion is their own (namespaces here, CRDs in ``controllers``)."""
        if table.definition.group == "" and table.definition.plural == "namespaces":
            return self._delete_namespace(table, stored), False
        return None

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
            self._drop_owner_references(dependent_table, dependent, {owner_uid})

    def _drop_owner_references(self, table: Table, dependent: JsonObject, uids: set[str]) -> None:
        meta = dependent["metadata"]
        refs = [r for r in meta.get("ownerReferences") or [] if str(r.get("uid")) not in uids]
        new_meta = {**meta, "ownerReferences": refs}
        if not refs:
            new_meta.pop("ownerReferences")
        self._commit(table, "MODIFIED", {**dependent, "metadata": new_meta}, dependent)

    def _collect_dependents(self, owner_uid: str) -> None:
        """Background cascade: reconsider every dependent of an owner that is gone."""
        for dependent_table, dependent in self._store.dependents_of(owner_uid):
            self._attempt_to_delete(dependent_table, dependent)

    def _delete_dependents_in_foreground(self, owner_uid: str) -> None:
        for dependent_table, dependent in self._store.dependents_of(owner_uid):
            self._attempt_to_delete(dependent_table, dependent)
        self._release_foreground_owner(owner_uid)

    def _attempt_to_delete(self, table: Table, dependent: JsonObject) -> None:
        """kube's ``attemptToDeleteItem`` for one dependent whose owners may be going."""
        current = table.objects.get(key_of(dependent))
        if current is None or current["metadata"].get("uid") != dependent["metadata"].get("uid"):
            return
        meta = current["metadata"]
        if meta.get("deletionTimestamp"):
            return  # already being deleted; its own finalizers decide the rest
        solid, gone_or_waiting, waiting = self._classify_owners(current)
        if solid:
            if gone_or_waiting:
                self._drop_owner_references(table, current, gone_or_waiting)
            return
        uid = str(meta.get("uid"))
        policy: PropagationPolicy | None = None  # honour the dependent's own GC finalizers
        if waiting and self._store.dependents_of(uid):
            policy = PropagationPolicy.FOREGROUND
        self._delete_object(table, current, policy, None)

    def _classify_owners(self, obj: JsonObject) -> tuple[bool, set[str], bool]:
        """(any solid owner, uids of owners gone or waiting, any owner waiting)."""
        solid = False
        waiting = False
        gone_or_waiting: set[str] = set()
        for uid in _owner_uids(obj):
            owner = self._store.lookup_uid(uid)
            if owner is None:
                gone_or_waiting.add(uid)
            elif owner["metadata"].get("deletionTimestamp") and FOREGROUND_FINALIZER in (
                owner["metadata"].get("finalizers") or []
            ):
                gone_or_waiting.add(uid)
                waiting = True
            else:
                solid = True
        return solid, gone_or_waiting, waiting

    def _release_foreground_owner(self, owner_uid: str) -> None:
        """Drop ``foregroundDeletion`` once no dependent blocks the owner's deletion."""
        owner = self._store.lookup_uid(owner_uid)
        if owner is None:
            return
        meta = owner["metadata"]
        if not meta.get("deletionTimestamp") or FOREGROUND_FINALIZER not in (
            meta.get("finalizers") or []
        ):
            return
        for _table, dependent in self._store.dependents_of(owner_uid):
            for ref in dependent["metadata"].get("ownerReferences") or []:
                if ref.get("uid") == owner_uid and ref.get("blockOwnerDeletion"):
                    return
        self._remove_gc_finalizer(owner_uid, FOREGROUND_FINALIZER)

    def _remove_gc_finalizer(self, owner_uid: str, finalizer: str) -> None:
        owner = self._store.lookup_uid(owner_uid)
        if owner is None:
            return
        meta = owner["metadata"]
        finalizers = [f for f in meta.get("finalizers") or [] if f != finalizer]
        owner_table = self._store.tables[self._store.by_uid[owner_uid][0]]
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
        return stored

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
