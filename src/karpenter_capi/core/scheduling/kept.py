"""A cache kept across rounds, keyed by what identifies one version of an API object.

Objects read from the API carry a ``uid`` and a ``resourceVersion``; what is read from one
version (a parsed pod, a disruption pass's facts about a Node) stays true until the object
changes, so it is computed once and kept across rounds. Entries not asked for during a whole
round (``new_round``) are dropped, so deleted objects do not accumulate. The key of an API
object's version is ``podspec.version_of`` (this package reads JSON only in its parsers).
"""

from __future__ import annotations

from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class Kept(Generic[K, V]):
    """Values by key, kept while some round asks for them (two generations)."""

    __slots__ = ("_current", "_previous")

    def __init__(self) -> None:
        self._current: dict[K, V] = {}
        self._previous: dict[K, V] = {}

    def __len__(self) -> int:
        return len(self._current) + len(self._previous)

    def new_round(self) -> None:
        """Start a round: what the last round did not ask for goes at the end of this one."""
        self._previous, self._current = self._current, {}

    def get(self, key: K) -> V | None:
        found = self._current.get(key)
        if found is None:
            found = self._previous.pop(key, None)
            if found is not None:
                self._current[key] = found
        return found

    def put(self, key: K, value: V) -> None:
        self._current[key] = value
