"""Which lifecycle lines were said for each NodeClaim, so that each is said once.

Why it exists: a lifecycle step runs again when the NodeClaim's write lost a conflict to
another writer, or when the next reconcile reads caches that do not show our own writes yet (a
real API server's watch event comes after the write returns). The Node the step patched may
then still look unpatched, so "did this reconcile change something" cannot tell whether the
line was said already; ``registered nodeclaim`` and ``initialized nodeclaim`` were logged twice.
Kept in memory, by NodeClaim name and uid (a NodeClaim recreated under the same name is a new
one), and forgotten with the NodeClaim; a restarted controller may say a line once more.
"""

from __future__ import annotations

import threading


class SaidOnce:
    """``first(name, uid, line)`` is true the first time only; ``forget(name)`` on deletion."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._said: dict[str, tuple[str, set[str]]] = {}

    def first(self, name: str, uid: str, line: str) -> bool:
        with self._lock:
            entry = self._said.get(name)
            if entry is None or entry[0] != uid:
                entry = self._said[name] = (uid, set())
            if line in entry[1]:
                return False
            entry[1].add(line)
            return True

    def forget(self, name: str) -> None:
        with self._lock:
            self._said.pop(name, None)
