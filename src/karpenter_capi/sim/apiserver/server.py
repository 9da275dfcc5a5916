"""``InMemoryAPIServer``: a stateful Kubernetes API in process, implementing ``KubeClient``.

Tests and the simulator need a Kubernetes API that behaves like the real one (resourceVersion,
conflicts, watch replay and 410, selectors, patches, subresources, finalizers, cascades,
evictions under PDBs) without a cluster. This class is that API: it implements the
``KubeClient`` protocol directly, so controller code runs against it unchanged, and the HTTP
front (``sim.apiserver.http``) serves the same object to the official client and kubectl.

Every public method takes the one server lock, so the HTTP front may call it from many threads;
every object returned is a private copy, so callers can never alias stored state.
"""

from __future__ import annotations

import builtins
from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from typing import Any, Final, NamedTuple

from karpenter_capi.core.clock import Clock
from karpenter_capi.core.kube.client import (
    ListResult,
    PatchType,
    Preconditions,
    PropagationPolicy,
    WatchEvent,
    WatchStream,
)
from karpenter_capi.core.kube.errors import (
    BadRequest,
    NotFound,
    Timeout,
    UnsupportedMediaType,
)
from karpenter_capi.core.kube.resources import NAMESPACES, Resource
from karpenter_capi.sim.apiserver import manifests, messages, subresources
from karpenter_capi.sim.apiserver.builtin import BUILTIN_DEFINITIONS, INITIAL_NAMESPACES
from karpenter_capi.sim.apiserver.capi_crds import cluster_api_crds
from karpenter_capi.sim.apiserver.continue_tokens import decode_continue, encode_continue
from karpenter_capi.sim.apiserver.definitions import ResourceDefinition, version_priority
from karpenter_capi.sim.apiserver.disruption_budgets import budgets_in
from karpenter_capi.sim.apiserver.engine import Engine, precondition_of
from karpenter_capi.sim.apiserver.eviction import check_eviction
from karpenter_capi.sim.apiserver.faults import FaultInjector
from karpenter_capi.sim.apiserver.field_validation import check_directive, check_fields
from karpenter_capi.sim.apiserver.hook_order import WRITE_HOOKS
from karpenter_capi.sim.apiserver.request_counts import RequestCounts
from karpenter_capi.sim.apiserver.selectors import (
    object_filter,
    parse_field_selector,
    parse_label_selector,
)
from karpenter_capi.sim.apiserver.subresources import check_subresource, scale_of, write_scale
from karpenter_capi.sim.apiserver.version import VERSION_INFO
from karpenter_capi.sim.apiserver.watch import InMemoryWatch, WatchFilter
from karpenter_capi.sim.apiserver.write_requests import apply_patch, check_delete_preconditions

JsonObject = dict[str, Any]

# kube-apiserver's NamespaceLifecycle admission refuses to delete these.
_UNDELETABLE = frozenset({"default", "kube-system", "kube-public"})


class DeleteResult(NamedTuple):
    """What a delete answers: the object, and whether this call removed it.

    ``object`` is the object as marked for deletion (``deletionTimestamp`` set) when it stays
    for finalizers or a foreground/orphan cascade, or as last stored when it went at once;
    ``deleted`` is kube's ``wasDeleted`` (False when the deletion is pending).
    """

    object: JsonObject
    deleted: bool


