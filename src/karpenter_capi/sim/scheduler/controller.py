"""The simulated cluster's kube-scheduler: binds pending pods to nodes that fit, in batches.

Without it, nodes the autoprovisioner creates in the simulator would stay empty and pending pods
pending forever, so no scenario could tell whether the right capacity was bought. It is a
``Controller`` over pods, but it schedules a whole *cycle* at a time: the first reconcile after
any pod or node event takes every pending pod in creation order (then namespace and name) and
places it against one snapshot of the cluster whose per-node totals and pod counts are updated
as each pod is placed. Later reconciles in the same pass find nothing changed and return at
once. That keeps the order deterministic (a queue would follow event order instead) and the
cost of a cycle at one pass over the pods plus, per pending pod, one pass over the nodes.

Pods this scheduler bound but the cache does not show bound yet are *assumed* on their node, as
kube-scheduler's assume cache does, so a threaded driver with a lagging cache cannot bind a pod
twice or overcommit a node.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from karpenter_capi.core.clock import Clock, format_timestamp
from karpenter_capi.core.kube.cache import object_key
from karpenter_capi.core.kube.client import JsonObject, KubeClient
from karpenter_capi.core.kube.errors import Conflict, NotFound
from karpenter_capi.core.kube.resources import NODES, PODS, Resource
from karpenter_capi.core.runtime.controller import DONE, WORKLOAD, Caches, Key, Result, Watch
from karpenter_capi.sim.scheduler import rules

__all__ = ["CYCLE_KEY", "SCHEDULER_NAME", "SimScheduler"]

SCHEDULER_NAME: Final = "default-scheduler"
CYCLE_KEY: Final = "sim.kube-scheduler/cycle"
"""The key node events enqueue: any key starts a cycle, this one names no pod."""

_UNSCHEDULABLE_TAINT: Final = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
_NONZERO_CPU: Final = 100 * 10**6  # 100m, kube-scheduler's scoring default for no request
_NONZERO_MEMORY: Final = 200 * 2**20 * 10**9  # 200Mi

MatchKey = tuple[frozenset[str] | None, str, bool]
"""(namespaces or ``None`` for all, canonical selector JSON, whether terminating pods count)."""


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _finished(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _matches(namespaces: frozenset[str] | None, selector: Any, pod: Mapping[str, Any]) -> bool:
    if namespaces is not None and _meta(pod).get("namespace") not in namespaces:
        return False
    return rules.label_selector_matches(selector, rules.labels_of(pod))


@dataclass
class _Node:
    obj: JsonObject
    name: str
    labels: Mapping[str, str]
    allocatable: dict[str, int]
    requested: dict[str, int] = field(default_factory=dict)
    nonzero_cpu: int = 0
    nonzero_memory: int = 0

    def add(self, requests: Mapping[str, int]) -> None:
        for resource, amount in requests.items():
            self.requested[resource] = self.requested.get(resource, 0) + amount
        self.nonzero_cpu += requests.get(rules.CPU) or _NONZERO_CPU
        self.nonzero_memory += requests.get(rules.MEMORY) or _NONZERO_MEMORY


@dataclass
class _Static:
    """Per pod shape: nodes passing the static filters, why the others fail, affinity matches."""

    passing: list[_Node] = field(default_factory=list)
    reasons: Counter[str] = field(default_factory=Counter)
    affinity_ok: set[str] = field(default_factory=set)


@dataclass
class _AntiGroup:
    """Existing pods' required anti-affinity terms that are the same term: one match test."""

    namespaces: frozenset[str] | None
    selector: Any
    topology_key: str
    domains: set[str] = field(default_factory=set)


