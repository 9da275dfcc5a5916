"""Small helpers over plain JSON objects, shared by every part of the in-memory API server.

The server stores objects as plain dicts and hands out copies, so the copy must be fast:
``copy.deepcopy`` is several times slower than a recursive walk that knows objects contain only
dicts, lists and scalars. Dotted-path access (``.spec.replicas``) is how CRDs name the fields
behind the scale subresource and how field selectors name fields, so it lives here too.
"""

from __future__ import annotations

from typing import Any

JsonObject = dict[str, Any]


def copy_json(value: Any) -> Any:
    """A deep copy of a JSON-shaped value (dicts, lists, scalars)."""
    if type(value) is dict:
        return {key: copy_json(item) for key, item in value.items()}
    if type(value) is list:
        return [copy_json(item) for item in value]
    return value


def copy_object(obj: JsonObject) -> JsonObject:
    """``copy_json`` for a top-level object, typed for callers."""
    copied: JsonObject = copy_json(obj)
    return copied


def object_key(namespace: str | None, name: str) -> str:
    """The storage key, ordered like etcd keys so lists come back sorted as kube sorts them."""
    return f"{namespace}/{name}" if namespace else name


def split_path(path: str) -> list[str]:
    """``.spec.replicas`` -> ``["spec", "replicas"]`` (the CRD scale path form)."""
    return [part for part in path.strip().lstrip(".").split(".") if part]


def get_path(obj: JsonObject, path: str) -> Any:
    """The value at a dotted path, or ``None`` when any step is missing."""
    current: Any = obj
    for part in split_path(path):
        if not isinstance(current, dict):
            return None
        current = current.get(part)
    return current


def set_path(obj: JsonObject, path: str, value: Any) -> None:
    """Set the value at a dotted path, creating intermediate dicts."""
    parts = split_path(path)
    current = obj
    for part in parts[:-1]:
        child = current.get(part)
        if not isinstance(child, dict):
            child = {}
            current[part] = child
        current = child
    current[parts[-1]] = value
