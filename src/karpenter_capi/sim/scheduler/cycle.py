"""One scheduling cycle's view of the cluster: the snapshot, and each pending pod against it.

``SimScheduler`` (``controller``) decides *when* to schedule and writes bindings; this module
holds what a cycle computes: per-node totals kept current as pods are placed, the filters
(resources, taints, node affinity, topology spread, pod (anti-)affinity) with kube's
``Unschedulable`` reasons, and the inputs of the default profile's Score plugins, whose
arithmetic lives in ``scoring``. Kept apart from the controller so each stays readable.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from karpenter_capi.core.kube.client import JsonObject
from karpenter_capi.sim.scheduler import rules, scoring
from karpenter_capi.sim.scheduler.facts import PodFacts, facts_of, metadata, spread_owner

__all__ = [
    "NodeInfo",
    "PodContext",
    "PodFacts",
    "Snapshot",
    "finished",
    "metadata",
    "unschedulable_message",
]

_UNSCHEDULABLE_TAINT: Final = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
_HOSTNAME: Final = "kubernetes.io/hostname"
_ZONE: Final = "topology.kubernetes.io/zone"
MatchKey = tuple[frozenset[str] | None, str, bool]
"""(namespaces or ``None`` for all, canonical selector JSON, whether terminating pods count)."""


def finished(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _matches(namespaces: frozenset[str] | None, selector: Any, pod: Mapping[str, Any]) -> bool:
    if namespaces is not None and metadata(pod).get("namespace") not in namespaces:
        return False
    return rules.label_selector_matches(selector, rules.labels_of(pod))


@dataclass
class NodeInfo:
    obj: JsonObject
    name: str
    labels: Mapping[str, str]
    allocatable: dict[str, int]
    requested: dict[str, int] = field(default_factory=dict)
    nonzero_cpu: int = 0
    nonzero_memory: int = 0

    def add(self, requests: Mapping[str, int], nonzero: tuple[int, int]) -> None:
        for resource, amount in requests.items():
            self.requested[resource] = self.requested.get(resource, 0) + amount
        self.nonzero_cpu += nonzero[0]
        self.nonzero_memory += nonzero[1]


@dataclass
class _Static:
    """Per pod shape: nodes passing the static filters, why the others fail, affinity matches."""

    passing: list[NodeInfo] = field(default_factory=list)
    reasons: Counter[str] = field(default_factory=Counter)
    affinity_ok: set[str] = field(default_factory=set)
    # Raw scores that depend only on the node and the pod's spec, per passing node.
    prefer_no_schedule: dict[str, int] = field(default_factory=dict)
    node_preference: dict[str, int] = field(default_factory=dict)
    any_prefer_no_schedule: bool = False
    any_node_preference: bool = False


@dataclass
class _AntiGroup:
    """Existing pods' required anti-affinity terms that are the same term: one match test."""

    namespaces: frozenset[str] | None
    selector: Any
    topology_key: str
    domains: set[str] = field(default_factory=set)


