"""Which old value a node of an updated custom resource is compared with, and when it is unchanged.

Two kube-apiserver features look at the old object while validating the new one, and they
pair values up differently:

* transition rules (CEL rules using ``oldSelf``) see the old value of object properties and
  map entries by key, and of ``x-kubernetes-list-type: map`` items by their map keys; items of
  any other list have no old value;
* validation ratcheting (errors in a subtree that did not change are not reported) also pairs
  the items of lists without a ``x-kubernetes-list-type`` by index, and decides "unchanged"
  as apiserver's ``CorrelatedObject.CachedDeepEqual`` does, quirks included: a map list is
  compared item by item through its keys (reordering is no change), and an object holding a
  key its schema does not describe (``x-kubernetes-preserve-unknown-fields``, ``metadata``) is
  never unchanged.
"""

from __future__ import annotations

from typing import Any

JsonObject = dict[str, Any]
ABSENT: Any = object()  # "no old value", distinct from an old value of null


def list_type(schema: JsonObject) -> str | None:
    found = schema.get("x-kubernetes-list-type")
    return str(found) if found is not None else None


def map_key(schema: JsonObject, item: Any) -> tuple[Any, ...] | None:
    if not isinstance(item, dict):
        return None
    return tuple(_hashable(item.get(k)) for k in schema.get("x-kubernetes-list-map-keys") or [])


def _hashable(value: Any) -> Any:
    return (type(value).__name__, value) if not isinstance(value, dict | list) else repr(value)


def map_list_index(schema: JsonObject, items: Any) -> dict[tuple[Any, ...], Any]:
    """The old items of a map list by their keys (the first wins, as kube's MapList)."""
    index: dict[tuple[Any, ...], Any] = {}
    if isinstance(items, list):
        for item in items:
            key = map_key(schema, item)
            if key is not None:
                index.setdefault(key, item)
    return index


def deep_equal(a: Any, b: Any) -> bool:
    """``reflect.DeepEqual`` over decoded JSON: a bool never equals a number."""
    if a is b:
        return True
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict):
        return (
            isinstance(b, dict)
            and len(a) == len(b)
            and all(k in b and deep_equal(v, b[k]) for k, v in a.items())
        )
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(deep_equal, a, b))
    if isinstance(a, int | float) and isinstance(b, int | float):
        # kube decodes an integral JSON number as int64 whichever way it was written.
        return bool(a == b)
    return type(a) is type(b) and bool(a == b)


def unchanged(new: Any, old: Any, schema: JsonObject | None) -> bool:
    """Whether ratcheting treats ``new`` as equal to its correlated ``old`` (see module doc)."""
    if old is ABSENT:
        return False
    if new is None or old is None:
        return new is None and old is None
    if schema is None:
        return deep_equal(new, old)
    if isinstance(new, list) and isinstance(old, list):
        return _unchanged_list(new, old, schema)
    if isinstance(new, dict) and isinstance(old, dict):
        return _unchanged_object(new, old, schema)
    return deep_equal(new, old)


def _unchanged_list(new: list[Any], old: list[Any], schema: JsonObject) -> bool:
    """Lists correlate by their ``x-kubernetes-list-type``: map lists by key, others by index.

    Sets and atomic lists have no per-item correlation in kube, so they compare whole.
    """
    if len(new) != len(old):
        return False
    items = schema.get("items")
    kind = list_type(schema)
    if not isinstance(items, dict) or kind in ("set", "atomic"):
        return deep_equal(new, old)
    if kind == "map":
        by_key = map_list_index(schema, old)
        for item in new:
            key = map_key(schema, item)
            previous = by_key.get(key, ABSENT) if key is not None else ABSENT
            if previous is ABSENT or not unchanged(item, previous, items):
                return False
        return True
    return all(unchanged(a, b, items) for a, b in zip(new, old, strict=True))


def _unchanged_object(new: JsonObject, old: JsonObject, schema: JsonObject) -> bool:
    """Objects correlate field by field; a field with no schema of its own never correlates."""
    if len(new) != len(old):
        return False
    properties = schema.get("properties") or {}
    additional = schema.get("additionalProperties")
    for key, value in new.items():
        if key not in old:
            return False
        child = properties.get(key)
        if child is None:
            if not isinstance(additional, dict):
                return False
            child = additional
        if not unchanged(value, old[key], child):
            return False
    return True


class Correlation:
    """A new value paired with its old one for ratcheting, with the equality computed once."""

    __slots__ = ("_equal", "new", "old", "schema")

    def __init__(self, new: Any, old: Any, schema: JsonObject) -> None:
        self.new, self.old, self.schema = new, old, schema
        self._equal: bool | None = None

    def equal(self) -> bool:
        if self._equal is None:
            self._equal = unchanged(self.new, self.old, self.schema)
        return self._equal

    def key(self, key: str) -> Correlation | None:
        if not (isinstance(self.new, dict) and isinstance(self.old, dict)):
            return None
        if key not in self.new or key not in self.old:
            return None
        child = (self.schema.get("properties") or {}).get(key)
        if child is None:
            child = self.schema.get("additionalProperties")
        if not isinstance(child, dict):
            return None
        return Correlation(self.new[key], self.old[key], child)

    def index(self, index: int, keyed_old: Any) -> Correlation | None:
        items = self.schema.get("items")
        if not (isinstance(self.new, list) and isinstance(self.old, list)):
            return None
        if not isinstance(items, dict):
            return None
        kind = list_type(self.schema)
        if kind == "map":
            old = keyed_old
        elif kind in ("set", "atomic") or index >= len(self.old):
            return None
        else:
            old = self.old[index]
        if old is ABSENT or old is None:
            return None
        return Correlation(self.new[index], old, items)


Ratchet = tuple[Correlation | None, Correlation | None]  # (this node, nearest correlated parent)


def should_ratchet(ratchet: Ratchet) -> bool:
    current, parent = ratchet
    if current is not None:
        return current.equal()
    return parent is not None and parent.equal()


def key_ratchet(ratchet: Ratchet, key: str) -> Ratchet:
    current = ratchet[0]
    if current is None:
        return ratchet
    return current.key(key), current
