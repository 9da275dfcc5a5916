"""Narrowing: the domains of a key a pod may still enter under one group, or why none is left.

One function per kind of constraint (spread, affinity, anti-affinity), each answering from the
group's counts alone, plus the refusal text a user reads when nothing is left.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Final

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.scheduling.topology._domains import (
    allows,
    candidate_domains,
    single_value,
)
from karpenter_capi.core.scheduling.topology._group import (
    AFFINITY,
    ANTI_AFFINITY,
    SPREAD,
    Group,
    possible_domains,
)
from karpenter_capi.core.values.refusal import Refusal
from karpenter_capi.core.values.requirements import Requirement, Requirements
from karpenter_capi.core.values.taints import Taint, untolerated

_REASON_DOMAINS: Final = 10
_UNEXPLAINED: Final = "topology constraint not satisfied (details omitted)"
# A solver trying many nodes asks without an explanation; these spare it an allocation per no.
_UNEXPLAINED_BY_FLAGS: Final = {
    (permanent, local): Refusal(_UNEXPLAINED, permanent=permanent, local=local)
    for permanent in (False, True)
    for local in (False, True)
}


def _permanent(group: Group) -> bool:
    return group.key == wellknown.LABEL_HOSTNAME and group.kind in (SPREAD, ANTI_AFFINITY)


def narrow(
    group: Group,
    self_selecting: bool,
    pod_requirements: Requirements,
    requirements: Requirements,
    node_taints: Sequence[Taint],
    *,
    explain: bool = True,
) -> Requirements | Refusal:
    """``requirements`` narrowed to the domains ``group`` still allows, or why none is left.

    ``explain=False`` returns a fixed phrase with the same flags: formatting the counts costs
    more than the check, and a solver trying many nodes needs only the verdict.
    """
    pod_domains = pod_requirements.get(group.key)
    node_domains = requirements.get(group.key)
    single = single_value(node_domains)
    if single is not None:
        # The node is in one domain already (a pinned zone, a claim's hostname): a yes keeps
        # the requirements as they are, so no set of domains is built to say it.
        if _single_allowed(group, self_selecting, pod_domains, single, node_taints):
            return requirements
        allowed: set[str] = set()
    elif group.kind == SPREAD:
        allowed = _spread_domains(group, self_selecting, pod_domains, node_domains, node_taints)
    elif group.kind == AFFINITY:
        allowed = _affinity_domains(group, self_selecting, pod_domains, node_domains)
    else:
        allowed = _anti_affinity_domains(group, pod_domains, node_domains)
    if not allowed:
        permanent = _permanent(group)
        local = group.key == wellknown.LABEL_HOSTNAME
        if not explain:
            return _UNEXPLAINED_BY_FLAGS[permanent, local]
        return Refusal(_reason(group, pod_domains, node_domains), permanent=permanent, local=local)
    if node_domains is not None and not node_domains.complement and node_domains.values == allowed:
        return requirements
    return requirements.with_requirement(Requirement(group.key, False, frozenset(allowed)))


def one_hostname(
    checks: Sequence[tuple[Group, bool]], pod_requirements: Requirements, requirements: Requirements
) -> Requirements | Refusal | None:
    """What ``narrow`` answers without explaining, group after group of ``checks`` (hostname
    spreads and anti-affinities, with whether the pod selects itself), for a node in one
    hostname: ``requirements`` kept as they are, or the first refusal. ``None`` for any other
    node.

    The same tests as ``_single_allowed``'s for a hostname, written out for the one case that
    needs no set of domains: a pod narrowed by these groups alone (one anti-affinity or hostname
    spread, typically) is tried on every claim, each in a hostname of its own."""
    single = single_value(requirements.get(wellknown.LABEL_HOSTNAME))
    if single is None:
        return None
    pod_domains = pod_requirements.get(wellknown.LABEL_HOSTNAME)
    for group, self_selecting in checks:
        count = group.counts.get(single, 0)
        if group.kind == SPREAD:
            own = 1 if self_selecting else 0
            kept = count + own <= group.max_skew and allows(pod_domains, single)
        else:
            kept = count == 0
        if not kept:
            return _UNEXPLAINED_BY_FLAGS[True, True]  # hostname: permanent, and local
    return requirements


def _single_allowed(
    group: Group,
    self_selecting: bool,
    pod_domains: Requirement | None,
    single: str,
    node_taints: Sequence[Taint],
) -> bool:
    """Whether ``group`` allows a node that is in domain ``single`` only: what the functions
    below answer for such a node, without building the set."""
    counts = group.counts
    hostname = group.key == wellknown.LABEL_HOSTNAME
    if group.kind == SPREAD:
        own = 1 if self_selecting else 0
        if hostname:
            return counts.get(single, 0) + own <= group.max_skew and allows(pod_domains, single)
        limit = group.max_skew + _global_min(group, pod_domains, single, node_taints) - own
        return (
            single in group.domains
            and counts.get(single, 0) <= limit
            and allows(pod_domains, single)
        )
    if group.kind == AFFINITY:
        if not allows(pod_domains, single):
            return False
        if counts.get(single, 0) > 0:
            return True
        nothing_to_follow = not any(c > 0 for c in counts.values())
        return self_selecting and nothing_to_follow and (hostname or single in group.domains)
    if hostname:
        return counts.get(single, 0) == 0
    return single in group.domains and counts.get(single, 0) == 0 and allows(pod_domains, single)


def _spread_domains(
    group: Group,
    self_selecting: bool,
    pod_domains: Requirement | None,
    node_domains: Requirement | None,
    node_taints: Sequence[Taint],
) -> set[str]:
    own = 1 if self_selecting else 0
    counts = group.counts
    single = single_value(node_domains)
    if group.key == wellknown.LABEL_HOSTNAME:
        # A new node is always possible, so the global minimum of a hostname spread is 0,
        # and the node's own hostname may not be registered yet.
        if single is not None:
            fits = counts.get(single, 0) + own <= group.max_skew and allows(pod_domains, single)
            return {single} if fits else set()
        minimum = 0
    else:
        minimum = _global_min(group, pod_domains, single, node_taints)
    limit = group.max_skew + minimum - own
    return {
        d
        for d in candidate_domains(group.domains, node_domains)
        if counts.get(d, 0) <= limit and allows(pod_domains, d)
    }


def _global_min(
    group: Group,
    pod_domains: Requirement | None,
    node_domain: str | None,
    node_taints: Sequence[Taint],
) -> int:
    node_filter = group.filter
    honor_affinity = node_filter is not None and node_filter.honor_affinity
    check_taints = group.tolerance is not None
    # The candidate node itself proves its domain has a node the pod tolerates.
    proven = (
        node_domain
        if check_taints
        and node_filter is not None
        and untolerated(node_filter.tolerations, node_taints) is None
        else None
    )
    counts = group.counts
    eligible = 0
    minimum: int | None = None
    for domain, taint_sets in group.domains.items():
        if check_taints and domain != proven and not group.tolerates(domain, taint_sets):
            continue
        if honor_affinity and pod_domains is not None and not pod_domains.has(domain):
            continue
        eligible += 1
        count = counts.get(domain, 0)
        if minimum is None or count < minimum:
            minimum = count
    # minDomains unset behaves as 1: no eligible domain at all also means a minimum of 0.
    if minimum is None or eligible < (group.min_domains or 1):
        return 0
    return minimum


def record_in(group: Group, requirements: Requirements, taints: Sequence[Taint]) -> None:
    """Count a pod ``group`` selects, placed on a node with ``requirements`` and ``taints``."""
    node_filter = group.filter
    if (
        node_filter is not None
        and not node_filter.trivial
        and not node_filter.matches_requirements(requirements, taints)
    ):
        return
    requirement = requirements.get(group.key)
    if group.kind == ANTI_AFFINITY:
        # Until the node's domain is decided, the selected pod could be in any of them.
        for domain in possible_domains(group, requirement):
            group.add(domain)
        return
    pinned = single_value(requirement)
    if pinned is not None:
        group.add(pinned)


def _affinity_domains(
    group: Group,
    self_selecting: bool,
    pod_domains: Requirement | None,
    node_domains: Requirement | None,
) -> set[str]:
    counts = group.counts

    def nothing_to_follow() -> bool:
        # kube-scheduler lets a pod start its group only when no selected pod runs anywhere
        # (even where this pod may not go): otherwise it must join one, or wait.
        return not any(c > 0 for c in counts.values())

    single = single_value(node_domains)
    if group.key == wellknown.LABEL_HOSTNAME and single is not None:
        if not allows(pod_domains, single):
            return set()
        if counts.get(single, 0) > 0 or (self_selecting and nothing_to_follow()):
            return {single}
        return set()
    # counts holds only occupied domains, usually far fewer than the key's universe.
    occupied = {
        d
        for d in candidate_domains(counts, node_domains)
        if counts[d] > 0 and allows(pod_domains, d)
    }
    if occupied:
        return occupied
    if self_selecting and nothing_to_follow():
        return {d for d in candidate_domains(group.domains, node_domains) if allows(pod_domains, d)}
    return set()


def _anti_affinity_domains(
    group: Group, pod_domains: Requirement | None, node_domains: Requirement | None
) -> set[str]:
    counts = group.counts
    single = single_value(node_domains)
    if group.key == wellknown.LABEL_HOSTNAME and single is not None:
        return {single} if counts.get(single, 0) == 0 else set()
    return {
        d
        for d in candidate_domains(group.domains, node_domains)
        if counts.get(d, 0) == 0 and allows(pod_domains, d)
    }


def _reason(group: Group, pod_domains: Requirement | None, node_domains: Requirement | None) -> str:
    if group.kind == SPREAD:
        what = f"maxSkew {group.max_skew}"
        if group.min_domains is not None:
            what += f", minDomains {group.min_domains}"
    elif group.kind == AFFINITY:
        what = "needs a domain holding a selected pod"
    elif group.inverse:
        what = "a placed pod's required anti-affinity selects this pod"
    else:
        what = "needs a domain holding no selected pod"
    # The solver may be refused by many nodes in a row, and a hostname group can hold thousands
    # of domains: show the node's own domains when it names them, and never sort them all.
    if node_domains is not None and not node_domains.complement:
        shown = sorted(node_domains.values)[:_REASON_DOMAINS]
        items = [(d, group.counts.get(d, 0)) for d in shown]
    else:
        shown = heapq.nsmallest(_REASON_DOMAINS, group.domains)
        items = [(d, group.counts.get(d, 0)) for d in shown]
    counts = ", ".join(f"{d}={c}" for d, c in items)
    if len(group.domains) > len(items):
        counts += f", ... ({len(group.domains)} domains)"
    return (
        f"unsatisfiable {group.kind} constraint on {group.key} ({what}): "
        f"counts [{counts}]; node allows {node_domains or 'any'}; pod allows {pod_domains or 'any'}"
    )
