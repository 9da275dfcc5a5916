"""Taint parsing and toleration values and matching as kube-scheduler does it."""

from __future__ import annotations

import dataclasses

import pytest

from karpenter_capi.core.values.taints import (
    Taint,
    TaintError,
    Toleration,
    parse_tolerations,
    tolerates,
    untolerated,
)


def test_parse_forms() -> None:
    assert Taint.parse("a=b:NoSchedule") == Taint("a", "NoSchedule", "b")
    assert Taint.parse("a:NoExecute") == Taint("a", "NoExecute")
    assert str(Taint("a", "NoSchedule", "b")) == "a=b:NoSchedule"
    with pytest.raises(TaintError, match="expected key"):
        Taint.parse("novalue")
    with pytest.raises(TaintError, match="effect"):
        Taint.parse("a=b:Never")


@pytest.mark.parametrize(
    ("toleration", "expected"),
    [
        ({"operator": "Exists"}, True),
        ({"key": "a", "operator": "Exists"}, True),
        ({"key": "a", "operator": "Exists", "effect": "NoExecute"}, False),
        ({"key": "a", "value": "b"}, True),
        ({"key": "a", "operator": "Equal", "value": "c"}, False),
        ({"key": "z", "operator": "Exists"}, False),
    ],
)
def test_toleration_matching(toleration: dict[str, str], expected: bool) -> None:
    assert tolerates(parse_tolerations([toleration]), Taint("a", "NoSchedule", "b")) is expected


def test_prefer_no_schedule_never_blocks() -> None:
    assert untolerated([], [Taint("a", "PreferNoSchedule")]) is None
    assert untolerated([], [Taint("a", "NoExecute")]) == Taint("a", "NoExecute")


def test_a_toleration_is_a_frozen_value_that_round_trips() -> None:
    raw = {"key": "gpu", "operator": "Equal", "value": "yes", "effect": "NoSchedule"}
    toleration = Toleration.from_dict({**raw, "tolerationSeconds": 30})
    assert toleration == Toleration("gpu", "Equal", "yes", "NoSchedule")
    assert toleration.to_dict() == raw
    assert Toleration.from_dict({"operator": "Exists"}).to_dict() == {"operator": "Exists"}
    assert len({toleration, Toleration.from_dict(raw)}) == 1  # hashable: usable as a key
    with pytest.raises(dataclasses.FrozenInstanceError):
        toleration.key = "other"  # type: ignore[misc]
    assert not hasattr(toleration, "__dict__")  # slotted


def test_an_unknown_operator_tolerates_nothing() -> None:
    # The API server refuses it (parse_pod reports such a pod); upstream's ToleratesTaint
    # answers false for it rather than guessing it meant Equal.
    assert Toleration("a", "Equal", "b").tolerates(Taint("a", "NoSchedule", "b"))
    assert not Toleration("a", "Matches", "b").tolerates(Taint("a", "NoSchedule", "b"))
