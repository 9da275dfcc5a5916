"""The :class:`Topology` of one solve: builds the groups, answers the solver, records placements.

The package docstring says what is enforced and how; this module holds the bookkeeping that ties
groups to pods (which groups a pod owns or is selected by) and remembers what was placed so far.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Final

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.scheduling.pod_terms import PodAffinityTerm, Spread
from karpenter_capi.core.scheduling.podspec import PodSpec
from karpenter_capi.core.scheduling.topology._domains import (
    NodeInfo,
    TaintSets,
    domain_of,
    single_value,
)
from karpenter_capi.core.scheduling.topology._existing import ExistingPods
from karpenter_capi.core.scheduling.topology._existing import pod_identity as _identity
from karpenter_capi.core.scheduling.topology._filter import NodeFilter, spread_filter
from karpenter_capi.core.scheduling.topology._group import (
    AFFINITY,
    ANTI_AFFINITY,
    KIND_ORDER,
    SPREAD,
    Group,
    Profile,
    possible_domains,
)
from karpenter_capi.core.scheduling.topology._narrowing import (
    narrow,
    one_hostname,
    record_in,
)
from karpenter_capi.core.values.refusal import Refusal
from karpenter_capi.core.values.requirements import Requirement, Requirements, normalize_key
from karpenter_capi.core.values.selectors import CompiledSelector
from karpenter_capi.core.values.taints import Taint

_NAMESPACE_NAME_LABEL: Final = "kubernetes.io/metadata.name"
_NO_NAMESPACES: Final[Mapping[str, Mapping[str, str]]] = MappingProxyType({})
_NO_DOMAIN_TAINTS: Final[Mapping[str, Mapping[str, Iterable[Iterable[Taint]]]]] = MappingProxyType(
    {}
)


def schedule_anyway_constraints(pod: PodSpec) -> tuple[Spread, ...]:
    """The pod's ``ScheduleAnyway`` spread constraints: preferences Topology does not enforce
    apart (it counts them as required until relaxation drops them)."""
    return tuple(spread for spread in pod.spreads if spread.schedule_anyway)


class Topology:
    """Topology groups for one solve: counts per domain, narrowed node requirements per pod.

    ``domains`` maps each topology key to every value a node could have (from NodePools,
    instance types, offerings and existing nodes); the values existing nodes carry are added
    automatically. ``existing_pods`` are the pods already bound or nominated, each with the node
    it is on. ``pending_pods`` are the pods this solve places; any of them also listed in
    ``existing_pods`` (same uid) is not counted twice. ``existing_pods`` may be an
    :class:`ExistingPods` index built once for many solves, of which ``excluded_nodes`` (node
    names) are left out. ``namespaces`` maps namespace names to their labels, for
    ``namespaceSelector``.

    ``domain_taints`` (optional, only consulted by ``nodeTaintsPolicy: Honor``) maps a key and a
    value to the taint sets of the node shapes that yield it, e.g. each NodePool template's
    taints. A value listed there is tolerated when any of its sets is; a value not listed is
    assumed to come from an untainted node and is tolerated by every pod.
    """

    memo_verdicts: bool = True
    """Whether ``add_requirements`` keeps its answers (``_verdict_key``); tests turn it off."""

    hostname_fast_path: bool = True
    """Whether ``add_requirements`` answers a pod narrowed by hostname spreads and
    anti-affinities alone on a node in one hostname by ``one_hostname``; tests turn it off to
    compare with ``narrow``."""

    def __init__(
        self,
        *,
        domains: Mapping[str, Iterable[str]],
        existing_pods: Iterable[tuple[PodSpec, NodeInfo]] | ExistingPods,
        pending_pods: Iterable[PodSpec],
        namespaces: Mapping[str, Mapping[str, str]] = _NO_NAMESPACES,
        domain_taints: Mapping[str, Mapping[str, Iterable[Iterable[Taint]]]] = _NO_DOMAIN_TAINTS,
        excluded_nodes: Iterable[str] = (),
    ) -> None:
        self._namespaces = namespaces
        self._groups: list[Group] = []
        self._by_identity: dict[tuple[object, ...], Group] = {}
        self._profiles: dict[str, Profile] = {}
        self._placements: list[tuple[Profile, Requirements, tuple[Taint, ...]]] = []
        # Bumped whenever a count, a domain or a group is added: what add_requirements said
        # while it stays the same holds for any node with the same domains (``_verdicts``).
        self._epoch = 0
        self._verdicts: dict[tuple[object, ...], bool | Refusal] = {}
        self._verdicts_epoch = 0

        self._universe: dict[str, dict[str, TaintSets]] = {}
        self._universe_complete: set[str] = set()
        for key, values in domains.items():
            bucket = self._universe.setdefault(normalize_key(key), {})
            for value in values:
                bucket.setdefault(str(value), [])
        for key, by_value in domain_taints.items():
            bucket = self._universe.setdefault(normalize_key(key), {})
            for value, taint_sets in by_value.items():
                bucket.setdefault(str(value), []).extend(tuple(s) for s in taint_sets)

        pending = list(pending_pods)
        # Indexed here, or once for many solves (a disruption pass's); either way left as is.
        self._base = (
            existing_pods
            if isinstance(existing_pods, ExistingPods)
            else ExistingPods(existing_pods)
        )
        # The pending pods also counted as existing ones; none when no pod exists yet.
        skip = {_identity(pod) for pod in pending} if self._base.where else set()
        self._nodes = self._base.nodes
        self._excluded = self._base.node_indexes(excluded_nodes)
        self._minus, emptied = self._base.left_out(skip, self._excluded)
        # Nodes whose every pod is left out are no node an existing pod runs on.
        self._absent = self._excluded | emptied
        for pod, index in self._base.anti_affinity:
            if index in self._excluded or _identity(pod) in skip:
                continue
            node = self._nodes[index]
            for group in self._inverse_groups(pod):
                domain = domain_of(node, group.key)
                if domain is not None:
                    group.add(domain)

        # Building every pending pod's groups now counts the existing pods once per distinct
        # constraint, before any placement, instead of on the solver's hot path.
        for waiting in pending:
            self._profile(waiting)

    # --- the solver's interface ---------------------------------------------------------------

    def has_constraints(self, pod: PodSpec) -> bool:
        """Whether any topology group constrains where ``pod`` may go.

        False means :meth:`add_requirements` would return the node requirements unchanged.
        :meth:`record` must still be called for every placed pod: it may count in other pods'
        groups.
        """
        profile = self._refreshed(pod)
        return bool(profile.owned or profile.inverse_selecting)

    def add_requirements(
        self,
        pod: PodSpec,
        pod_requirements: Requirements,
        node_requirements: Requirements,
        node_taints: Sequence[Taint] = (),
        *,
        explain: bool = True,
    ) -> Requirements | Refusal:
        """``node_requirements`` narrowed to the domains where ``pod`` keeps every constraint.

        ``pod_requirements`` are the pod's own node requirements (one alternative of its node
        selector terms); ``node_requirements`` those of the candidate node (an existing node's
        labels, or a NodeClaim's requirements with its hostname placeholder). Each group keeps
        the domains it allows (spread: within ``maxSkew`` of the global minimum; affinity: those
        holding a selected pod; anti-affinity: those holding none), and every key the pod's own
        constraints use is then pinned to one domain, the least loaded by its spreads, so that
        :meth:`record` can count it. Keys narrowed only by other pods' anti-affinity are left as
        a set. Returns a :class:`Refusal` instead when no domain is left; with
        ``explain=False`` its text is a fixed phrase (building the counts into a message costs
        more than the check, and a solver trying many nodes only needs the verdict).
        """
        profile = self._refreshed(pod)
        if not profile.owned and not profile.inverse_selecting:
            return node_requirements
        if not explain and profile.hostname_only is not None and self.hostname_fast_path:
            answer = one_hostname(profile.hostname_only, pod_requirements, node_requirements)
            if answer is not None:
                return answer
        memo_key = None
        if not explain and profile.memo_keys and self.memo_verdicts:
            memo_key = self._verdict_key(profile, pod_requirements, node_requirements, node_taints)
            if memo_key is not None:
                known = self._verdicts.get(memo_key)
                if known is True:
                    return node_requirements
                if isinstance(known, Refusal):
                    return known
        result = self._narrowed(profile, pod_requirements, node_requirements, node_taints, explain)
        if memo_key is not None:
            # A node in one domain of every key: narrowing keeps it as it is, or refuses it.
            if result is node_requirements:
                self._verdicts[memo_key] = True
            elif isinstance(result, Refusal):
                self._verdicts[memo_key] = result
        return result

    def _verdict_key(
        self,
        profile: Profile,
        pod_requirements: Requirements,
        node_requirements: Requirements,
        node_taints: Sequence[Taint],
    ) -> tuple[object, ...] | None:
        """What :meth:`add_requirements` reads of a node in one domain of each key the pod's
        groups are on, ``None`` for any other node. Nodes alike in it get the same answer until
        the next count, domain or group (``_epoch``): several claims of a pod's candidates are
        typically in one zone, and their hostnames differ (``Profile.memo_keys`` is empty when
        a group is on the hostname)."""
        if self._verdicts_epoch != self._epoch:
            self._verdicts.clear()
            self._verdicts_epoch = self._epoch
        keys = profile.memo_keys
        if len(keys) == 1:  # the usual case (one zonal constraint), without the list
            value = single_value(node_requirements.get(keys[0]))
            if value is None:
                return None
            return (profile, pod_requirements, tuple(node_taints), value)
        singles: list[object] = [profile, pod_requirements, tuple(node_taints)]
        for key in keys:
            value = single_value(node_requirements.get(key))
            if value is None:
                return None
            singles.append(value)
        return tuple(singles)

    def _narrowed(
        self,
        profile: Profile,
        pod_requirements: Requirements,
        node_requirements: Requirements,
        node_taints: Sequence[Taint],
        explain: bool,
    ) -> Requirements | Refusal:
        result = node_requirements
        for group in profile.inverse_selecting:
            narrowed = narrow(group, False, pod_requirements, result, node_taints, explain=explain)
            if isinstance(narrowed, Refusal):
                return narrowed
            result = narrowed
        for group, self_selecting in profile.owned:
            narrowed = narrow(
                group, self_selecting, pod_requirements, result, node_taints, explain=explain
            )
            if isinstance(narrowed, Refusal):
                return narrowed
            result = narrowed
        # record counts a spread or affinity only in a pinned domain, and blocks every domain
        # still possible for an anti-affinity, so choose now: the domain the pod's spreads load
        # least, then by name (Karpenter also hands back a single domain).
        for key, spreads in profile.pins:
            requirement = result.get(key)
            if requirement is None or requirement.complement or len(requirement.values) < 2:
                continue
            choice = min(
                requirement.values, key=lambda d: (sum(g.counts.get(d, 0) for g in spreads), d)
            )
            result = result.with_requirement(Requirement(key, False, frozenset((choice,))))
        return result

    def affinity_domains(self, pod: PodSpec, key: str) -> frozenset[str] | None:
        """The only ``key`` domains the pod's required pod affinity can accept, if known.

        ``None`` when the pod has no required affinity on ``key``, or may start its group
        anywhere (it selects itself and nothing it follows is placed yet). A superset of what
        :meth:`add_requirements` allows, so a solver can skip every other node outright: with
        thousands of nodes and a hostname affinity, that is most of the work saved.
        """
        profile = self._refreshed(pod)
        if key not in profile.affinity_keys:
            return None
        result: frozenset[str] | None = None
        for group, self_selecting in profile.owned:
            if group.kind != AFFINITY or group.key != key:
                continue
            occupied = frozenset(d for d, c in group.counts.items() if c > 0)
            if not occupied and self_selecting:
                continue
            result = occupied if result is None else result & occupied
        return result

    def record(
        self,
        pod: PodSpec,
        node_requirements: Requirements,
        node_taints: Sequence[Taint] = (),
    ) -> None:
        """Count ``pod``, placed on a node with ``node_requirements``, in every group it affects.

        Spread and affinity groups count it only for a key the requirements pin to one value,
        so pin each such key (choose the zone) before recording. Anti-affinity groups, and the
        pod's own required anti-affinity terms, block every domain the node could still be in.
        ``node_taints`` matter only to spreads with ``nodeTaintsPolicy: Honor``.
        """
        self._epoch += 1
        profile = self._refreshed(pod)
        taints = tuple(node_taints)
        for group in profile.selected:
            record_in(group, node_requirements, taints)
        for group in profile.inverse_owned:
            for domain in possible_domains(group, node_requirements.get(group.key)):
                group.add(domain)
        self._placements.append((profile, node_requirements, taints))

    def register_domain(self, key: str, value: str, taints: Sequence[Taint] = ()) -> None:
        """A new domain (a NodeClaim's hostname placeholder, say) on a node with ``taints``."""
        self._epoch += 1
        key = normalize_key(key)
        bucket = self._universe_for(key)
        taint_sets = bucket.get(value)
        if taint_sets is None:
            taint_sets = bucket[value] = [tuple(taints)] if taints else []
        elif taints or taint_sets:
            # An untainted shape joining a tainted value makes it tolerable for everyone.
            taint_sets.append(tuple(taints))

    # --- groups and profiles ------------------------------------------------------------------

    def _universe_for(self, key: str) -> dict[str, TaintSets]:
        bucket = self._universe.setdefault(key, {})
        if key not in self._universe_complete:
            self._epoch += 1
            for index, node in enumerate(self._nodes):
                if index in self._absent:
                    continue
                domain = domain_of(node, key)
                if domain is not None:
                    bucket.setdefault(domain, [])
            self._universe_complete.add(key)
        return bucket

    def _group(
        self,
        kind: str,
        key: str,
        namespaces: frozenset[str] | None,
        selector: CompiledSelector,
        *,
        max_skew: int = 0,
        min_domains: int | None = None,
        node_filter: NodeFilter | None = None,
        inverse: bool = False,
    ) -> Group:
        key = normalize_key(key)
        identity = (
            kind,
            key,
            namespaces,
            selector.clauses,
            max_skew,
            min_domains,
            None if node_filter is None else node_filter.identity,
            inverse,
        )
        group = self._by_identity.get(identity)
        if group is not None:
            return group
        group = Group(
            kind,
            key,
            domains=self._universe_for(key),
            namespaces=namespaces,
            selector=selector,
            max_skew=max_skew,
            min_domains=min_domains,
            node_filter=node_filter,
            inverse=inverse,
        )
        if not inverse:
            # An inverse group counts its owners, and no owner can have been placed before the
            # group existed: building the owner's profile is what creates it.
            self._count_existing(group)
            for profile, requirements, taints in self._placements:
                if group.selects(profile.namespace, profile.labels):
                    record_in(group, requirements, taints)
        self._by_identity[identity] = group
        self._groups.append(group)
        self._epoch += 1
        return group

    def _count_existing(self, group: Group) -> None:
        existing = self._base.buckets
        if group.namespaces is None:
            spaces = list(existing.items())
        else:
            spaces = [(ns, existing[ns]) for ns in group.namespaces if ns in existing]
        node_filter = group.filter
        check = node_filter is not None and not node_filter.trivial
        node_ok: dict[int, bool] = {}
        excluded, minus = self._excluded, self._minus
        for namespace, buckets in spaces:
            for shape, (labels, per_node) in buckets.items():
                if not group.selector.matches(labels):
                    continue
                left_out = minus.get((namespace, shape))
                for index, count in per_node.items():
                    if index in excluded:
                        continue
                    if left_out is not None:
                        count -= left_out.get(index, 0)
                        if count <= 0:
                            continue
                    node = self._nodes[index]
                    if check and node_filter is not None:
                        ok = node_ok.get(index)
                        if ok is None:
                            ok = node_ok[index] = node_filter.matches_node(node.labels, node.taints)
                        if not ok:
                            continue
                    domain = domain_of(node, group.key)
                    if domain is not None:
                        group.add(domain, count)

    def _term_namespaces(self, namespace: str, term: PodAffinityTerm) -> frozenset[str] | None:
        """The namespaces an affinity term looks in; None for all of them."""
        listed = term.namespaces
        selector = term.namespace_selector
        if selector is None:
            return frozenset(listed) if listed else frozenset((namespace,))
        if selector.clauses == ():
            return None  # ``namespaceSelector: {}`` selects every namespace
        selected = {
            name
            for name, labels in self._namespaces.items()
            if selector.matches({**labels, _NAMESPACE_NAME_LABEL: name})
        }
        return frozenset(selected.union(listed))

    def _term_group(
        self, kind: str, namespace: str, term: PodAffinityTerm, *, inverse: bool
    ) -> Group:
        namespaces = self._term_namespaces(namespace, term)
        return self._group(kind, term.topology_key, namespaces, term.selector, inverse=inverse)

    def _inverse_groups(self, pod: PodSpec) -> list[Group]:
        namespace = pod.namespace or "default"
        return [
            self._term_group(ANTI_AFFINITY, namespace, term, inverse=True)
            for term in pod.anti_affinity
        ]

    def _refreshed(self, pod: PodSpec) -> Profile:
        # Asked several times for every claim a pod is tried on: the look-up is inlined.
        profile = self._profiles.get(pod.topology_signature)
        if profile is None:
            profile = self._profile(pod)
        groups = self._groups
        if profile.seen < len(groups):
            for index in range(profile.seen, len(groups)):
                group = groups[index]
                if group.selects(profile.namespace, profile.labels):
                    if group.inverse:
                        profile.inverse_selecting.append(group)
                    else:
                        profile.selected.append(group)
            profile.seen = len(groups)
            profile.memo_keys = _memo_keys(profile)
            profile.hostname_only = _hostname_only(profile)
        return profile

    def _profile(self, pod: PodSpec) -> Profile:
        profile = self._profiles.get(pod.topology_signature)
        if profile is None:
            profile = self._build_profile(pod)
            self._profiles[pod.topology_signature] = profile
        return profile

    def _build_profile(self, pod: PodSpec) -> Profile:
        namespace = pod.namespace or "default"
        labels = pod.labels
        profile = Profile(namespace, labels)
        owned: list[Group] = []
        # Every spread is enforced: a ScheduleAnyway one counts as DoNotSchedule until
        # relaxation drops it.
        for spread in pod.spreads:
            owned.append(
                self._group(
                    SPREAD,
                    spread.topology_key,
                    frozenset((namespace,)),
                    spread.selector,
                    max_skew=spread.max_skew,
                    min_domains=spread.min_domains,
                    node_filter=spread_filter(pod, spread),
                )
            )
        for kind, terms in (
            (AFFINITY, pod.strict_affinity),
            (ANTI_AFFINITY, pod.strict_anti_affinity),
        ):
            for term in terms:
                owned.append(self._term_group(kind, namespace, term, inverse=False))
                if kind == ANTI_AFFINITY:
                    inverse = self._term_group(kind, namespace, term, inverse=True)
                    if inverse not in profile.inverse_owned:
                        profile.inverse_owned.append(inverse)
        unique = list(dict.fromkeys(owned))
        unique.sort(key=lambda g: KIND_ORDER[g.kind])
        profile.owned = [(g, g.selects(namespace, labels)) for g in unique]
        profile.affinity_keys = frozenset(g.key for g in unique if g.kind == AFFINITY)
        pins: dict[str, list[Group]] = {}
        for group in unique:
            pins.setdefault(group.key, [])
            if group.kind == SPREAD:
                pins[group.key].append(group)
        profile.pins = list(pins.items())
        profile.memo_keys = _memo_keys(profile)
        profile.hostname_only = _hostname_only(profile)
        return profile


def _memo_keys(profile: Profile) -> tuple[str, ...]:
    """The keys of every group narrowing the profile's pods, none if one is the hostname."""
    keys = dict.fromkeys(g.key for g in profile.inverse_selecting)
    keys.update(dict.fromkeys(g.key for g, _ in profile.owned))
    if wellknown.LABEL_HOSTNAME in keys:
        return ()
    return tuple(keys)


def _hostname_only(profile: Profile) -> list[tuple[Group, bool]] | None:
    """The groups narrowing the profile's pods in the order ``_narrowed`` asks them, with
    whether the pod selects itself, when all are hostname spreads or anti-affinities (what
    ``one_hostname`` answers for); ``None`` otherwise."""
    checks = [*((g, False) for g in profile.inverse_selecting), *profile.owned]
    local = all(
        g.key == wellknown.LABEL_HOSTNAME and g.kind in (SPREAD, ANTI_AFFINITY) for g, _ in checks
    )
    return checks if checks and local else None
