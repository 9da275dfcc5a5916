"""A CEL rule's ``fieldPath`` (``.spec['x'].y``) as the field path kube reports (``spec[x].y``).

Split from ``cel`` (which uses it for where a failed rule reports) to keep modules small.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

JsonObject = dict[str, Any]


def _tokens(text: str) -> Iterator[str]:
    position = 0
    while position < len(text):
        char = text[position]
        if char in ".[]":
            yield char
            position += 1
        elif char == "'":
            end = position + 1
            while end < len(text) and not (text[end] == "'" and text[end - 1] != "\\"):
                end += 1
            yield text[position : end + 1]
            position = end + 1
        else:
            end = position
            while end < len(text) and text[end] not in ".[]":
                end += 1
            yield text[position:end]
            position = end


_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}


def _unquote(token: str) -> str:
    if len(token) < 2 or token[0] != "'" or token[-1] != "'":
        raise ValueError(f"expected single quoted string but got {token}")

    def unescape(match: re.Match[str]) -> str:
        char = match.group(1)
        if char in ("'", "\\"):
            return char
        if char in _ESCAPES:
            return _ESCAPES[char]
        raise ValueError(f"invalid string literal: invalid escape char \\{char}")

    return re.sub(r"\\(.)", unescape, token[1:-1])


def normalize_field_path(text: str, schema: JsonObject) -> str:
    """A rule's ``fieldPath`` (``.spec['x'].y``) as the field path kube reports (``spec[x].y``).

    Only properties (``.name`` or ``['name']``) and map keys are allowed; ValueError otherwise.
    """
    path = ""
    tokens = iter(list(_tokens(text)))
    for token in tokens:
        if token == "[":
            name = _unquote(next(tokens, ""))
            if next(tokens, None) != "]":
                raise ValueError("expected ]")
        elif token == ".":
            name = next(tokens, "")
            if not name:
                raise ValueError("unexpected end of JSON path")
        else:
            raise ValueError(f"expected [ or . but got: {token}")
        properties = schema.get("properties")
        additional = schema.get("additionalProperties")
        if isinstance(properties, dict):
            if name not in properties:
                raise ValueError("does not refer to a valid field")
            schema = properties[name]
            path = f"{path}.{name}" if path else name
        elif isinstance(additional, dict):
            schema = additional
            path = f"{path}[{name}]"
        else:
            raise ValueError("does not refer to a valid field")
    return path