class InMemoryAPIServer:
    """A Kubernetes API server in memory: the verbs over one ``Engine`` (module docstring)."""

    drains_zero_timeout_watch: Final = True
    """A zero-timeout watch delivers what is recorded and ends (``InMemoryWatch``)."""

    def __init__(
        self,
        clock: Clock | None = None,
        watch_history: int = 50_000,
        *,
        random_seed: int | None = None,
    ) -> None:
        """``random_seed`` makes generated names and uids reproducible (simulations)."""
        engine = Engine(clock, watch_history, random_seed, WRITE_HOOKS)
        self._engine = engine
        # The engine's state the read verbs use directly (the same objects, not copies).
        self._lock = engine.lock
        self._store = engine.store
        self._served = engine.served
        self._hub = engine.hub
        self.faults = FaultInjector(self._hub.drop_all, self.compact, self.clock)
        # Every request served, by verb (``sim.apiserver.request_counts``).
        self.requests = RequestCounts()
        # Idle watches that allow bookmarks get one this often (real time, like kube's ~1/min).
        self.bookmark_interval_seconds: float | None = 60.0
        self.version_info: JsonObject = dict(VERSION_INFO)  # what ``/version`` answers
        for definition in BUILTIN_DEFINITIONS:
            self._engine.serve(definition)
        for name in INITIAL_NAMESPACES:
            self.create(NAMESPACES, {"metadata": {"name": name}})

    @property
    def clock(self) -> Clock:
        """The server's clock: timestamps, deletion grace periods, fault windows."""
        return self._engine.clock

    # -------------------------------------------------------------------------- registry

    def definitions(self) -> builtins.list[ResourceDefinition]:
        """Every served resource (built-in and custom), sorted by group then plural."""
        with self._lock:
            return sorted(self._served.values(), key=lambda d: (d.group, d.plural))

    def find_definition(self, group: str, version: str, plural: str) -> ResourceDefinition | None:
        """The served resource ``plural`` in ``group/version``, or None (a lookup by key: the
        HTTP front asks on every request)."""
        found = self._served.get((group, plural))
        return found if found is not None and version in found.versions else None

    def definition(self, group: str, version: str, plural: str) -> ResourceDefinition:
        """The served resource ``plural`` in ``group/version``; NotFound if it is not served."""
        with self._lock:
            found = self._served.get((group, plural))
        if found is None or version not in found.versions:
            gv = f"{group}/{version}" if group else version
            raise NotFound(f"the server could not find the requested resource ({plural} in {gv})")
        return found

    def resource(self, group: str, version: str, plural: str) -> Resource:
        return self.definition(group, version, plural).resource(version)

    def server_version(self) -> JsonObject:
        self.faults.check("get", "version", "version")  # a fault rule on resource "version"
        return dict(self.version_info)

    def served_versions(self, group: str) -> builtins.list[str]:
        with self._lock:
            versions = {v for d in self._served.values() if d.group == group for v in d.versions}
        return sorted(versions, key=version_priority)

    def apply_manifests(self, docs: Iterable[JsonObject | None]) -> builtins.list[JsonObject]:
        """Create or replace each object (CRDs first, then namespaces); returns what is stored.

        Like ``seed``, a ``status`` in a document is kept, so scenario files can describe
        nodes and machines as they are, not only as they were created.
        """
        return manifests.apply_manifests(self, docs)

    def register_cluster_api(self) -> builtins.list[JsonObject]:
        """Serve the Cluster API core and infrastructure kinds, by creating their CRDs."""
        return manifests.apply_manifests(self, cluster_api_crds())

    # ------------------------------------------------------------------------ watch control

    def send_bookmarks(self) -> None:
        """Make every open watch that allows bookmarks emit one at the current version."""
        self._hub.request_bookmarks()

    def set_watch_history(self, events: int) -> None:
        """Retain this many events per resource (older resourceVersions become 410)."""
        with self._lock:
            self._store.set_watch_history(events)

    def set_compaction_interval(self, seconds: float | None) -> None:
        """Compact the watch history every ``seconds`` of the server's clock, as kube-apiserver
        has etcd do (every 5 minutes by default): history stays minutes long however long the
        server runs, and a watch resuming from before the last compaction gets 410. ``None``
        (the default) keeps history by count alone (``set_watch_history``)."""
        with self._lock:
            self._store.set_compaction(seconds, self.clock.monotonic)

    def compact(self) -> None:
        """Drop all retained watch history, as an etcd compaction does."""
        with self._lock:
            self._store.compact()

    @property
    def resource_version(self) -> str:
        """The latest resourceVersion the server has handed out."""
        with self._lock:
            return str(self._store.rv)

    def written_at(self, namespace: str) -> int:
        """The resourceVersion of the latest write in ``namespace`` (``""``: cluster-scoped)."""
        with self._lock:
            return self._store.written_at.get(namespace, 0)

    # -------------------------------------------------------------------------------- reads

    def _check_fault(
        self,
        verb: str,
        definition: ResourceDefinition,
        name: str | None = None,
        subresource: str | None = None,
        *,
        poll: bool = False,
    ) -> None:
        self.requests.record(verb, subresource, poll=poll, resource=definition.plural)
        self.faults.check(verb, definition.plural, definition.group_resource, name, subresource)

    def _present(self, obj: JsonObject, resource: Resource, shared: bool = False) -> JsonObject:
        """``obj`` as served; ``shared`` (the HTTP front, which only serializes the reply): the
        stored object itself where serving it changes nothing (``Engine.present_shared``)."""
        return (self._engine.present_shared if shared else self._engine.present)(resource, obj)

    def get(
        self,
        resource: Resource,
        name: str,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
        shared: bool = False,
    ) -> JsonObject:
        definition, table = self._engine.resolve(resource)
        check_subresource(definition, subresource)
        self._check_fault("get", definition, name, subresource)
        with self._lock:
            stored = self._engine.get_stored(definition, table, name, namespace)
            if subresource == "scale":
                return scale_of(definition, stored)
            return self._present(stored, resource, shared)

    def list(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
        resource_version: str | None = None,
        shared: bool = False,
    ) -> ListResult:
        """The objects, as an API server lists them; ``shared``: the stored objects themselves
        where serving them needs no change, for the simulator's own observers, which read every
        pod at every sample and never mutate what they read (a deep copy each was most of
        their cost)."""
        definition, table = self._engine.resolve(resource)
        self._check_fault("list", definition)
        predicate = object_filter(
            parse_label_selector(label_selector), parse_field_selector(field_selector, definition)
        )
        scope = namespace if definition.namespaced else None
        with self._lock:
            self._check_not_too_new(resource_version)
            if continue_token:
                snapshot_rv, start = decode_continue(continue_token)
                objects, keys = table.snapshot_at(snapshot_rv)
            else:
                snapshot_rv, start = self._store.rv, ""
                objects, keys = table.objects, table.sorted_keys()
            low, high = 0, len(keys)
            if scope:
                low, high = bisect_left(keys, f"{scope}/"), bisect_left(keys, f"{scope}0")
            if start:
                low = max(low, bisect_right(keys, start))
            matched: builtins.list[JsonObject] = []
            index = low
            last_key = ""
            while index < high:
                key = keys[index]
                index += 1
                obj = objects[key]
                if predicate is None or predicate(obj):
                    matched.append(obj)
                    last_key = key
                    if limit and len(matched) >= limit:
                        break
        # Stored objects are never mutated, so copying them needs no lock.
        more = bool(limit) and index < high
        present = self._engine.present_shared if shared else self._engine.present
        return ListResult(
            items=[present(resource, obj) for obj in matched],
            resource_version=str(snapshot_rv),
            continue_token=encode_continue(snapshot_rv, last_key) if more else None,
            remaining_item_count=(high - index) if more and predicate is None else None,
        )

    def _check_not_too_new(self, resource_version: str | None) -> None:
        if not resource_version or resource_version == "0":
            return
        try:
            requested = int(resource_version)
        except ValueError:
            raise BadRequest(f"invalid resource version: {resource_version}") from None
        if requested > self._store.rv:
            raise Timeout(
                f"Too large resource version: {requested}, current: {self._store.rv}",
                details={"causes": [{"reason": "ResourceVersionTooLarge"}]},
                retry_after_seconds=1,
            )

    def watch(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        allow_bookmarks: bool = False,
        timeout_seconds: float | None = None,
        shared: bool = False,
    ) -> WatchStream:
        """Watch changes after ``resource_version``.

        ``None``, ``""`` and ``"0"`` all start with a synthetic ADDED per current object (kube
        may serve ``"0"`` from its cache; here the cache is always current). An expired version
        yields one ERROR event carrying the 410 Status, then the stream ends.
        ``timeout_seconds=0`` delivers what is already there and ends without blocking (see
        ``InMemoryWatch``), which is how the stepped simulation polls.
        ``shared``: events carry the stored objects themselves wherever presenting them would
        change nothing but copy them (``Engine.present_shared``), for a reader that never
        mutates them: the HTTP front, which only serializes each event.
        """
        definition, table = self._engine.resolve(resource)
        self._check_fault("watch", definition, poll=timeout_seconds == 0)
        predicate = object_filter(
            parse_label_selector(label_selector), parse_field_selector(field_selector, definition)
        )
        scope = namespace if definition.namespaced else None
        engine = self._engine

        presenter = engine.present_shared if shared else engine.present

        def present(obj: JsonObject) -> JsonObject:
            return presenter(resource, obj)

        with self._lock:
            initial: builtins.list[WatchEvent] = []
            if resource_version in (None, "", "0"):
                position = self._store.rv
                for key in table.sorted_keys():
                    obj = table.objects[key]
                    if scope and obj["metadata"].get("namespace") != scope:
                        continue
                    if predicate is None or predicate(obj):
                        initial.append(WatchEvent("ADDED", present(obj)))
            else:
                try:
                    position = int(str(resource_version))
                except ValueError:
                    raise BadRequest(f"invalid resource version: {resource_version}") from None

            def bookmark() -> JsonObject:
                return {"kind": definition.kind, "apiVersion": resource.api_version}

            return InMemoryWatch(
                self._hub,
                table.log,
                position=position,
                initial=initial,
                selection=WatchFilter(scope, predicate),
                present=present,
                bookmark=bookmark if allow_bookmarks else None,
                current_rv=lambda: self._store.rv,
                timeout_seconds=timeout_seconds,
                bookmark_interval=self.bookmark_interval_seconds,
            )

    # ------------------------------------------------------------------------------- writes

    def create(
        self,
        resource: Resource,
        obj: JsonObject,
        namespace: str | None = None,
        *,
        field_validation: str | None = None,
        warnings: builtins.list[str] | None = None,
        shared: bool = False,
    ) -> JsonObject:
        """Create ``obj``. ``field_validation`` (see ``_check_fields``) defaults to Ignore;
        ``shared`` as for ``_present``."""
        definition, table = self._engine.resolve(resource)
        check_directive(field_validation, "CreateOptions")
        self._check_fault("create", definition, (obj.get("metadata") or {}).get("name"))
        body = self._engine.private_copy(obj)
        with self._lock:
            self._check_fields(definition, resource, body, field_validation, warnings)
            stored = self._engine.create_object(
                definition, table, body, namespace, resource.version, warnings=warnings
            )
            return self._present(stored, resource, shared)

    def seed(self, resource: Resource, obj: JsonObject, namespace: str | None = None) -> JsonObject:
        """Create keeping the ``status`` the caller wrote (a fixture shortcut; no API does this)."""
        definition, table = self._engine.resolve(resource)
        body = self._engine.private_copy(obj)
        with self._lock:
            stored = self._engine.create_object(
                definition, table, body, namespace, resource.version, keep_status=True
            )
            return self._present(stored, resource)

    def update(
        self,
        resource: Resource,
        obj: JsonObject,
        *,
        subresource: str | None = None,
        field_validation: str | None = None,
        warnings: builtins.list[str] | None = None,
        shared: bool = False,
    ) -> JsonObject:
        definition, table = self._engine.resolve(resource)
        check_subresource(definition, subresource)
        check_directive(field_validation, "UpdateOptions")
        meta = obj.get("metadata") or {}
        name = str(meta.get("name") or "")
        self._check_fault("update", definition, name, subresource)
        body = self._engine.private_copy(obj)
        with self._lock:
            stored = self._engine.get_stored(definition, table, name, meta.get("namespace"))
            if subresource == "scale":
                return write_scale(self._engine, definition, table, stored, body)
            self._check_fields(definition, resource, body, field_validation, warnings)
            if subresource is None:
                self._engine.check_type(definition, body, resource.version)
            written = self._engine.update_object(
                table,
                stored,
                body,
                subresource=subresource,
                precondition=precondition_of(meta),
                require_version=definition.custom,
                warnings=warnings,
            )
            return self._present(written, resource, shared)

    def patch(
        self,
        resource: Resource,
        name: str,
        patch: JsonObject | builtins.list[JsonObject],
        namespace: str | None = None,
        *,
        patch_type: PatchType = PatchType.MERGE,
        subresource: str | None = None,
        field_validation: str | None = None,
        warnings: builtins.list[str] | None = None,
        shared: bool = False,
    ) -> JsonObject:
        definition, table = self._engine.resolve(resource)
        check_subresource(definition, subresource)
        check_directive(field_validation, "PatchOptions")
        self._check_fault("patch", definition, name, subresource)
        if patch_type == PatchType.STRATEGIC and definition.custom:
            raise UnsupportedMediaType(
                "the body of the request was in an unknown format - accepted media types "
                "include: application/json-patch+json, application/merge-patch+json, "
                "application/apply-patch+yaml"
            )
        with self._lock:
            stored = self._engine.get_stored(definition, table, name, namespace)
            if subresource == "scale":
                patched_scale = apply_patch(
                    scale_of(definition, stored), patch, patch_type, "Scale"
                )
                return write_scale(self._engine, definition, table, stored, patched_scale)
            patched = apply_patch(
                self._patch_base(definition, resource, stored, patch_type),
                patch,
                patch_type,
                definition.kind,
            )
            patched_meta = patched.get("metadata") or {}
            if patched_meta.get("name") != name:
                raise BadRequest(
                    f"the name of the object ({patched_meta.get('name')}) does not match the "
                    f"name on the URL ({name})"
                )
            self._check_fields(definition, None, patched, field_validation, warnings)
            written = self._engine.update_object(
                table,
                stored,
                patched,
                precondition=precondition_of(patched_meta),
                subresource=subresource,
                warnings=warnings,
            )
            return self._present(written, resource, shared)

    def _patch_base(
        self,
        definition: ResourceDefinition,
        resource: Resource,
        stored: JsonObject,
        patch_type: PatchType,
    ) -> JsonObject:
        """What a patch is applied to. A merge patch of a built-in kind: the stored object
        itself (``merge_patch`` copies what it changes; no later step of a built-in kind's
        update edits in place; stored objects are never mutated). Else a private copy (JSON
        patches edit in place; custom resources are pruned and defaulted in place)."""
        if patch_type == PatchType.MERGE and not definition.custom:
            return self._engine.present_shared(resource, stored)
        return self._present(stored, resource)

    def _check_fields(
        self,
        definition: ResourceDefinition,
        resource: Resource | None,
        body: JsonObject,
        directive: str | None,
        warnings: builtins.list[str] | None,
    ) -> None:
        """``fieldValidation`` for ``body`` (see ``field_validation.check_fields``)."""
        check_fields(
            self._engine, definition, resource, body, directive=directive, warnings=warnings
        )

    def delete(
        self,
        resource: Resource,
        name: str,
        namespace: str | None = None,
        *,
        preconditions: Preconditions | None = None,
        propagation_policy: PropagationPolicy | None = None,
        grace_period_seconds: int | None = None,
    ) -> JsonObject:
        return self.delete_with_result(
            resource,
            name,
            namespace,
            preconditions=preconditions,
            propagation_policy=propagation_policy,
            grace_period_seconds=grace_period_seconds,
        ).object

    def delete_with_result(
        self,
        resource: Resource,
        name: str,
        namespace: str | None = None,
        *,
        preconditions: Preconditions | None = None,
        propagation_policy: PropagationPolicy | None = None,
        grace_period_seconds: int | None = None,
    ) -> DeleteResult:
        """``delete``, also telling whether the object went at once (the HTTP front's 200/202).

        Without a ``propagation_policy`` the object's own ``orphan``/``foregroundDeletion``
        finalizer decides, and else the default (Background), as in kube.
        """
        definition, table = self._engine.resolve(resource)
        self._check_fault("delete", definition, name)
        if definition.group == "" and definition.plural == "namespaces" and name in _UNDELETABLE:
            raise messages.forbidden(definition, name, "this namespace may not be deleted")
        with self._lock:
            stored = self._engine.get_stored(definition, table, name, namespace)
            check_delete_preconditions(definition, stored, preconditions)
            result, deleted = self._engine.delete_object(
                table, stored, propagation_policy, grace_period_seconds
            )
            return DeleteResult(self._present(result, resource), deleted)

    def evict(self, name: str, namespace: str, *, grace_period_seconds: int | None = None) -> None:
        """The Eviction API: delete the pod unless its PodDisruptionBudget forbids it (429)."""
        pods = self._served[("", "pods")]
        self._check_fault("evict", pods, name, "eviction")
        self.faults.check("create", pods.plural, pods.group_resource, name, "eviction")
        with self._lock:
            table = self._store.tables["pods"]
            stored = self._engine.get_stored(pods, table, name, namespace)
            check_eviction(stored, budgets_in(self._engine, namespace))
            self._engine.delete_object(table, stored, None, grace_period_seconds)

    def bind(self, binding: JsonObject, namespace: str, name: str | None = None) -> None:
        """A create on ``pods/binding``: the pod bound in one write (``subresources.bind_pod``)."""
        subresources.bind_pod(self._engine, self._check_fault, binding, namespace, name)

    def create_binding(self, binding: JsonObject, namespace: str) -> None:
        """A create on the deprecated ``bindings`` collection: ``bind``, the pod named by the
        Binding alone (kube's ``LegacyBindingREST``)."""
        subresources.bind_pod(
            self._engine, self._check_fault, binding, namespace, None, collection=True
        )

    def budgets_in(self, namespace: str) -> builtins.list[JsonObject]:
        """The PodDisruptionBudgets stored in ``namespace``, as stored (do not modify)."""
        with self._lock:
            return budgets_in(self._engine, namespace)
