"""How the parser reads a pod's affinity terms and spreads into ``pod_terms`` values.

Why a module of its own: it is the part of reading a pod (``podspec.parse_pod``) that follows
kube-scheduler's rules for selectors (a nil selector selects nothing, ``matchLabelKeys`` copy
the pod's own labels in), and what the API server would refuse in the tolerations and spreads
(``list_problem``); ``podspec`` holds the rest of the parse and the caches of it. One of the
parser modules of ``core.scheduling`` allowed to read a pod's JSON.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from karpenter_capi.core.scheduling.pod_terms import PodAffinityTerm, Spread
from karpenter_capi.core.values.selectors import (
    NOTHING,
    Clause,
    CompiledSelector,
    SelectorError,
    compile_selector,
)
from karpenter_capi.core.values.taints import EFFECTS

WeightedTerm = tuple[int, PodAffinityTerm | None]
"""A preferred pod (anti-)affinity term and its weight; ``None`` for a term without a
``topologyKey``, which constrains nothing but is still one step of relaxation."""

REQUIRED: Final = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED: Final = "preferredDuringSchedulingIgnoredDuringExecution"
_TOLERATION_OPERATORS: Final = ("Exists", "Equal", "")
_UNSATISFIABLE: Final = ("DoNotSchedule", "ScheduleAnyway", "")


def term_selector(raw: Mapping[str, Any] | None, extra: Iterable[Clause] = ()) -> CompiledSelector:
    """A spread constraint's or affinity term's selector, as kube-scheduler reads it.

    A nil ``labelSelector`` selects no pod, unlike ``{}``; kube-scheduler treats a malformed
    selector the same way, so both become "nothing" (a nil ``namespaceSelector`` means the
    pod's own namespace, which the topology decides).
    """
    try:
        return compile_selector(raw, nil_matches=False, extra=extra)
    except SelectorError:
        return NOTHING


def _label_key_clauses(
    term: Mapping[str, Any], labels: Mapping[str, str], *, mismatch: bool
) -> list[Clause]:
    """``matchLabelKeys`` (and ``mismatchLabelKeys``) copy the owner's own label values into
    the selector."""
    clauses: list[Clause] = [
        (k, "In", frozenset((labels[k],))) for k in term.get("matchLabelKeys") or () if k in labels
    ]
    if mismatch:
        clauses.extend(
            (k, "NotIn", frozenset((labels[k],)))
            for k in term.get("mismatchLabelKeys") or ()
            if k in labels
        )
    return clauses


def _affinity_term(term: Mapping[str, Any], labels: Mapping[str, str]) -> PodAffinityTerm | None:
    key = term.get("topologyKey")
    if not key:
        return None
    raw_namespaces = term.get("namespaceSelector")
    return PodAffinityTerm(
        topology_key=str(key),
        selector=term_selector(
            term.get("labelSelector"), _label_key_clauses(term, labels, mismatch=True)
        ),
        namespaces=tuple(str(n) for n in term.get("namespaces") or ()),
        namespace_selector=None if raw_namespaces is None else term_selector(raw_namespaces),
    )


def required_terms(
    section: Mapping[str, Any], labels: Mapping[str, str]
) -> tuple[PodAffinityTerm, ...]:
    terms = (_affinity_term(term, labels) for term in section.get(REQUIRED) or ())
    return tuple(term for term in terms if term is not None)


def preferred_terms(
    section: Mapping[str, Any], labels: Mapping[str, str]
) -> tuple[WeightedTerm, ...]:
    return tuple(
        (int(term.get("weight") or 0), _affinity_term(term.get("podAffinityTerm") or {}, labels))
        for term in section.get(PREFERRED) or ()
    )


def spread(constraint: Mapping[str, Any], labels: Mapping[str, str]) -> Spread:
    min_domains = constraint.get("minDomains")
    return Spread(
        topology_key=str(constraint.get("topologyKey") or ""),
        max_skew=int(constraint.get("maxSkew") or 1),
        min_domains=None if min_domains is None else int(min_domains),
        schedule_anyway=constraint.get("whenUnsatisfiable") == "ScheduleAnyway",
        selector=term_selector(
            constraint.get("labelSelector"), _label_key_clauses(constraint, labels, mismatch=False)
        ),
        honor_affinity=(constraint.get("nodeAffinityPolicy") or "Honor") == "Honor",
        honor_taints=(constraint.get("nodeTaintsPolicy") or "Ignore") == "Honor",
    )


def list_problem(spec: Mapping[str, Any]) -> str | None:
    """What the API server would refuse in the tolerations or spreads, or ``None``."""
    for field in ("tolerations", "topologySpreadConstraints"):
        items = spec.get(field) or []
        if not isinstance(items, list) or not all(isinstance(i, Mapping) for i in items):
            return f"{field} is not a list of objects"
    for index, toleration in enumerate(spec.get("tolerations") or ()):
        operator = toleration.get("operator") or ""
        effect = toleration.get("effect") or ""
        if operator not in _TOLERATION_OPERATORS:
            return f"tolerations[{index}]: operator {operator!r} is not Exists or Equal"
        if effect and effect not in EFFECTS:
            return f"tolerations[{index}]: effect {effect!r} is not one of {', '.join(EFFECTS)}"
    for index, constraint in enumerate(spec.get("topologySpreadConstraints") or ()):
        where = f"topologySpreadConstraints[{index}]"
        if int(constraint.get("maxSkew", 1)) < 1:
            return f"{where}: maxSkew must be at least 1"
        if (constraint.get("whenUnsatisfiable") or "") not in _UNSATISFIABLE:
            return f"{where}: whenUnsatisfiable {constraint['whenUnsatisfiable']!r} is unknown"
        if not constraint.get("topologyKey"):
            return f"{where}: topologyKey is required"
    return None
