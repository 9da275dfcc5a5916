"""JSON merge patch (RFC 7386) and JSON patch (RFC 6902), applied as kube-apiserver applies them.

Controllers patch far more often than they update (labels, annotations, finalizers, the
delete-machine annotation), and a JSON patch ``test`` op is how a client makes a write
conditional on a value. Errors are raised as the API errors kube answers with: a failed
``test`` or a bad path is 422 Invalid, a malformed document 400.
"""

from __future__ import annotations

from typing import Any

from karpenter_capi.core.kube.errors import BadRequest, Invalid
from karpenter_capi.sim.apiserver.objects import copy_json

JsonObject = dict[str, Any]


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, ``null`` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy_json(patch)
    result: JsonObject = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# ----------------------------------------------------------------------------------- JSON patch


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _pointer(path: Any) -> list[str]:
    if not isinstance(path, str):
        raise BadRequest(f"the JSON patch path {path!r} is not a string")
    if path == "":
        return []
    if not path.startswith("/"):
        raise Invalid(f'JSON Pointer "{path}" must start with "/"')
    return [_unescape(token) for token in path[1:].split("/")]


def _index(container: list[Any], token: str, path: str, *, allow_end: bool) -> int:
    if token == "-" and allow_end:
        return len(container)
    if not token.isdigit() or (len(token) > 1 and token.startswith("0")):
        raise Invalid(f"unable to access invalid index: {token} (path {path})")
    index = int(token)
    limit = len(container) + (1 if allow_end else 0)
    if index >= limit:
        raise Invalid(f"Unable to access invalid index: {index}")
    return index


def _parent(doc: Any, tokens: list[str], path: str) -> Any:
    current = doc
    for token in tokens[:-1]:
        if isinstance(current, dict):
            if token not in current:
                raise Invalid(f'doc is missing path: "{path}": missing value')
            current = current[token]
        elif isinstance(current, list):
            current = current[_index(current, token, path, allow_end=False)]
        else:
            raise Invalid(f'doc is missing path: "{path}": missing value')
    return current


def _get(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return doc
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise Invalid(f'doc is missing path: "{path}": missing value')
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, path, allow_end=False)]
    raise Invalid(f'doc is missing path: "{path}": missing value')


def _add(doc: Any, path: str, value: Any) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return value
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, path, allow_end=True), value)
    else:
        raise Invalid(f'doc is missing path: "{path}": missing value')
    return doc


def _remove(doc: Any, path: str) -> tuple[Any, Any]:
    tokens = _pointer(path)
    if not tokens:
        raise Invalid("unable to remove the whole document")
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise Invalid(f"Unable to remove nonexistent key: {last}: missing value")
        return doc, parent.pop(last)
    if isinstance(parent, list):
        return doc, parent.pop(_index(parent, last, path, allow_end=False))
    raise Invalid(f'doc is missing path: "{path}": missing value')


def _replace(doc: Any, path: str, value: Any) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return value
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise Invalid(
                f"replace operation does not apply: doc is missing key: {path}: missing value"
            )
        parent[last] = value
    elif isinstance(parent, list):
        parent[_index(parent, last, path, allow_end=False)] = value
    else:
        raise Invalid(f'doc is missing path: "{path}": missing value')
    return doc


def _operation_field(operation: JsonObject, name: str) -> Any:
    if name not in operation:
        raise BadRequest(f"the JSON patch operation {operation!r} is missing {name!r}")
    return operation[name]


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902 on a copy of ``target``: add, remove, replace, move, copy, test."""
    if not isinstance(operations, list):
        raise BadRequest("a JSON patch must be a list of operations")
    doc = copy_json(target)
    for operation in operations:
        if not isinstance(operation, dict):
            raise BadRequest(f"the JSON patch operation {operation!r} is not an object")
        doc = _apply_operation(doc, operation)
    return doc


def _apply_operation(doc: Any, operation: dict[str, Any]) -> Any:
    """``doc`` after one operation (in place where it can be; the new root otherwise)."""
    op = _operation_field(operation, "op")
    path = _operation_field(operation, "path")
    if op == "add":
        return _add(doc, path, copy_json(_operation_field(operation, "value")))
    if op == "remove":
        return _remove(doc, path)[0]
    if op == "replace":
        return _replace(doc, path, copy_json(_operation_field(operation, "value")))
    if op == "move":
        source = _operation_field(operation, "from")
        if path.startswith(source + "/"):
            raise Invalid(f"unable to move {source} into its own child {path}")
        doc, value = _remove(doc, source)
        return _add(doc, path, value)
    if op == "copy":
        value = copy_json(_get(doc, _operation_field(operation, "from")))
        return _add(doc, path, value)
    if op == "test":
        expected = _operation_field(operation, "value")
        if _get(doc, path) != expected:
            raise Invalid(f"testing value {path} failed: test failed")
        return doc
    raise BadRequest(f"Unexpected kind: {op}")
