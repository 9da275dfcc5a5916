"""A small validator and defaulter for Kubernetes structural schemas.

``jsonschema`` is not a project dependency, and the API server's semantics differ from plain
JSON Schema anyway (int-or-string, pruning of unknown fields, top-down defaulting), so the
tests check generated CRDs against this compact re-implementation of the parts we emit.
"""

from __future__ import annotations

import copy
import re
from typing import Any

_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "boolean": (bool,),
    "number": (int, float),
}


def _type_ok(schema: dict[str, Any], value: Any) -> bool:
    if schema.get("x-kubernetes-int-or-string"):
        return isinstance(value, int | str) and not isinstance(value, bool)
    if schema.get("x-kubernetes-preserve-unknown-fields") and "type" not in schema:
        return True
    expected = _TYPES[schema["type"]]
    if isinstance(value, bool) and bool not in expected:
        return False
    return isinstance(value, expected)


def validate(schema: dict[str, Any], value: Any, path: str = "") -> list[str]:
    """Problems with ``value`` against ``schema``, as ``path: reason`` strings."""
    if not _type_ok(schema, value):
        return [f"{path}: expected {schema.get('type', 'int-or-string')}, got {value!r}"]
    problems: list[str] = []
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"{path}: {value!r} not in {schema['enum']}")
    if isinstance(value, str):
        if "pattern" in schema and not re.search(schema["pattern"], value):
            problems.append(f"{path}: {value!r} does not match {schema['pattern']}")
        if len(value) > schema.get("maxLength", len(value)):
            problems.append(f"{path}: longer than {schema['maxLength']}")
        if len(value) < schema.get("minLength", 0):
            problems.append(f"{path}: shorter than {schema['minLength']}")
    if isinstance(value, int) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            problems.append(f"{path}: below minimum {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            problems.append(f"{path}: above maximum {schema['maximum']}")
    if isinstance(value, list):
        if len(value) > schema.get("maxItems", len(value)):
            problems.append(f"{path}: more than {schema['maxItems']} items")
        for index, item in enumerate(value):
            problems += validate(schema["items"], item, f"{path}[{index}]")
    if isinstance(value, dict):
        if len(value) > schema.get("maxProperties", len(value)):
            problems.append(f"{path}: more than {schema['maxProperties']} properties")
        problems += [
            f"{path}.{name}: required" for name in schema.get("required", []) if name not in value
        ]
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for name, item in value.items():
            if name in properties:
                problems += validate(properties[name], item, f"{path}.{name}")
            elif isinstance(extra, dict):
                problems += validate(extra, item, f"{path}[{name}]")
    return problems


def apply_defaults(schema: dict[str, Any], value: Any) -> Any:
    """Default ``value`` top-down like the API server: a defaulted object is defaulted in turn."""
    value = copy.deepcopy(value)
    if isinstance(value, dict):
        for name, sub in schema.get("properties", {}).items():
            if name not in value and "default" in sub:
                value[name] = copy.deepcopy(sub["default"])
            if name in value:
                value[name] = apply_defaults(sub, value[name])
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            value = {k: apply_defaults(extra, v) for k, v in value.items()}
    elif isinstance(value, list) and "items" in schema:
        value = [apply_defaults(schema["items"], item) for item in value]
    return value


def walk(schema: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every (path, node) of a schema, the root first."""
    nodes = [(path, schema)]
    for name, sub in schema.get("properties", {}).items():
        nodes += walk(sub, f"{path}.{name}")
    if isinstance(schema.get("additionalProperties"), dict):
        nodes += walk(schema["additionalProperties"], f"{path}{{}}")
    if "items" in schema:
        nodes += walk(schema["items"], f"{path}[]")
    return nodes