class Snapshot:
    """The cluster as one cycle sees it, updated in place as the cycle places pods."""

    def __init__(
        self,
        nodes: Iterable[JsonObject],
        bound: Iterable[tuple[JsonObject, str]],
        facts: PodFacts | None = None,
    ):
        self._facts = facts.of if facts is not None else facts_of
        self.nodes = sorted(
            (
                NodeInfo(n, metadata(n)["name"], rules.labels_of(n), rules.node_allocatable(n))
                for n in nodes
            ),
            key=lambda node: node.name,
        )
        self.by_name = {node.name: node for node in self.nodes}
        self.pods_on: dict[str, list[JsonObject]] = {}
        # Per (namespaces, selector, terminating?): the parsed selector and matches per node.
        self._matches: dict[MatchKey, tuple[Any, Counter[str]]] = {}
        self.anti: dict[tuple[MatchKey, str], _AntiGroup] = {}
        self._static: dict[str, _Static] = {}
        # Non-terminating pods per node by their spreading owner's uid (default spreading).
        self.owned: dict[str, Counter[str]] = {}
        # Placed pods whose affinity terms score other pods (InterPodAffinity), with their node.
        self.scoring_affinity: list[tuple[JsonObject, NodeInfo]] = []
        for pod, node_name in bound:
            self.place(pod, node_name)

    def place(self, pod: JsonObject, node_name: str) -> None:
        node = self.by_name.get(node_name)
        if node is None:
            return  # bound to a node that is gone: it takes nothing anywhere
        facts = self._facts(pod)
        node.add(facts.requests, facts.nonzero)
        self.pods_on.setdefault(node_name, []).append(pod)
        terminating = facts.terminating
        owner = facts.owner
        if owner is not None and not terminating:
            self.owned.setdefault(owner, Counter())[node_name] += 1
        if facts.scores_affinity:
            self.scoring_affinity.append((pod, node))
        for (in_namespaces, _, with_terminating), (selector, counts) in self._matches.items():
            if (with_terminating or not terminating) and _matches(in_namespaces, selector, pod):
                counts[node_name] += 1
        namespace = facts.namespace
        for term in facts.anti_terms:
            key = term.get("topologyKey", "")
            if key not in node.labels:
                continue
            namespaces = rules.term_namespaces(term, namespace)
            selector = term.get("labelSelector")
            match_key: MatchKey = (namespaces, json.dumps(selector, sort_keys=True), True)
            group = self.anti.setdefault((match_key, key), _AntiGroup(namespaces, selector, key))
            group.domains.add(node.labels[key])

    def static_filter(self, pod: JsonObject) -> _Static:
        """The filters that depend only on the node and the pod's spec, once per pod shape.

        Pods of one Deployment share tolerations and node affinity: with thousands of them
        pending, testing cordons, readiness, taints and affinity once per shape, not per pod,
        is what keeps a cycle well under a second.
        """
        spec = pod.get("spec") or {}
        signature = json.dumps(
            [
                spec.get("tolerations"),
                spec.get("nodeSelector"),
                (spec.get("affinity") or {}).get("nodeAffinity"),
            ],
            sort_keys=True,
        )
        known = self._static.get(signature)
        if known is not None:
            return known
        tolerates_cordon = (
            rules.untolerated_taint(pod, {"spec": {"taints": [_UNSCHEDULABLE_TAINT]}}) is None
        )
        result = _Static()
        for node in self.nodes:
            reason = None
            affinity_ok = rules.node_affinity_matches(pod, node.obj)
            if affinity_ok:
                result.affinity_ok.add(node.name)
            taint = rules.untolerated_taint(pod, node.obj)
            if (node.obj.get("spec") or {}).get("unschedulable") and not tolerates_cordon:
                reason = "node(s) were unschedulable"
            elif not rules.node_ready(node.obj):
                reason = "node(s) were not ready"
            elif taint is not None:
                reason = (
                    f"node(s) had untolerated taint {{{taint.get('key', '')}: "
                    f"{taint.get('value', '')}}}"
                )
            elif not affinity_ok:
                reason = "node(s) didn't match Pod's node affinity/selector"
            if reason is None:
                result.passing.append(node)
                taints = rules.prefer_no_schedule_taints(pod, node.obj)
                preference = rules.preferred_node_affinity(pod, node.obj)
                result.prefer_no_schedule[node.name] = taints
                result.node_preference[node.name] = preference
                result.any_prefer_no_schedule |= taints > 0
                result.any_node_preference |= preference > 0
            else:
                result.reasons[reason] += 1
        self._static[signature] = result
        return result

    def match_counts(
        self, namespaces: frozenset[str] | None, selector: Any, *, with_terminating: bool
    ) -> Counter[str]:
        """Pods matching (namespaces, selector) per node, computed once and then kept current."""
        key: MatchKey = (namespaces, json.dumps(selector, sort_keys=True), with_terminating)
        known = self._matches.get(key)
        if known is not None:
            return known[1]
        counts: Counter[str] = Counter()
        for node_name, pods in self.pods_on.items():
            for pod in pods:
                if not with_terminating and metadata(pod).get("deletionTimestamp"):
                    continue
                if _matches(namespaces, selector, pod):
                    counts[node_name] += 1
        self._matches[key] = (selector, counts)
        return counts


