"""Which nodes a spread counts, as its ``nodeAffinityPolicy`` and ``nodeTaintsPolicy`` say.

Kept apart from the groups because the rules are Kubernetes' own and easy to get subtly wrong:
this is the one place that applies those two fields.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from karpenter_capi.core.scheduling.pod_terms import Spread
from karpenter_capi.core.scheduling.podspec import PodSpec, spread_node_terms
from karpenter_capi.core.scheduling.topology._domains import TaintSets
from karpenter_capi.core.values.requirements import Requirements
from karpenter_capi.core.values.taints import Taint, Toleration, untolerated


def tolerates_any(tolerations: Sequence[Toleration], taint_sets: TaintSets) -> bool:
    # No taint information means an untainted node shape, which every pod tolerates.
    if not taint_sets:
        return True
    return any(untolerated(tolerations, taints) is None for taints in taint_sets)


class NodeFilter:
    """Which nodes a spread constraint counts (``nodeAffinityPolicy``/``nodeTaintsPolicy``)."""

    __slots__ = (
        "affinity_trivial",
        "honor_affinity",
        "honor_taints",
        "identity",
        "terms",
        "tolerations",
        "trivial",
    )

    def __init__(
        self,
        honor_affinity: bool,
        terms: tuple[Requirements, ...],
        honor_taints: bool,
        tolerations: tuple[Toleration, ...],
    ) -> None:
        self.honor_affinity = honor_affinity
        self.terms = terms
        self.honor_taints = honor_taints
        self.tolerations = tolerations
        # Terms are ORed, so one empty term lets every node through.
        self.affinity_trivial = not honor_affinity or any(len(t) == 0 for t in terms)
        self.trivial = self.affinity_trivial and not honor_taints
        self.identity = (
            honor_affinity,
            None if self.affinity_trivial else frozenset(terms),
            honor_taints,
            frozenset(tolerations) if honor_taints else None,
        )

    def matches_node(self, labels: Mapping[str, str], taints: Sequence[Taint]) -> bool:
        if not self.affinity_trivial and not any(t.satisfied_by(labels) for t in self.terms):
            return False
        return not self.honor_taints or untolerated(self.tolerations, taints) is None

    def matches_requirements(self, requirements: Requirements, taints: Sequence[Taint]) -> bool:
        if not self.affinity_trivial and not any(
            requirements.incompatibility(t) is None for t in self.terms
        ):
            return False
        return not self.honor_taints or untolerated(self.tolerations, taints) is None


def spread_filter(pod: PodSpec, spread: Spread) -> NodeFilter:
    """The nodes ``spread`` counts for ``pod``: those its node affinity and (with
    ``nodeTaintsPolicy: Honor``) its tolerations allow."""
    terms = spread_node_terms(pod) if spread.honor_affinity else ()
    tolerations = pod.tolerations if spread.honor_taints else ()
    return NodeFilter(spread.honor_affinity, terms, spread.honor_taints, tolerations)
