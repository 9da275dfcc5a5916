"""Soft constraints, honoured first and given up one at a time, as Karpenter does.

A pod's preferences (preferred node affinity, preferred pod (anti-)affinity, ``ScheduleAnyway``
topology spread, ``PreferNoSchedule`` taints) say where it would rather run. kube-scheduler only
scores nodes by them, but a provisioner chooses which nodes exist, so Karpenter first tries to
place the pod as if every preference were a requirement, and only when that fails relaxes them,
one step per failed attempt, until the pod fits or nothing is left to give up. We do the same so
that a pod lands where Karpenter would put it: on a node that honours its preferences whenever
one can be launched.

The pod under relaxation is a :class:`~.podspec.PodSpec` with the preferences not yet given up.
:func:`relax` takes one step (``Preferences.Relax`` in upstream's
``pkg/controllers/provisioning/scheduling/preferences.go``) and returns a new spec
(``dataclasses.replace``) sharing every part it did not change. What each attempt must satisfy
is read off the spec: ``PodSpec.requirements`` ANDs the first required node affinity term with
the heaviest preferred one (upstream's ``NewPodRequirements``), and the topology counts the
preferred pod (anti-)affinity terms and ``ScheduleAnyway`` spreads exactly like required ones
(``PodSpec.strict_affinity``; ``Topology.newForAffinities`` and ``newForTopologies``).

Taints are the pod-independent part: upstream's ``Taints.Tolerates`` blocks on a
``PreferNoSchedule`` taint the pod does not tolerate, and the last relaxation step tolerates
them all. :func:`strictly_untolerated` is that check; plain :func:`~.taints.untolerated` is what
kube-scheduler enforces.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from typing import Final

from karpenter_capi.core.scheduling.podspec import PodSpec, rederived
from karpenter_capi.core.scheduling.podspec_terms import WeightedTerm
from karpenter_capi.core.values.taints import Taint, Toleration, tolerates

PREFER_NO_SCHEDULE_TOLERATION: Final = Toleration(operator="Exists", effect="PreferNoSchedule")
"""Tolerates every ``PreferNoSchedule`` taint: the last thing relaxation gives up."""


def _by_weight(terms: Iterable[WeightedTerm]) -> tuple[WeightedTerm, ...]:
    # Stable: among equal weights the term written first is tried first, as upstream's
    # slices.SortStableFunc does.
    return tuple(sorted(terms, key=lambda term: -term[0]))


def _describe(term: WeightedTerm) -> str:
    weight, value = term
    if value is None:
        return f"(weight {weight}, no topologyKey)"
    return f"(weight {weight}) on {value.topology_key}"


def relax_step(
    pod: PodSpec, *, tolerate_prefer_no_schedule: bool = True
) -> tuple[PodSpec, str] | None:
    """One relaxation of ``pod`` and what it gave up, or ``None`` if nothing is left.

    The first step that applies wins, in upstream's order: drop the first required node
    affinity term while another remains (the terms are ORed: a requirement is never given up,
    only exchanged for an alternative the pod also accepts); drop the heaviest preferred pod
    affinity term, then pod anti-affinity term, then node affinity term; drop a
    ``ScheduleAnyway`` spread constraint; last, tolerate ``PreferNoSchedule`` taints. Upstream
    only takes that last step when some NodePool has such a taint (otherwise it is a wasted
    attempt): ``tolerate_prefer_no_schedule=False`` skips it.
    """
    if len(pod.node_terms) > 1:
        dropped = pod.node_terms[0]
        return (
            _relaxed(replace(pod, node_terms=pod.node_terms[1:])),
            f"removing required node affinity term {dropped.requirements}",
        )
    if pod.preferred_affinity:
        ordered = _by_weight(pod.preferred_affinity)
        return (
            _relaxed(replace(pod, preferred_affinity=ordered[1:])),
            f"removing preferred pod affinity term {_describe(ordered[0])}",
        )
    if pod.preferred_anti_affinity:
        ordered = _by_weight(pod.preferred_anti_affinity)
        return (
            _relaxed(replace(pod, preferred_anti_affinity=ordered[1:])),
            f"removing preferred pod anti-affinity term {_describe(ordered[0])}",
        )
    if pod.preferred_node_terms:
        weight, heaviest = pod.preferred_node_terms[0]
        return (
            _relaxed(replace(pod, preferred_node_terms=pod.preferred_node_terms[1:])),
            f"removing preferred node affinity term (weight {weight}) {heaviest}",
        )
    for index, spread in enumerate(pod.spreads):
        if spread.schedule_anyway:
            # Upstream swaps the last constraint into the hole; order carries no meaning, so we
            # keep the rest in place.
            spreads = pod.spreads[:index] + pod.spreads[index + 1 :]
            return (
                _relaxed(replace(pod, spreads=spreads)),
                f"removing topology spread constraint on {spread.topology_key}",
            )
    # v1.Toleration.MatchToleration: the same toleration, not merely one that also tolerates.
    if tolerate_prefer_no_schedule and PREFER_NO_SCHEDULE_TOLERATION not in pod.tolerations:
        tolerations = (*pod.tolerations, PREFER_NO_SCHEDULE_TOLERATION)
        return (
            _relaxed(replace(pod, tolerations=tolerations)),
            "adding a toleration for PreferNoSchedule taints",
        )
    return None


def _relaxed(pod: PodSpec) -> PodSpec:
    return rederived(pod, relaxed=True)


def relax(pod: PodSpec, *, tolerate_prefer_no_schedule: bool = True) -> PodSpec | None:
    """``pod`` with one more soft constraint given up (a new spec), or ``None`` if none is left.

    See :func:`relax_step` for the order.
    """
    result = relax_step(pod, tolerate_prefer_no_schedule=tolerate_prefer_no_schedule)
    return None if result is None else result[0]


def relaxations(
    pod: PodSpec, *, tolerate_prefer_no_schedule: bool = True
) -> Iterator[tuple[PodSpec, str]]:
    """Every successive relaxation of ``pod``, each with what it gave up, until none is left."""
    current = pod
    while True:
        result = relax_step(current, tolerate_prefer_no_schedule=tolerate_prefer_no_schedule)
        if result is None:
            return
        yield result
        current = result[0]


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
