"""Which objects of this pass are the very objects of the last one: the pass's deltas.

An informer's store replaces an object when an event brings a new version of it and shares
every other one: two lists taken from it a pass apart hold the same Python objects for whatever
did not change (``kube.cache``: what the store hands out is read-only, never changed in place;
the tests and the benchmark keep to the same rule). So the pass learns what changed since the
last one from the lists themselves, with no journal to keep in step with the store: an object
that is the very one of the last pass is that version still, and what the pass read of it
holds; any other (updated, added, or all of them after a relist, which makes every object
anew) is read. Each reader compares against the lists it read last, so any number of readers
of one store each keep their own place, and a list made by hand compares like any other.

The comparison walks the lists in C (``map`` over ``operator.is_not``, a dict of ``id``s), a
few milliseconds for 90,000 objects; the pass's own work is then in proportion to what changed.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import compress, repeat
from operator import is_not
from typing import Final, TypeVar

T = TypeVar("T")

NEW: Final = -1
"""The position of an object that was not in the last list."""


def positions(old: Sequence[object], new: Sequence[object]) -> list[int]:
    """For each object of ``new``, the position of the very same object in ``old``, ``NEW``
    when it is not there. ``old`` must be alive (held) for the call: its ``id``s stand for it."""
    count = len(new)
    if len(old) == count:
        # Updates only (what most passes see): the objects in place, the updated ones replaced.
        moved = list(compress(range(count), map(is_not, old, new)))
        if len(moved) <= count // 8:
            found = list(range(count))
            for index in moved:
                found[index] = NEW
            return found
    # Objects added or removed shift the others: found by identity wherever they are now.
    where = dict(zip(map(id, old), range(len(old)), strict=True))
    return list(map(where.get, map(id, new), repeat(NEW)))


def carried(values: Sequence[T], found: Sequence[int], missing: T) -> list[T]:
    """``values`` (one per object of the last list) moved to where ``found`` puts each object
    now, ``missing`` for a new one."""
    return list(map([*values, missing].__getitem__, found))


def new_ones(found: Sequence[int]) -> list[int]:
    """The positions in the new list of the objects not in the last one."""
    return list(compress(range(len(found)), map(NEW.__eq__, found)))
