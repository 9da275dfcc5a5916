"""Taint parsing and toleration matching as kube-scheduler does it."""

from __future__ import annotations

import pytest

from karpenter_capi.core.values.taints import Taint, TaintError, tolerates, untolerated


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
    assert tolerates([toleration], Taint("a", "NoSchedule", "b")) is expected


def test_prefer_no_schedule_never_blocks() -> None:
    assert untolerated([], [Taint("a", "PreferNoSchedule")]) is None
    assert untolerated([], [Taint("a", "NoExecute")]) == Taint("a", "NoExecute")
