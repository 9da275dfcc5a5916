"""Structural OpenAPI schemas of CRDs: pruning, defaulting and validation of custom resources.

kube-apiserver does three things with a CRD's ``openAPIV3Schema`` on every write of a custom
resource: it drops fields the schema does not know (pruning), fills in declared ``default``s,
and rejects values that break the schema with 422. The project's CRDs are generated from its
models and rely on the server for Karpenter's defaults (``consolidateAfter``, disruption
budgets...), and a controller writing a misspelled field must see it vanish as it would on a
real cluster, so the same rules apply here. CEL rules (``x-kubernetes-validations``) are
evaluated by ``sim.apiserver.cel`` after these checks; ``format`` is not validated, and the
storage version's schema applies to every served version (objects are stored once; versions
differ only in name here).

On update, validation ratchets as kube's (default since 1.30): a subtree equal to the value it
correlates with in the old object (``correlate``) is not validated again, so an object stored
under an older, looser schema can still be updated where it is not changed.

Every function returns new containers and never mutates its input: stored objects are shared
with watch events and list snapshots.

A write mostly leaves a custom resource's ``spec`` (or ``status``) as it was, so with an
``AdmitMemo`` (one per CRD version, ``apiextensions``) each top-level field remembers, by its
JSON bytes, what it was stored as (pruning and defaulting are functions of the value) and which
stored values passed validation whole, without ratcheting: such a value passes again whatever
the old object (ratcheting only forgives), so it is not walked again.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from karpenter_capi.sim.apiserver.cel_memo import memo_key
from karpenter_capi.sim.apiserver.correlate import (
    ABSENT,
    list_type,
    map_key,
    map_list_index,
    unchanged,
)
from karpenter_capi.sim.apiserver.messages import FieldError, invalid_value, required
from karpenter_capi.sim.apiserver.objects import copy_json

JsonObject = dict[str, Any]
_ROOT_FIELDS = ("apiVersion", "kind", "metadata")
_MEMO_SIZE = 256  # values remembered per top-level field (then forgotten all at once)


class AdmitMemo:
    """Per top-level field of one schema: stored value by written value, and the stored
    values that passed validation whole (all as JSON bytes, ``cel_memo.memo_key``)."""

    __slots__ = ("passed", "stored")

    def __init__(self) -> None:
        self.stored: dict[str, dict[bytes, bytes]] = {}
        self.passed: dict[str, dict[bytes, None]] = {}


def _remember(table: dict[str, dict[bytes, Any]], field: str, key: bytes, value: Any) -> None:
    found = table.setdefault(field, {})
    if len(found) >= _MEMO_SIZE:
        found.clear()
    found[key] = value


# ---------------------------------------------------------------------- pruning + defaulting


def _normalize(value: Any, schema: JsonObject) -> Any:
    if isinstance(value, dict):
        return _normalize_object(value, schema)
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_normalize(item, schema["items"]) for item in value]
    return value


def _normalize_object(value: JsonObject, schema: JsonObject) -> Any:
    """An object pruned to the fields its schema knows (or keeps), its defaults filled in."""
    properties = schema.get("properties")
    additional = schema.get("additionalProperties")
    keep_unknown = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
    if properties is None and not isinstance(additional, dict) and keep_unknown:
        return value
    result: JsonObject = {}
    for key, item in value.items():
        if properties is not None and key in properties:
            child = properties[key]
            if item is None and not child.get("nullable"):
                continue  # a null for a non-nullable field is dropped (then defaulted)
            result[key] = _normalize(item, child)
        elif isinstance(additional, dict):
            result[key] = _normalize(item, additional)
        elif additional is True or keep_unknown:
            result[key] = item
    for key, child in (properties or {}).items():
        if key not in result and "default" in child:
            result[key] = _normalize(copy_json(child["default"]), child)
    return result


def prune_and_default(
    obj: JsonObject, schema: JsonObject | None, memo: AdmitMemo | None = None
) -> JsonObject:
    """``obj`` as the API server would store it: unknown fields dropped, defaults applied."""
    if not schema:
        return obj
    body = {k: v for k, v in obj.items() if k not in _ROOT_FIELDS}
    root = {**schema, "properties": _without_root(schema)}
    normalized = _normalize(body, root) if memo is None else _normalize_top(body, root, memo)
    return {**{k: obj[k] for k in _ROOT_FIELDS if k in obj}, **normalized}


def _normalize_top(body: JsonObject, root: JsonObject, memo: AdmitMemo) -> JsonObject:
    """``_normalize_object(body, root)``, each described top-level field's stored value
    taken from ``memo`` when that value was written before (decoded anew: a fresh copy)."""
    properties: JsonObject = root["properties"]
    additional = root.get("additionalProperties")
    keep_unknown = bool(root.get("x-kubernetes-preserve-unknown-fields"))
    result: JsonObject = {}
    for key, item in body.items():
        if key in properties:
            child = properties[key]
            if item is None and not child.get("nullable"):
                continue
            result[key] = _normalize_field(key, item, child, memo)
        elif isinstance(additional, dict):
            result[key] = _normalize(item, additional)
        elif additional is True or keep_unknown:
            result[key] = item
    for key, child in properties.items():
        if key not in result and "default" in child:
            result[key] = _normalize(copy_json(child["default"]), child)
    return result


def _normalize_field(key: str, item: Any, schema: JsonObject, memo: AdmitMemo) -> Any:
    raw = memo_key(item)
    if raw is None:
        return _normalize(item, schema)
    found = memo.stored.get(key, {}).get(raw)
    if found is not None:
        return orjson.loads(found)
    value = _normalize(item, schema)
    stored = memo_key(value)
    if stored is not None:
        _remember(memo.stored, key, raw, stored)
    return value


def _fill_defaults(value: Any, schema: JsonObject) -> Any:
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        result: JsonObject = {}
        for key, item in value.items():
            child = properties.get(key)
            if child is None and isinstance(additional, dict):
                child = additional
            result[key] = item if child is None else _fill_defaults(item, child)
        for key, child in properties.items():
            if key not in result and "default" in child:
                result[key] = _fill_defaults(copy_json(child["default"]), child)
        return result
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_fill_defaults(item, schema["items"]) for item in value]
    return value


def apply_defaults(obj: JsonObject, schema: JsonObject) -> JsonObject:
    """``obj`` with ``schema``'s defaults filled in and nothing pruned: what kube-apiserver
    does to an object it reads from etcd."""
    body = {k: v for k, v in obj.items() if k not in _ROOT_FIELDS}
    filled = _fill_defaults(body, {**schema, "properties": _without_root(schema)})
    return {**{k: obj[k] for k in _ROOT_FIELDS if k in obj}, **filled}


def has_defaults(schema: Any) -> bool:
    """Whether any node of ``schema`` declares a ``default``."""
    if isinstance(schema, dict):
        return "default" in schema or any(has_defaults(v) for v in schema.values())
    if isinstance(schema, list):
        return any(has_defaults(v) for v in schema)
    return False


def unknown_fields(obj: JsonObject, schema: JsonObject | None) -> list[str]:
    """Paths of the fields pruning would drop (``spec.foo``, ``spec.items[0].bar``), sorted.

    This is what ``fieldValidation=Strict`` rejects and ``Warn`` warns about.
    """
    if not schema:
        return []
    found: list[str] = []
    body = {k: v for k, v in obj.items() if k not in _ROOT_FIELDS}
    _collect_unknown(body, {**schema, "properties": _without_root(schema)}, "", found)
    return sorted(found)


def _collect_unknown(value: Any, schema: JsonObject, path: str, found: list[str]) -> None:
    if isinstance(value, dict):
        properties = schema.get("properties")
        additional = schema.get("additionalProperties")
        keep_unknown = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
        if properties is None and not isinstance(additional, dict) and keep_unknown:
            return
        for key, item in value.items():
            where = _join(path, str(key))
            if properties is not None and key in properties:
                _collect_unknown(item, properties[key], where, found)
            elif isinstance(additional, dict):
                _collect_unknown(item, additional, where, found)
            elif not (additional is True or keep_unknown):
                found.append(where)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            _collect_unknown(item, schema["items"], f"{path}[{index}]", found)


def _without_root(schema: JsonObject) -> JsonObject:
    properties: JsonObject = schema.get("properties") or {}
    return {k: v for k, v in properties.items() if k not in _ROOT_FIELDS}


# --------------------------------------------------------------------------------- validation


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _has_type(value: Any, schema: JsonObject) -> bool:
    if schema.get("x-kubernetes-int-or-string"):
        return _type_name(value) in ("integer", "string")
    expected = schema.get("type")
    if expected is None:
        return True
    actual = _type_name(value)
    return actual == expected or (expected == "number" and actual == "integer")


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


class _Validator:
    def __init__(self, skip: frozenset[str] = frozenset()) -> None:
        self.errors: list[FieldError] = []
        # Top-level fields known to pass (``AdmitMemo``), and those that passed here without
        # ratcheting forgiving anything (``ratcheted`` counts the subtrees it skipped).
        self.skip = skip
        self.clean: list[str] = []
        self.ratcheted = 0

    def fail(self, field: str, reason: str, detail: str) -> None:
        self.errors.append(FieldError(field, reason, detail))

    def check(self, value: Any, schema: JsonObject, path: str, old: Any = ABSENT) -> None:
        """Validate ``value``; ``old`` is what it correlates with in the old object, if any."""
        if value is None and schema.get("nullable"):
            return
        if path and old is not ABSENT and unchanged(value, old, schema):
            self.ratcheted += 1
            return  # ratcheting: an unchanged subtree keeps whatever errors it had
        if not _has_type(value, schema):
            expected = (
                "integer or string" if schema.get("x-kubernetes-int-or-string") else schema["type"]
            )
            actual = _type_name(value)
            self.fail(
                path,
                "FieldValueTypeInvalid",
                f'Invalid value: "{actual}": {path} in body must be of type {expected}: "{actual}"',
            )
            return
        self._scalar_rules(value, schema, path)
        for keyword in ("anyOf", "oneOf"):
            branches = schema.get(keyword)
            if branches and not any(_matches(value, branch, path) for branch in branches):
                self.errors.append(
                    invalid_value(
                        path, _shown(value), f"must validate at least one schema ({keyword})"
                    )
                )
        for branch in schema.get("allOf") or []:
            self.check(value, branch, path)
        if isinstance(value, dict):
            self._object_rules(value, schema, path, old if isinstance(old, dict) else None)
        elif isinstance(value, list):
            self._array_rules(value, schema, path, old if isinstance(old, list) else None)

    def _scalar_rules(self, value: Any, schema: JsonObject, path: str) -> None:
        enum = schema.get("enum")
        if enum is not None and value not in enum:
            supported = ", ".join(f'"{v}"' if isinstance(v, str) else str(v) for v in enum)
            self.fail(
                path,
                "FieldValueNotSupported",
                f"Unsupported value: {_shown(value)}: supported values: {supported}",
            )
        if isinstance(value, str):
            pattern = schema.get("pattern")
            if pattern is not None and not re.search(pattern, value):
                self.errors.append(
                    invalid_value(path, value, f"{path} in body should match '{pattern}'")
                )
            if "maxLength" in schema and len(value) > schema["maxLength"]:
                self.fail(
                    path,
                    "FieldValueTooLong",
                    f"Too long: may not be longer than {schema['maxLength']}",
                )
            if "minLength" in schema and len(value) < schema["minLength"]:
                self.errors.append(
                    invalid_value(
                        path,
                        value,
                        f"{path} in body should be at least {schema['minLength']} chars long",
                    )
                )
        if _type_name(value) in ("integer", "number"):
            if "minimum" in schema and value < schema["minimum"]:
                self.errors.append(
                    invalid_value(
                        path,
                        value,
                        f"{path} in body should be greater than or equal to {schema['minimum']}",
                    )
                )
            if "maximum" in schema and value > schema["maximum"]:
                self.errors.append(
                    invalid_value(
                        path,
                        value,
                        f"{path} in body should be less than or equal to {schema['maximum']}",
                    )
                )

    def _object_rules(
        self, value: JsonObject, schema: JsonObject, path: str, old: JsonObject | None
    ) -> None:
        for key in schema.get("required") or []:
            if key not in value:
                self.errors.append(required(_join(path, key), ""))
        if "maxProperties" in schema and len(value) > schema["maxProperties"]:
            self.fail(
                path,
                "FieldValueTooMany",
                f"Too many: {len(value)}: must have at most {schema['maxProperties']} items",
            )
        properties = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        for key, item in value.items():
            before = ABSENT if old is None else old.get(key, ABSENT)
            if key in properties:
                if path:
                    self.check(item, properties[key], _join(path, key), before)
                elif key not in self.skip:
                    found = (len(self.errors), self.ratcheted)
                    self.check(item, properties[key], key, before)
                    if found == (len(self.errors), self.ratcheted):
                        self.clean.append(key)
            elif isinstance(additional, dict):
                self.check(item, additional, _join(path, key), before)

    def _array_rules(
        self, value: list[Any], schema: JsonObject, path: str, old: list[Any] | None
    ) -> None:
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            self.fail(
                path,
                "FieldValueTooMany",
                f"Too many: {len(value)}: must have at most {schema['maxItems']} items",
            )
        if "minItems" in schema and len(value) < schema["minItems"]:
            self.errors.append(
                invalid_value(
                    path,
                    len(value),
                    f"{path} in body should have at least {schema['minItems']} items",
                )
            )
        items = schema.get("items")
        kind = list_type(schema)
        if isinstance(items, dict):
            old_by_key = map_list_index(schema, old) if kind == "map" else {}
            for index, item in enumerate(value):
                self.check(
                    item,
                    items,
                    f"{path}[{index}]",
                    _old_item(schema, old, old_by_key, index=index, item=item),
                )
        if kind in ("set", "map"):
            keys = schema.get("x-kubernetes-list-map-keys") or []
            seen: list[Any] = []
            for index, item in enumerate(value):
                identity = (
                    [item.get(k) for k in keys]
                    if kind == "map" and isinstance(item, dict)
                    else item
                )
                if identity in seen:
                    self.fail(
                        f"{path}[{index}]",
                        "FieldValueDuplicate",
                        f"Duplicate value: {_shown(identity)}",
                    )
                seen.append(identity)


def _old_item(
    schema: JsonObject,
    old: list[Any] | None,
    old_by_key: dict[tuple[Any, ...], Any],
    *,
    index: int,
    item: Any,
) -> Any:
    """The old item ratcheting compares ``item`` with: by map keys, by index, or none (sets)."""
    kind = list_type(schema)
    if old is None or kind in ("set", "atomic"):
        return ABSENT
    if kind == "map":
        key = map_key(schema, item)
        return ABSENT if key is None else old_by_key.get(key, ABSENT)
    return old[index] if index < len(old) else ABSENT


def _shown(value: Any) -> str:
    return f'"{value}"' if isinstance(value, str) else str(value)


def _matches(value: Any, schema: JsonObject, path: str) -> bool:
    probe = _Validator()
    probe.check(value, schema, path)
    return not probe.errors


def validate(
    obj: JsonObject,
    schema: JsonObject | None,
    old: JsonObject | None = None,
    memo: AdmitMemo | None = None,
) -> list[FieldError]:
    """Schema violations of a custom resource (``metadata`` is validated elsewhere).

    ``old`` (the stored object, on update) turns ratcheting on. The root itself never counts
    as unchanged (its ``metadata`` holds keys no schema describes), as in kube. With
    ``memo``, a top-level field whose value passed whole before is not walked again.
    """
    if not schema:
        return []
    body = {k: v for k, v in obj.items() if k not in _ROOT_FIELDS}
    if memo is None or any(schema.get(k) for k in ("allOf", "anyOf", "oneOf")):
        return _validate(body, schema, old, _Validator())
    keys = {k: memo_key(v) for k, v in body.items() if k in (schema.get("properties") or {})}
    skip = frozenset(k for k, key in keys.items() if key in memo.passed.get(k, {}))
    validator = _Validator(skip)
    errors = _validate(body, schema, old, validator)
    for field in validator.clean:
        if (key := keys.get(field)) is not None:
            _remember(memo.passed, field, key, None)
    return errors


def _validate(
    body: JsonObject, schema: JsonObject, old: JsonObject | None, validator: _Validator
) -> list[FieldError]:
    root = {**schema, "properties": _without_root(schema)}
    root["required"] = [k for k in schema.get("required") or [] if k not in _ROOT_FIELDS]
    before: Any = ABSENT
    if old is not None:
        before = {k: v for k, v in old.items() if k not in _ROOT_FIELDS}
    validator.check(body, root, "", before)
    return validator.errors
