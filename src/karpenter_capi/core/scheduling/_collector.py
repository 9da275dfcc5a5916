"""Automatic garbage collection paused while a solve runs.

Why: a solve allocates hundreds of thousands of small, short-lived objects (vectors, fits,
requirement sets) that reference counting frees at once and that form no reference cycles.
They still trip the cyclic collector's allocation counters, and when its full collection
comes due it walks every object of the process: the informers' caches, every parsed pod. In
the 10,000-pod scheduling benchmark the two full collections of a solve took a fifth of its
CPU time, for nothing to collect. Pausing collection for the solve's duration (bounded by its
timeout) and resuming it afterwards loses nothing: whatever cycle was made meanwhile is
collected at the next collection after the pause.

The pause is process-wide (``gc`` has no per-thread switch), so it is counted: solves on
several threads resume collection when the last one ends, and only if it was on to begin with.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_holders = 0
_resume = False


@contextmanager
def collection_paused() -> Iterator[None]:
    """Run the body with automatic garbage collection off (see the module docstring)."""
    global _holders, _resume
    with _lock:
        if _holders == 0:
            _resume = gc.isenabled()
            gc.disable()
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0 and _resume:
                gc.enable()
