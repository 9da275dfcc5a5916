"""The value a CEL rule sees as ``self``: the stored JSON, typed by the schema as kube types it.

kube-apiserver does not hand rules raw JSON. It converts each value by its schema node
(apiserver ``UnstructuredToVal``): ``type: number`` is always a double (``1`` becomes
``1.0``), strings with ``format: date``/``date-time`` are timestamps, ``format: duration`` a
duration and ``format: byte`` bytes; object properties whose names are not CEL identifiers
are renamed (``foo-bar`` -> ``foo__dash__bar``, ``namespace`` -> ``__namespace__``) or
hidden; and at a resource root (the custom resource, or an
``x-kubernetes-embedded-resource``) ``metadata`` shows only ``name`` and ``generateName``.

Most schema subtrees need none of that, and converting is the costly part of evaluating a
rule, so ``converter`` returns None for them and callers pass the stored value through.
A string a format cannot parse stays a string (kube would make it an error value that fails
only the rules touching it; here those rules fail with a type error instead).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from karpenter_capi.sim.apiserver.cel_library import escape_property

JsonObject = dict[str, Any]
Converter = Callable[[Any], Any]

_VISIBLE_METADATA = ("name", "generateName")
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(ns|us|µs|ms|s|m|h|d|w)")
_DURATION_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 604800.0,
}


def _to_double(value: Any) -> Any:
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _to_timestamp(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return value
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _to_date(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return datetime.strptime(value, "%Y-%m-%d").replace(tzinfo=UTC)
    except ValueError:
        return value


def parse_go_duration(text: str) -> timedelta | None:
    """``1h30m``, ``1.5s``, ``-2m``, ``3d`` (the OpenAPI ``duration`` format); None if not one."""
    body = text.strip()
    sign = -1.0 if body.startswith("-") else 1.0
    body = body.lstrip("+-").replace(" ", "")
    if body == "0":
        return timedelta(0)
    position, seconds = 0, 0.0
    for match in _DURATION_PART.finditer(body):
        if match.start() != position:
            return None
        seconds += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
        position = match.end()
    if position == 0 or position != len(body):
        return None
    return timedelta(seconds=sign * seconds)


def _to_duration(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    parsed = parse_go_duration(value)
    return value if parsed is None else parsed


def _to_bytes(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return value


_FORMATS: dict[str, Converter] = {
    "date": _to_date,
    "date-time": _to_timestamp,
    "duration": _to_duration,
    "byte": _to_bytes,
}


def converter(schema: JsonObject, resource_root: bool = False) -> Converter | None:
    """A function typing values of ``schema`` for CEL, or None when they pass unchanged."""
    kind = schema.get("type")
    if kind == "number":
        return _to_double
    if kind == "string":
        return _FORMATS.get(str(schema.get("format")))
    properties = schema.get("properties")
    additional = schema.get("additionalProperties")
    items = schema.get("items")
    embedded = resource_root or bool(schema.get("x-kubernetes-embedded-resource"))
    if isinstance(properties, dict) or embedded:
        return _object_converter(properties or {}, embedded)
    if isinstance(additional, dict):
        value_converter = converter(additional)
        if value_converter is None:
            return None
        return lambda value: (
            {k: _apply(value_converter, v) for k, v in value.items()}
            if isinstance(value, dict)
            else value
        )
    if isinstance(items, dict):
        item_converter = converter(items)
        if item_converter is None:
            return None
        return lambda value: (
            [_apply(item_converter, v) for v in value] if isinstance(value, list) else value
        )
    return None


def _apply(function: Converter, value: Any) -> Any:
    return None if value is None else function(value)


def _object_converter(properties: JsonObject, embedded: bool) -> Converter | None:
    fields: dict[str, tuple[str | None, Converter | None]] = {}
    plain = not embedded
    for name, child in properties.items():
        escaped = escape_property(name)
        child_converter = converter(child) if isinstance(child, dict) else None
        fields[name] = (escaped, child_converter)
        if escaped != name or child_converter is not None:
            plain = False
    if plain:
        return None

    def convert(value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        result: JsonObject = {}
        for key, item in value.items():
            escaped, child_converter = fields.get(key, (key, None))
            if escaped is None:
                continue
            result[escaped] = (
                child_converter(item) if child_converter and item is not None else item
            )
        if embedded and isinstance(value.get("metadata"), dict):
            meta = value["metadata"]
            result["metadata"] = {k: meta[k] for k in _VISIBLE_METADATA if k in meta}
        return result

    return convert
