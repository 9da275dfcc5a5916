"""Garbage collection by ownerReferences: kube-controller-manager's garbage collector.

CAPI objects form ownership chains (MachineDeployment -> MachineSet -> Machine) that garbage
collection tears down, and Karpenter's termination flow relies on dependents going with their
owner. Here the collector runs synchronously inside the write that triggers it, so tests and
the simulation see the cascade's outcome immediately and deterministically; kube's is
asynchronous, which only changes when, not what.

The collector follows kube's ``attemptToDeleteItem``: a dependent with an owner that still
exists (and is not itself waiting for its dependents) is kept, minus its references to owners
that are gone or waiting; otherwise it is deleted, in the foreground when one of its owners is
being deleted in the foreground and it has dependents of its own, so a foreground deletion
waits for the whole blocking subtree. The delete verb records an ``Orphan`` or ``Foreground``
policy as the ``orphan`` or ``foregroundDeletion`` finalizer, as kube-apiserver does; this
hook sees the marked object committed, does the orphaning or the foreground cascade, and
removes the finalizer once its work is done.
"""

from __future__ import annotations

from typing import Any

from karpenter_capi.core.kube.client import PropagationPolicy, WatchEventType
from karpenter_capi.sim.apiserver.engine import FOREGROUND_FINALIZER, ORPHAN_FINALIZER
from karpenter_capi.sim.apiserver.store import Table, key_of, same_owners
from karpenter_capi.sim.apiserver.write_hook import WriteHook

JsonObject = dict[str, Any]


class GarbageCollector(WriteHook):
    """Cascades deletions to dependents and honours orphan and foreground policies."""

    def after_commit(
        self, table: Table, event_type: WatchEventType, stored: JsonObject, prev: JsonObject | None
    ) -> None:
        if event_type == "DELETED":
            self._collect_dependents(str(stored["metadata"].get("uid")))
            for owner_uid in owner_uids(stored):
                self._release_foreground_owner(owner_uid)
        elif event_type == "MODIFIED" and prev is not None:
            if not same_owners(prev, stored):
                for owner_uid in owner_uids(prev) - owner_uids(stored):
                    self._release_foreground_owner(owner_uid)
            self._propagate(stored, prev)

    def _propagate(self, stored: JsonObject, prev: JsonObject) -> None:
        """Act on an orphan or foreground policy the delete verb has just recorded."""
        meta = stored["metadata"]
        if not meta.get("deletionTimestamp"):
            return
        finalizers = meta.get("finalizers") or []
        uid = str(meta["uid"])
        if ORPHAN_FINALIZER in finalizers:
            # The collector removes ``orphan`` as soon as it is done, so it is always new here.
            for dependent_table, dependent in self.engine.store.dependents_of(uid):
                self._drop_owner_references(dependent_table, dependent, {uid})
            self._remove_gc_finalizer(uid, ORPHAN_FINALIZER)
        elif FOREGROUND_FINALIZER in finalizers:
            before = prev["metadata"]
            if before.get("deletionTimestamp") and FOREGROUND_FINALIZER in (
                before.get("finalizers") or []
            ):
                return  # already waiting for its dependents
            for dependent_table, dependent in self.engine.store.dependents_of(uid):
                self._attempt_to_delete(dependent_table, dependent)
            self._release_foreground_owner(uid)

    def _drop_owner_references(self, table: Table, dependent: JsonObject, uids: set[str]) -> None:
        meta = dependent["metadata"]
        refs = [r for r in meta.get("ownerReferences") or [] if str(r.get("uid")) not in uids]
        new_meta = {**meta, "ownerReferences": refs}
        if not refs:
            new_meta.pop("ownerReferences")
        self.engine.commit(table, "MODIFIED", {**dependent, "metadata": new_meta}, dependent)

    def _collect_dependents(self, owner_uid: str) -> None:
        """Background cascade: reconsider every dependent of an owner that is gone."""
        for dependent_table, dependent in self.engine.store.dependents_of(owner_uid):
            self._attempt_to_delete(dependent_table, dependent)

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
        if waiting and self.engine.store.dependents_of(uid):
            policy = PropagationPolicy.FOREGROUND
        self.engine.delete_object(table, current, policy, None)

    def _classify_owners(self, obj: JsonObject) -> tuple[bool, set[str], bool]:
        """(any solid owner, uids of owners gone or waiting, any owner waiting)."""
        solid = False
        waiting = False
        gone_or_waiting: set[str] = set()
        for uid in owner_uids(obj):
            owner = self.engine.store.lookup_uid(uid)
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
        store = self.engine.store
        owner = store.lookup_uid(owner_uid)
        if owner is None:
            return
        meta = owner["metadata"]
        if not meta.get("deletionTimestamp") or FOREGROUND_FINALIZER not in (
            meta.get("finalizers") or []
        ):
            return
        for _table, dependent in store.dependents_of(owner_uid):
            for ref in dependent["metadata"].get("ownerReferences") or []:
                if ref.get("uid") == owner_uid and ref.get("blockOwnerDeletion"):
                    return
        self._remove_gc_finalizer(owner_uid, FOREGROUND_FINALIZER)

    def _remove_gc_finalizer(self, owner_uid: str, finalizer: str) -> None:
        store = self.engine.store
        owner = store.lookup_uid(owner_uid)
        if owner is None:
            return
        meta = owner["metadata"]
        finalizers = [f for f in meta.get("finalizers") or [] if f != finalizer]
        owner_table = store.tables[store.by_uid[owner_uid][0]]
        new = {**owner, "metadata": {**meta, "finalizers": finalizers}}
        if not finalizers:
            new["metadata"].pop("finalizers")
            self.engine.finish_deletion(owner_table, new, owner)
        else:
            self.engine.commit(owner_table, "MODIFIED", new, owner)


def owner_uids(obj: JsonObject) -> set[str]:
    """The uids an object's ownerReferences name."""
    refs = obj["metadata"].get("ownerReferences") or []
    return {str(ref["uid"]) for ref in refs if ref.get("uid")}
