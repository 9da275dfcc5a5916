"""A pod's class: the parts of its spec the solver reads, as one hashable value.

Pods equal in these parts (one Deployment's replicas, mostly) parse to the same values but for
who they are, so ``podspec.parse_pod`` reads the first of a class and copies the rest from it
(``ClassMemo``). Finding a pod's class is then the whole cost of reading it: the parts are
frozen into nested tuples here (about 15 us a pod) rather than serialized to sorted JSON (about
35 us), and the JSON ``class_key`` is written once per class, by the full parse.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any, TypeVar

from karpenter_capi.core.scheduling.kept import Kept

V = TypeVar("V")

_MAPPING = "{"
_LIST = "["


def class_parts(value: Any) -> Hashable:
    """``value`` (JSON: a pod's scheduling parts) frozen: equal results mean equal JSON.

    Mappings and lists are tagged so one never equals the other; a leaf other than a string or
    ``None`` carries its type, so ``1``, ``1.0`` and ``True`` (equal in Python, not in JSON)
    stay apart. Tuples freeze as lists, as JSON writes them.
    """
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return (_MAPPING, *sorted((str(k), class_parts(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return (_LIST, *(class_parts(v) for v in value))
    if isinstance(value, bool | int | float):
        return (type(value).__name__, value)
    # What ``json.dumps(default=str)`` would write of anything else.
    return ("str", str(value))


class ClassMemo(Kept[Hashable, V]):
    """Parsed pods by class (``class_parts`` of their scheduling spec), so the next pod of a
    class is read in a few field copies.

    Everything of a parsed pod but who the pod is (name, uid, node, phase, owners, the object)
    is read from the parts ``scheduling_spec`` keeps, so two pods of one class parse to the
    same values; one Deployment's replicas are most of a batch, and reading each one's
    containers, affinities and spreads again was most of a first solve. Entries not used for a
    whole round (``new_round``) are dropped.
    """

    __slots__ = ()
