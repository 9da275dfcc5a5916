"""Noisy neighbours: processes that burn CPU while a decision is made next to them.

The re-packing optimizer must decide the same on an idle machine and on a loaded one
(issue 25); its determinism test and ``benchmarks/packing.py --load N`` both load the machine
this way.
"""

from __future__ import annotations

import contextlib
import multiprocessing
from collections.abc import Iterator


def _spin() -> None:
    while True:
        pass


@contextlib.contextmanager
def cpu_load(processes: int) -> Iterator[None]:
    """``processes`` busy processes for the duration, stopped afterwards."""
    context = multiprocessing.get_context("spawn")
    hogs = [context.Process(target=_spin, daemon=True) for _ in range(processes)]
    for hog in hogs:
        hog.start()
    try:
        yield
    finally:
        for hog in hogs:
            hog.terminate()
            hog.join()