@dataclass
class _Spread:
    key: str
    max_skew: int
    counts: dict[str, int]  # domain -> matching pods
    min_match: int
    self_match: int
    eligible: set[str]


class PodContext:
    """What one pending pod needs from the snapshot, computed once, then tested per node."""

    def __init__(self, pod: JsonObject, snapshot: Snapshot) -> None:
        self.pod = pod
        self.requests = rules.pod_requests(pod)
        self.request_items = sorted((r, a) for r, a in self.requests.items() if a > 0)
        namespace = metadata(pod).get("namespace", "")
        labels = rules.labels_of(pod)
        self.static = snapshot.static_filter(pod)
        self.affinity_ok = self.static.affinity_ok
        self.spreads = [
            self._spread(c, namespace, labels, snapshot)
            for c in (pod.get("spec") or {}).get("topologySpreadConstraints") or []
            if c.get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule"
        ]
        # This pod's anti-affinity: (topology key, domains holding a matching pod).
        self.anti: list[tuple[str, set[str]]] = []
        for term in rules.pod_terms(pod, "podAntiAffinity"):
            key = term.get("topologyKey", "")
            counts = snapshot.match_counts(
                rules.term_namespaces(term, namespace),
                term.get("labelSelector"),
                with_terminating=True,
            )
            self.anti.append((key, _domains(snapshot, counts, key)))
        # Existing pods' anti-affinity that this pod would violate.
        self.forbidden: list[tuple[str, set[str]]] = [
            (group.topology_key, group.domains)
            for group in snapshot.anti.values()
            if _matches(group.namespaces, group.selector, pod)
        ]
        # This pod's affinity: (topology key, domains holding a matching pod), or None when no
        # pod matches anywhere and the pod matches its own term (the first of its group).
        self.affinity: list[tuple[str, set[str] | None]] = []
        for term in rules.pod_terms(pod, "podAffinity"):
            key = term.get("topologyKey", "")
            namespaces = rules.term_namespaces(term, namespace)
            counts = snapshot.match_counts(
                namespaces, term.get("labelSelector"), with_terminating=True
            )
            domains = _domains(snapshot, counts, key)
            if not domains and _matches(namespaces, term.get("labelSelector"), pod):
                self.affinity.append((key, None))
            else:
                self.affinity.append((key, domains))

    def _spread(
        self,
        constraint: Mapping[str, Any],
        namespace: str,
        labels: Mapping[str, str],
        snapshot: Snapshot,
    ) -> _Spread:
        key = constraint.get("topologyKey", "")
        selector = _spread_selector(constraint, labels)
        eligible = {
            node.name
            for node in snapshot.nodes
            if key in node.labels and self._counts_for_spread(constraint, node)
        }
        per_node = snapshot.match_counts(frozenset({namespace}), selector, with_terminating=False)
        counts: dict[str, int] = {}
        for name in eligible:
            domain = snapshot.by_name[name].labels[key]
            counts[domain] = counts.get(domain, 0) + per_node.get(name, 0)
        min_match = min(counts.values()) if counts else 0
        min_domains = constraint.get("minDomains")
        if min_domains is not None and len(counts) < int(min_domains):
            min_match = 0
        self_match = 1 if rules.label_selector_matches(selector, labels) else 0
        return _Spread(
            key, int(constraint.get("maxSkew", 1)), counts, min_match, self_match, eligible
        )

    def _counts_for_spread(self, constraint: Mapping[str, Any], node: NodeInfo) -> bool:
        """Whether pods on ``node`` count towards ``constraint`` (its node inclusion policies)."""
        honor_affinity = constraint.get("nodeAffinityPolicy", "Honor") == "Honor"
        if honor_affinity and node.name not in self.affinity_ok:
            return False
        if constraint.get("nodeTaintsPolicy", "Ignore") == "Honor":
            return rules.untolerated_taint(self.pod, node.obj) is None
        return True

    def failures(self, node: NodeInfo, reserved: Mapping[str, int] | None = None) -> list[str]:
        """Why ``node``, which passed the static filters, cannot take the pod; empty if it can.
        ``reserved``: what pods nominated to the node keep there (``nominated.Nominator``)."""
        insufficient = self._insufficient(node, reserved or {})
        if insufficient:
            return insufficient
        why = self._spread_failure(node) or self._affinity_failure(node)
        return [why] if why else []

    def _insufficient(self, node: NodeInfo, kept: Mapping[str, int]) -> list[str]:
        requested, allocatable = node.requested, node.allocatable
        return [
            "Too many pods" if resource == rules.PODS else f"Insufficient {resource}"
            for resource, amount in self.request_items
            if requested.get(resource, 0) + kept.get(resource, 0) + amount
            > allocatable.get(resource, 0)
        ]

    def _spread_failure(self, node: NodeInfo) -> str | None:
        for spread in self.spreads:
            if spread.key not in node.labels:
                return (
                    "node(s) didn't match pod topology spread constraints (missing required label)"
                )
            domain = node.labels[spread.key]
            skew = spread.counts.get(domain, 0) + spread.self_match - spread.min_match
            if skew > spread.max_skew:
                return "node(s) didn't match pod topology spread constraints"
        return None

    def _affinity_failure(self, node: NodeInfo) -> str | None:
        for key, domains in self.anti:
            if key in node.labels and node.labels[key] in domains:
                return "node(s) didn't match pod anti-affinity rules"
        for key, domains in self.forbidden:
            if key in node.labels and node.labels[key] in domains:
                return "node(s) didn't satisfy existing pods anti-affinity rules"
        for key, maybe_domains in self.affinity:
            if maybe_domains is not None and node.labels.get(key) not in maybe_domains:
                return "node(s) didn't match pod affinity rules"
        return None

    def totals(self, feasible: Sequence[NodeInfo], snapshot: Snapshot) -> list[int]:
        """Each feasible node's weighted score under kube-scheduler's default profile."""
        nonzero_cpu, nonzero_memory = rules.pod_nonzero_cpu_memory(self.pod)
        cpu, memory = self.requests.get(rules.CPU, 0), self.requests.get(rules.MEMORY, 0)
        fit: list[int] = []
        balanced: list[int] = []
        best_effort = not cpu and not memory  # such pods skip BalancedAllocation
        for node in feasible:
            cpu_allocatable = node.allocatable.get(rules.CPU, 0)
            memory_allocatable = node.allocatable.get(rules.MEMORY, 0)
            fit.append(
                scoring.least_allocated(
                    node.nonzero_cpu + nonzero_cpu,
                    node.nonzero_memory + nonzero_memory,
                    cpu_allocatable,
                    memory_allocatable,
                )
            )
            if not best_effort:
                balanced.append(
                    scoring.balanced_allocation(
                        node.requested.get(rules.CPU, 0) + cpu,
                        node.requested.get(rules.MEMORY, 0) + memory,
                        cpu_allocatable,
                        memory_allocatable,
                    )
                )
        static = self.static
        plugin_scores: list[tuple[int, Sequence[int]]] = [
            (scoring.FIT_WEIGHT, fit),
            (scoring.BALANCED_WEIGHT, balanced),
            (scoring.SPREAD_WEIGHT, self._spread_scores(feasible, snapshot)),
            (scoring.INTERPOD_WEIGHT, self._interpod_scores(feasible, snapshot)),
        ]
        # Without a PreferNoSchedule taint or a preferred node term anywhere, these plugins
        # give every node the same score: it cannot change the choice, so it is not summed.
        if static.any_prefer_no_schedule:
            taints = [static.prefer_no_schedule[n.name] for n in feasible]
            plugin_scores.append(
                (scoring.TAINT_WEIGHT, scoring.normalize_to_max(taints, reverse=True))
            )
        if static.any_node_preference:
            preferences = [static.node_preference[n.name] for n in feasible]
            plugin_scores.append(
                (scoring.NODE_AFFINITY_WEIGHT, scoring.normalize_to_max(preferences))
            )
        return scoring.weighted_total(plugin_scores, len(feasible))

    def _soft_constraints(
        self, snapshot: Snapshot
    ) -> tuple[list[tuple[Mapping[str, Any], Counter[str]]], bool]:
        """Scored spread constraints with matching pods per node, and whether all keys count.

        A pod's own ``ScheduleAnyway`` constraints; without constraints of its own, the system
        defaults (hostname maxSkew 3, zone maxSkew 5) over the pods of its owner.
        """
        spec = self.pod.get("spec") or {}
        own = spec.get("topologySpreadConstraints") or []
        if own:
            namespace = metadata(self.pod).get("namespace", "")
            labels = rules.labels_of(self.pod)
            return [
                (
                    c,
                    snapshot.match_counts(
                        frozenset({namespace}),
                        _spread_selector(c, labels),
                        with_terminating=False,
                    ),
                )
                for c in own
                if c.get("whenUnsatisfiable") == "ScheduleAnyway"
            ], True
        owner = spread_owner(self.pod)
        if owner is None:
            return [], False
        per_node = snapshot.owned.get(owner) or Counter()
        return [
            ({"topologyKey": _HOSTNAME, "maxSkew": scoring.DEFAULT_HOSTNAME_MAX_SKEW}, per_node),
            ({"topologyKey": _ZONE, "maxSkew": scoring.DEFAULT_ZONE_MAX_SKEW}, per_node),
        ], False

    def _spread_scores(self, feasible: Sequence[NodeInfo], snapshot: Snapshot) -> list[int]:
        """PodTopologySpread's score: fewer matching pods in the node's domains is better."""
        constraints, require_all = self._soft_constraints(snapshot)
        if not constraints:
            return []
        keys = [str(c.get("topologyKey", "")) for c, _ in constraints]
        ignored = {n.name for n in feasible if require_all and any(k not in n.labels for k in keys)}
        # (key, maxSkew - 1, weight, matching pods per node, per domain or None for hostname)
        prepared: list[tuple[str, int, float, Counter[str], dict[str, int] | None]] = []
        for (constraint, per_node), key in zip(constraints, keys, strict=True):
            if key == _HOSTNAME:
                size = len(feasible) - len(ignored)
                prepared.append(_prepared(constraint, key, size, per_node, None))
                continue
            counts: dict[str, int] = {}
            for node in feasible:
                if node.name not in ignored and key in node.labels:
                    counts[node.labels[key]] = 0
            for name, count in per_node.items():  # only nodes holding matching pods add
                holder = snapshot.by_name.get(name)
                domain = None if holder is None else holder.labels.get(key)
                if (
                    holder is not None
                    and domain in counts
                    and (not require_all or all(k in holder.labels for k in keys))
                    and self._counts_for_spread(constraint, holder)
                ):
                    counts[domain] += count
            prepared.append(_prepared(constraint, key, len(counts), per_node, counts))
        return scoring.normalize_spread(_raw_spread_scores(feasible, ignored, prepared))

    def _interpod_scores(self, feasible: Sequence[NodeInfo], snapshot: Snapshot) -> list[int]:
        """InterPodAffinity's score: preferred (anti-)affinity terms, both ways, by domain."""
        namespace = metadata(self.pod).get("namespace", "")
        terms = [
            (weight, term) for weight, term in rules.preferred_pod_terms(self.pod, "podAffinity")
        ] + [
            (-weight, term)
            for weight, term in rules.preferred_pod_terms(self.pod, "podAntiAffinity")
        ]
        if not terms and not snapshot.scoring_affinity:
            return []
        by_domain: dict[str, dict[str, int]] = {}

        def add(key: str, node: NodeInfo, amount: int) -> None:
            if amount and key in node.labels:
                domains = by_domain.setdefault(key, {})
                domains[node.labels[key]] = domains.get(node.labels[key], 0) + amount

        for weight, term in terms:
            key = term.get("topologyKey", "")
            counts = snapshot.match_counts(
                rules.term_namespaces(term, namespace),
                term.get("labelSelector"),
                with_terminating=True,
            )
            for node_name, count in counts.items():
                node = snapshot.by_name.get(node_name)
                if node is not None:
                    add(key, node, weight * count)
        for existing, node in snapshot.scoring_affinity:
            own_namespace = metadata(existing).get("namespace", "")
            weighted = (
                [
                    (scoring.HARD_POD_AFFINITY_WEIGHT, t)
                    for t in rules.pod_terms(existing, "podAffinity")
                ]
                + rules.preferred_pod_terms(existing, "podAffinity")
                + [(-w, t) for w, t in rules.preferred_pod_terms(existing, "podAntiAffinity")]
            )
            for weight, term in weighted:
                if _matches(
                    rules.term_namespaces(term, own_namespace), term.get("labelSelector"), self.pod
                ):
                    add(term.get("topologyKey", ""), node, weight)
        raw = [
            sum(
                domains.get(node.labels[key], 0)
                for key, domains in by_domain.items()
                if key in node.labels
            )
            for node in feasible
        ]
        return scoring.normalize_min_max(raw)


