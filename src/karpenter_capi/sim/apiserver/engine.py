"""The write path of the in-memory API server: create and update with kube's rules.

Creating and replacing objects is where most of kube-apiserver's semantics live: uid,
creationTimestamp and generation, generateName, name validation, resourceVersion
preconditions, the split between the main endpoint and the ``status`` subresource, finalizers
on an object being deleted, and no-op writes that must not bump the resourceVersion. They sit
in one class that the deletion logic (``lifecycle``) and the public verbs (``server``) build on.
"""

from __future__ import annotations

import random
import threading
import uuid
from typing import Any

from karpenter_capi.core.clock import Clock, SystemClock, format_timestamp
from karpenter_capi.core.kube.client import WatchEventType
from karpenter_capi.core.kube.errors import BadRequest, NotFound
from karpenter_capi.core.kube.resources import Resource
from karpenter_capi.sim.apiserver import kinds, messages
from karpenter_capi.sim.apiserver.definitions import ResourceDefinition
from karpenter_capi.sim.apiserver.objects import copy_object, object_key
from karpenter_capi.sim.apiserver.store import Store, Table
from karpenter_capi.sim.apiserver.watch import WatchHub

JsonObject = dict[str, Any]

_NAME_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
# Metadata only the server writes; a client's copy of them is ignored on update.
_SYSTEM_METADATA = (
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
)


