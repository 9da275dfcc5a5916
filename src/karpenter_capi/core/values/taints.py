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


@dataclass(frozen=True, slots=True)
class Toleration:
    """A pod's toleration (``v1.Toleration``), read once from its spec.

    ``operator`` is kept as written (``""`` means ``Equal``); ``tolerationSeconds`` is left
    out: it only says how long a ``NoExecute`` taint may wait, which scheduling never reads.
    """

    key: str = ""
    operator: str = ""
    value: str = ""
    effect: str = ""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Toleration:
        return cls(
            str(data.get("key") or ""),
            str(data.get("operator") or ""),
            str(data.get("value") or ""),
            str(data.get("effect") or ""),
        )

    def to_dict(self) -> dict[str, str]:
        """The toleration as the API writes it (empty fields left out)."""
        fields = (
            ("key", self.key),
            ("operator", self.operator),
            ("value", self.value),
            ("effect", self.effect),
        )
        return {name: value for name, value in fields if value}

    def tolerates(self, taint: Taint) -> bool:
        """``v1.Toleration.ToleratesTaint``: an empty effect matches every effect, ``Exists``
        with an empty key every taint, ``Equal`` (or no operator) compares key and value, and
        any other operator (which the API server refuses) tolerates nothing."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.operator == "Exists":
            return not self.key or self.key == taint.key
        if self.operator in ("Equal", ""):
            return self.key == taint.key and self.value == taint.value
        return False


def parse_tolerations(raw: Iterable[Mapping[str, Any]]) -> tuple[Toleration, ...]:
    """``spec.tolerations`` as values."""
    return tuple(Toleration.from_dict(item) for item in raw)


def tolerates(tolerations: Iterable[Toleration], taint: Taint) -> bool:
    """Whether any of ``tolerations`` tolerates ``taint``."""
    return any(toleration.tolerates(taint) for toleration in tolerations)


def untolerated(tolerations: Sequence[Toleration], taints: Iterable[Taint]) -> Taint | None:
    """The first scheduling-blocking taint the tolerations do not tolerate, or ``None``."""
    for taint in taints:
        if taint.effect != "PreferNoSchedule" and not tolerates(tolerations, taint):
            return taint
    return None
