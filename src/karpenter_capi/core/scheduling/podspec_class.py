"""A pod's class: the parts of its spec the solver reads, as one hashable value.

Pods equal in these parts (one Deployment's replicas, mostly) parse to the same values but for
who they are, so ``podspec.parse_pod`` reads the first of a class and copies the rest from it
(``ClassMemo``). Finding a pod's class is then most of the cost of reading it, so the memo's
key is the parts written with ``marshal`` (version 2, which writes every value in full, never a
reference to one written before) in the order the object holds them: less than half the time of
compact JSON, which was a sixth of a first solve. Marshal writes exactly what it reads back, so
equal bytes mean equal parts and a hit is always right; equal parts written differently (in
another key order, or a string interned in one pod and not in another) only miss, and the full
parse writes the sorted ``class_key``, once per class. Parts marshal cannot write (anything but
plain JSON data) are keyed by their JSON text instead: text and bytes never compare equal.
"""

from __future__ import annotations

import json
import marshal
from collections.abc import Hashable
from typing import Any, TypeVar, cast

from karpenter_capi.core.scheduling.kept import Kept

V = TypeVar("V")

_MARSHAL_VERSION = 2  # binary floats, and no references to objects written before (3 on)
_ENCODER = json.JSONEncoder(default=str, check_circular=False, separators=(",", ":"))


def class_parts(parts: object) -> Hashable:
    """The memo key of a pod's scheduling parts (``podspec.scheduling_spec``)."""
    try:
        return marshal.dumps(cast("Any", parts), _MARSHAL_VERSION)
    except ValueError:  # not plain data ("unmarshallable object"), or nested too deep
        return _ENCODER.encode(parts)


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