class Engine:
    """Shared state (store, served definitions, lock, clock) and the create/update path."""

    def __init__(self, clock: Clock | None, watch_history: int, random_seed: int | None) -> None:
        self.clock: Clock = clock or SystemClock()
        self._lock = threading.RLock()
        self._condition = threading.Condition(self._lock)
        self._store = Store(watch_history)
        self._served: dict[tuple[str, str], ResourceDefinition] = {}
        self._hub = WatchHub(self._condition)
        # Seeded, generated names and uids repeat run after run (deterministic simulations);
        # unseeded they are as random as kube's.
        self._random = random.Random(random_seed)
        self._seeded = random_seed is not None

    # ------------------------------------------------------------------------- definitions

    def _serve(self, definition: ResourceDefinition) -> Table:
        with self._lock:
            self._served[(definition.group, definition.plural)] = definition
            return self._store.table(definition)

    def _resolve(self, resource: Resource) -> tuple[ResourceDefinition, Table]:
        definition = self._served.get((resource.group, resource.plural))
        if definition is None or resource.version not in definition.versions:
            gv = resource.api_version
            raise NotFound(
                f"the server could not find the requested resource ({resource.plural} in {gv})"
            )
        return definition, self._store.tables[definition.group_resource]

    def _table(self, group: str, plural: str) -> Table | None:
        definition = self._served.get((group, plural))
        return None if definition is None else self._store.tables[definition.group_resource]

    def _now(self) -> str:
        return format_timestamp(self.clock.now())

    # ----------------------------------------------------------------------------- commits

    def _commit(
        self, table: Table, event_type: WatchEventType, obj: JsonObject, prev: JsonObject | None
    ) -> JsonObject:
        stored = self._store.commit(table, event_type, obj, prev)
        self._condition.notify_all()
        self._after_commit(table, event_type, stored, prev)
        return stored

    def _after_commit(
        self, table: Table, event_type: WatchEventType, stored: JsonObject, prev: JsonObject | None
    ) -> None:
        """Side effects of a write (PDB status, cascades, CRD registration): see subclasses."""

    def _finish_deletion(self, table: Table, final: JsonObject, stored: JsonObject) -> JsonObject:
        """Remove ``stored``, last seen as ``final`` (implemented by ``lifecycle``)."""
        raise NotImplementedError

    # ------------------------------------------------------------------------------ create

    def _namespace_of(
        self, definition: ResourceDefinition, obj: JsonObject, namespace: str | None
    ) -> str | None:
        meta = obj.setdefault("metadata", {})
        if not definition.namespaced:
            meta.pop("namespace", None)
            return None
        declared = meta.get("namespace")
        if namespace and declared and declared != namespace:
            raise BadRequest(
                "the namespace of the provided object does not match the namespace sent on "
                "the request"
            )
        chosen = namespace or declared
        if not chosen:
            raise BadRequest(f"creating {definition.group_resource} needs a namespace")
        meta["namespace"] = chosen
        return str(chosen)

    def _check_type(self, definition: ResourceDefinition, obj: JsonObject, version: str) -> None:
        """Fill in apiVersion/kind, or reject a body meant for another resource (400)."""
        expected = definition.api_version(version)
        api_version = obj.get("apiVersion")
        kind = obj.get("kind")
        if api_version and api_version not in {
            definition.api_version(v) for v in definition.versions
        }:
            raise BadRequest(
                f"the API version in the data ({api_version}) does not match the expected API "
                f"version ({expected})"
            )
        if kind and kind != definition.kind:
            raise BadRequest(
                f'{kind} in version "{version}" cannot be handled as a {definition.kind}: '
                f"the kind in the data does not match the resource"
            )
        rest = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
        obj.clear()
        obj["apiVersion"] = definition.api_version()
        obj["kind"] = definition.kind
        obj.update(rest)

    def _generate_name(self, table: Table, namespace: str | None, prefix: str) -> str:
        for _ in range(100):
            suffix = "".join(self._random.choice(_NAME_SUFFIX_ALPHABET) for _ in range(5))
            candidate = f"{prefix}{suffix}"
            if object_key(namespace, candidate) not in table.objects:
                return candidate
        raise messages.already_exists(table.definition, prefix)  # pragma: no cover

    def _new_uid(self) -> str:
        if self._seeded:
            return str(uuid.UUID(int=self._random.getrandbits(128), version=4))
        return str(uuid.uuid4())

    def _priorities(self) -> dict[str, int]:
        table = self._table("scheduling.k8s.io", "priorityclasses")
        if table is None:
            return {}
        return {
            str(pc["metadata"]["name"]): int(pc.get("value") or 0) for pc in table.objects.values()
        }

    def _create_object(
        self,
        definition: ResourceDefinition,
        table: Table,
        obj: JsonObject,
        namespace: str | None,
        version: str,
        *,
        keep_status: bool = False,
        warnings: list[str] | None = None,
    ) -> JsonObject:
        """Store a new object (``obj`` is owned by the caller-made copy). Lock must be held."""
        self._check_create_allowed(definition)
        self._check_type(definition, obj, version)
        chosen_namespace = self._namespace_of(definition, obj, namespace)
        meta = obj["metadata"]
        _drop_unknown_metadata(meta)
        if chosen_namespace is not None:
            self._require_namespace_open(definition, chosen_namespace, meta)
        name = meta.get("name")
        if not name and meta.get("generateName"):
            name = self._generate_name(table, chosen_namespace, str(meta["generateName"]))
            meta["name"] = name
        errors = messages.validate_name(definition, str(name or ""))
        errors.extend(messages.validate_metadata(meta))
        if errors:
            raise messages.invalid(definition, str(name or ""), errors)
        if object_key(chosen_namespace, str(name)) in table.objects:
            raise messages.already_exists(definition, str(name))
        for field in (*_SYSTEM_METADATA, "resourceVersion", "selfLink"):
            meta.pop(field, None)
        meta["uid"] = self._new_uid()
        meta["creationTimestamp"] = self._now()
        if kinds.tracks_generation(definition):
            meta["generation"] = 1
        status = obj.get("status")
        kinds.prepare_create(definition, obj, self._priorities())
        if keep_status and status is not None:
            obj["status"] = status
        obj = self._admit(definition, obj, None, warnings)
        self._prepare_create_hook(definition, obj)
        return self._commit(table, "ADDED", obj, None)

    def _require_namespace_open(
        self, definition: ResourceDefinition, namespace: str, meta: JsonObject
    ) -> None:
        namespaces = self._store.tables["namespaces"].objects
        found = namespaces.get(namespace)
        if found is None:
            raise messages.namespace_not_found(namespace)
        if found["metadata"].get("deletionTimestamp"):
            raise messages.forbidden(
                definition,
                str(meta.get("name") or meta.get("generateName") or ""),
                f"unable to create new content in namespace {namespace} because it is being "
                "terminated",
            )

    def _check_create_allowed(self, definition: ResourceDefinition) -> None:
        """Refuse creates the resource does not take right now (a terminating CRD's kind)."""

    def _admit(
        self,
        definition: ResourceDefinition,
        obj: JsonObject,
        old: JsonObject | None = None,
        warnings: list[str] | None = None,
    ) -> JsonObject:
        """The object as it will be stored (custom resources: pruned, defaulted, validated).

        ``old`` is the stored object on update (transition rules, ratcheting); ``warnings``
        collects what the client should be warned about (ratcheted rule failures).
        """
        return obj

    def _unknown_fields(self, definition: ResourceDefinition, obj: JsonObject) -> list[str]:
        """Paths of fields the server would drop (``fieldValidation``): ObjectMeta's here."""
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            return []
        return [f"metadata.{key}" for key in meta if key not in kinds.OBJECT_META_FIELDS]

    def _prepare_create_hook(self, definition: ResourceDefinition, obj: JsonObject) -> None:
        """Kind-specific validation or defaulting that needs the server (CRDs): subclasses."""

    # ------------------------------------------------------------------------------ update

    def _update_object(
        self,
        table: Table,
        old: JsonObject,
        incoming: JsonObject,
        *,
        subresource: str | None,
        precondition: str | None,
        require_version: bool,
        warnings: list[str] | None = None,
    ) -> JsonObject:
        """Replace ``old`` with ``incoming`` (a private copy). Lock must be held."""
        definition = table.definition
        old_meta = old["metadata"]
        name = str(old_meta["name"])
        if precondition and precondition != old_meta.get("resourceVersion"):
            raise messages.conflict(definition, name)
        if not precondition and require_version:
            raise messages.invalid(
                definition,
                name,
                [
                    messages.invalid_value(
                        "metadata.resourceVersion", "0x0", "must be specified for an update"
                    )
                ],
            )
        incoming_meta = incoming.get("metadata") or {}
        if incoming_meta.get("uid") and incoming_meta["uid"] != old_meta.get("uid"):
            raise messages.conflict(
                definition,
                name,
                f"Precondition failed: UID in precondition: {incoming_meta['uid']}, UID in "
                f"object meta: {old_meta.get('uid')}",
            )
        if subresource == "status":
            new = {**old, "metadata": dict(old_meta), "status": incoming.get("status")}
            if new["status"] is None:
                new.pop("status")
        else:
            new = self._merge_system_fields(definition, old, incoming)
        new = self._admit(definition, new, old, warnings)
        errors = kinds.validate_update(definition, old, new)
        errors.extend(self._finalizer_errors(old, new))
        if subresource is None and new["metadata"] != old_meta:
            errors.extend(messages.validate_metadata(new["metadata"]))
        if errors:
            raise messages.invalid(definition, name, errors)
        if kinds.generation_changed(definition, old, new):
            new["metadata"]["generation"] = int(old_meta.get("generation") or 0) + 1
        if new == old:
            return old  # a no-op write keeps the resourceVersion, as kube does
        self._prepare_update_hook(definition, old, new)
        if old_meta.get("deletionTimestamp") and not new["metadata"].get("finalizers"):
            return self._finish_deletion(table, new, old)
        return self._commit(table, "MODIFIED", new, old)

    def _merge_system_fields(
        self, definition: ResourceDefinition, old: JsonObject, incoming: JsonObject
    ) -> JsonObject:
        new = dict(incoming)
        meta = dict(incoming.get("metadata") or {})
        _drop_unknown_metadata(meta)
        old_meta = old["metadata"]
        if meta.get("namespace", old_meta.get("namespace")) != old_meta.get("namespace"):
            raise BadRequest(
                "the namespace of the provided object does not match the namespace sent on "
                "the request"
            )
        for field in (*_SYSTEM_METADATA, "resourceVersion", "name", "namespace"):
            if field in old_meta:
                meta[field] = old_meta[field]
            else:
                meta.pop(field, None)
        meta.pop("selfLink", None)
        new["metadata"] = meta
        new["apiVersion"] = old["apiVersion"]
        new["kind"] = old["kind"]
        if definition.has_status:
            if "status" in old:
                new["status"] = old["status"]
            else:
                new.pop("status", None)
        return new

    @staticmethod
    def _finalizer_errors(old: JsonObject, new: JsonObject) -> list[messages.FieldError]:
        if not old["metadata"].get("deletionTimestamp"):
            return []
        before = set(old["metadata"].get("finalizers") or [])
        added = [f for f in new["metadata"].get("finalizers") or [] if f not in before]
        if not added:
            return []
        shown = "[]string{" + ", ".join(f'"{f}"' for f in added) + "}"
        return [
            messages.forbidden_field(
                "metadata.finalizers",
                f"no new finalizers can be added if the object is being deleted, found new "
                f"finalizers {shown}",
            )
        ]

    def _prepare_update_hook(
        self, definition: ResourceDefinition, old: JsonObject, new: JsonObject
    ) -> None:
        """Kind-specific checks that need the server (CRD updates): subclasses."""

    # ------------------------------------------------------------------------------ helpers

    def _get_stored(
        self, definition: ResourceDefinition, table: Table, name: str, namespace: str | None
    ) -> JsonObject:
        if definition.namespaced and not namespace:
            raise BadRequest(f"{definition.group_resource} {name!r} needs a namespace")
        found = table.objects.get(object_key(namespace if definition.namespaced else None, name))
        if found is None:
            raise messages.not_found(definition, name)
        return found

    @staticmethod
    def _private_copy(obj: JsonObject) -> JsonObject:
        if not isinstance(obj, dict):
            raise BadRequest("the request body must be a JSON object")
        return copy_object(obj)


def _drop_unknown_metadata(meta: JsonObject) -> None:
    """Keys ObjectMeta does not have are not stored (kube decodes metadata into ObjectMeta)."""
    for key in [k for k in meta if k not in kinds.OBJECT_META_FIELDS]:
        del meta[key]
