"""The parts of the control plane that must react inside the write that triggers them.

Two things in a real cluster change server behaviour as a consequence of objects being
written: creating a ``CustomResourceDefinition`` makes a new resource served (the
apiextensions-apiserver), and the disruption controller keeps every PodDisruptionBudget's
``status`` current, which the eviction subresource then trusts. Both run here, synchronously,
so a CRD is usable the moment its create returns and ``kubectl get pdb`` and evictions always
see budgets that reflect the pods as they are now.

Deleting a CRD works as apiextensions-apiserver's finalizer does: the CRD gets the
``customresourcecleanup.apiextensions.k8s.io`` finalizer and a ``Terminating`` condition, its
objects are deleted (their own finalizers honoured), creating new ones is refused (405), and
the CRD goes, and its resource stops being served, once the last object is gone.
"""

from __future__ import annotations

from typing import Any

from karpenter_capi.core.clock import Clock
from karpenter_capi.core.kube.client import WatchEventType
from karpenter_capi.core.kube.errors import MethodNotAllowed
from karpenter_capi.sim.apiserver import messages, schema
from karpenter_capi.sim.apiserver.cel import RuleValidator
from karpenter_capi.sim.apiserver.cel_checks import schema_rule_errors
from karpenter_capi.sim.apiserver.definitions import ResourceDefinition, definition_from_crd
from karpenter_capi.sim.apiserver.eviction import pdb_selects, pdb_status
from karpenter_capi.sim.apiserver.lifecycle import Deletion, Lifecycle
from karpenter_capi.sim.apiserver.objects import get_path
from karpenter_capi.sim.apiserver.store import Table, key_of

JsonObject = dict[str, Any]

CRD_GROUP = "apiextensions.k8s.io"
CRD_CLEANUP_FINALIZER = "customresourcecleanup.apiextensions.k8s.io"


# Schema errors after which kube does not evaluate CEL rules (the value may not have the shape
# the rules assume); it says so with one more error instead.
_BLOCKING = frozenset(
    {
        "FieldValueNotSupported",
        "FieldValueRequired",
        "FieldValueTooLong",
        "FieldValueTooMany",
        "FieldValueTypeInvalid",
    }
)
_RULES_NOT_CHECKED = messages.FieldError(
    "<nil>",
    "FieldValueInvalid",
    'Invalid value: "null": some validation rules were not checked because the object was '
    "invalid; correct the existing errors to complete validation",
)


def _is(definition: ResourceDefinition, group: str, plural: str) -> bool:
    return definition.group == group and definition.plural == plural


def _in_namespace(table: Table, namespace: str) -> list[JsonObject]:
    prefix = f"{namespace}/"
    return [obj for key, obj in table.objects.items() if key.startswith(prefix)]