def _prepared(
    constraint: Mapping[str, Any],
    key: str,
    domains: int,
    per_node: Counter[str],
    by_domain: dict[str, int] | None,
) -> tuple[str, int, float, Counter[str], dict[str, int] | None]:
    skew = int(constraint.get("maxSkew", 1)) - 1
    return key, skew, scoring.topology_weight(domains), per_node, by_domain


def _raw_spread_scores(
    feasible: Sequence[NodeInfo],
    ignored: set[str],
    prepared: list[tuple[str, int, float, Counter[str], dict[str, int] | None]],
) -> list[int | None]:
    """Each node's matching pods weighted by the topology's size, plus maxSkew - 1 (kube's
    scoreForCount, which waters down small differences); None for an ignored node."""
    raw: list[int | None] = []
    for node in feasible:
        if node.name in ignored:
            raw.append(None)
            continue
        total = 0.0
        for key, skew, weight, per_node, by_domain in prepared:
            domain = node.labels.get(key)
            if domain is not None:
                matching = per_node[node.name] if by_domain is None else by_domain[domain]
                total += matching * weight + skew
        raw.append(scoring.round_half_away(total))
    return raw


def _spread_selector(constraint: Mapping[str, Any], labels: Mapping[str, str]) -> Any:
    """A spread constraint's selector with its ``matchLabelKeys`` folded in."""
    selector = dict(constraint.get("labelSelector") or {})
    extra = [
        {"key": k, "operator": "In", "values": [labels[k]]}
        for k in constraint.get("matchLabelKeys") or []
        if k in labels
    ]
    if extra:
        selector["matchExpressions"] = [*(selector.get("matchExpressions") or []), *extra]
    return selector


def _domains(snapshot: Snapshot, counts: Mapping[str, int], key: str) -> set[str]:
    return {
        snapshot.by_name[name].labels[key]
        for name, count in counts.items()
        if count > 0 and name in snapshot.by_name and key in snapshot.by_name[name].labels
    }


def unschedulable_message(node_count: int, reasons: Counter[str]) -> str:
    """``0/3 nodes are available: 1 Insufficient cpu, 2 node(s) had ...``, as kube writes it."""
    parts = sorted(f"{count} {reason}" for reason, count in reasons.items())
    if not parts:
        return f"0/{node_count} nodes are available."
    return f"0/{node_count} nodes are available: {', '.join(parts)}."
