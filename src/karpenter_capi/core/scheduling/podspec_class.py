"""A pod's class: the parts of its spec the solver reads, as one hashable value.

Pods equal in these parts (one Deployment's replicas, mostly) parse to the same values but for
who they are, so ``podspec.parse_pod`` reads the first of a class and copies the rest from it
(``ClassMemo``). Finding a pod's class is then most of the cost of reading it, so the memo's
key is the parts serialized by ``marshal`` in the order the object holds them (C, no text
escaping: about a third of the time of compact JSON, a sixth of the sorted ``class_key``).
Format 2 writes every value by its type and contents alone (no back-references, no interned
strings, which later formats write depending on how the object is shared), so equal parts
give equal bytes, and equal bytes mean equal parts: ``marshal.loads`` reads them back as one
value, so a hit is always right. The same parts in another key order (or a tuple where a list
was) only miss, and the full parse writes the sorted ``class_key``, once per class. A value
``marshal`` cannot write (anything but JSON's types) raises ``ValueError``: the pod then has no
class and is parsed in full.
"""

from __future__ import annotations

import marshal
from collections.abc import Hashable
from typing import Final, TypeVar

from karpenter_capi.core.scheduling.kept import Kept

V = TypeVar("V")

_FORMAT: Final = 2
"""``marshal`` format 2: no references (format 3) nor short-string forms (format 4)."""


def class_parts(parts: object) -> Hashable:
    """The memo key of a pod's scheduling parts (``podspec.scheduling_spec``); ``ValueError``
    when they hold a value that is not JSON's (the pod is then parsed in full)."""
    return marshal.dumps(parts, _FORMAT)  # type: ignore[arg-type]


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
