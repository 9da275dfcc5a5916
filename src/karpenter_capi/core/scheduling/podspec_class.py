"""A pod's class: the parts of its spec the solver reads, as one hashable value.

Pods equal in these parts (one Deployment's replicas, mostly) parse to the same values but for
who they are, so ``podspec.parse_pod`` reads the first of a class and copies the rest from it
(``ClassMemo``). Finding a pod's class is then most of the cost of reading it, so the memo's
key is the parts written as compact JSON in the order the object holds them (C's encoder, about
half the time of the sorted ``class_key``): equal text means equal parts, so a hit is always
right; the same parts in another key order only miss, and the full parse writes the sorted
``class_key``, once per class.
"""

from __future__ import annotations

import json
from collections.abc import Hashable
from typing import TypeVar

from karpenter_capi.core.scheduling.kept import Kept

V = TypeVar("V")

_ENCODER = json.JSONEncoder(default=str, check_circular=False, separators=(",", ":"))


def class_parts(parts: object) -> Hashable:
    """The memo key of a pod's scheduling parts (``podspec.scheduling_spec``)."""
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
