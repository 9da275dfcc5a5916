"""Topology spread, pod affinity and pod anti-affinity, as the scheduling simulator honours them.

The solver decides where pods go before any node exists, so it cannot ask kube-scheduler whether a
placement keeps a ``topologySpreadConstraint`` or a required pod (anti-)affinity term. If it guessed
differently from kube-scheduler the pods it provisioned for would stay Pending (or land on nodes
that break the constraint), so this module answers the question the way Karpenter's
``pkg/controllers/provisioning/scheduling/topology.go`` does: every constraint becomes a *topology
group* that counts matching pods per domain (``SELECT count(*) ... GROUP BY <topologyKey>``), and a
placement narrows the node's requirements to the domains the counts still allow.

What is enforced, and how:

* ``topologySpreadConstraints`` with ``whenUnsatisfiable: DoNotSchedule`` (the default), on any
  topology key: ``labelSelector`` plus ``matchLabelKeys``, ``maxSkew``, ``minDomains`` (fewer
  eligible domains than ``minDomains`` makes the global minimum 0), ``nodeAffinityPolicy`` (Honor,
  the default: only domains the pod's requirements allow count toward the global minimum, where
  those are the ``pod_requirements`` passed in, i.e. the node-affinity term being tried, as in
  Karpenter; and only pods on nodes matching the pod's ``nodeSelector`` and any of its required
  node-affinity terms are counted) and
  ``nodeTaintsPolicy`` (Honor: domains whose nodes all carry taints the pod does not tolerate do
  not count toward the minimum, and pods on such nodes are not counted). Only pods in the pod's own
  namespace count. For ``kubernetes.io/hostname`` the global minimum is always 0, because the
  solver can always open a new node.
* Required pod affinity: a domain is allowed when it already holds a selected pod; when no selected
  pod exists anywhere the pod may bootstrap the group only if its own term selects it.
* Required pod anti-affinity, both ways: a pod may not enter a domain holding a pod its term
  selects, and may not enter a domain holding a pod (existing, or placed earlier in this solve)
  whose required anti-affinity term selects it.

Every key the pod's own constraints use comes back pinned to one domain (the least loaded by its
spreads, then by name), because a placement counts only where its domain is known.

Not enforced here, on purpose: ``ScheduleAnyway`` spreads and ``preferredDuringScheduling`` pod
(anti-)affinity are ignored. They are preferences, which the solver owns and relaxes; use
:func:`schedule_anyway_constraints` to find the soft spreads. To try a preference as though it were
required, pass a *copy* of the pod with it promoted (``whenUnsatisfiable: DoNotSchedule``, or the
term moved to ``required...``): groups are derived from the pod object each call receives, and a
group first seen mid-solve is counted from the existing pods and every placement recorded so far.

Pods are recognised by object identity first, then by content, and treated as immutable: call
:meth:`Topology.forget` after changing a pod's constraints in place (a fresh copy needs nothing).
Identical constraints shared by many pods (the replicas of a Deployment) are one group with one
set of counts, and a pod's view of the groups is cached by namespace, labels and constraints, so
the per-pod cost is a few dictionary look-ups.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.scheduling.refusal import Refusal
from karpenter_capi.core.scheduling.requirements import Requirement, Requirements, normalize_key
from karpenter_capi.core.scheduling.taints import Taint, untolerated

SPREAD: Final = "topology spread"
AFFINITY: Final = "pod affinity"
ANTI_AFFINITY: Final = "pod anti-affinity"

# Anti-affinity narrows hardest and is cheapest, so it goes first; spread then keeps whichever of
# the remaining domains are within maxSkew, and the pin picks the least loaded of those.
_KIND_ORDER: Final = {ANTI_AFFINITY: 0, AFFINITY: 1, SPREAD: 2}
_SELECTOR_OPERATORS: Final = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})
_NAMESPACE_NAME_LABEL: Final = "kubernetes.io/metadata.name"
_BETA_ALIASES: Final = {ga: beta for beta, ga in wellknown.NORMALIZED_LABELS.items() if beta != ga}
_NO_NAMESPACES: Final[Mapping[str, Mapping[str, str]]] = MappingProxyType({})
_NO_DOMAIN_TAINTS: Final[Mapping[str, Mapping[str, Iterable[Iterable[Taint]]]]] = MappingProxyType(
    {}
)
_REASON_DOMAINS: Final = 10
# Callers may hand over a fresh copy of a pod on every call; past this many identities the
# identity cache is dropped (the content-keyed profiles survive, so a miss costs a few reprs).
_IDENTITY_CACHE_LIMIT: Final = 1 << 16

_Clause = tuple[str, str, frozenset[str]]
_TaintSets = list[tuple[Taint, ...]]


@dataclass(frozen=True)
class NodeInfo:
    """A node an existing pod runs on: its name, labels and taints."""

    name: str
    labels: Mapping[str, str]
    taints: tuple[Taint, ...] = ()


def schedule_anyway_constraints(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The pod's ``ScheduleAnyway`` spread constraints: preferences this module does not enforce."""
    spec = pod.get("spec") or {}
    return [
        constraint
        for constraint in spec.get("topologySpreadConstraints") or ()
        if (constraint.get("whenUnsatisfiable") or "DoNotSchedule") != "DoNotSchedule"
    ]


