"""Automatic garbage collection paused while a solve runs (or a disruption pass reads the
cluster).

Why: a solve allocates hundreds of thousands of small, short-lived objects (vectors, fits,
requirement sets) that reference counting frees at once and that form no reference cycles.
They still trip the cyclic collector's allocation counters, and when its full collection
comes due it walks every object of the process: the informers' caches, every parsed pod. In
the 10,000-pod scheduling benchmark the two full collections of a solve took a fifth of its
CPU time, for nothing to collect. Pausing collection for the solve's duration (bounded by its
timeout) and resuming it afterwards loses nothing: whatever cycle was made meanwhile is
collected at the next collection after the pause.

The pause is process-wide (``gc`` has no per-thread switch), so it belongs to the solve that
started it: solves that overlap it (a fleet's clusters solve on several threads) run inside it
and do not extend it, and it ends with its owner, and only if collection was on to begin with.
Counting holders instead would let overlapping solves on a busy fleet keep collection off for
as long as any solve runs; this way it is never off for longer than one solve's timeout.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_paused = False


@contextmanager
def collection_paused() -> Iterator[None]:
    """Run the body with automatic garbage collection off (see the module docstring)."""
    global _paused
    with _lock:
        owner = not _paused and gc.isenabled()
        if owner:
            gc.disable()
            _paused = True
    try:
        yield
    finally:
        if owner:
            with _lock:
                _paused = False
                gc.enable()
