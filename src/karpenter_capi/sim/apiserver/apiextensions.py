"""CustomResourceDefinitions: what apiextensions-apiserver does when a CRD is written.

Creating a ``CustomResourceDefinition`` makes a new resource served, validated by the CRD's
structural schema and CEL rules; kube's apiextensions-apiserver does that (and refuses a CRD
that is not well formed). This hook does it inside the write, so a CRD is usable the moment its
create returns: it validates CRD writes and fills in their ``status``, serves (or stops
serving) the resource on each committed change, and admits each custom object against the
schema of its storage version (pruning, defaults, validation, CEL). Deleting a CRD's objects
before the CRD goes is the cleanup controller's job (``crd_cleanup``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from karpenter_capi.core.kube.client import WatchEventType
from karpenter_capi.sim.apiserver import messages, schema
from karpenter_capi.sim.apiserver.cel import RuleValidator
from karpenter_capi.sim.apiserver.cel_checks import schema_rule_errors
from karpenter_capi.sim.apiserver.conversion import converter_of
from karpenter_capi.sim.apiserver.definitions import ResourceDefinition, definition_from_crd
from karpenter_capi.sim.apiserver.store import Table, key_of
from karpenter_capi.sim.apiserver.write_hook import Previous, Warnings, WriteHook

if TYPE_CHECKING:
    from karpenter_capi.sim.apiserver.engine import Engine

JsonObject = dict[str, Any]

CRD_GROUP = "apiextensions.k8s.io"


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


def is_crd(definition: ResourceDefinition) -> bool:
    """Whether ``definition`` is the CustomResourceDefinition resource itself."""
    return definition.group == CRD_GROUP and definition.plural == "customresourcedefinitions"


def crd_key(crd: JsonObject) -> tuple[str, str]:
    """(group, plural) of the resource a CRD object defines."""
    spec = crd.get("spec") or {}
    return (str(spec.get("group", "")), str((spec.get("names") or {}).get("plural", "")))


class CustomResourceDefinitions(WriteHook):
    """Validates CRDs, serves their resources, and admits custom objects by their schema."""

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        # The openAPIV3Schema of each served version of each custom resource, by (group,
        # plural), then version; and the version objects are stored at (the preferred one).
        self._schemas: dict[tuple[str, str], dict[str, JsonObject]] = {}
        self._stored_at: dict[tuple[str, str], str] = {}
        # Their compiled CEL rules (x-kubernetes-validations), built once per CRD write.
        self._rules: dict[tuple[str, str], dict[str, RuleValidator]] = {}
        # What each version's top-level fields were stored as and which passed (``schema``).
        self._memos: dict[tuple[str, str], dict[str, schema.AdmitMemo]] = {}

    def admit(
        self, definition: ResourceDefinition, obj: JsonObject, old: Previous, warnings: Warnings
    ) -> JsonObject:
        """Prune, default and validate ``obj`` by the schema of the version it is written at,
        then convert it to the stored version (``old`` too, for ratcheting, as kube does)."""
        if not definition.custom:
            return obj
        key = _key(definition)
        by_version = self._schemas.get(key)
        if by_version is None:
            return obj
        version, found = self._schema_of(key, by_version, obj)
        if old is not None and old.get("apiVersion") != obj.get("apiVersion"):
            old = self.engine.present(definition.resource(version), old)
        memo = self._memos[key].get(version)
        stored = schema.prune_and_default(obj, found, memo)
        errors = schema.validate(stored, found, old, memo)
        rules = self._rules[key].get(version)
        if rules is not None and rules.has_rules:
            if any(e.reason in _BLOCKING for e in errors):
                errors.append(_RULES_NOT_CHECKED)
            else:
                errors.extend(rules.validate(stored, old, warnings))
        if errors:
            raise messages.invalid(definition, str(stored["metadata"].get("name", "")), errors)
        target = self._stored_at[key]
        convert = self.engine.conversions.get(key)
        if convert is not None and version != target:
            stored = convert(stored, definition.api_version(target))
            stored = schema.prune_and_default(stored, by_version.get(target))
        return stored

    def unknown_fields(self, definition: ResourceDefinition, obj: JsonObject) -> list[str]:
        if not definition.custom:
            return []
        key = _key(definition)
        by_version = self._schemas.get(key)
        if by_version is None:
            return []
        return schema.unknown_fields(obj, self._schema_of(key, by_version, obj)[1])

    def _schema_of(
        self, key: tuple[str, str], by_version: dict[str, JsonObject], obj: JsonObject
    ) -> tuple[str, JsonObject]:
        """(version ``obj`` is written at, that version's schema): the stored version's when
        ``obj`` names none that is served."""
        version = str(obj.get("apiVersion") or "").rpartition("/")[2]
        if version not in by_version:
            version = self._stored_at[key]
        return version, by_version.get(version) or {}

    def prepare_create(self, definition: ResourceDefinition, obj: JsonObject) -> None:
        if is_crd(definition):
            self._validate_crd(definition, obj)
            obj["status"] = _crd_status(obj)

    def prepare_update(
        self, definition: ResourceDefinition, old: JsonObject, new: JsonObject
    ) -> None:
        if is_crd(definition) and old.get("spec") != new.get("spec"):
            self._validate_crd(definition, new)
            new["status"] = _crd_status(new)

    def after_commit(
        self, table: Table, event_type: WatchEventType, stored: JsonObject, prev: JsonObject | None
    ) -> None:
        if is_crd(table.definition):
            self._sync_crd(event_type, stored)

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
        existing = self.engine.served.get((str(group), str(plural)))
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

    def _default_on_read(self, key: tuple[str, str], schemas: dict[str, JsonObject]) -> None:
        """Objects stored before this CRD change read with its defaults filled in, as kube
        defaults what it reads from etcd (objects written from now on are defaulted on write,
        so only older resourceVersions pay for it)."""
        defaulted = {v: found for v, found in schemas.items() if schema.has_defaults(found)}
        if not defaulted:
            self.engine.read_defaults.pop(key, None)
            return
        changed_at = self.engine.store.rv

        def fill(obj: JsonObject, version: str) -> JsonObject:
            found = defaulted.get(version)
            written = str((obj.get("metadata") or {}).get("resourceVersion") or "0")
            if found is None or not written.isdigit() or int(written) >= changed_at:
                return obj
            return schema.apply_defaults(obj, found)

        self.engine.read_defaults[key] = fill

    def _version_of(self, group: str, kind: str) -> str | None:
        """The preferred served apiVersion of ``kind`` in ``group``, or None. A kind the
        simulation never creates (the object CAPI clones from a template, a pool's per-instance
        kind) takes the version of its template or its pool, as a provider serves them alike."""
        for wanted in (kind, f"{kind}Template", kind.removesuffix("Machine")):
            for definition in self.engine.served.values():
                if definition.group == group and definition.kind == wanted:
                    return definition.api_version()
        return None

    def _sync_crd(self, event_type: WatchEventType, crd: JsonObject) -> None:
        definition = definition_from_crd(crd)
        key = (definition.group, definition.plural)
        if event_type != "DELETED":
            self.engine.serve(definition)
            schemas = _version_schemas(crd)
            current = self._schemas.get(key) or {}
            if current.keys() != schemas.keys() or any(
                current[v] is not found for v, found in schemas.items()
            ):
                if current and current != schemas:
                    self._default_on_read(key, schemas)
                self._schemas[key] = schemas
                self._rules[key] = {v: RuleValidator(found) for v, found in schemas.items()}
                self._memos[key] = {v: schema.AdmitMemo() for v in schemas}
            self._stored_at[key] = definition.versions[0]
            convert = converter_of(crd, self._version_of)
            if convert is None:
                self.engine.conversions.pop(key, None)
            else:
                self.engine.conversions[key] = convert
            return
        self.engine.read_defaults.pop(key, None)
        served = self.engine.served.get(key)
        if served is None or not served.custom:
            return
        # Normally empty by now; objects left behind (the cleanup finalizer was removed by hand)
        # become unreachable with their resource, so they are dropped with it.
        table = self.engine.store.tables[served.group_resource]
        for stored in [table.objects[k] for k in table.sorted_keys()]:
            if table.objects.get(key_of(stored)) is stored:
                self.engine.finish_deletion(table, stored, stored)
        del self.engine.served[key]
        self._schemas.pop(key, None)
        self._rules.pop(key, None)
        self._memos.pop(key, None)
        self._stored_at.pop(key, None)
        self.engine.conversions.pop(key, None)
        self.engine.hub.drop_for(table.log)  # as kube ends watches of a resource that is gone


def _key(definition: ResourceDefinition) -> tuple[str, str]:
    return (definition.group, definition.plural)


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


def _version_schemas(crd: JsonObject) -> dict[str, JsonObject]:
    """The ``openAPIV3Schema`` of each served version (kube validates an object by the schema
    of the version it is written at)."""
    versions = (crd.get("spec") or {}).get("versions") or []
    return {
        str(v.get("name")): ((v.get("schema") or {}).get("openAPIV3Schema")) or {}
        for v in versions
        if v.get("served", True)
    }