@dataclass(frozen=True, slots=True)
class _Selector:
    """A compiled ``metav1.LabelSelector``; ``clauses`` None selects nothing (a nil selector)."""

    clauses: tuple[_Clause, ...] | None

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


def _compile_selector(raw: Mapping[str, Any] | None, extra: Iterable[_Clause] = ()) -> _Selector:
    # A nil selector in a spread constraint or affinity term selects no pod, unlike ``{}``;
    # kube-scheduler treats a malformed one the same way, so both become "nothing".
    if raw is None:
        return _Selector(None)
    clauses: set[_Clause] = {
        (str(key), "In", frozenset((str(value),)))
        for key, value in (raw.get("matchLabels") or {}).items()
    }
    for expression in raw.get("matchExpressions") or ():
        key = expression.get("key")
        operator = expression.get("operator")
        if not key or operator not in _SELECTOR_OPERATORS:
            return _Selector(None)
        values = frozenset(str(v) for v in expression.get("values") or ())
        clauses.add((str(key), str(operator), values))
    clauses.update(extra)
    return _Selector(tuple(sorted(clauses, key=lambda c: (c[0], c[1], sorted(c[2])))))


def _tolerated(tolerations: Sequence[Mapping[str, Any]], taint_sets: _TaintSets) -> bool:
    # No taint information means an untainted node shape, which every pod tolerates.
    if not taint_sets:
        return True
    return any(untolerated(tolerations, taints) is None for taints in taint_sets)


class _NodeFilter:
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
        tolerations: tuple[Mapping[str, Any], ...],
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
            tuple(sorted(repr(sorted(t.items())) for t in tolerations)) if honor_taints else None,
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


def _spread_filter(spec: Mapping[str, Any], constraint: Mapping[str, Any]) -> _NodeFilter:
    honor_affinity = (constraint.get("nodeAffinityPolicy") or "Honor") == "Honor"
    honor_taints = (constraint.get("nodeTaintsPolicy") or "Ignore") == "Honor"
    terms: tuple[Requirements, ...] = ()
    if honor_affinity:
        selector = Requirements.from_labels(spec.get("nodeSelector") or {})
        node_affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
        required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
        # matchFields pins node names, which only existing nodes have; dropping it counts a
        # little more than kube-scheduler would, never less.
        terms = tuple(
            selector.merged(Requirements.from_dicts(term.get("matchExpressions") or ()))
            for term in required.get("nodeSelectorTerms") or ()
        ) or (selector,)
    tolerations = tuple(spec.get("tolerations") or ()) if honor_taints else ()
    return _NodeFilter(honor_affinity, terms, honor_taints, tolerations)


