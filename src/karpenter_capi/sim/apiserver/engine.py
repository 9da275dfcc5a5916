"""The write path of the in-memory API server: create, update and delete with kube's rules.

Creating, replacing and deleting objects is where most of kube-apiserver's semantics live: uid,
creationTimestamp and generation, generateName, name validation, resourceVersion
preconditions, the split between the main endpoint and the ``status`` subresource, finalizers
on an object being deleted, propagation policies, and no-op writes that must not bump the
resourceVersion. ``Engine`` does those and nothing else: what the rest of a control plane does
in reaction to a write (garbage collection, namespace teardown, CRD registration, budgets) is
an ordered list of write hooks (``hook_order.WRITE_HOOKS``) that the engine calls at fixed
points, so one list says what a write triggers and in which order. The public verbs
(``server``) are a thin layer over this class.

Karpenter's termination flow is built on the deletion rules here: a NodeClaim with the
``karpenter.sh/termination`` finalizer stays, with a deletionTimestamp, until the controller
has drained and removed the instance. Pods are deleted immediately unless they carry
finalizers (no kubelet-driven grace period): the simulated kubelet has nothing to shut down,
and a deterministic simulation wants the pod gone when the eviction or delete returns.
"""

from __future__ import annotations

import random
import threading
import uuid
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, Final

from karpenter_capi.core.clock import Clock, SystemClock, format_timestamp
from karpenter_capi.core.kube.client import PropagationPolicy, WatchEventType
from karpenter_capi.core.kube.errors import BadRequest, NotFound
from karpenter_capi.core.kube.resources import Resource
from karpenter_capi.sim.apiserver import kinds, messages
from karpenter_capi.sim.apiserver.conversion import Converter
from karpenter_capi.sim.apiserver.definitions import ResourceDefinition
from karpenter_capi.sim.apiserver.namespace_lifecycle import require_open_namespace
from karpenter_capi.sim.apiserver.objects import copy_object, object_key
from karpenter_capi.sim.apiserver.store import Store, Table
from karpenter_capi.sim.apiserver.watch import WatchHub
from karpenter_capi.sim.apiserver.write_hook import (
    PHASES,
    Deletion,
    HookFactory,
    WriteHook,
    overrides,
)

JsonObject = dict[str, Any]

_NAME_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_MAX_GENERATED_PREFIX: Final = 58
# Metadata only the server writes; a client's copy of them is ignored on update.
_SYSTEM_METADATA = (
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
)

# The garbage collector's finalizers: the delete verb sets them for an orphan or foreground
# propagation policy and the collector (``garbage_collector``) removes them when done.
FOREGROUND_FINALIZER = "foregroundDeletion"
ORPHAN_FINALIZER = "orphan"
GC_FINALIZERS = (ORPHAN_FINALIZER, FOREGROUND_FINALIZER)


