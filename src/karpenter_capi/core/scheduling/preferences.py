"""Soft constraints, honoured first and given up one at a time, as Karpenter does.

A pod's preferences (preferred node affinity, preferred pod (anti-)affinity, ``ScheduleAnyway``
topology spread, ``PreferNoSchedule`` taints) say where it would rather run. kube-scheduler only
scores nodes by them, but a provisioner chooses which nodes exist, so Karpenter first tries to
place the pod as if every preference were a requirement, and only when that fails relaxes them,
one step per failed attempt, until the pod fits or nothing is left to give up. We do the same so
that a pod lands where Karpenter would put it: on a node that honours its preferences whenever
one can be launched.

Two views of a pod, both plain JSON dicts:

* the pod under relaxation: the real pod with the preferences not yet given up. :func:`relax`
  takes one step (``Preferences.Relax`` in upstream's
  ``pkg/controllers/provisioning/scheduling/preferences.go``) and returns a relaxed copy that
  shares every part it did not change with the pod (the solver relaxes pods on its hot path).
* :func:`strictest`: that pod with its remaining preferences written as requirements, which is
  what each placement attempt must satisfy. It mirrors what upstream enforces per attempt:
  ``NewPodRequirements`` (``pkg/scheduling/requirements.go``) uses the first required node
  affinity term ANDed with the heaviest preferred node term, and ``Topology.newForAffinities``
  and ``newForTopologies`` (``topology.go``) count preferred pod (anti-)affinity terms and
  ``ScheduleAnyway`` spread constraints exactly like required ones.

Taints are the pod-independent part: upstream's ``Taints.Tolerates`` blocks on a
``PreferNoSchedule`` taint the pod does not tolerate, and the last relaxation step tolerates
them all. :func:`strictly_untolerated` is that check; plain :func:`~.taints.untolerated` is what
kube-scheduler enforces.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Final

from karpenter_capi.core.values.taints import Taint, Toleration, tolerates

PodCopy = dict[str, Any]
"""A pod (JSON) whose top dicts relaxation may write to: see ``_owned``."""

PREFER_NO_SCHEDULE_TOLERATION: Final[Mapping[str, str]] = {
    "operator": "Exists",
    "effect": "PreferNoSchedule",
}
"""Tolerates every ``PreferNoSchedule`` taint: the last thing relaxation gives up."""

_REQUIRED: Final = "requiredDuringSchedulingIgnoredDuringExecution"
_PREFERRED: Final = "preferredDuringSchedulingIgnoredDuringExecution"


def _affinity(pod: PodCopy, kind: str) -> dict[str, Any] | None:
    """``spec.affinity.<kind>`` of a pod we own (see ``_owned``), or ``None`` when absent."""
    affinity = (pod.get("spec") or {}).get("affinity") or {}
    section = affinity.get(kind)
    return section if isinstance(section, dict) else None


def _by_weight(terms: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    # Stable: among equal weights the term written first is tried first, as upstream's
    # slices.SortStableFunc does.
    return sorted(terms, key=lambda term: -int(term.get("weight") or 0))


def _remove_required_node_affinity_term(pod: PodCopy) -> str | None:
    node_affinity = _affinity(pod, "nodeAffinity")
    required = (node_affinity or {}).get(_REQUIRED) or {}
    terms = required.get("nodeSelectorTerms") or []
    # The terms are ORed; dropping the first lets the next be tried. The last one stays: a
    # requirement is never given up, only exchanged for an alternative the pod also accepts.
    if len(terms) <= 1:
        return None
    required["nodeSelectorTerms"] = terms[1:]
    return f"removing required node affinity term {terms[0]}"


def _remove_heaviest(pod: PodCopy, kind: str, what: str) -> str | None:
    section = _affinity(pod, kind)
    terms = (section or {}).get(_PREFERRED) or []
    if section is None or not terms:
        return None
    ordered = _by_weight(terms)
    section[_PREFERRED] = ordered[1:]
    return f"removing preferred {what} term {ordered[0]}"


def _remove_preferred_pod_affinity_term(pod: PodCopy) -> str | None:
    return _remove_heaviest(pod, "podAffinity", "pod affinity")


def _remove_preferred_pod_anti_affinity_term(pod: PodCopy) -> str | None:
    return _remove_heaviest(pod, "podAntiAffinity", "pod anti-affinity")


def _remove_preferred_node_affinity_term(pod: PodCopy) -> str | None:
    return _remove_heaviest(pod, "nodeAffinity", "node affinity")


def _remove_topology_spread_schedule_anyway(pod: PodCopy) -> str | None:
    spec = pod.get("spec") or {}
    constraints = spec.get("topologySpreadConstraints") or []
    for index, constraint in enumerate(constraints):
        if constraint.get("whenUnsatisfiable") == "ScheduleAnyway":
            # Upstream swaps the last constraint into the hole; order carries no meaning, so we
            # keep the rest in place.
            spec["topologySpreadConstraints"] = constraints[:index] + constraints[index + 1 :]
            return f"removing topology spread constraint {constraint}"
    return None


def _matches_exactly(toleration: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    # v1.Toleration.MatchToleration: the same toleration, not merely one that also tolerates.
    return all(
        (toleration.get(f) or "") == (wanted.get(f) or "")
        for f in ("key", "operator", "value", "effect")
    )


def _tolerate_prefer_no_schedule_taints(pod: PodCopy) -> str | None:
    spec = pod.setdefault("spec", {})
    tolerations = spec.get("tolerations") or []
    if any(_matches_exactly(t, PREFER_NO_SCHEDULE_TOLERATION) for t in tolerations):
        return None
    spec["tolerations"] = [*tolerations, dict(PREFER_NO_SCHEDULE_TOLERATION)]
    return "adding a toleration for PreferNoSchedule taints"


_STEPS: Final = (
    _remove_required_node_affinity_term,
    _remove_preferred_pod_affinity_term,
    _remove_preferred_pod_anti_affinity_term,
    _remove_preferred_node_affinity_term,
    _remove_topology_spread_schedule_anyway,
)


def relax_step(
    pod: Mapping[str, Any], *, tolerate_prefer_no_schedule: bool = True
) -> tuple[PodCopy, str] | None:
    """One relaxation of ``pod`` and what it gave up, or ``None`` if nothing is left.

    The first step that applies wins, in upstream's order: drop the first required node
    affinity term while another remains; drop the heaviest preferred pod affinity term, then
    pod anti-affinity term, then node affinity term; drop a ``ScheduleAnyway`` spread
    constraint; last, tolerate ``PreferNoSchedule`` taints. Upstream only takes that last step
    when some NodePool has such a taint (otherwise it is a wasted attempt):
    ``tolerate_prefer_no_schedule=False`` skips it. ``pod`` is never modified.
    """
    relaxed = _owned(pod)
    steps = (
        (*_STEPS, _tolerate_prefer_no_schedule_taints) if tolerate_prefer_no_schedule else _STEPS
    )
    for step in steps:
        reason = step(relaxed)
        if reason is not None:
            return relaxed, reason
    return None


def _owned(pod: Mapping[str, Any]) -> PodCopy:
    """A copy of ``pod`` whose dicts the relaxation steps write to are its own.

    The steps only replace values in the pod, its spec, its affinity, the affinity's three
    sections and the required node affinity, never change a list or a term in place, so
    copying those few dicts leaves ``pod`` untouched without copying it deeply.
    """
    owned: PodCopy = dict(pod)
    if not isinstance(pod.get("spec"), Mapping):
        return owned
    spec = owned["spec"] = dict(pod["spec"])
    if not isinstance(spec.get("affinity"), Mapping):
        return owned
    affinity = spec["affinity"] = dict(spec["affinity"])
    for kind in ("nodeAffinity", "podAffinity", "podAntiAffinity"):
        if isinstance(affinity.get(kind), Mapping):
            affinity[kind] = dict(affinity[kind])
    node_affinity = affinity.get("nodeAffinity")
    if isinstance(node_affinity, dict) and isinstance(node_affinity.get(_REQUIRED), Mapping):
        node_affinity[_REQUIRED] = dict(node_affinity[_REQUIRED])
    return owned


def relax(pod: Mapping[str, Any], *, tolerate_prefer_no_schedule: bool = True) -> PodCopy | None:
    """``pod`` with one more soft constraint given up (a copy), or ``None`` if none is left.

    See :func:`relax_step` for the order.
    """
    result = relax_step(pod, tolerate_prefer_no_schedule=tolerate_prefer_no_schedule)
    return None if result is None else result[0]


def relaxations(
    pod: Mapping[str, Any], *, tolerate_prefer_no_schedule: bool = True
) -> Iterator[tuple[PodCopy, str]]:
    """Every successive relaxation of ``pod``, each with what it gave up, until none is left."""
    current: Mapping[str, Any] = pod
    while True:
        result = relax_step(current, tolerate_prefer_no_schedule=tolerate_prefer_no_schedule)
        if result is None:
            return
        yield result
        current = result[0]


def strictest(pod: Mapping[str, Any]) -> PodCopy:
    """A deep copy of ``pod`` with its remaining preferences written as requirements.

    * node affinity: only the first required term is kept (the others are reached by
      relaxation), ANDed with the ``matchExpressions`` of the heaviest preferred term; the
      preferred terms go.
    * pod affinity and anti-affinity: every preferred term becomes a required term.
    * topology spread: ``ScheduleAnyway`` becomes ``DoNotSchedule``.

    Tolerations are unchanged; pair this with :func:`strictly_untolerated` for taints.
    """
    strict: PodCopy = copy.deepcopy(dict(strict_topology(pod)))
    spec = strict.setdefault("spec", {})
    node_affinity = (spec.get("affinity") or {}).get("nodeAffinity")
    if isinstance(node_affinity, dict):
        _strict_node_affinity(node_affinity)
    return strict


def _has_soft_topology(pod: Mapping[str, Any]) -> bool:
    spec = pod.get("spec") or {}
    affinity = spec.get("affinity") or {}
    if any(
        (affinity.get(kind) or {}).get(_PREFERRED) for kind in ("podAffinity", "podAntiAffinity")
    ):
        return True
    return any(
        c.get("whenUnsatisfiable") == "ScheduleAnyway"
        for c in spec.get("topologySpreadConstraints") or ()
    )


def strict_topology(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    """``pod`` with its topology preferences as requirements; ``pod`` itself if it has none.

    Preferred pod (anti-)affinity terms join the required ones and ``ScheduleAnyway`` spreads
    become ``DoNotSchedule``, which is how Karpenter's topology counts them until relaxation
    drops them. Node affinity is left alone (a spread counts domains by the *required* node
    affinity, as kube-scheduler does). A shallow copy: the solver makes one per attempt, and
    only the sections it rewrites are new.
    """
    if not _has_soft_topology(pod):
        return pod
    spec = pod.get("spec") or {}
    affinity = dict(spec.get("affinity") or {})
    for kind in ("podAffinity", "podAntiAffinity"):
        section = dict(affinity.get(kind) or {})
        weighted = section.get(_PREFERRED) or []
        if weighted:
            required = list(section.get(_REQUIRED) or [])
            required.extend(term.get("podAffinityTerm") or {} for term in weighted)
            section[_REQUIRED] = required
            section[_PREFERRED] = []
            affinity[kind] = section
    spreads = [
        {**c, "whenUnsatisfiable": "DoNotSchedule"}
        if c.get("whenUnsatisfiable") == "ScheduleAnyway"
        else c
        for c in spec.get("topologySpreadConstraints") or ()
    ]
    new_spec = {**spec, "affinity": affinity}
    if spreads:
        new_spec["topologySpreadConstraints"] = spreads
    return {**pod, "spec": new_spec}


def _strict_node_affinity(node_affinity: dict[str, Any]) -> None:
    preferred = _by_weight(node_affinity.get(_PREFERRED) or [])
    node_affinity[_PREFERRED] = []
    required = node_affinity.get(_REQUIRED) or {}
    terms = list(required.get("nodeSelectorTerms") or [])
    extra = list(
        ((preferred[0].get("preference") or {}) if preferred else {}).get("matchExpressions") or []
    )
    if terms:
        first = dict(terms[0])
        # An empty term selects no node at all; ANDing a preference into it would make it
        # select some, so it stays empty.
        if extra and (first.get("matchExpressions") or first.get("matchFields")):
            first["matchExpressions"] = [*(first.get("matchExpressions") or []), *extra]
        node_affinity[_REQUIRED] = {**required, "nodeSelectorTerms": [first]}
    elif extra:
        node_affinity[_REQUIRED] = {"nodeSelectorTerms": [{"matchExpressions": extra}]}


def strictly_untolerated(
    tolerations: Sequence[Toleration], taints: Iterable[Taint]
) -> Taint | None:
    """The first taint, ``PreferNoSchedule`` included, the tolerations do not tolerate.

    Karpenter's ``Taints.Tolerates``: until relaxation adds the PreferNoSchedule toleration, a
    NodePool with a ``PreferNoSchedule`` taint is avoided like one with ``NoSchedule``.
    """
    for taint in taints:
        if not tolerates(tolerations, taint):
            return taint
    return None
