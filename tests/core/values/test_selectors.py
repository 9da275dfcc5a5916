"""The one label-selector matcher core uses agrees with Kubernetes' ``metav1.LabelSelector``.

Each row is what ``metav1.LabelSelectorAsSelector(selector).Matches(labels)`` answers in
Kubernetes (apimachinery), with ``nil_matches`` standing for the caller's reading of a missing
selector. The typed model (``core.api.meta.LabelSelector``) and topology must give the same
answers, since they all delegate here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import pytest

from karpenter_capi.core.api.meta import LabelSelector
from karpenter_capi.core.values.selectors import (
    EVERYTHING,
    NOTHING,
    SelectorError,
    compile_selector,
    selector_matches,
)


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    found: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        found["values"] = list(values)
    return found


WEB = {"app": "web", "tier": "front"}
NO_LABELS: dict[str, str] = {}

# (case, selector, labels, nil_matches, expected)
CASES: list[tuple[str, Mapping[str, Any] | None, Mapping[str, str], bool, bool]] = [
    # A nil selector: nothing for spread, affinity, PDBs; everything where it means "no filter".
    ("nil, nil selects nothing", None, WEB, False, False),
    ("nil, nil selects nothing, no labels", None, NO_LABELS, False, False),
    ("nil, nil means no filter", None, WEB, True, True),
    # An empty selector selects everything, whatever the caller reads nil as.
    ("empty", {}, WEB, False, True),
    ("empty, no labels", {}, NO_LABELS, False, True),
    ("empty fields", {"matchLabels": {}, "matchExpressions": []}, NO_LABELS, False, True),
    ("matchLabels hit", {"matchLabels": {"app": "web"}}, WEB, False, True),
    ("matchLabels wrong value", {"matchLabels": {"app": "db"}}, WEB, False, False),
    ("matchLabels missing key", {"matchLabels": {"zone": "a"}}, WEB, False, False),
    ("matchLabels all ANDed", {"matchLabels": {"app": "web", "tier": "back"}}, WEB, False, False),
    ("In hit", {"matchExpressions": [expr("app", "In", "db", "web")]}, WEB, False, True),
    ("In miss", {"matchExpressions": [expr("app", "In", "db")]}, WEB, False, False),
    ("In absent key", {"matchExpressions": [expr("zone", "In", "a")]}, WEB, False, False),
    ("NotIn hit", {"matchExpressions": [expr("app", "NotIn", "web")]}, WEB, False, False),
    ("NotIn miss", {"matchExpressions": [expr("app", "NotIn", "db")]}, WEB, False, True),
    # Kubernetes: NotIn is satisfied by a missing label.
    ("NotIn absent key", {"matchExpressions": [expr("zone", "NotIn", "a")]}, WEB, False, True),
    ("Exists present", {"matchExpressions": [expr("app", "Exists")]}, WEB, False, True),
    ("Exists absent", {"matchExpressions": [expr("zone", "Exists")]}, WEB, False, False),
    (
        "DoesNotExist present",
        {"matchExpressions": [expr("app", "DoesNotExist")]},
        WEB,
        False,
        False,
    ),
    ("DoesNotExist absent", {"matchExpressions": [expr("zone", "DoesNotExist")]}, WEB, False, True),
    (
        "labels and expressions ANDed",
        {"matchLabels": {"app": "web"}, "matchExpressions": [expr("tier", "In", "back")]},
        WEB,
        False,
        False,
    ),
    (
        "every requirement holds",
        {
            "matchLabels": {"app": "web"},
            "matchExpressions": [expr("tier", "In", "front"), expr("canary", "DoesNotExist")],
        },
        WEB,
        False,
        True,
    ),
]


@pytest.mark.parametrize(
    ("selector", "labels", "nil_matches", "expected"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_matches_as_kubernetes_does(
    selector: Mapping[str, Any] | None,
    labels: Mapping[str, str],
    nil_matches: bool,
    expected: bool,
) -> None:
    assert selector_matches(selector, labels, nil_matches=nil_matches) is expected
    if selector is not None:
        # The typed model reads the same selector the same way.
        assert LabelSelector.model_validate(selector).matches(labels) is expected


def test_nil_compiles_to_nothing_or_everything_as_asked() -> None:
    assert compile_selector(None, nil_matches=False) is NOTHING
    assert compile_selector(None, nil_matches=True) == EVERYTHING
    assert compile_selector({}, nil_matches=False) == EVERYTHING


def test_equal_selectors_compile_equal_whatever_their_order() -> None:
    written = {
        "matchLabels": {"b": "2", "a": "1"},
        "matchExpressions": [expr("z", "In", "y", "x"), expr("c", "Exists")],
    }
    reordered = {
        "matchExpressions": [expr("c", "Exists"), expr("z", "In", "x", "y")],
        "matchLabels": {"a": "1", "b": "2"},
    }
    assert compile_selector(written, nil_matches=False) == compile_selector(
        reordered, nil_matches=False
    )


def test_extra_clauses_are_anded_in_but_nil_stays_nothing() -> None:
    extra = [("version", "In", frozenset({"v2"}))]
    selector = compile_selector({"matchLabels": {"app": "web"}}, nil_matches=False, extra=extra)
    assert selector.matches({"app": "web", "version": "v2"})
    assert not selector.matches({"app": "web", "version": "v1"})
    assert compile_selector(None, nil_matches=False, extra=extra) is NOTHING


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ({"operator": "Exists"}, "matchExpressions[0]: key is required"),
        (expr("a", "Gt", "1"), "operator 'Gt' is not one of In, NotIn, Exists, DoesNotExist"),
        (expr("a", "In"), "operator In needs at least one value"),
        (expr("a", "NotIn"), "operator NotIn needs at least one value"),
        (expr("a", "Exists", "1"), "operator Exists takes no values"),
        (expr("a", "DoesNotExist", "1"), "operator DoesNotExist takes no values"),
    ],
)
def test_a_selector_kubernetes_rejects_raises(expression: dict[str, Any], message: str) -> None:
    with pytest.raises(SelectorError, match=re.escape(message)):
        selector_matches({"matchExpressions": [expression]}, WEB, nil_matches=True)