class _Snapshot:
    """The cluster as one cycle sees it, updated in place as the cycle places pods."""

    def __init__(self, nodes: Iterable[JsonObject], bound: Iterable[tuple[JsonObject, str]]):
        self.nodes = sorted(
            (
                _Node(n, _meta(n)["name"], rules.labels_of(n), rules.node_allocatable(n))
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
        for pod, node_name in bound:
            self.place(pod, node_name)

    def place(self, pod: JsonObject, node_name: str) -> None:
        node = self.by_name.get(node_name)
        if node is None:
            return  # bound to a node that is gone: it takes nothing anywhere
        node.add(rules.pod_requests(pod))
        self.pods_on.setdefault(node_name, []).append(pod)
        terminating = bool(_meta(pod).get("deletionTimestamp"))
        for (in_namespaces, _, with_terminating), (selector, counts) in self._matches.items():
            if (with_terminating or not terminating) and _matches(in_namespaces, selector, pod):
                counts[node_name] += 1
        namespace = _meta(pod).get("namespace", "")
        for term in rules.pod_terms(pod, "podAntiAffinity"):
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
                if not with_terminating and _meta(pod).get("deletionTimestamp"):
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


class _PodContext:
    """What one pending pod needs from the snapshot, computed once, then tested per node."""

    def __init__(self, pod: JsonObject, snapshot: _Snapshot) -> None:
        self.pod = pod
        self.requests = rules.pod_requests(pod)
        self.request_items = sorted((r, a) for r, a in self.requests.items() if a > 0)
        namespace = _meta(pod).get("namespace", "")
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
        snapshot: _Snapshot,
    ) -> _Spread:
        key = constraint.get("topologyKey", "")
        selector = dict(constraint.get("labelSelector") or {})
        extra = [
            {"key": k, "operator": "In", "values": [labels[k]]}
            for k in constraint.get("matchLabelKeys") or []
            if k in labels
        ]
        if extra:
            selector["matchExpressions"] = [*(selector.get("matchExpressions") or []), *extra]
        honor_affinity = constraint.get("nodeAffinityPolicy", "Honor") == "Honor"
        honor_taints = constraint.get("nodeTaintsPolicy", "Ignore") == "Honor"
        eligible = {
            node.name
            for node in snapshot.nodes
            if key in node.labels
            and (not honor_affinity or node.name in self.affinity_ok)
            and (not honor_taints or rules.untolerated_taint(self.pod, node.obj) is None)
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

    def failures(self, node: _Node) -> list[str]:
        """Why ``node``, which passed the static filters, cannot take the pod; empty if it can."""
        insufficient: list[str] = []
        requested, allocatable = node.requested, node.allocatable
        for resource, amount in self.request_items:
            if requested.get(resource, 0) + amount > allocatable.get(resource, 0):
                insufficient.append(
                    "Too many pods" if resource == rules.PODS else f"Insufficient {resource}"
                )
        if insufficient:
            return insufficient
        for spread in self.spreads:
            if spread.key not in node.labels:
                return [
                    "node(s) didn't match pod topology spread constraints (missing required label)"
                ]
            domain = node.labels[spread.key]
            skew = spread.counts.get(domain, 0) + spread.self_match - spread.min_match
            if skew > spread.max_skew:
                return ["node(s) didn't match pod topology spread constraints"]
        for key, domains in self.anti:
            if key in node.labels and node.labels[key] in domains:
                return ["node(s) didn't match pod anti-affinity rules"]
        for key, domains in self.forbidden:
            if key in node.labels and node.labels[key] in domains:
                return ["node(s) didn't satisfy existing pods anti-affinity rules"]
        for key, maybe_domains in self.affinity:
            if maybe_domains is None:
                continue
            if key not in node.labels or node.labels[key] not in maybe_domains:
                return ["node(s) didn't match pod affinity rules"]
        return []

    def score(self, node: _Node) -> int:
        """kube's LeastAllocated: free share of CPU and memory after placing, 0-100 each."""
        cpu = node.nonzero_cpu + (self.requests.get(rules.CPU) or _NONZERO_CPU)
        memory = node.nonzero_memory + (self.requests.get(rules.MEMORY) or _NONZERO_MEMORY)
        return (
            _free_share(cpu, node.allocatable.get(rules.CPU, 0))
            + _free_share(memory, node.allocatable.get(rules.MEMORY, 0))
        ) // 2


def _free_share(requested: int, allocatable: int) -> int:
    if allocatable <= 0 or requested > allocatable:
        return 0
    return (allocatable - requested) * 100 // allocatable


def _domains(snapshot: _Snapshot, counts: Mapping[str, int], key: str) -> set[str]:
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


class SimScheduler:
    """A kube-scheduler stand-in for the simulator; add it to a ``Manager`` like any controller.

    Only pods whose ``spec.schedulerName`` is unset or ``default-scheduler`` are scheduled.
    """

    name = "sim.kube-scheduler"
    primary: Resource = PODS
    primary_cluster = WORKLOAD

    def __init__(self, client: KubeClient, caches: Caches, clock: Clock) -> None:
        self.client, self.caches, self.clock = client, caches, clock
        self._lock = threading.Lock()
        self._dirty = True
        self._assumed: dict[str, tuple[str, str]] = {}  # pod key -> (uid, node)
        self.cycles = 0
        """Scheduling cycles run (a cycle is skipped when nothing changed)."""

    def watches(self) -> Sequence[Watch]:
        return [Watch(NODES, to_keys=self._on_node), Watch(PODS, to_keys=self._on_pod)]

    def reads(self) -> Sequence[tuple[Resource, str]]:
        return []

    def _on_node(self, node: JsonObject) -> Iterable[Key]:
        self._dirty = True
        return (CYCLE_KEY,)

    def _on_pod(self, pod: JsonObject) -> Iterable[Key]:
        self._dirty = True  # the pod's own key is enqueued as the primary event
        return ()

    def reconcile(self, key: Key) -> Result:
        with self._lock:
            if not self._dirty:
                return DONE
            self._dirty = False
            try:
                self.schedule_cycle()
            except BaseException:
                self._dirty = True  # retried with backoff: the next attempt must run a cycle
                raise
        return DONE

    def schedule_cycle(self) -> None:
        """Place every pending pod, in creation order, against one snapshot of the cluster."""
        self.cycles += 1
        pods = self.caches.store(PODS).list()
        bound: list[tuple[JsonObject, str]] = []
        pending: list[JsonObject] = []
        live: set[str] = set()
        for pod in pods:
            key = object_key(pod)
            live.add(key)
            node_name = (pod.get("spec") or {}).get("nodeName")
            assumed = self._assumed.get(key)
            if node_name or (assumed and assumed[0] != _meta(pod).get("uid")):
                self._assumed.pop(key, None)
                assumed = None
            if _finished(pod):
                continue
            if node_name:
                bound.append((pod, node_name))
            elif assumed:
                bound.append((pod, assumed[1]))
            elif self._wants(pod):
                pending.append(pod)
        for key in [k for k in self._assumed if k not in live]:
            del self._assumed[key]
        if not pending:
            return
        pending.sort(
            key=lambda p: (
                _meta(p).get("creationTimestamp") or "",
                _meta(p).get("namespace", ""),
                _meta(p)["name"],
            )
        )
        snapshot = _Snapshot(self.caches.store(NODES).list(), bound)
        for pod in pending:
            self._schedule_one(pod, snapshot)

    @staticmethod
    def _wants(pod: JsonObject) -> bool:
        return not _meta(pod).get("deletionTimestamp") and (pod.get("spec") or {}).get(
            "schedulerName", SCHEDULER_NAME
        ) in (SCHEDULER_NAME, "", None)

    def _schedule_one(self, pod: JsonObject, snapshot: _Snapshot) -> None:
        context = _PodContext(pod, snapshot)
        reasons: Counter[str] = Counter(context.static.reasons)
        best: tuple[int, str] | None = None
        for node in context.static.passing:
            failures = context.failures(node)
            if failures:
                reasons.update(failures)
                continue
            score = context.score(node)
            if best is None or score > best[0]:
                best = (score, node.name)  # nodes are in name order: ties keep the first
        if best is None:
            self._mark_unschedulable(pod, unschedulable_message(len(snapshot.nodes), reasons))
            return
        if self._bind(pod, best[1]):
            snapshot.place(pod, best[1])

    def _bind(self, pod: JsonObject, node_name: str) -> bool:
        meta = _meta(pod)
        name, namespace = meta["name"], meta.get("namespace")
        try:
            written = self.client.patch(
                PODS,
                name,
                {
                    "metadata": {"resourceVersion": meta.get("resourceVersion")},
                    "spec": {"nodeName": node_name},
                },
                namespace,
            )
        except (Conflict, NotFound):
            return False  # changed or gone since the cache saw it: its event brings it back
        self._assumed[object_key(pod)] = (str(meta.get("uid", "")), node_name)
        self._set_scheduled(written, "True", None, None)
        return True

    def _mark_unschedulable(self, pod: JsonObject, message: str) -> None:
        self._set_scheduled(pod, "False", "Unschedulable", message)

    def _set_scheduled(
        self, pod: JsonObject, status: str, reason: str | None, message: str | None
    ) -> None:
        conditions = list((pod.get("status") or {}).get("conditions") or [])
        current = next((c for c in conditions if c.get("type") == "PodScheduled"), None)
        if (
            current is not None
            and current.get("status") == status
            and current.get("reason") == reason
            and current.get("message") == message
        ):
            return
        condition: JsonObject = {"type": "PodScheduled", "status": status}
        if reason is not None:
            condition["reason"] = reason
        if message is not None:
            condition["message"] = message
        same = current is not None and current.get("status") == status
        condition["lastTransitionTime"] = (
            current.get("lastTransitionTime") if same and current is not None else None
        ) or format_timestamp(self.clock.now())
        conditions = [c for c in conditions if c.get("type") != "PodScheduled"] + [condition]
        meta = _meta(pod)
        with contextlib.suppress(NotFound):
            self.client.patch(
                PODS,
                meta["name"],
                {"status": {"conditions": conditions}},
                meta.get("namespace"),
                subresource="status",
            )
