"""``metav1.LabelSelector`` in the two forms Kubernetes uses.

NodeClasses, PodDisruptionBudgets and topology constraints carry structured selectors
(``matchLabels`` + ``matchExpressions``); list and watch calls take the string form. Converting
the structured form to a string lets the API server filter instead of the controller, and the
matcher answers the same question locally for objects already in a cache.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_OPERATORS = {"In", "NotIn", "Exists", "DoesNotExist"}


class SelectorError(ValueError):
    """A structured label selector that Kubernetes would reject."""


def _expressions(selector: Mapping[str, Any]) -> list[tuple[str, str, list[str]]]:
    parsed: list[tuple[str, str, list[str]]] = []
    for index, expr in enumerate(selector.get("matchExpressions") or []):
        key = expr.get("key")
        operator = expr.get("operator")
        values = [str(v) for v in expr.get("values") or []]
        where = f"matchExpressions[{index}]"
        if not key:
            raise SelectorError(f"{where}: key is required")
        if operator not in _OPERATORS:
            raise SelectorError(
                f"{where}: operator {operator!r} is not one of In, NotIn, Exists, DoesNotExist"
            )
        if operator in ("In", "NotIn") and not values:
            raise SelectorError(f"{where}: operator {operator} needs at least one value")
        if operator in ("Exists", "DoesNotExist") and values:
            raise SelectorError(f"{where}: operator {operator} takes no values")
        parsed.append((str(key), str(operator), values))
    return parsed


def selector_to_string(selector: Mapping[str, Any] | None) -> str:
    """The string form of a structured selector (``""`` selects everything).

    >>> selector_to_string({"matchLabels": {"a": "1"},
    ...     "matchExpressions": [{"key": "b", "operator": "In", "values": ["x", "y"]}]})
    'a=1,b in (x,y)'
    """
    if not selector:
        return ""
    parts = [f"{key}={value}" for key, value in sorted((selector.get("matchLabels") or {}).items())]
    for key, operator, values in _expressions(selector):
        if operator == "In":
            parts.append(f"{key} in ({','.join(sorted(values))})")
        elif operator == "NotIn":
            parts.append(f"{key} notin ({','.join(sorted(values))})")
        elif operator == "Exists":
            parts.append(key)
        else:
            parts.append(f"!{key}")
    return ",".join(parts)


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """Whether ``labels`` satisfy a structured selector. ``None``/``{}`` matches everything."""
    if not selector:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != str(value):
            return False
    for key, operator, values in _expressions(selector):
        present = key in labels
        if operator == "In" and (not present or labels[key] not in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True
