"""``metav1.LabelSelector`` in the two forms Kubernetes uses, and the one matcher core relies on.

NodeClasses, PodDisruptionBudgets and topology constraints carry structured selectors
(``matchLabels`` + ``matchExpressions``); list and watch calls take the string form. Converting
the structured form to a string lets the API server filter instead of the controller, and the
matcher answers the same question locally for objects already in a cache.

Every structured-selector match in core goes through :func:`compile_selector` (or
:func:`selector_matches`, which compiles and matches once), so there is one answer to what a
selector selects. The one place Kubernetes itself is not uniform is a *missing* selector: an
empty selector (``{}``) selects everything everywhere, but a nil one selects nothing in
``metav1.LabelSelectorAsSelector``, which topology spread constraints, pod (anti-)affinity
terms, PodDisruptionBudgets (policy/v1) and CAPI's MachineSet selectors use, while an object
whose selector field defaults to ``{}`` (a NodeClass's ``scalableResourceSelector``) or a list
call without a selector means "no filter". Callers say which with ``nil_matches``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

_OPERATORS = {"In", "NotIn", "Exists", "DoesNotExist"}

Clause = tuple[str, str, frozenset[str]]
"""One requirement of a compiled selector: key, operator and values (``matchLabels`` become In)."""


class SelectorError(ValueError):
    """A structured label selector that Kubernetes would reject."""


@dataclass(frozen=True, slots=True)
class CompiledSelector:
    """A validated selector, ready to match many label sets.

    ``clauses`` is ``None`` for a selector that selects nothing (a nil selector where nil means
    nothing), ``()`` for one that selects everything; otherwise the requirements, sorted so that
    equal selectors compare (and hash) equal whatever order they were written in.
    """

    clauses: tuple[Clause, ...] | None

    def matches(self, labels: Mapping[str, str]) -> bool:
        clauses = self.clauses
        if clauses is None:
            return False
        for key, operator, values in clauses:
            value = labels.get(key)
            if operator == "In":
                if value is None or value not in values:
                    return False
            elif operator == "NotIn":
                if value is not None and value in values:
                    return False
            elif operator == "Exists":
                if value is None:
                    return False
            elif value is not None:
                return False
        return True


NOTHING: Final = CompiledSelector(None)
EVERYTHING: Final = CompiledSelector(())


def _raw_expressions(selector: Mapping[str, Any]) -> list[tuple[Any, Any, Iterable[Any]]]:
    return [
        (expr.get("key"), expr.get("operator"), expr.get("values") or [])
        for expr in selector.get("matchExpressions") or []
    ]


def _validated(
    expressions: Iterable[tuple[Any, Any, Iterable[Any]]],
) -> list[tuple[str, str, list[str]]]:
    parsed: list[tuple[str, str, list[str]]] = []
    for index, (key, operator, raw_values) in enumerate(expressions):
        values = [str(v) for v in raw_values]
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


def compile_parts(
    match_labels: Mapping[str, Any],
    match_expressions: Iterable[tuple[Any, Any, Iterable[Any]]],
    extra: Iterable[Clause] = (),
) -> CompiledSelector:
    """A selector given as its two fields already read (a typed model's), plus ``extra`` clauses.

    Raises :class:`SelectorError` for what Kubernetes would reject.
    """
    clauses: set[Clause] = {
        (str(key), "In", frozenset((str(value),))) for key, value in match_labels.items()
    }
    clauses.update(
        (key, operator, frozenset(values))
        for key, operator, values in _validated(match_expressions)
    )
    clauses.update(extra)
    return CompiledSelector(tuple(sorted(clauses, key=lambda c: (c[0], c[1], sorted(c[2])))))


def compile_selector(
    selector: Mapping[str, Any] | None, *, nil_matches: bool, extra: Iterable[Clause] = ()
) -> CompiledSelector:
    """Compile a structured selector; ``nil_matches`` says what a missing (``None``) one selects.

    ``extra`` clauses are ANDed in (``matchLabelKeys`` copy the owner's own label values into
    the selector this way); a nil selector that matches nothing stays nothing. Raises
    :class:`SelectorError` for what Kubernetes would reject.
    """
    if selector is None:
        if not nil_matches:
            return NOTHING
        selector = {}
    return compile_parts(selector.get("matchLabels") or {}, _raw_expressions(selector), extra)


def selector_matches(
    selector: Mapping[str, Any] | None, labels: Mapping[str, str], *, nil_matches: bool
) -> bool:
    """Whether ``labels`` satisfy a structured selector (see :func:`compile_selector`).

    ``{}`` matches everything; ``None`` matches everything only with ``nil_matches=True``.
    """
    return compile_selector(selector, nil_matches=nil_matches).matches(labels)


def selector_to_string(selector: Mapping[str, Any] | None) -> str:
    """The string form of a structured selector (``""`` selects everything).

    >>> selector_to_string({"matchLabels": {"a": "1"},
    ...     "matchExpressions": [{"key": "b", "operator": "In", "values": ["x", "y"]}]})
    'a=1,b in (x,y)'
    """
    if not selector:
        return ""
    parts = [f"{key}={value}" for key, value in sorted((selector.get("matchLabels") or {}).items())]
    for key, operator, values in _validated(_raw_expressions(selector)):
        if operator == "In":
            parts.append(f"{key} in ({','.join(sorted(values))})")
        elif operator == "NotIn":
            parts.append(f"{key} notin ({','.join(sorted(values))})")
        elif operator == "Exists":
            parts.append(key)
        else:
            parts.append(f"!{key}")
    return ",".join(parts)
