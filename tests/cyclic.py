"""What the cyclic garbage collector would have to free of what a test's body made."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def cyclic_garbage() -> Iterator[list[object]]:
    """The objects the cyclic collector finds unreachable after the body (the collector held
    off meanwhile; what was garbage before it is collected first), then freed."""
    found: list[object] = []
    enabled = gc.isenabled()
    gc.disable()
    gc.collect()
    try:
        yield found
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        found.extend(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.collect()
        if enabled:
            gc.enable()


def exceptions_in(found: list[object]) -> list[str]:
    """The type names of the exceptions among ``found``: each one held in a cycle by its
    traceback's frames, which hold everything their code referenced."""
    return [type(o).__name__ for o in found if isinstance(o, BaseException)]
