"""Topology groups: pod counts per domain for one constraint, and one pod shape's view of them.

A group is shared by every pod that carries the same constraint (the replicas of a Deployment),
so its counts are kept once; a profile lists, for one pod shape, the groups it owns and the
groups whose selectors select it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from karpenter_capi.core.scheduling.topology._domains import TaintSets
from karpenter_capi.core.scheduling.topology._filter import NodeFilter, tolerates_any
from karpenter_capi.core.values.requirements import Requirement
from karpenter_capi.core.values.selectors import (
    CompiledSelector,
)

SPREAD: Final = "topology spread"
AFFINITY: Final = "pod affinity"
ANTI_AFFINITY: Final = "pod anti-affinity"

# Anti-affinity narrows hardest and is cheapest, so it goes first; spread then keeps whichever of
# the remaining domains are within maxSkew, and the pin picks the least loaded of those.
KIND_ORDER: Final = {ANTI_AFFINITY: 0, AFFINITY: 1, SPREAD: 2}


class Group:
    """Pod counts per domain for one constraint, shared by every pod that carries it.

    ``domains`` is the key's universe, one dict shared by every group on that key, so a new
    hostname costs one insertion however many groups there are; ``counts`` holds only the
    domains with a pod in them. For an inverse group (the required anti-affinity of pods already
    placed) the counts are of the pods that *own* the term, and the group constrains the pods
    its selector selects.
    """

    __slots__ = (
        "counts",
        "domains",
        "filter",
        "inverse",
        "key",
        "kind",
        "max_skew",
        "min_domains",
        "namespaces",
        "selector",
        "tolerance",
    )

    def __init__(
        self,
        kind: str,
        key: str,
        *,
        domains: dict[str, TaintSets],
        namespaces: frozenset[str] | None,
        selector: CompiledSelector,
        max_skew: int,
        min_domains: int | None,
        node_filter: NodeFilter | None,
        inverse: bool,
    ) -> None:
        self.kind = kind
        self.key = key
        self.domains = domains
        self.namespaces = namespaces
        self.selector = selector
        self.max_skew = max_skew
        self.min_domains = min_domains
        self.filter = node_filter
        self.inverse = inverse
        self.counts: dict[str, int] = {}
        # domain -> (taint sets seen, whether the owner tolerates one): taint sets only grow,
        # so their number tells a stale answer. None unless nodeTaintsPolicy is Honor.
        self.tolerance: dict[str, tuple[int, bool]] | None = (
            {} if node_filter is not None and node_filter.honor_taints else None
        )

    def selects(self, namespace: str, labels: Mapping[str, str]) -> bool:
        namespaces = self.namespaces
        return (namespaces is None or namespace in namespaces) and self.selector.matches(labels)

    def tolerates(self, domain: str, taint_sets: TaintSets) -> bool:
        tolerance = self.tolerance
        if tolerance is None or self.filter is None:
            return True
        known = tolerance.get(domain)
        if known is None or known[0] != len(taint_sets):
            known = (len(taint_sets), tolerates_any(self.filter.tolerations, taint_sets))
            tolerance[domain] = known
        return known[1]

    def add(self, domain: str, count: int = 1) -> None:
        if domain not in self.domains:
            self.domains[domain] = []
        self.counts[domain] = self.counts.get(domain, 0) + count


class Profile:
    """One pod shape's view of the groups: those it owns, and those that select it."""

    __slots__ = (
        "affinity_keys",
        "hostname_only",
        "inverse_owned",
        "inverse_selecting",
        "labels",
        "memo_keys",
        "namespace",
        "owned",
        "pins",
        "seen",
        "selected",
    )

    def __init__(self, namespace: str, labels: Mapping[str, str]) -> None:
        self.namespace = namespace
        self.labels = labels
        self.owned: list[tuple[Group, bool]] = []  # (group, the pod selects itself)
        self.affinity_keys: frozenset[str] = frozenset()  # the keys of its owned affinities
        self.pins: list[tuple[str, list[Group]]] = []  # owned keys, with the spreads on each
        self.inverse_owned: list[Group] = []
        self.selected: list[Group] = []
        self.inverse_selecting: list[Group] = []
        self.seen = 0  # how many of Topology._groups ``selected`` has been checked against
        # The keys its narrowing reads, when answers may be kept by them (Topology._verdict_key)
        self.memo_keys: tuple[str, ...] = ()
        # Its groups in order with whether it selects itself, when all are hostname spreads or
        # anti-affinities (answered by _narrowing.one_hostname for a node in one hostname).
        self.hostname_only: list[tuple[Group, bool]] | None = None


def possible_domains(group: Group, requirement: Requirement | None) -> list[str]:
    """Every domain a node with ``requirement`` on the group's key could be in."""
    if requirement is None:
        # The node does not promise the label, so it counts in no domain (a node without the
        # topology label is outside the topology), as in Karpenter.
        return []
    if not requirement.complement:
        return [v for v in requirement.values if requirement.has(v)]
    return [d for d in group.domains if requirement.has(d)]