_UNEXPLAINED: Final = "topology constraint not satisfied (details omitted)"
# A solver trying many nodes asks without an explanation; these spare it an allocation per no.
_UNEXPLAINED_BY_FLAGS: Final = {
    (permanent, local): Refusal(_UNEXPLAINED, permanent=permanent, local=local)
    for permanent in (False, True)
    for local in (False, True)
}


def _permanent(group: _Group) -> bool:
    return group.key == wellknown.LABEL_HOSTNAME and group.kind in (SPREAD, ANTI_AFFINITY)


class _Group:
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
        domains: dict[str, _TaintSets],
        namespaces: frozenset[str] | None,
        selector: _Selector,
        max_skew: int,
        min_domains: int | None,
        node_filter: _NodeFilter | None,
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

    def tolerates(self, domain: str, taint_sets: _TaintSets) -> bool:
        tolerance = self.tolerance
        if tolerance is None or self.filter is None:
            return True
        known = tolerance.get(domain)
        if known is None or known[0] != len(taint_sets):
            known = (len(taint_sets), _tolerated(self.filter.tolerations, taint_sets))
            tolerance[domain] = known
        return known[1]

    def add(self, domain: str, count: int = 1) -> None:
        if domain not in self.domains:
            self.domains[domain] = []
        self.counts[domain] = self.counts.get(domain, 0) + count


class _Profile:
    """One pod shape's view of the groups: those it owns, and those that select it."""

    __slots__ = (
        "inverse_owned",
        "inverse_selecting",
        "labels",
        "namespace",
        "owned",
        "pins",
        "seen",
        "selected",
    )

    def __init__(self, namespace: str, labels: Mapping[str, str]) -> None:
        self.namespace = namespace
        self.labels = labels
        self.owned: list[tuple[_Group, bool]] = []  # (group, the pod selects itself)
        self.pins: list[tuple[str, list[_Group]]] = []  # owned keys, with the spreads on each
        self.inverse_owned: list[_Group] = []
        self.selected: list[_Group] = []
        self.inverse_selecting: list[_Group] = []
        self.seen = 0  # how many of Topology._groups ``selected`` has been checked against


def _node_domain(node: NodeInfo, key: str) -> str | None:
    value = node.labels.get(key)
    if value is None:
        beta = _BETA_ALIASES.get(key)
        if beta is not None:
            value = node.labels.get(beta)
    # The kubelet may not have set the hostname label yet; the node name stands in, as in
    # Karpenter, so a self-affinity group still sees the pod somewhere.
    if value is None and key == wellknown.LABEL_HOSTNAME:
        return node.name
    return value


def _single(requirement: Requirement | None) -> str | None:
    if requirement is None or requirement.complement or len(requirement.values) != 1:
        return None
    value = next(iter(requirement.values))
    return value if requirement.has(value) else None


def _allows(requirement: Requirement | None, domain: str) -> bool:
    return requirement is None or requirement.has(domain)


def _candidates(domains: Mapping[str, object], node_domains: Requirement | None) -> Iterator[str]:
    """The known domains a node with ``node_domains`` could be in."""
    if node_domains is None:
        yield from domains
    elif not node_domains.complement:
        # Walking the node's few values beats walking thousands of hostname domains.
        for domain in node_domains.values:
            if domain in domains and node_domains.has(domain):
                yield domain
    else:
        for domain in domains:
            if node_domains.has(domain):
                yield domain


def _possible_domains(group: _Group, requirement: Requirement | None) -> list[str]:
    """Every domain a node with ``requirement`` on the group's key could be in."""
    if requirement is None:
        # The node does not promise the label, so it counts in no domain (a node without the
        # topology label is outside the topology), as in Karpenter.
        return []
    if not requirement.complement:
        return [v for v in requirement.values if requirement.has(v)]
    return [d for d in group.domains if requirement.has(d)]