class Engine:
    """Shared state (store, served definitions, lock, clock), the write path, and its hooks.

    ``hooks`` are made in order, each given this engine; that order is the order of every
    phase (see ``write_hook``).
    """

    def __init__(
        self,
        clock: Clock | None,
        watch_history: int,
        random_seed: int | None,
        hooks: Sequence[HookFactory] = (),
    ) -> None:
        self.clock: Clock = clock or SystemClock()
        self.lock = threading.RLock()
        self.condition = threading.Condition(self.lock)
        self.store = Store(watch_history)
        self.served: dict[tuple[str, str], ResourceDefinition] = {}
        # Custom resources whose CRD converts through a webhook, by (group, plural): objects
        # are stored in the preferred version's layout and converted on every read and write
        # at another version (``present``, ``at_request_version``).
        self.conversions: dict[tuple[str, str], Converter] = {}
        # Custom resources whose CRD gained defaults after objects were stored: what fills
        # them in on read (object, version read at), as kube-apiserver defaults what it reads
        # from etcd (set by ``apiextensions``).
        self.read_defaults: dict[tuple[str, str], Callable[[JsonObject, str], JsonObject]] = {}
        self.hub = WatchHub(self.condition)
        # Seeded, generated names and uids repeat run after run (deterministic simulations);
        # unseeded they are as random as kube's.
        self._random = random.Random(random_seed)
        self._seeded = random_seed is not None
        self.hooks: tuple[WriteHook, ...] = tuple(make(self) for make in hooks)
        # Per phase, only the hooks that take part: a phase no hook needs costs nothing.
        self._phase: dict[str, tuple[WriteHook, ...]] = {
            phase: tuple(h for h in self.hooks if overrides(h, phase)) for phase in PHASES
        }
        self._after_commit = self._phase["after_commit"]

    # ------------------------------------------------------------------------- definitions

    def serve(self, definition: ResourceDefinition) -> Table:
        with self.lock:
            self.served[(definition.group, definition.plural)] = definition
            return self.store.table(definition)

    def resolve(self, resource: Resource) -> tuple[ResourceDefinition, Table]:
        definition = self.served.get((resource.group, resource.plural))
        if definition is None or resource.version not in definition.versions:
            gv = resource.api_version
            raise NotFound(
                f"the server could not find the requested resource ({resource.plural} in {gv})"
            )
        return definition, self.store.tables[definition.group_resource]

    def table_of(self, group: str, plural: str) -> Table | None:
        definition = self.served.get((group, plural))
        return None if definition is None else self.store.tables[definition.group_resource]

    def now(self) -> str:
        return format_timestamp(self.clock.now())

    def present(self, resource: Resource, obj: JsonObject) -> JsonObject:
        """A copy of stored ``obj`` as served at ``resource``'s version (converted where its
        CRD has a conversion webhook)."""
        copied = copy_object(obj)
        api_version = resource.api_version
        convert = self.conversions.get((resource.group, resource.plural))
        if convert is not None and copied.get("apiVersion") != api_version:
            copied = convert(copied, api_version)
        copied["apiVersion"] = api_version
        fill = self.read_defaults.get((resource.group, resource.plural))
        return copied if fill is None else fill(copied, resource.version)

    def present_shared(self, resource: Resource, obj: JsonObject) -> JsonObject:
        """Stored ``obj`` itself where ``present`` would change nothing but copy it (no
        conversion, no read defaults), else ``present``'s copy: for readers that never mutate."""
        if (
            obj.get("apiVersion") == resource.api_version
            and (resource.group, resource.plural) not in self.read_defaults
        ):
            return obj
        return self.present(resource, obj)

    # ----------------------------------------------------------------------------- commits

    def commit(
        self,
        table: Table,
        event_type: WatchEventType,
        obj: JsonObject,
        prev: JsonObject | None,
        *,
        owned: bool = False,
    ) -> JsonObject:
        """Store ``obj``, wake watchers, then let each hook react, in order (depth first).

        ``owned``: ``obj`` and its metadata were made for this write alone (``Store.commit``)."""
        stored = self.store.commit(table, event_type, obj, prev, owned=owned)
        self.hub.notify(table.log, stored["metadata"].get("namespace"))
        for hook in self._after_commit:
            hook.after_commit(table, event_type, stored, prev)
        return stored

    def finish_deletion(self, table: Table, final: JsonObject, stored: JsonObject) -> JsonObject:
        """Remove ``stored``, last seen as ``final`` (finalizers gone, its last state)."""
        return self.commit(table, "DELETED", final, stored)

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

    def check_type(self, definition: ResourceDefinition, obj: JsonObject, version: str) -> None:
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
        # The version the body is written at: validated against, then converted from, in
        # ``admit`` (a served version named in the body wins over the URL's, as kube decodes).
        rest = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
        obj.clear()
        obj["apiVersion"] = api_version or expected
        obj["kind"] = definition.kind
        obj.update(rest)

    def _generate_name(self, table: Table, namespace: str | None, prefix: str) -> str:
        # As the apiserver's SimpleNameGenerator: the base is cut to 58 characters so the name
        # with its five random ones fits 63 (an Event about a long-named object is still made).
        prefix = prefix[:_MAX_GENERATED_PREFIX]
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
        table = self.table_of("scheduling.k8s.io", "priorityclasses")
        if table is None:
            return {}
        return {
            str(pc["metadata"]["name"]): int(pc.get("value") or 0) for pc in table.objects.values()
        }

    def create_object(
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
        for hook in self._phase["refuse_create"]:
            hook.refuse_create(definition)
        self.check_type(definition, obj, version)
        chosen_namespace = self._namespace_of(definition, obj, namespace)
        meta = obj["metadata"]
        _drop_unknown_metadata(meta)
        if chosen_namespace is not None:
            require_open_namespace(self.store, definition, chosen_namespace, meta)
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
        meta["creationTimestamp"] = self.now()
        if kinds.tracks_generation(definition):
            meta["generation"] = 1
        status = obj.get("status")
        kinds.prepare_create(definition, obj, self._priorities())
        if keep_status and status is not None:
            obj["status"] = status
        obj = self.admit(definition, obj, None, warnings)
        for hook in self._phase["prepare_create"]:
            hook.prepare_create(definition, obj)
        # ``obj`` is the caller's private copy, its metadata edited in place above.
        return self.commit(table, "ADDED", obj, None, owned=True)

    def admit(
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
        for hook in self._phase["admit"]:
            obj = hook.admit(definition, obj, old, warnings)
        obj["apiVersion"] = definition.api_version()  # stored in the preferred version
        return obj

    def unknown_fields(self, definition: ResourceDefinition, obj: JsonObject) -> list[str]:
        """Paths of fields the server would drop (``fieldValidation``): ObjectMeta's, then
        what the hooks know of (a custom resource's schema)."""
        meta = obj.get("metadata")
        found = []
        if isinstance(meta, dict):
            found = [f"metadata.{key}" for key in meta if key not in kinds.OBJECT_META_FIELDS]
        for hook in self._phase["unknown_fields"]:
            found.extend(hook.unknown_fields(definition, obj))
        return found

    # ------------------------------------------------------------------------------ update

    def update_object(
        self,
        table: Table,
        old: JsonObject,
        incoming: JsonObject,
        *,
        precondition: str | None,
        subresource: str | None = None,
        require_version: bool = False,
        warnings: list[str] | None = None,
    ) -> JsonObject:
        """Replace ``old`` with ``incoming`` (a private copy). Lock must be held.

        ``precondition`` is the resourceVersion the client based the write on (None: any).
        """
        definition = table.definition
        old_meta = old["metadata"]
        name = str(old_meta["name"])
        _check_preconditions(definition, old_meta, incoming, precondition, require_version)
        if subresource == "status":
            new = self._status_update(definition, old, incoming)
        else:
            new = self._merge_system_fields(definition, old, incoming)
        new = self.admit(definition, new, old, warnings)
        errors = kinds.validate_update(definition, old, new)
        errors.extend(self._finalizer_errors(old, new))
        if subresource is None and new["metadata"] != old_meta:
            errors.extend(messages.validate_metadata(_changed_parts(old_meta, new["metadata"])))
        if errors:
            raise messages.invalid(definition, name, errors)
        if kinds.generation_changed(definition, old, new):
            new["metadata"]["generation"] = int(old_meta.get("generation") or 0) + 1
        if new == old:
            return old  # a no-op write keeps the resourceVersion, as kube does
        for hook in self._phase["prepare_update"]:
            hook.prepare_update(definition, old, new)
        if old_meta.get("deletionTimestamp") and not new["metadata"].get("finalizers"):
            return self.finish_deletion(table, new, old)
        # ``new`` and its metadata are this write's own (``_status_update`` and
        # ``_merge_system_fields`` build both; admission returns them or copies).
        return self.commit(table, "MODIFIED", new, old, owned=True)

    def _status_update(
        self, definition: ResourceDefinition, old: JsonObject, incoming: JsonObject
    ) -> JsonObject:
        """``old`` with the status of ``incoming`` (a write to the status subresource)."""
        # A status written at another served version is converted to the stored one
        # first: only the status of the converted object is taken.
        convert = self.conversions.get((definition.group, definition.plural))
        if convert is not None and incoming.get("apiVersion") not in (
            None,
            old.get("apiVersion"),
        ):
            incoming = convert(copy_object(incoming), str(old.get("apiVersion")))
        new = {**old, "metadata": dict(old["metadata"]), "status": incoming.get("status")}
        if new["status"] is None:
            new.pop("status")
        return new

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
        served = {definition.api_version(v) for v in definition.versions}
        written_at = incoming.get("apiVersion")
        new["apiVersion"] = written_at if written_at in served else old["apiVersion"]
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

    # ------------------------------------------------------------------------------ delete

    def delete_object(
        self,
        table: Table,
        stored: JsonObject,
        policy: PropagationPolicy | None,
        grace_period_seconds: int | None,
    ) -> Deletion:
        """Delete ``stored``. ``policy=None`` keeps what the object's GC finalizers ask for.

        The object goes at once unless finalizers hold it; an orphan or foreground policy is
        recorded as the garbage collector's finalizer, which the collector acts on when the
        marked object is committed. Lock must be held.
        """
        for hook in self._phase["delete"]:
            special = hook.delete(table, stored)
            if special is not None:
                return special
        meta = stored["metadata"]
        existing = list(meta.get("finalizers") or [])
        finalizers = [f for f in existing if f not in GC_FINALIZERS]
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
            return self.finish_deletion(table, final, stored), True
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
        return self.commit(table, "MODIFIED", {**stored, "metadata": new_meta}, stored), False

    # ------------------------------------------------------------------------------ helpers

    def get_stored(
        self, definition: ResourceDefinition, table: Table, name: str, namespace: str | None
    ) -> JsonObject:
        if definition.namespaced and not namespace:
            raise BadRequest(f"{definition.group_resource} {name!r} needs a namespace")
        found = table.objects.get(object_key(namespace if definition.namespaced else None, name))
        if found is None:
            raise messages.not_found(definition, name)
        return found

    @staticmethod
    def private_copy(obj: JsonObject) -> JsonObject:
        if not isinstance(obj, dict):
            raise BadRequest("the request body must be a JSON object")
        return copy_object(obj)


def precondition_of(meta: JsonObject) -> str | None:
    """The resourceVersion a client's metadata pins its write to, if any."""
    return str(meta.get("resourceVersion") or "") or None


# What ``messages.validate_metadata`` checks, each part on its own.
_VALIDATED_METADATA = ("labels", "annotations", "ownerReferences")


def _changed_parts(old_meta: JsonObject, new_meta: JsonObject) -> JsonObject:
    """The parts of ``new_meta`` that ``validate_metadata`` checks and the update changed.

    Every stored metadata was validated when it was written (on create, and on each update
    that changed it), so an unchanged part cannot fail again: an annotation patch no longer
    checks every label's name and value, nor a label patch the owner references. A changed
    part is checked whole (the annotations' total size included), in the same order."""
    return {
        part: new_meta[part]
        for part in _VALIDATED_METADATA
        if part in new_meta and new_meta[part] != old_meta.get(part)
    }


def _drop_unknown_metadata(meta: JsonObject) -> None:
    """Keys ObjectMeta does not have are not stored (kube decodes metadata into ObjectMeta)."""
    for key in [k for k in meta if k not in kinds.OBJECT_META_FIELDS]:
        del meta[key]


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


def _check_preconditions(
    definition: ResourceDefinition,
    old_meta: JsonObject,
    incoming: JsonObject,
    precondition: str | None,
    require_version: bool,
) -> None:
    """The update's resourceVersion and uid preconditions hold, or the 409/422 kube gives."""
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
