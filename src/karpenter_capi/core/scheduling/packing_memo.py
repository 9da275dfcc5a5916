"""Re-packing outcomes kept across provisioning rounds, by the problem they answer.

Why it exists: while a round's NodeClaims launch and their Nodes come up, the pods they are for
stay pending, and every round until they bind solves them again. The greedy pass gives the
same claims, so the re-packing stage gets the very problem it solved a round ago: 109 of the
119 re-packing solves of the ``basic-1000`` scenario repeated an earlier one, 4.6 of their
5.2 CPU-seconds. ``packing.optimize`` counts its work instead of timing it, so its outcome is a
function of the problem and its settings alone (``timed-out``, the CPU safety net striking, is
the exception, and is never kept): an outcome kept for an equal problem is exactly the one a
new solve would give.

The provisioner owns one (per cluster); a solver without one solves every time, as the tests
comparing solves under different clocks and loads need.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Final

from karpenter_capi.core.scheduling.packing_problem import PackingOutcome

DEFAULT_SIZE: Final = 64
"""Outcomes kept, the least recently used dropped first: a round asks for one per family of
claims, so this holds the last rounds of a cluster with dozens of NodePools and families."""


class PackingMemo:
    """``packing.optimize``'s outcomes by their problem and settings, least recently used
    dropped past ``size``. Safe to share between threads."""

    def __init__(self, size: int = DEFAULT_SIZE) -> None:
        self._size = size
        self._kept: OrderedDict[Hashable, PackingOutcome] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.solves = 0

    def outcome(self, key: Hashable, solve: Callable[[], PackingOutcome]) -> PackingOutcome:
        """The outcome kept for ``key``, or ``solve()``'s (kept unless it timed out).

        ``key`` must hold everything the outcome depends on: the problem and each setting of
        the solve. A copy is handed out, so a caller changing it changes nothing kept."""
        with self._lock:
            kept = self._kept.get(key)
            if kept is not None:
                self._kept.move_to_end(key)
                self.hits += 1
                return dataclasses.replace(kept)
        outcome = solve()  # outside the lock: a solve of another problem is not held up by it
        with self._lock:
            self.solves += 1
            if outcome.status != "timed-out":
                self._kept[key] = dataclasses.replace(outcome)
                self._kept.move_to_end(key)
                while len(self._kept) > self._size:
                    self._kept.popitem(last=False)
        return outcome

    def __len__(self) -> int:
        return len(self._kept)