def _identity(pod: Mapping[str, Any]) -> object:
    meta = pod.get("metadata") or {}
    uid = meta.get("uid")
    if uid:
        return uid
    return (meta.get("namespace") or "default", meta.get("name"))


def _ignored(pod: Mapping[str, Any]) -> bool:
    # Finished and terminating pods no longer occupy their domain (Karpenter's
    # IgnoredForTopology).
    phase = (pod.get("status") or {}).get("phase")
    return phase in ("Succeeded", "Failed") or bool(
        (pod.get("metadata") or {}).get("deletionTimestamp")
    )


def _required_terms(affinity: Mapping[str, Any], kind: str) -> Sequence[Mapping[str, Any]]:
    terms: Sequence[Mapping[str, Any]] = (affinity.get(kind) or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or ()
    return terms


class Topology:
    """Topology groups for one solve: counts per domain, narrowed node requirements per pod.

    ``domains`` maps each topology key to every value a node could have (from NodePools,
    instance types, offerings and existing nodes); the values existing nodes carry are added
    automatically. ``existing_pods`` are the pods already bound or nominated, each with the node
    it is on. ``pending_pods`` are the pods this solve places; any of them also listed in
    ``existing_pods`` (same uid) is not counted twice. ``namespaces`` maps namespace names to
    their labels, for ``namespaceSelector``.

    ``domain_taints`` (optional, only consulted by ``nodeTaintsPolicy: Honor``) maps a key and a
    value to the taint sets of the node shapes that yield it, e.g. each NodePool template's
    taints. A value listed there is tolerated when any of its sets is; a value not listed is
    assumed to come from an untainted node and is tolerated by every pod.
    """

    def __init__(
        self,
        *,
        domains: Mapping[str, Iterable[str]],
        existing_pods: Iterable[tuple[Mapping[str, Any], NodeInfo]],
        pending_pods: Iterable[Mapping[str, Any]],
        namespaces: Mapping[str, Mapping[str, str]] = _NO_NAMESPACES,
        domain_taints: Mapping[str, Mapping[str, Iterable[Iterable[Taint]]]] = _NO_DOMAIN_TAINTS,
    ) -> None:
        self._namespaces = namespaces
        self._groups: list[_Group] = []
        self._by_identity: dict[tuple[Any, ...], _Group] = {}
        self._profiles: dict[tuple[Any, ...], _Profile] = {}
        self._by_id: dict[int, tuple[Mapping[str, Any], _Profile]] = {}
        self._placements: list[tuple[_Profile, Requirements, tuple[Taint, ...]]] = []

        self._universe: dict[str, dict[str, _TaintSets]] = {}
        for key, values in domains.items():
            bucket = self._universe.setdefault(normalize_key(key), {})
            for value in values:
                bucket.setdefault(str(value), [])
        for key, by_value in domain_taints.items():
            bucket = self._universe.setdefault(normalize_key(key), {})
            for value, taint_sets in by_value.items():
                bucket.setdefault(str(value), []).extend(tuple(s) for s in taint_sets)
        self._universe_complete: set[str] = set()

        pending = list(pending_pods)
        skip = {_identity(pod) for pod in pending}
        self._nodes: list[NodeInfo] = []
        node_index: dict[str, int] = {}
        # namespace -> repr(labels) -> (labels, node index -> pods): replicas on one node with one
        # label set collapse, so counting a new group touches each distinct shape once.
        self._existing: dict[str, dict[str, tuple[Mapping[str, str], dict[int, int]]]] = {}
        anti_affinity: list[tuple[Mapping[str, Any], int]] = []
        for pod, node in existing_pods:
            if _ignored(pod) or _identity(pod) in skip:
                continue
            index = node_index.get(node.name)
            if index is None:
                index = node_index[node.name] = len(self._nodes)
                self._nodes.append(node)
            meta = pod.get("metadata") or {}
            labels = meta.get("labels") or {}
            buckets = self._existing.setdefault(meta.get("namespace") or "default", {})
            entry = buckets.setdefault(repr(labels), (labels, {}))
            entry[1][index] = entry[1].get(index, 0) + 1
            affinity = (pod.get("spec") or {}).get("affinity") or {}
            if _required_terms(affinity, "podAntiAffinity"):
                anti_affinity.append((pod, index))

        for pod, index in anti_affinity:
            node = self._nodes[index]
            for group in self._inverse_groups(pod):
                domain = _node_domain(node, group.key)
                if domain is not None:
                    group.add(domain)

        # Building every pending pod's groups now counts the existing pods once per distinct
        # constraint, before any placement, instead of on the solver's hot path.
        for pod in pending:
            self._profile(pod)

    # --- the solver's interface ---------------------------------------------------------------

    def has_constraints(self, pod: Mapping[str, Any]) -> bool:
        """Whether any topology group constrains where ``pod`` may go.

        False means :meth:`add_requirements` would return the node requirements unchanged.
        :meth:`record` must still be called for every placed pod: it may count in other pods'
        groups.
        """
        profile = self._refreshed(pod)
        return bool(profile.owned or profile.inverse_selecting)

    def add_requirements(
        self,
        pod: Mapping[str, Any],
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
        result = node_requirements
        for group in profile.inverse_selecting:
            narrowed = self._narrow(
                group, False, pod_requirements, result, node_taints, explain=explain
            )
            if isinstance(narrowed, Refusal):
                return narrowed
            result = narrowed
        for group, self_selecting in profile.owned:
            narrowed = self._narrow(
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

    def affinity_domains(self, pod: Mapping[str, Any], key: str) -> frozenset[str] | None:
        """The only ``key`` domains the pod's required pod affinity can accept, if known.

        ``None`` when the pod has no required affinity on ``key``, or may start its group
        anywhere (it selects itself and nothing it follows is placed yet). A superset of what
        :meth:`add_requirements` allows, so a solver can skip every other node outright: with
        thousands of nodes and a hostname affinity, that is most of the work saved.
        """
        profile = self._refreshed(pod)
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
        pod: Mapping[str, Any],
        node_requirements: Requirements,
        node_taints: Sequence[Taint] = (),
    ) -> None:
        """Count ``pod``, placed on a node with ``node_requirements``, in every group it affects.

        Spread and affinity groups count it only for a key the requirements pin to one value,
        so pin each such key (choose the zone) before recording. Anti-affinity groups, and the
        pod's own required anti-affinity terms, block every domain the node could still be in.
        ``node_taints`` matter only to spreads with ``nodeTaintsPolicy: Honor``.
        """
        profile = self._refreshed(pod)
        taints = tuple(node_taints)
        for group in profile.selected:
            self._record_in(group, node_requirements, taints)
        for group in profile.inverse_owned:
            for domain in _possible_domains(group, node_requirements.get(group.key)):
                group.add(domain)
        self._placements.append((profile, node_requirements, taints))

    def register_domain(self, key: str, value: str, taints: Sequence[Taint] = ()) -> None:
        """A new domain (a NodeClaim's hostname placeholder, say) on a node with ``taints``."""
        key = normalize_key(key)
        bucket = self._universe_for(key)
        taint_sets = bucket.get(value)
        if taint_sets is None:
            taint_sets = bucket[value] = [tuple(taints)] if taints else []
        elif taints or taint_sets:
            # An untainted shape joining a tainted value makes it tolerable for everyone.
            taint_sets.append(tuple(taints))

    def forget(self, pod: Mapping[str, Any]) -> None:
        """Drop the cached view of ``pod`` after its constraints were changed in place."""
        self._by_id.pop(id(pod), None)

    # --- narrowing ----------------------------------------------------------------------------

    def _narrow(
        self,
        group: _Group,
        self_selecting: bool,
        pod_requirements: Requirements,
        requirements: Requirements,
        node_taints: Sequence[Taint],
        *,
        explain: bool = True,
    ) -> Requirements | Refusal:
        pod_domains = pod_requirements.get(group.key)
        node_domains = requirements.get(group.key)
        if group.kind == SPREAD:
            allowed = self._spread_domains(
                group, self_selecting, pod_domains, node_domains, node_taints
            )
        elif group.kind == AFFINITY:
            allowed = _affinity_domains(group, self_selecting, pod_domains, node_domains)
        else:
            allowed = _anti_affinity_domains(group, pod_domains, node_domains)
        if not allowed:
            permanent = _permanent(group)
            local = group.key == wellknown.LABEL_HOSTNAME
            if not explain:
                return _UNEXPLAINED_BY_FLAGS[permanent, local]
            return Refusal(
                _reason(group, pod_domains, node_domains), permanent=permanent, local=local
            )
        if (
            node_domains is not None
            and not node_domains.complement
            and node_domains.values == allowed
        ):
            return requirements
        return requirements.with_requirement(Requirement(group.key, False, frozenset(allowed)))

    def _spread_domains(
        self,
        group: _Group,
        self_selecting: bool,
        pod_domains: Requirement | None,
        node_domains: Requirement | None,
        node_taints: Sequence[Taint],
    ) -> set[str]:
        own = 1 if self_selecting else 0
        counts = group.counts
        single = _single(node_domains)
        if group.key == wellknown.LABEL_HOSTNAME:
            # A new node is always possible, so the global minimum of a hostname spread is 0,
            # and the node's own hostname may not be registered yet.
            if single is not None:
                fits = counts.get(single, 0) + own <= group.max_skew and _allows(
                    pod_domains, single
                )
                return {single} if fits else set()
            minimum = 0
        else:
            minimum = self._global_min(group, pod_domains, single, node_taints)
        limit = group.max_skew + minimum - own
        return {
            d
            for d in _candidates(group.domains, node_domains)
            if counts.get(d, 0) <= limit and _allows(pod_domains, d)
        }

    @staticmethod
    def _global_min(
        group: _Group,
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

    # --- recording ----------------------------------------------------------------------------

    @staticmethod
    def _record_in(group: _Group, requirements: Requirements, taints: Sequence[Taint]) -> None:
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
            for domain in _possible_domains(group, requirement):
                group.add(domain)
            return
        pinned = _single(requirement)
        if pinned is not None:
            group.add(pinned)

    # --- groups and profiles ------------------------------------------------------------------

    def _universe_for(self, key: str) -> dict[str, _TaintSets]:
        bucket = self._universe.setdefault(key, {})
        if key not in self._universe_complete:
            for node in self._nodes:
                domain = _node_domain(node, key)
                if domain is not None:
                    bucket.setdefault(domain, [])
            self._universe_complete.add(key)
        return bucket

    def _group(
        self,
        kind: str,
        key: str,
        namespaces: frozenset[str] | None,
        selector: _Selector,
        *,
        max_skew: int = 0,
        min_domains: int | None = None,
        node_filter: _NodeFilter | None = None,
        inverse: bool = False,
    ) -> _Group:
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
        group = _Group(
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
                    self._record_in(group, requirements, taints)
        self._by_identity[identity] = group
        self._groups.append(group)
        return group

    def _count_existing(self, group: _Group) -> None:
        if group.namespaces is None:
            spaces = list(self._existing.values())
        else:
            spaces = [self._existing[ns] for ns in group.namespaces if ns in self._existing]
        node_filter = group.filter
        check = node_filter is not None and not node_filter.trivial
        node_ok: dict[int, bool] = {}
        for buckets in spaces:
            for labels, per_node in buckets.values():
                if not group.selector.matches(labels):
                    continue
                for index, count in per_node.items():
                    node = self._nodes[index]
                    if check and node_filter is not None:
                        ok = node_ok.get(index)
                        if ok is None:
                            ok = node_ok[index] = node_filter.matches_node(node.labels, node.taints)
                        if not ok:
                            continue
                    domain = _node_domain(node, group.key)
                    if domain is not None:
                        group.add(domain, count)

    def _term_namespaces(self, namespace: str, term: Mapping[str, Any]) -> frozenset[str] | None:
        """The namespaces an affinity term looks in; None for all of them."""
        listed = [str(n) for n in term.get("namespaces") or ()]
        raw_selector = term.get("namespaceSelector")
        if raw_selector is None:
            return frozenset(listed) if listed else frozenset((namespace,))
        selector = _compile_selector(raw_selector)
        if selector.clauses == ():
            return None  # ``namespaceSelector: {}`` selects every namespace
        selected = {
            name
            for name, labels in self._namespaces.items()
            if selector.matches({**labels, _NAMESPACE_NAME_LABEL: name})
        }
        return frozenset(selected.union(listed))

    def _term_group(
        self,
        kind: str,
        namespace: str,
        labels: Mapping[str, str],
        term: Mapping[str, Any],
        *,
        inverse: bool,
    ) -> _Group | None:
        key = term.get("topologyKey")
        if not key:
            return None
        # matchLabelKeys/mismatchLabelKeys copy the owner's own label values into the selector.
        extra: list[_Clause] = [
            (k, "In", frozenset((labels[k],)))
            for k in term.get("matchLabelKeys") or ()
            if k in labels
        ]
        extra.extend(
            (k, "NotIn", frozenset((labels[k],)))
            for k in term.get("mismatchLabelKeys") or ()
            if k in labels
        )
        selector = _compile_selector(term.get("labelSelector"), extra)
        namespaces = self._term_namespaces(namespace, term)
        return self._group(kind, str(key), namespaces, selector, inverse=inverse)

    def _inverse_groups(self, pod: Mapping[str, Any]) -> list[_Group]:
        meta = pod.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        labels = meta.get("labels") or {}
        affinity = (pod.get("spec") or {}).get("affinity") or {}
        groups = []
        for term in _required_terms(affinity, "podAntiAffinity"):
            group = self._term_group(ANTI_AFFINITY, namespace, labels, term, inverse=True)
            if group is not None:
                groups.append(group)
        return groups

    def _refreshed(self, pod: Mapping[str, Any]) -> _Profile:
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
        return profile

    def _profile(self, pod: Mapping[str, Any]) -> _Profile:
        cached = self._by_id.get(id(pod))
        if cached is not None and cached[0] is pod:
            return cached[1]
        meta = pod.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        labels = meta.get("labels") or {}
        spec = pod.get("spec") or {}
        spreads = spec.get("topologySpreadConstraints")
        affinity = spec.get("affinity") or {}
        affinity_terms = _required_terms(affinity, "podAffinity")
        anti_terms = _required_terms(affinity, "podAntiAffinity")
        # repr is exact for JSON data and far cheaper than canonicalising; two equal pods whose
        # dicts differ only in key order just get two profiles sharing the same groups.
        signature: tuple[Any, ...] = (
            namespace,
            repr(labels),
            repr(affinity_terms),
            repr(anti_terms),
        )
        if spreads:
            signature += (
                repr(spreads),
                repr(spec.get("nodeSelector")),
                repr(affinity.get("nodeAffinity")),
                repr(spec.get("tolerations")),
            )
        profile = self._profiles.get(signature)
        if profile is None:
            profile = self._build_profile(namespace, labels, spec, affinity_terms, anti_terms)
            self._profiles[signature] = profile
        if len(self._by_id) >= _IDENTITY_CACHE_LIMIT:
            self._by_id.clear()
        self._by_id[id(pod)] = (pod, profile)
        return profile

    def _build_profile(
        self,
        namespace: str,
        labels: Mapping[str, str],
        spec: Mapping[str, Any],
        affinity_terms: Sequence[Mapping[str, Any]],
        anti_terms: Sequence[Mapping[str, Any]],
    ) -> _Profile:
        profile = _Profile(namespace, labels)
        owned: list[_Group] = []
        for constraint in spec.get("topologySpreadConstraints") or ():
            if (constraint.get("whenUnsatisfiable") or "DoNotSchedule") != "DoNotSchedule":
                continue
            key = constraint.get("topologyKey")
            if not key:
                continue
            extra = [
                (k, "In", frozenset((labels[k],)))
                for k in constraint.get("matchLabelKeys") or ()
                if k in labels
            ]
            min_domains = constraint.get("minDomains")
            owned.append(
                self._group(
                    SPREAD,
                    str(key),
                    frozenset((namespace,)),
                    _compile_selector(constraint.get("labelSelector"), extra),
                    max_skew=int(constraint.get("maxSkew") or 1),
                    min_domains=None if min_domains is None else int(min_domains),
                    node_filter=_spread_filter(spec, constraint),
                )
            )
        for kind, terms in ((AFFINITY, affinity_terms), (ANTI_AFFINITY, anti_terms)):
            for term in terms:
                group = self._term_group(kind, namespace, labels, term, inverse=False)
                if group is not None:
                    owned.append(group)
                if kind == ANTI_AFFINITY:
                    inverse = self._term_group(kind, namespace, labels, term, inverse=True)
                    if inverse is not None and inverse not in profile.inverse_owned:
                        profile.inverse_owned.append(inverse)
        unique = list(dict.fromkeys(owned))
        unique.sort(key=lambda g: _KIND_ORDER[g.kind])
        profile.owned = [(g, g.selects(namespace, labels)) for g in unique]
        pins: dict[str, list[_Group]] = {}
        for group in unique:
            pins.setdefault(group.key, [])
            if group.kind == SPREAD:
                pins[group.key].append(group)
        profile.pins = list(pins.items())
        return profile


def _affinity_domains(
    group: _Group,
    self_selecting: bool,
    pod_domains: Requirement | None,
    node_domains: Requirement | None,
) -> set[str]:
    counts = group.counts

    def nothing_to_follow() -> bool:
        # kube-scheduler lets a pod start its group only when no selected pod runs anywhere
        # (even where this pod may not go): otherwise it must join one, or wait.
        return not any(c > 0 for c in counts.values())

    single = _single(node_domains)
    if group.key == wellknown.LABEL_HOSTNAME and single is not None:
        if not _allows(pod_domains, single):
            return set()
        if counts.get(single, 0) > 0 or (self_selecting and nothing_to_follow()):
            return {single}
        return set()
    # counts holds only occupied domains, usually far fewer than the key's universe.
    occupied = {
        d for d in _candidates(counts, node_domains) if counts[d] > 0 and _allows(pod_domains, d)
    }
    if occupied:
        return occupied
    if self_selecting and nothing_to_follow():
        return {d for d in _candidates(group.domains, node_domains) if _allows(pod_domains, d)}
    return set()


def _anti_affinity_domains(
    group: _Group, pod_domains: Requirement | None, node_domains: Requirement | None
) -> set[str]:
    counts = group.counts
    single = _single(node_domains)
    if group.key == wellknown.LABEL_HOSTNAME and single is not None:
        return {single} if counts.get(single, 0) == 0 else set()
    return {
        d
        for d in _candidates(group.domains, node_domains)
        if counts.get(d, 0) == 0 and _allows(pod_domains, d)
    }


def _reason(
    group: _Group, pod_domains: Requirement | None, node_domains: Requirement | None
) -> str:
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