class Controllers(Lifecycle):
    """CRD registration and PodDisruptionBudget status, hooked into every commit."""

    def __init__(self, clock: Clock | None, watch_history: int, random_seed: int | None) -> None:
        # The storage version's openAPIV3Schema of each custom resource, by (group, plural).
        self._schemas: dict[tuple[str, str], JsonObject] = {}
        # Its compiled CEL rules (x-kubernetes-validations), built once per CRD write.
        self._rules: dict[tuple[str, str], RuleValidator] = {}
        super().__init__(clock, watch_history, random_seed)

    def _admit(
        self,
        definition: ResourceDefinition,
        obj: JsonObject,
        old: JsonObject | None = None,
        warnings: list[str] | None = None,
    ) -> JsonObject:
        if not definition.custom:
            return obj
        key = _key(definition)
        found = self._schemas.get(key)
        if found is None:
            return obj
        stored = schema.prune_and_default(obj, found)
        errors = schema.validate(stored, found, old)
        rules = self._rules.get(key)
        if rules is not None and rules.has_rules:
            if any(e.reason in _BLOCKING for e in errors):
                errors.append(_RULES_NOT_CHECKED)
            else:
                errors.extend(rules.validate(stored, old, warnings))
        if errors:
            raise messages.invalid(definition, str(stored["metadata"].get("name", "")), errors)
        return stored

    def _unknown_fields(self, definition: ResourceDefinition, obj: JsonObject) -> list[str]:
        found = super()._unknown_fields(definition, obj)
        if definition.custom:
            found.extend(schema.unknown_fields(obj, self._schemas.get(_key(definition))))
        return found

    def _after_commit(
        self, table: Table, event_type: WatchEventType, stored: JsonObject, prev: JsonObject | None
    ) -> None:
        definition = table.definition
        if _is(definition, CRD_GROUP, "customresourcedefinitions"):
            self._sync_crd(event_type, stored)
        elif _is(definition, "", "pods"):
            changed = [stored] if prev is None else [stored, prev]
            self._refresh_budgets(str(stored["metadata"]["namespace"]), changed)
        elif (
            _is(definition, "policy", "poddisruptionbudgets")
            and event_type != "DELETED"
            and (prev is None or prev.get("spec") != stored.get("spec"))
        ):
            self._refresh_budget(table, stored)
        elif definition.has_scale and definition.namespaced and event_type == "MODIFIED":
            # A controller's replicas are the expected pod count of the budgets over its pods.
            self._refresh_budgets(str(stored["metadata"]["namespace"]), None)
        super()._after_commit(table, event_type, stored, prev)
        if definition.custom and event_type == "DELETED":
            self._maybe_finish_crd(f"{definition.plural}.{definition.group}")

    # ------------------------------------------------------------------------------ budgets

    def _refresh_budgets(self, namespace: str, changed_pods: list[JsonObject] | None) -> None:
        budgets_table = self._table("policy", "poddisruptionbudgets")
        if budgets_table is None:
            return
        for budget in _in_namespace(budgets_table, namespace):
            if changed_pods is None or any(pdb_selects(budget, pod) for pod in changed_pods):
                self._refresh_budget(budgets_table, budget)

    def _refresh_budget(self, budgets_table: Table, budget: JsonObject) -> None:
        pods_table = self._store.tables["pods"]
        namespace = str(budget["metadata"]["namespace"])
        status = pdb_status(
            budget, _in_namespace(pods_table, namespace), self._expected_scale, self._now()
        )
        if status != budget.get("status"):
            self._commit(budgets_table, "MODIFIED", {**budget, "status": status}, budget)

    def _expected_scale(self, pods: list[JsonObject]) -> int | None:
        """Sum of the desired replicas of the pods' controllers (None if a pod has none)."""
        scales: dict[str, int] = {}
        for pod in pods:
            controller = self._scalable_controller(pod)
            if controller is None:
                return None
            uid, replicas = controller
            scales[uid] = replicas
        return sum(scales.values())

    def _scalable_controller(self, obj: JsonObject) -> tuple[str, int] | None:
        """The topmost controller with a scale (a ReplicaSet's Deployment, a StatefulSet...)."""
        found: tuple[str, int] | None = None
        current = obj
        for _ in range(4):  # pod -> ReplicaSet -> Deployment is as deep as kube looks
            ref = next(
                (
                    r
                    for r in current["metadata"].get("ownerReferences") or []
                    if r.get("controller")
                ),
                None,
            )
            if ref is None:
                return found
            owner = self._store.lookup_uid(str(ref.get("uid")))
            if owner is None:
                return found
            table = self._store.tables[self._store.by_uid[str(ref["uid"])][0]]
            if table.definition.has_scale:
                replicas = get_path(owner, table.definition.scale_spec_path)
                found = (str(ref["uid"]), int(replicas or 0))
            current = owner
        return found

    def budgets_in(self, namespace: str) -> list[JsonObject]:
        budgets_table = self._table("policy", "poddisruptionbudgets")
        return [] if budgets_table is None else _in_namespace(budgets_table, namespace)

    # --------------------------------------------------------------------------------- CRDs

    def _crds(self) -> Table:
        return self._store.tables[f"customresourcedefinitions.{CRD_GROUP}"]

    def _check_create_allowed(self, definition: ResourceDefinition) -> None:
        if not definition.custom:
            return
        crd = self._crds().objects.get(f"{definition.plural}.{definition.group}")
        if crd is not None and crd["metadata"].get("deletionTimestamp"):
            raise MethodNotAllowed(
                "create not allowed while custom resource definition is terminating",
                details={"group": definition.group, "kind": definition.plural},
            )

    def _delete_hook(self, table: Table, stored: JsonObject) -> Deletion | None:
        if _is(table.definition, CRD_GROUP, "customresourcedefinitions") and not stored[
            "metadata"
        ].get("deletionTimestamp"):
            return self._delete_crd(table, stored), False
        return super()._delete_hook(table, stored)

    def _delete_crd(self, table: Table, crd: JsonObject) -> JsonObject:
        """Mark the CRD, delete its objects, and remove it if none is held by a finalizer."""
        meta = crd["metadata"]
        now = self._now()
        finalizers = list(meta.get("finalizers") or [])
        if CRD_CLEANUP_FINALIZER not in finalizers:
            finalizers.append(CRD_CLEANUP_FINALIZER)
        in_progress = "True", "InstanceDeletionInProgress", "CustomResource deletion is in progress"
        marked = self._commit(
            table,
            "MODIFIED",
            {
                **crd,
                "metadata": {**meta, "deletionTimestamp": now, "finalizers": finalizers},
                "status": _with_terminating(crd, now, in_progress),
            },
            crd,
        )
        served = self._served.get(_crd_key(marked))
        if served is not None and served.custom:
            instances = self._store.tables[served.group_resource]
            for key in instances.sorted_keys():
                instance = instances.objects.get(key)
                if instance is not None and not instance["metadata"].get("deletionTimestamp"):
                    self._delete_object(instances, instance, None, None)
        self._maybe_finish_crd(str(meta["name"]))
        return marked

    def _maybe_finish_crd(self, name: str) -> None:
        """Drop the cleanup finalizer of a terminating CRD whose objects are all gone."""
        crds = self._crds()
        crd = crds.objects.get(name)
        if crd is None or not crd["metadata"].get("deletionTimestamp"):
            return
        finalizers = list(crd["metadata"].get("finalizers") or [])
        if CRD_CLEANUP_FINALIZER not in finalizers:
            return
        served = self._served.get(_crd_key(crd))
        instances = None if served is None else self._store.tables[served.group_resource]
        if instances is not None and instances.objects:
            return
        finalizers.remove(CRD_CLEANUP_FINALIZER)
        meta = {**crd["metadata"], "finalizers": finalizers}
        if not finalizers:
            meta.pop("finalizers")
        status = _with_terminating(
            crd, self._now(), ("False", "InstanceDeletionCompleted", "removed all instances")
        )
        new = {**crd, "metadata": meta, "status": status}
        if finalizers:
            self._commit(crds, "MODIFIED", new, crd)
        else:
            self._finish_deletion(crds, new, crd)

    def _prepare_create_hook(self, definition: ResourceDefinition, obj: JsonObject) -> None:
        if _is(definition, CRD_GROUP, "customresourcedefinitions"):
            self._validate_crd(definition, obj)
            obj["status"] = self._crd_status(obj)

    def _prepare_update_hook(
        self, definition: ResourceDefinition, old: JsonObject, new: JsonObject
    ) -> None:
        if _is(definition, CRD_GROUP, "customresourcedefinitions") and old.get("spec") != new.get(
            "spec"
        ):
            self._validate_crd(definition, new)
            new["status"] = self._crd_status(new)

    def _validate_crd(self, definition: ResourceDefinition, crd: JsonObject) -> None:
        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        name = str(crd["metadata"].get("name", ""))
        errors: list[messages.FieldError] = []
        plural, group = names.get("plural"), spec.get("group")
        if not group:
            errors.append(messages.required("spec.group", ""))
        if not plural:
            errors.append(messages.required("spec.names.plural", ""))
        if not names.get("kind"):
            errors.append(messages.required("spec.names.kind", ""))
        if plural and group and name != f"{plural}.{group}":
            errors.append(
                messages.invalid_value(
                    "metadata.name", name, 'must be spec.names.plural+"."+spec.group'
                )
            )
        versions = spec.get("versions") or []
        if not versions:
            errors.append(messages.required("spec.versions", "must have exactly one version"))
        elif sum(1 for v in versions if v.get("storage")) != 1:
            errors.append(
                messages.invalid_value(
                    "spec.versions", "", "must have exactly one version marked as storage version"
                )
            )
        existing = self._served.get((str(group), str(plural)))
        if existing is not None and not existing.custom:
            errors.append(
                messages.invalid_value("spec.group", group, "is served by the API server itself")
            )
        for index, version in enumerate(versions):
            found = ((version.get("schema") or {}).get("openAPIV3Schema")) or {}
            where = f"spec.versions[{index}].schema.openAPIV3Schema"
            errors.extend(schema_rule_errors(found, where))
        if errors:
            raise messages.invalid(definition, name, errors)

    @staticmethod
    def _crd_status(crd: JsonObject) -> JsonObject:
        spec = crd.get("spec") or {}
        names = dict(spec.get("names") or {})
        names.setdefault("singular", str(names.get("kind", "")).lower())
        names.setdefault("listKind", f"{names.get('kind')}List")
        storage = [v["name"] for v in spec.get("versions") or [] if v.get("storage")]
        previous = (crd.get("status") or {}).get("storedVersions") or []
        stored_versions = list(dict.fromkeys([*previous, *storage]))

        def condition(kind: str, reason: str, message: str) -> JsonObject:
            return {
                "type": kind,
                "status": "True",
                "reason": reason,
                "message": message,
                "lastTransitionTime": (crd.get("metadata") or {}).get("creationTimestamp"),
            }

        return {
            "acceptedNames": names,
            "conditions": [
                condition("NamesAccepted", "NoConflicts", "no conflicts found"),
                condition(
                    "Established", "InitialNamesAccepted", "the initial names have been accepted"
                ),
            ],
            "storedVersions": stored_versions,
        }

    def _sync_crd(self, event_type: WatchEventType, crd: JsonObject) -> None:
        definition = definition_from_crd(crd)
        key = (definition.group, definition.plural)
        if event_type != "DELETED":
            self._serve(definition)
            storage_schema = _storage_schema(crd)
            if self._schemas.get(key) is not storage_schema:
                self._schemas[key] = storage_schema
                self._rules[key] = RuleValidator(storage_schema)
            return
        served = self._served.get(key)
        if served is None or not served.custom:
            return
        # Normally empty by now; objects left behind (the cleanup finalizer was removed by hand)
        # become unreachable with their resource, so they are dropped with it.
        table = self._store.tables[served.group_resource]
        for stored in [table.objects[k] for k in table.sorted_keys()]:
            if table.objects.get(key_of(stored)) is stored:
                self._finish_deletion(table, stored, stored)
        del self._served[key]
        self._schemas.pop(key, None)
        self._rules.pop(key, None)
        self._hub.drop_for(table.log)  # as kube ends watches of a resource that is gone


def _key(definition: ResourceDefinition) -> tuple[str, str]:
    return (definition.group, definition.plural)


def _crd_key(crd: JsonObject) -> tuple[str, str]:
    spec = crd.get("spec") or {}
    return (str(spec.get("group", "")), str((spec.get("names") or {}).get("plural", "")))


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


def _storage_schema(crd: JsonObject) -> JsonObject:
    versions = (crd.get("spec") or {}).get("versions") or []
    storage = next((v for v in versions if v.get("storage")), versions[0] if versions else {})
    found: JsonObject = ((storage.get("schema") or {}).get("openAPIV3Schema")) or {}
    return found
