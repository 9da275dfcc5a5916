"""Frozen slotted values made field by field at the speed of plain attribute stores.

Why: a first disruption pass over 10,000 nodes makes a ``PodSpec`` and a ``PodFacts`` for
each of its 70,000 pods, most of them copied from their class's first pod. A frozen
dataclass's ``__init__`` sets each field through ``object.__setattr__`` (a Python-level call
per field), and setting each slot's descriptor from C (``map`` over the setters) still costs
about 1.2 us for a 26-field ``PodSpec``. Here a value is written into its *open twin*, a plain
class with the very same slots (so the same memory layout), by ordinary attribute stores,
which the interpreter specializes to a direct slot write, and then turned into the frozen
class by assigning its ``__class__``, which CPython allows between classes of the same layout
(checked once, in :func:`open_twin`): about 0.25 us for the same 26 fields. The result is an
instance of the frozen class like any other (its ``type`` is that class, it compares, hashes
and refuses assignment as one made by ``__init__``).

Every field must be set before the value is closed: a field left out would be an unset slot
(``AttributeError`` when read). ``tests/core/scheduling/test_assembly.py`` checks the values
made here against the classes' own ``__init__``, field for field.
"""

from __future__ import annotations

from dataclasses import fields, is_dataclass
from typing import Any


def open_twin(frozen: type[Any]) -> type[Any]:
    """A plain class with ``frozen``'s slots (a slotted dataclass), whose instances can be
    written field by field and then closed into ``frozen`` (``obj.__class__ = frozen``)."""
    assert is_dataclass(frozen)
    slots = tuple(f.name for f in fields(frozen))
    if getattr(frozen, "__slots__", None) != slots:
        raise TypeError(f"{frozen.__name__} is not a slotted dataclass of its fields")
    twin = type(f"_Open{frozen.__name__}", (), {"__slots__": slots, "__module__": __name__})
    probe: Any = object.__new__(twin)
    probe.__class__ = frozen  # TypeError here if the layouts differ
    return twin
