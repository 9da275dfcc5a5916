"""What a CRD's rules are remembered by: the keys of ``cel``'s outcome caches.

A rule's outcome is a function of the values it is given (``self``, and ``oldSelf`` for a
transition rule): the Kubernetes libraries (``cel_library``) read no clock and no state. So
the validator remembers outcomes by those values, as JSON bytes (``memo_key``), at two levels:

* per schema node, the outcomes of its rules without ``oldSelf`` by ``self``; where every such
  rule reads ``self`` only through fields (``self.metadata.name``), by those fields alone
  (``self_fields``, ``project``), so a root rule on the name is not run again because the
  status changed;
* per subtree, the values it passed with: every rule in it held (or did not apply) for this
  value and this correlated old value (``pass_key``); such a subtree gives no error and no
  warning, whatever the write's ratcheting, so it is not walked again for the same pair.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from karpenter_capi.sim.apiserver.cel_library import escape_property

VISIBLE_METADATA = ("name", "generateName")
"""What a rule sees of ``metadata`` at a resource root (kube's ``UnstructuredToVal``)."""

# Every ``self`` in the text, as a word: in code, strings and comments alike, so nothing that
# could be the variable is missed (the rest only makes the answer more cautious).
_SELF = re.compile(r"\bself\b", re.ASCII)
# What must follow it for a field read: ``.field``, not called (``self.all(...)``).
_FIELD = re.compile(r"\s*\.\s*([A-Za-z_][A-Za-z0-9_]*)\s*(\()?", re.ASCII)


def self_fields(text: str) -> frozenset[str] | None:
    """The fields of ``self`` the expression reads, when every ``self`` in its text is a
    ``self.<field>`` selection (not a method call); None when it may read more.

    A field whose name is escaped for CEL (``foo__dash__bar``, ``__namespace__``) counts as
    reading more: its stored name differs."""
    fields: set[str] = set()
    for found in _SELF.finditer(text):
        read = _FIELD.match(text, found.end())
        if read is None or read.group(2) is not None:
            return None
        name = read.group(1)
        if "__" in name or escape_property(name) != name:
            return None
        fields.add(name)
    return frozenset(fields)


def memo_key(value: Any) -> bytes | None:
    """``value`` as JSON bytes: equal only for the same types and values in the same order
    (``true`` is not ``1``, ``1`` is not ``1.0``), which CEL may tell apart; ``None`` where
    that does not hold (orjson writes NaN and infinities as ``null``) or it cannot encode."""
    try:
        key = orjson.dumps(value)
    except (orjson.JSONEncodeError, TypeError):
        return None
    return None if b"null" in key else key


def project(value: Any, fields: frozenset[str] | None, embedded: bool) -> Any:
    """What of ``value`` rules reading only ``fields`` of it can see: those fields (present
    or not), ``metadata`` cut to what a resource root shows. Any other value whole."""
    if fields is None or not isinstance(value, dict):
        return value
    seen = {name: value[name] for name in sorted(fields) if name in value}
    meta = seen.get("metadata")
    if embedded and isinstance(meta, dict):
        seen["metadata"] = {k: meta[k] for k in VISIBLE_METADATA if k in meta}
    return seen


def pass_key(value: Any, old: Any, absent: Any, with_old: bool) -> bytes | None:
    """The key a subtree's pass is remembered by: ``value``, and the correlated ``old``
    (``absent`` if none) where a rule in the subtree reads ``oldSelf``. JSON never holds a
    raw NUL byte, so the separator keeps the pairs apart."""
    new = memo_key(value)
    if new is None or not with_old:
        return new
    if old is absent:
        return b"\x00" + new
    before = memo_key(old)
    return None if before is None else new + b"\x00" + before
