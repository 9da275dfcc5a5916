"""Status conditions that behave like Karpenter's, so ``kubectl describe`` reads the same.

Upstream Karpenter sets conditions through ``awslabs/operatorpkg``'s ``ConditionSet``, and users
and tools rely on its exact behaviour: every dependent condition exists from the start
(``Unknown``, reason ``AwaitingReconciliation``, transition time = the object's creation), a
condition's ``lastTransitionTime`` moves only when its status changes, ``observedGeneration`` is
the object's generation at the time of writing, and the root condition (``Ready``) is derived
from the dependents: ``True`` when all are, ``False`` (``UnhealthyDependents``) when one is False
for the current generation, else ``Unknown`` (``ReconcilingDependents``), with a message listing
the unhealthy ones. Conditions this set does not know (another controller's ``Drifted``,
``Consolidatable``) are carried along untouched.

It works on the JSON form (list of dicts) because that is what is patched back to the API.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any, Final

from karpenter_capi.core.clock import format_timestamp, parse_timestamp

TRUE: Final = "True"
FALSE: Final = "False"
UNKNOWN: Final = "Unknown"

READY: Final = "Ready"
AWAITING_RECONCILIATION: Final = "AwaitingReconciliation"
AWAITING_MESSAGE: Final = "object is awaiting reconciliation"

_EPOCH: Final = "1970-01-01T00:00:00Z"


def _normalized(condition: Mapping[str, Any]) -> dict[str, Any]:
    """A condition as this module writes it, so equal conditions compare equal."""
    result: dict[str, Any] = {
        "type": str(condition.get("type", "")),
        "status": str(condition.get("status", UNKNOWN)),
        "reason": str(condition.get("reason") or ""),
        "message": str(condition.get("message") or ""),
        "lastTransitionTime": str(condition.get("lastTransitionTime") or _EPOCH),
    }
    if condition.get("observedGeneration") is not None:
        result["observedGeneration"] = int(condition["observedGeneration"])
    return result


@lru_cache(maxsize=4096)
def _parsed(text: str) -> datetime:
    """``parse_timestamp``, once per text: a set sorts its conditions by transition time at
    every change, and the same few timestamps come back in every reconcile."""
    return parse_timestamp(text)


def _time(condition: Mapping[str, Any]) -> datetime:
    return _parsed(str(condition.get("lastTransitionTime") or _EPOCH))


class ConditionSet:
    """The conditions of one object, with a root condition derived from ``dependents``."""

    def __init__(
        self,
        conditions: Iterable[Mapping[str, Any]],
        *,
        now: datetime,
        generation: int | None,
        created: datetime | None,
        dependents: Sequence[str],
        root: str | None = READY,
    ) -> None:
        self._conditions = [_normalized(c) for c in conditions]
        self._now = now
        self._generation = generation
        self._created = created
        self._root = root
        self._dependents = tuple(d for d in dict.fromkeys(dependents) if d != root)
        self._original = [dict(c) for c in self._conditions]
        known = (root, *self._dependents) if root else self._dependents
        for condition_type in known:
            if self.get(condition_type) is None:
                self.set(condition_type, UNKNOWN, AWAITING_RECONCILIATION, AWAITING_MESSAGE)

    # Reads.

    def get(self, condition_type: str) -> dict[str, Any] | None:
        found = next((c for c in self._conditions if c["type"] == condition_type), None)
        return dict(found) if found is not None else None

    def status(self, condition_type: str) -> str | None:
        found = self.get(condition_type)
        return None if found is None else str(found["status"])

    def is_true(self, condition_type: str) -> bool:
        return self.status(condition_type) == TRUE

    def reason(self, condition_type: str) -> str:
        found = self.get(condition_type)
        return "" if found is None else str(found["reason"])

    def message(self, condition_type: str) -> str:
        found = self.get(condition_type)
        return "" if found is None else str(found["message"])

    def last_transition(self, condition_type: str) -> datetime | None:
        found = self.get(condition_type)
        return None if found is None else _time(found)

    def to_json(self) -> list[dict[str, Any]]:
        return [dict(c) for c in self._conditions]

    @property
    def changed(self) -> bool:
        return self._conditions != self._original

    # Writes.

    def set_true(self, condition_type: str, reason: str | None = None, message: str = "") -> bool:
        return self.set(condition_type, TRUE, reason or condition_type, message)

    def set_false(self, condition_type: str, reason: str, message: str) -> bool:
        return self.set(condition_type, FALSE, reason, message)

    def set_unknown(self, condition_type: str, reason: str, message: str) -> bool:
        return self.set(condition_type, UNKNOWN, reason, message)

    def set(self, condition_type: str, status: str, reason: str, message: str = "") -> bool:
        """Set one condition; returns whether anything changed. Recomputes the root."""
        new: dict[str, Any] = {
            "type": condition_type,
            "status": status,
            "reason": reason,
            "message": message,
        }
        if self._generation is not None:
            new["observedGeneration"] = self._generation
        existing = next((c for c in self._conditions if c["type"] == condition_type), None)
        if existing is not None:
            same_status = existing["status"] == status
            new["lastTransitionTime"] = (
                existing["lastTransitionTime"] if same_status else format_timestamp(self._now)
            )
            if _normalized(new) == existing:
                return False
            self._conditions = [c for c in self._conditions if c["type"] != condition_type]
        elif self._is_known(condition_type) and self._created is not None:
            # A known condition that was never written has been in this state since creation.
            new["lastTransitionTime"] = format_timestamp(self._created)
        else:
            new["lastTransitionTime"] = format_timestamp(self._now)
        self._conditions.append(_normalized(new))
        # Oldest transition first and the root last, as kubectl shows upstream's.
        self._conditions.sort(key=lambda c: (c["type"] == self._root, _time(c)))
        if self._root is not None and condition_type != self._root:
            self._recompute_root()
        return True

    def _is_known(self, condition_type: str) -> bool:
        return condition_type == self._root or condition_type in self._dependents

    def _recompute_root(self) -> None:
        assert self._root is not None
        unhealthy = [
            c
            for c in self._conditions
            if c["type"] in self._dependents
            and (c["status"] != TRUE or c.get("observedGeneration") != self._generation)
        ]
        if not unhealthy:
            self.set_true(self._root)
            return
        unhealthy.sort(key=_time, reverse=True)
        failed = any(
            c["status"] == FALSE and c.get("observedGeneration") == self._generation
            for c in unhealthy
        )
        self.set(
            self._root,
            FALSE if failed else UNKNOWN,
            "UnhealthyDependents" if failed else "ReconcilingDependents",
            ", ".join(f"{c['type']}={c['status']}" for c in unhealthy),
        )
