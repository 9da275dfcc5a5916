"""Taints and tolerations, as kube-scheduler's TaintToleration plugin judges them.

A pod may land on a node only if it tolerates every ``NoSchedule`` and ``NoExecute`` taint;
``PreferNoSchedule`` is a preference and never blocks. Matching follows
``v1.Toleration.ToleratesTaint``: an empty effect matches every effect, ``Exists`` with an empty
key matches every taint, ``Equal`` compares key and value.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


class TaintError(ValueError):
    """A taint that Kubernetes would reject (for example an unknown effect)."""


@dataclass(frozen=True, slots=True)
class Taint:
    """A node taint (``key``, ``value``, ``effect``), as a NodePool, a NodeClass or a node
    template declares it."""

    key: str
    effect: str
    value: str = ""

    def __post_init__(self) -> None:
        if not self.key:
            raise TaintError("a taint needs a key")
        if self.effect not in EFFECTS:
            raise TaintError(
                f"taint {self.key}: effect {self.effect!r} is not one of {', '.join(EFFECTS)}"
            )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Taint:
        return cls(
            str(data.get("key", "")), str(data.get("effect", "")), str(data.get("value") or "")
        )

    @classmethod
    def parse(cls, text: str) -> Taint:
        """Parse kubectl's ``key[=value]:Effect`` form."""
        head, sep, effect = text.strip().rpartition(":")
        if not sep:
            raise TaintError(f"taint {text!r}: expected key[=value]:Effect")
        key, _, value = head.partition("=")
        return cls(key.strip(), effect.strip(), value.strip())

    def to_dict(self) -> dict[str, str]:
        data = {"key": self.key, "effect": self.effect}
        if self.value:
            data["value"] = self.value
        return data

    def __str__(self) -> str:
        return (
            f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"
        )


def tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Taint) -> bool:
    """Whether any of ``tolerations`` tolerates ``taint``."""
    for toleration in tolerations:
        effect = toleration.get("effect") or ""
        if effect and effect != taint.effect:
            continue
        operator = toleration.get("operator") or "Equal"
        key = toleration.get("key") or ""
        if operator == "Exists":
            if not key or key == taint.key:
                return True
        elif key == taint.key and (toleration.get("value") or "") == taint.value:
            return True
    return False


def untolerated(tolerations: Sequence[Mapping[str, Any]], taints: Iterable[Taint]) -> Taint | None:
    """The first scheduling-blocking taint the tolerations do not tolerate, or ``None``."""
    for taint in taints:
        if taint.effect != "PreferNoSchedule" and not tolerates(tolerations, taint):
            return taint
    return None
