"""The scheduling simulation: where pending pods can go, and the cheapest NodeClaims for the rest.

It follows Karpenter's scheduler, so a pod Karpenter would place we place the same way: pods in
order of decreasing CPU then memory; each goes to an existing node (registered, or a NodeClaim
still launching) if one can take it, else to a NodeClaim already proposed in this solve, else
to a new NodeClaim from the NodePools in weight order. A proposed NodeClaim keeps every
instance type that can still hold its pods; the provider launches the cheapest it can get.
A pod that fits nowhere is relaxed one preference at a time and retried.

Where it departs from Karpenter is speed. Pods with the same scheduling-relevant spec (same
requests, selectors, affinities, tolerations, spreads, ports, labels and namespace: typically
the replicas of one Deployment) form a class, and everything that depends only on the spec is
decided once per class: the requirements, the toleration verdicts, and which nodes can never
take the class again (a node that rejected a class for lack of room, a port, a label or a taint
rejects it for good, since nodes only fill up during a solve). A NodeClaim's instance types
are kept in price order with a moving cut-off instead of being refiltered for every pod.
"""

from __future__ import annotations

import json
import logging
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.clock import Clock, SystemClock
from karpenter_capi.core.scheduling import highs, packing, packing_model
from karpenter_capi.core.scheduling.claims import (
    HOSTNAME_PLACEHOLDER,
    ClaimState,
    PodClass,
    PoolState,
    TypeInfo,
    Vector,
    add,
    cheapest_price,
    fits,
    limit_use,
    max_capacity,
)
from karpenter_capi.core.scheduling.daemons import DaemonOverhead
from karpenter_capi.core.scheduling.hostports import HostPortUsage, pod_host_ports
from karpenter_capi.core.scheduling.model import (
    ExistingNode,
    NodePoolOption,
    Pod,
    ProposedNodeClaim,
    SolveResult,
    compatible_offerings,
    pod_key,
)
from karpenter_capi.core.scheduling.nofit import no_type_reason, too_small_reason
from karpenter_capi.core.scheduling.preferences import (
    relax,
    strict_topology,
    strictly_untolerated,
)
from karpenter_capi.core.scheduling.refusal import Refusal
from karpenter_capi.core.scheduling.repack import Repacker
from karpenter_capi.core.scheduling.requirements import (
    Requirement,
    Requirements,
    preferred_node_terms,
)
from karpenter_capi.core.scheduling.resources import ResourceList, pod_requests
from karpenter_capi.core.scheduling.taints import EFFECTS, Taint
from karpenter_capi.core.scheduling.topology import NodeInfo, Topology

log = logging.getLogger(__name__)

DEFAULT_MAX_INSTANCE_TYPES: Final = 60
DEFAULT_TIMEOUT_SECONDS: Final = 60.0
_DEADLINE_CHECK_EVERY: Final = 64
_BALANCE_CANDIDATES: Final = 4


def _scheduling_spec(pod: Pod) -> Mapping[str, Any]:
    spec = pod.get("spec") or {}
    meta = pod.get("metadata") or {}
    return {
        "namespace": meta.get("namespace"),
        "labels": meta.get("labels"),
        "nodeSelector": spec.get("nodeSelector"),
        "affinity": spec.get("affinity"),
        "tolerations": spec.get("tolerations"),
        "topologySpreadConstraints": spec.get("topologySpreadConstraints"),
        "containers": [(c.get("resources"), c.get("ports")) for c in spec.get("containers") or ()],
        "initContainers": [
            (c.get("resources"), c.get("ports"), c.get("restartPolicy"))
            for c in spec.get("initContainers") or ()
        ],
        "overhead": spec.get("overhead"),
        "resources": spec.get("resources"),
    }


def pod_requirements(pod: Pod, *, preferred: bool = True) -> Requirements | None:
    """What a pod asks of a node's labels, with preferences treated as requirements.

    As Karpenter: ``nodeSelector``, the first required node-affinity term, and (unless
    ``preferred`` is false) the heaviest preferred node-affinity term; relaxation removes the
    terms one at a time when the pod does not fit. ``None`` when the first required term can
    never match a new node: it selects by ``matchFields`` (an existing node's name) or is empty
    (Kubernetes: selects no node).
    """
    spec = pod.get("spec") or {}
    requirements = Requirements.from_labels(spec.get("nodeSelector") or {})
    node_affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    heaviest = preferred_node_terms(pod)[:1] if preferred else []
    for _, preference in heaviest:
        requirements = requirements.merged(preference)
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = required.get("nodeSelectorTerms") or []
    if terms:
        if terms[0].get("matchFields") or not terms[0].get("matchExpressions"):
            return None
        requirements = requirements.merged(
            Requirements.from_dicts(terms[0].get("matchExpressions") or [])
        )
    return requirements


_TOLERATION_OPERATORS: Final = ("Exists", "Equal", "")
_UNSATISFIABLE: Final = ("DoNotSchedule", "ScheduleAnyway", "")
# What reading a pod spec the API server would have refused raises (a string where a list is,
# an unknown operator, a malformed quantity): one such pod must not stop the round.
_SPEC_ERRORS: Final = (ValueError, TypeError, AttributeError, KeyError)


# Refusals whose text no user sees (the solver only asks whether there was one), made once so the
# hot path allocates nothing to say no.
_TAINT: Final = Refusal("taint", permanent=True)
_LABELS: Final = Refusal("labels", permanent=True)
_RESOURCES: Final = Refusal("resources", permanent=True)
_HOST_PORT: Final = Refusal("host port", permanent=True)
_NO_ROOM: Final = Refusal("no instance type can hold it with the pods already there")
_MIN_VALUES: Final = Refusal("minValues would no longer be met")
_NO_NODE_MATCHES_TERM: Final = Refusal(
    "its required node affinity term is empty or selects by field, which no new node matches"
)
_NO_NODEPOOL: Final = Refusal("no NodePool is available")


def unreadable_pod(pod: Pod) -> str | None:
    """Why ``pod``'s scheduling constraints cannot be read, or ``None`` when they can.

    The API server refuses such specs, but a webhook-less test cluster, an aggregated API or a
    bug upstream may still hand one over; the pod is then reported unschedulable with this
    text instead of taking the whole provisioning round down with it.
    """
    spec = pod.get("spec") or {}
    try:
        requests = pod_requests(pod, include_pod_count=True)
        negative = sorted(name for name in requests if requests.milli(name) < 0)
        if negative:
            return f"requests of {', '.join(negative)} must not be negative"
        pod_requirements(pod)
        pod_requirements(pod, preferred=False)
        pod_host_ports(pod)
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
        strict_topology(pod)
    except _SPEC_ERRORS as exc:
        return f"cannot read its spec: {exc}"
    return None


@dataclass(frozen=True, slots=True)
class _Ordered:
    size: float  # negated dominant share, so an ascending sort puts the largest first
    key: str
    cpu: float
    memory: float
    pod: Pod


@dataclass(eq=False)
class _Fit:
    """A claim as it would be with one more pod (see ``Solver._fit_claim``)."""

    claim: ClaimState
    requirements: Requirements
    types: list[TypeInfo]
    first: int
    pods_total: Vector
    daemon: Vector


@dataclass(eq=False)
class _Node:
    index: int
    node: ExistingNode
    requirements: Requirements
    allocatable: Vector
    total: Vector
    ports: HostPortUsage
    placed: list[Pod] = field(default_factory=list)

    @property
    def hostname(self) -> str:
        return self.node.labels.get(wellknown.LABEL_HOSTNAME, self.node.name)


class Solver:
    """One scheduling simulation over a fixed view of the cluster.

    Create one per provisioning round; ``solve`` may be called once. ``clock`` bounds the
    solve by ``timeout_seconds``: pods not reached by then are reported unschedulable with a
    reason saying so, and the provisioner retries them in the next round.
    """

    def __init__(
        self,
        nodepools: Sequence[NodePoolOption],
        *,
        existing_nodes: Sequence[ExistingNode] = (),
        daemonsets: Sequence[Mapping[str, Any]] = (),
        namespaces: Mapping[str, Mapping[str, str]] | None = None,
        max_instance_types: int = DEFAULT_MAX_INSTANCE_TYPES,
        clock: Clock | None = None,
        timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
        label_requirements: dict[str, Requirements] | None = None,
        packing_budget: float = packing.DEFAULT_BUDGET_SECONDS,
        packing_backend: highs.HiGHS | None = None,
    ) -> None:
        """``label_requirements`` caches each registered node's labels as requirements, by
        node name, for callers that solve many times over the same nodes (consolidation).
        ``packing_budget`` bounds, in seconds, the re-packing of unconstrained NodeClaims
        after the greedy solve (``packing.py``; 0 disables it); ``packing_outcomes`` then
        says what it decided for each group of claims it looked at."""
        # Upstream's OrderByWeight: heaviest first, ties by name, later names first.
        self._options = sorted(nodepools, key=lambda p: (p.weight, p.name), reverse=True)
        self._existing = existing_nodes
        self._daemons = DaemonOverhead(daemonsets)
        self._namespaces = dict(namespaces or {})
        self._max_instance_types = max_instance_types
        self._clock = clock or SystemClock()
        self._timeout = timeout_seconds
        self._resources: tuple[str, ...] = ()
        self._classes: dict[str, PodClass] = {}
        self._claims: list[ClaimState] = []
        self._claims_by_host: dict[str, ClaimState] = {}
        self._topology_rejections: dict[str, set[int]] = {}
        self._nodes: list[_Node] = []
        self._pools: list[PoolState] = []
        self._topology: Topology | None = None
        self._merge_cache: dict[tuple[str, int], tuple[Requirements, Requirements | Refusal]] = {}
        self._types_cache: dict[tuple[int, Requirements, str], list[TypeInfo]] = {}
        self._label_requirements = label_requirements if label_requirements is not None else {}
        self._packing_budget = packing_budget
        self._packing_backend = packing_backend
        self.packing_outcomes: list[packing_model.PackingOutcome] = []

    # -- set-up ----------------------------------------------------------------------------

    def _vector(self, resources: ResourceList) -> Vector:
        return tuple(resources.milli(name) for name in self._resources)

    def _index_resources(self, pods: Sequence[Pod]) -> None:
        names: set[str] = {"cpu", "memory", "pods"}
        for option in self._options:
            for instance_type in option.instance_types:
                names.update(instance_type.allocatable)
        for pod in pods:
            names.update(pod_requests(pod))
        for node in self._existing:
            names.update(node.allocatable)
        first = ("cpu", "memory", "pods")
        self._resources = first + tuple(sorted(names - set(first)))

    def _build_pools(self) -> None:
        for option in self._options:
            base = option.requirements.merged(
                [Requirement.new(wellknown.LABEL_NODEPOOL, "In", [option.name])]
            )
            types = []
            for instance_type in option.instance_types:
                requirements = Requirements.from_value_sets(instance_type.requirements)
                if base.conflict_with(requirements) is not None:
                    continue
                offerings = compatible_offerings(instance_type, base)
                if not offerings:
                    continue
                types.append(
                    TypeInfo(
                        instance_type,
                        self._vector(instance_type.allocatable),
                        self._vector(instance_type.capacity),
                        requirements,
                        min(o.price for o in offerings),
                    )
                )
            types.sort(key=lambda t: (t.price, t.instance_type.name))
            remaining = None
            if option.limits is not None:
                limits = self._limit_vector(option.limits)
                remaining = tuple(
                    limit - used
                    for limit, used in zip(limits, self._limit_usage(option), strict=True)
                )
            self._pools.append(
                PoolState(
                    option,
                    base,
                    types,
                    remaining,
                    any(r.min_values for r in base.values()),
                    any(t.instance_type.taints for t in types),
                    (
                        max((t.allocatable[0] for t in types), default=1) or 1,
                        max((t.allocatable[1] for t in types), default=1) or 1,
                    ),
                )
            )

    def _limit_vector(self, limits: ResourceList) -> Vector:
        # Resources the limits do not name are unlimited; "nodes" is counted in pods' place.
        unlimited = 1 << 62
        vector = [limits.milli(n) if n in limits else unlimited for n in self._resources]
        pods_index = self._resources.index("pods")
        vector[pods_index] = limits.milli("nodes") if "nodes" in limits else unlimited
        return tuple(vector)

    def _limits_reason(self, types: Sequence[TypeInfo], remaining: Vector) -> str:
        """Which limits even the smallest node would break ("nodes" in the pods slot)."""
        names = [
            "nodes" if name == "pods" else name
            for index, name in enumerate(self._resources)
            if all(limit_use(t.capacity)[index] > remaining[index] for t in types)
        ]
        return f"the NodePool's limits would be exceeded ({', '.join(names) or 'together'})"

    def _limit_usage(self, option: NodePoolOption) -> Vector:
        usage = [option.usage.milli(n) for n in self._resources]
        usage[self._resources.index("pods")] = option.usage.milli("nodes")
        return tuple(usage)

    def _build_nodes(self) -> None:
        for index, node in enumerate(self._existing):
            ports = HostPortUsage()
            for pod in node.pods:
                ports.add(pod_host_ports(pod))
            requested = self._vector(node.requested)
            if node.in_flight:
                requirements = Requirements.from_labels(node.labels)
            else:
                cached = self._label_requirements.get(node.name)
                if cached is None:
                    cached = Requirements.from_labels(node.labels)
                    self._label_requirements[node.name] = cached
                requirements = cached
            if node.in_flight:
                # What the claim may still become, not only what it already pins.
                requirements = requirements.merged(node.requirements)
                taints = tuple(node.taints)
                requested = add(
                    requested, self._vector(self._daemons.for_node(requirements, taints))
                )
            self._nodes.append(
                _Node(
                    index,
                    node,
                    requirements,
                    self._vector(node.allocatable),
                    requested,
                    ports,
                )
            )

    def _build_topology(self, pods: Sequence[Pod]) -> Topology:
        domains: dict[str, set[str]] = {}
        for pool in self._pools:
            for key, requirement in pool.requirements.items():
                if not requirement.complement:
                    domains.setdefault(key, set()).update(requirement.values)
            for info in pool.types:
                for key, values in info.instance_type.requirements.items():
                    domains.setdefault(key, set()).update(values)
                for offering in compatible_offerings(info.instance_type, pool.requirements):
                    domains.setdefault(wellknown.LABEL_TOPOLOGY_ZONE, set()).add(offering.zone)
                    domains.setdefault(wellknown.LABEL_CAPACITY_TYPE, set()).add(
                        offering.capacity_type
                    )
        existing_pods: list[tuple[Pod, NodeInfo]] = []
        for node in self._existing:
            labels = dict(node.labels)
            labels.setdefault(wellknown.LABEL_HOSTNAME, node.name)
            for key, value in labels.items():
                domains.setdefault(key, set()).add(value)
            node_info = NodeInfo(node.name, labels, tuple(node.taints))
            existing_pods.extend((pod, node_info) for pod in node.pods)
        return Topology(
            domains=domains,
            existing_pods=existing_pods,
            pending_pods=[strict_topology(p) for p in pods],
            namespaces=self._namespaces,
        )

    def _class_of(self, pod: Pod) -> PodClass:
        signature = json.dumps(_scheduling_spec(pod), sort_keys=True, default=str)
        found = self._classes.get(signature)
        if found is not None:
            return found
        requests = pod_requests(pod, include_pod_count=True)
        spec = pod.get("spec") or {}
        assert self._topology is not None
        strict = strict_topology(pod)
        pod_class = PodClass(
            signature=signature,
            requests=requests,
            vector=self._vector(requests),
            requirements=pod_requirements(pod),
            required=pod_requirements(pod, preferred=False) or Requirements(),
            tolerations=spec.get("tolerations") or (),
            host_ports=pod_host_ports(pod),
            topological=self._topology.has_constraints(strict),
        )
        if pod_class.topological:
            strict_spec = strict.get("spec") or {}
            meta = pod.get("metadata") or {}
            constraints = json.dumps(
                [
                    meta.get("namespace"),
                    meta.get("labels"),
                    (strict_spec.get("affinity") or {}).get("podAffinity"),
                    (strict_spec.get("affinity") or {}).get("podAntiAffinity"),
                    strict_spec.get("topologySpreadConstraints"),
                    # Spreads may count only nodes the pod's affinity and tolerations allow.
                    strict_spec.get("nodeSelector"),
                    (strict_spec.get("affinity") or {}).get("nodeAffinity"),
                    strict_spec.get("tolerations"),
                ],
                sort_keys=True,
                default=str,
            )
            pod_class.topology_rejected = self._topology_rejections.setdefault(constraints, set())
        self._classes[signature] = pod_class
        return pod_class

    # -- solving ----------------------------------------------------------------------------

    def solve(self, pods: Sequence[Pod]) -> SolveResult:
        """Place ``pods``; see the module docstring for the order things are tried in."""
        deadline = self._clock.monotonic() + self._timeout
        errors: dict[str, str] = {}
        readable = []
        for pod in pods:
            problem = unreadable_pod(pod)
            if problem is None:
                readable.append(pod)
            else:
                errors[pod_key(pod)] = problem
        pods = readable
        self._index_resources(pods)
        self._build_pools()
        self._build_nodes()
        self._topology = self._build_topology(pods)
        result = SolveResult()
        queue = deque(self._order(pods))
        stalled = 0  # pods retried since the last one was placed
        handled = 0
        while queue:
            if handled % _DEADLINE_CHECK_EVERY == 0 and self._clock.monotonic() > deadline:
                result.timed_out = True
                for pod in queue:
                    errors.setdefault(pod_key(pod), "the solve timed out before reaching it")
                break
            handled += 1
            pod = queue.popleft()
            key = pod_key(pod)
            try:
                why = self._place(pod)
            except _SPEC_ERRORS as exc:  # what unreadable_pod did not foresee
                log.warning("cannot place pod %s: %r", key, exc)
                errors[key] = f"cannot read its spec: {exc}"
                continue
            if why is None:
                errors.pop(key, None)
                stalled = 0
                continue
            errors[key] = why.reason
            relaxed = relax(pod)
            if relaxed is not None:
                queue.append(relaxed)
                continue
            # Nothing left to relax; retry once everything else has had its turn, since a
            # pod placed later (an affinity target) may make room for it.
            stalled += 1
            if stalled <= len(queue):
                queue.append(pod)
        # Report the pods as given, not the relaxed copies that were placed.
        originals = {pod_key(p): p for p in readable}
        if self._packing_budget > 0 and self._claims:
            repacker = Repacker(
                class_of=self._class_of,
                compatible_types=self._compatible_types,
                daemons=self._daemons,
                clock=self._clock,
                budget=self._packing_budget,
                backend=self._packing_backend,
            )
            self._claims = repacker.repack(self._claims, originals)
            self.packing_outcomes = repacker.outcomes
        for node in self._nodes:
            if node.placed:
                result.existing[node.node.name] = [originals[pod_key(p)] for p in node.placed]
        for claim in self._claims:
            claim.pods = [originals[pod_key(p)] for p in claim.pods]
        result.new_nodeclaims = [self._finish(claim) for claim in self._claims]
        result.unschedulable = errors
        return result

    def _order(self, pods: Sequence[Pod]) -> list[Pod]:
        """Largest first, interleaving CPU-heavy and memory-heavy pods.

        Karpenter sorts by CPU then memory, so a claim fills with the biggest pods of one shape
        and ends up CPU-bound or memory-bound, paying for what it does not use. Here pods are
        split by which resource they lean on (relative to the largest instance type's
        proportion), each side sorted by its dominant size, and merged so the running totals
        stay in that proportion: consecutive pods, which land on the same claim, then fill its
        CPU and memory together.
        """
        cpu_max = max((pool.largest[0] for pool in self._pools), default=1)
        memory_max = max((pool.largest[1] for pool in self._pools), default=1)
        sides: tuple[list[_Ordered], list[_Ordered]] = ([], [])  # CPU-heavy, memory-heavy
        for pod in pods:
            requests = pod_requests(pod)
            cpu = requests.milli("cpu") / cpu_max
            memory = requests.milli("memory") / memory_max
            sides[memory > cpu].append(_Ordered(-max(cpu, memory), pod_key(pod), cpu, memory, pod))
        for side in sides:
            side.sort(key=lambda o: (o.size, o.key))
        cpu_heavy, memory_heavy = sides
        ordered: list[Pod] = []
        cpu_total = memory_total = 0.0
        i = j = 0
        while i < len(cpu_heavy) or j < len(memory_heavy):
            if j >= len(memory_heavy) or (i < len(cpu_heavy) and cpu_total <= memory_total):
                chosen = cpu_heavy[i]
                i += 1
            else:
                chosen = memory_heavy[j]
                j += 1
            cpu_total += chosen.cpu
            memory_total += chosen.memory
            ordered.append(chosen.pod)
        return ordered

    def _place(self, pod: Pod) -> Refusal | None:
        """Put ``pod`` on a node or claim (existing, in-flight, then new), or say why not."""
        pod_class = self._class_of(pod)
        strict = strict_topology(pod) if pod_class.topological else pod
        if pod_class.requirements is None:
            return _NO_NODE_MATCHES_TERM
        key = pod_key(pod)
        # Back to the in-flight NodeClaim this pod was launched for, before anything else.
        for node in self._nodes:
            if key in node.node.nominated and self._node_refusal(node, pod_class, strict) is None:
                self._place_on_node(node, pod_class, pod, strict)
                return None
        hosts = None
        if pod_class.topological:
            assert self._topology is not None
            hosts = self._topology.affinity_domains(strict, wellknown.LABEL_HOSTNAME)
        nodes = self._nodes if hosts is None else [n for n in self._nodes if n.hostname in hosts]
        for node in nodes:
            if node.index in pod_class.rejected_nodes:
                continue
            if self._node_refusal(node, pod_class, strict) is None:
                self._place_on_node(node, pod_class, pod, strict)
                return None
        claims: Sequence[ClaimState]
        if hosts is None:
            claims = self._claims
            start = pod_class.first_claim
            while start < len(claims) and start in pod_class.rejected_claims:
                pod_class.rejected_claims.discard(start)
                start += 1
            pod_class.first_claim = start
        else:
            # Only the claims holding a pod it must be next to.
            by_host = self._claims_by_host
            claims = sorted((by_host[h] for h in hosts if h in by_host), key=lambda c: c.index)
            start = 0
        # Of the first few claims that can take the pod, the one it leaves best balanced: with
        # instance types of every shape, an unbalanced claim (all memory, little CPU) is what
        # wastes money, and mixing memory-heavy and CPU-heavy pods is what avoids it.
        best: _Fit | None = None
        best_score = 0.0
        seen = 0
        refusals = pod_class.unchanged_refusals
        by_topology = pod_class.topology_rejected
        for claim in claims[start:]:
            if claim.index in pod_class.rejected_claims or claim.index in by_topology:
                continue
            if refusals and refusals.get(claim.index) == claim.version:
                continue
            fit = self._fit_claim(claim, pod_class, strict)
            if isinstance(fit, Refusal):
                continue
            score = self._imbalance(fit)
            if best is None or score < best_score:
                best, best_score = fit, score
            seen += 1
            if seen == _BALANCE_CANDIDATES:
                break
        if best is not None:
            self._commit(best, pod_class, pod, strict)
            return None
        reasons = []
        for pool in self._pools:
            why = self._place_on_new_claim(pool, pod_class, pod, strict)
            if why is None:
                return None
            reasons.append(f"NodePool {pool.option.name}: {why.reason}")
        if not reasons:
            return _NO_NODEPOOL
        return Refusal("; ".join(reasons))

    def _tolerates(self, pod_class: PodClass, pool: PoolState) -> Taint | None:
        name = pool.option.name
        if name not in pod_class.pool_taint:
            pod_class.pool_taint[name] = strictly_untolerated(
                pod_class.tolerations, pool.option.taints
            )
        return pod_class.pool_taint[name]

    def _node_refusal(self, node: _Node, pod_class: PodClass, strict: Pod) -> Refusal | None:
        """Why the existing node cannot take a pod of ``pod_class``, or ``None`` if it can.

        Checks only; a refusal that lasts (taints, labels, room, ports) also marks the node as
        never again for this pod class.
        """
        assert pod_class.requirements is not None
        assert self._topology is not None
        lasting = None
        if strictly_untolerated(pod_class.tolerations, node.node.taints) is not None:
            lasting = _TAINT
        elif (
            node.requirements.incompatibility(pod_class.requirements) is not None
            if node.node.in_flight
            else not pod_class.requirements.satisfied_by(node.node.labels)
        ):
            lasting = _LABELS
        elif not fits(add(node.total, pod_class.vector), node.allocatable):
            lasting = _RESOURCES
        elif pod_class.host_ports and node.ports.conflicts(pod_class.host_ports):
            lasting = _HOST_PORT
        if lasting is not None:
            pod_class.rejected_nodes.add(node.index)
            return lasting
        if pod_class.topological:
            narrowed = self._topology.add_requirements(
                strict, pod_class.required, node.requirements, node.node.taints
            )
            if isinstance(narrowed, Refusal):
                return narrowed
        return None

    def _place_on_node(self, node: _Node, pod_class: PodClass, pod: Pod, strict: Pod) -> None:
        """Commit ``pod`` to an existing node :meth:`_node_refusal` found no reason against."""
        assert self._topology is not None
        self._topology.record(strict, node.requirements)
        node.total = add(node.total, pod_class.vector)
        node.ports.add(pod_class.host_ports)
        node.placed.append(pod)

    def _merged(self, pod_class: PodClass, requirements: Requirements) -> Requirements | Refusal:
        """The claim's requirements with the pod's, or why they conflict (cached per class)."""
        assert pod_class.requirements is not None
        cache_key = (pod_class.signature, id(requirements))
        cached = self._merge_cache.get(cache_key)
        if cached is not None and cached[0] is requirements:
            return cached[1]
        why = requirements.incompatibility(pod_class.requirements)
        merged: Requirements | Refusal
        if why is not None:
            merged = why
        else:
            merged = requirements.merged(pod_class.requirements)
            if merged == requirements:
                merged = requirements  # keep identity: the claim's fast path relies on it
        self._merge_cache[cache_key] = (requirements, merged)
        return merged

    def _fit_claim(self, claim: ClaimState, pod_class: PodClass, strict: Pod) -> _Fit | Refusal:
        """How ``claim`` would look with the pod on it, or why it cannot take the pod.

        The checks whose failure lasts (taints, ports, labels, room) come first and mark the
        claim as never again for this pod class; topology, which can change as other pods
        land, comes last and marks it only when its refusal is permanent.
        """
        assert pod_class.requirements is not None
        assert self._topology is not None
        rejected = pod_class.rejected_claims
        if self._tolerates(pod_class, claim.pool) is not None:
            rejected.add(claim.index)
            return _TAINT
        if pod_class.host_ports and claim.ports.conflicts(pod_class.host_ports):
            rejected.add(claim.index)
            return _HOST_PORT
        merged = self._merged(pod_class, claim.requirements)
        if isinstance(merged, Refusal):
            rejected.add(claim.index)
            return merged
        pods_total = add(claim.pods_total, pod_class.vector)
        fast = self._tolerates_every_type(pod_class, claim.pool)
        room = self._first_fit(claim.types, claim.first, add(pods_total, claim.daemon), pod_class)
        if room is None:
            # Narrowing only removes types and adds DaemonSets, so there will be no more room.
            rejected.add(claim.index)
            return _NO_ROOM
        narrowed = merged
        if pod_class.topological:
            topological = self._topology.add_requirements(
                strict, pod_class.required, merged, claim.taints, explain=False
            )
            if isinstance(topological, Refusal):
                if topological.permanent:
                    pod_class.topology_rejected.add(claim.index)
                elif topological.local:
                    pod_class.unchanged_refusals[claim.index] = claim.version
                return topological
            narrowed = claim.requirements if topological == claim.requirements else topological
        if narrowed is claim.requirements and fast:
            daemon = claim.daemon
            types, first = claim.types, room
        else:
            daemon = self._vector(self._daemons.for_node(narrowed, claim.taints))
            total = add(pods_total, daemon)
            allowed = {id(t) for t in self._compatible_types(claim.pool, narrowed, pod_class)}
            types = [
                t
                for t in claim.types[claim.first :]
                if id(t) in allowed and fits(total, t.allocatable)
            ]
            if not types:
                if not pod_class.topological:
                    rejected.add(claim.index)
                return _NO_ROOM
            first = 0
        if (
            claim.pool.min_values
            and self._min_values_problem(narrowed, types[first:], add(pods_total, daemon))
            is not None
        ):
            return _MIN_VALUES
        return _Fit(claim, narrowed, types, first, pods_total, daemon)

    def _commit(self, fit: _Fit, pod_class: PodClass, pod: Pod, strict: Pod) -> None:
        assert self._topology is not None
        claim = fit.claim
        claim.requirements = fit.requirements
        claim.types, claim.first = fit.types, fit.first
        claim.pods_total, claim.daemon = fit.pods_total, fit.daemon
        claim.ports.add(pod_class.host_ports)
        claim.pods.append(pod)
        claim.version += 1
        self._topology.record(strict, fit.requirements)

    def _imbalance(self, fit: _Fit) -> float:
        """How lopsided the claim's CPU and memory would be, relative to its pool's largest type.

        0 when both are used in the proportion the largest type offers them.
        """
        cpu_max, memory_max = fit.claim.pool.largest
        total = add(fit.pods_total, fit.daemon)
        return abs(total[0] / cpu_max - total[1] / memory_max)

    def _first_fit(
        self, types: list[TypeInfo], first: int, total: Vector, pod_class: PodClass
    ) -> int | None:
        """Index of the cheapest type from ``first`` on that holds ``total``."""
        for index in range(first, len(types)):
            if fits(total, types[index].allocatable) and self._type_tolerated(
                types[index], pod_class
            ):
                return index
        return None

    def _tolerates_every_type(self, pod_class: PodClass, pool: PoolState) -> bool:
        """Whether no instance type of the pool has a taint this pod class does not tolerate."""
        if not pool.tainted_types:
            return True
        key = f"types:{pool.option.name}"
        if key not in pod_class.pool_taint:
            pod_class.pool_taint[key] = next(
                (
                    taint
                    for info in pool.types
                    if (
                        taint := strictly_untolerated(
                            pod_class.tolerations, info.instance_type.taints
                        )
                    )
                ),
                None,
            )
        return pod_class.pool_taint[key] is None

    def _type_tolerated(self, info: TypeInfo, pod_class: PodClass) -> bool:
        taints = info.instance_type.taints
        return not taints or strictly_untolerated(pod_class.tolerations, taints) is None

    def _compatible_types(
        self, pool: PoolState, requirements: Requirements, pod_class: PodClass
    ) -> list[TypeInfo]:
        """The pool's types (price order) that ``requirements`` and the pod's tolerations allow.

        Cached by the requirements without the hostname, which every claim has its own of and
        no instance type speaks about; the list is shared, so callers never change it.
        """
        relevant = Requirements(
            r for key, r in requirements.items() if key != wellknown.LABEL_HOSTNAME
        )
        tolerations = pod_class.signature if pool.tainted_types else ""
        cache_key = (id(pool), relevant, tolerations)
        cached = self._types_cache.get(cache_key)
        if cached is None:
            cached = [
                t
                for t in pool.types
                if relevant.conflict_with(t.requirements) is None
                and compatible_offerings(t.instance_type, relevant)
                and self._type_tolerated(t, pod_class)
            ]
            self._types_cache[cache_key] = cached
        return cached

    def _min_values_problem(
        self, requirements: Requirements, types: Sequence[TypeInfo], total: Vector
    ) -> Refusal | None:
        values: dict[str, set[str]] = {}
        for info in types:
            if not fits(total, info.allocatable):
                continue
            for key, allowed in info.instance_type.requirements.items():
                values.setdefault(key, set()).update(allowed)
        return requirements.min_values_problem(values)

    def _place_on_new_claim(
        self, pool: PoolState, pod_class: PodClass, pod: Pod, strict: Pod
    ) -> Refusal | None:
        """Open a new claim in ``pool`` holding ``pod``, or say why the pool cannot."""
        assert pod_class.requirements is not None
        assert self._topology is not None
        taint = self._tolerates(pod_class, pool)
        if taint is not None:
            return Refusal(f"taint {taint} not tolerated")
        why = pool.requirements.incompatibility(pod_class.requirements)
        if why is not None:
            return Refusal(f"incompatible requirements: {why.reason}")
        hostname = f"{HOSTNAME_PLACEHOLDER}{len(self._claims):04d}"
        requirements = pool.requirements.merged(pod_class.requirements).with_requirement(
            Requirement.new(wellknown.LABEL_HOSTNAME, "In", [hostname])
        )
        taints = pool.option.taints
        if pod_class.topological:
            self._topology.register_domain(wellknown.LABEL_HOSTNAME, hostname)
            narrowed = self._topology.add_requirements(
                strict, pod_class.required, requirements, taints
            )
            if isinstance(narrowed, Refusal):
                return narrowed
            requirements = narrowed
        daemon = self._vector(self._daemons.for_node(requirements, taints))
        ports = self._daemons.host_ports_for_node(requirements, taints)
        clash = ports.conflicts(pod_class.host_ports) if pod_class.host_ports else None
        if clash is not None:
            return Refusal(f"host port {clash} is taken by a DaemonSet on every such node")
        total = add(pod_class.vector, daemon)
        types = self._compatible_types(pool, requirements, pod_class)
        if not types:
            if pod_class.topological:
                shown = Requirements(
                    r for key, r in requirements.items() if key != wellknown.LABEL_HOSTNAME
                )
                return Refusal(f"no instance type is offered where its topology allows ({shown})")
            relevant = Requirements(
                r for key, r in requirements.items() if key != wellknown.LABEL_HOSTNAME
            )
            return Refusal(
                no_type_reason(
                    pool.option.instance_types,
                    relevant,
                    lambda it: (
                        not it.taints
                        or strictly_untolerated(pod_class.tolerations, it.taints) is None
                    ),
                )
            )
        if pool.remaining is not None:
            remaining = pool.remaining
            within = [t for t in types if fits(limit_use(t.capacity), remaining)]
            if not within:
                return Refusal(self._limits_reason(types, remaining))
            types = within
        first = self._first_fit(types, 0, total, pod_class)
        if first is None:
            needed = pod_class.requests.add(self._daemons.for_node(requirements, taints))
            return Refusal(too_small_reason([t.instance_type for t in types], needed))
        if pool.min_values:
            problem = self._min_values_problem(requirements, types[first:], total)
            if problem is not None:
                return problem
        if not pod_class.topological:
            self._topology.register_domain(wellknown.LABEL_HOSTNAME, hostname)
        claim = ClaimState(
            index=len(self._claims),
            pool=pool,
            hostname=hostname,
            requirements=requirements,
            taints=taints,
            types=types,
            first=first,
            pods_total=pod_class.vector,
            daemon=daemon,
            ports=ports,
            reserved=max_capacity(types[first:]) if pool.remaining is not None else (),
        )
        claim.ports.add(pod_class.host_ports)
        claim.pods.append(pod)
        if pool.remaining is not None:
            pool.remaining = tuple(
                r - u for r, u in zip(pool.remaining, limit_use(claim.reserved), strict=True)
            )
        self._claims.append(claim)
        self._claims_by_host[hostname] = claim
        self._topology.record(strict, requirements)
        return None

    def _finish(self, claim: ClaimState) -> ProposedNodeClaim:
        total = add(claim.pods_total, claim.daemon)
        pool_requirements = claim.pool.requirements
        same_offerings = all(
            claim.requirements.get(key) == pool_requirements.get(key)
            for key in (wellknown.LABEL_TOPOLOGY_ZONE, wellknown.LABEL_CAPACITY_TYPE)
        )
        types: list[TypeInfo] = []
        for info in claim.types[claim.first :]:
            if fits(total, info.allocatable):
                types.append(info)
                # In pool price order already unless the claim narrowed zone or capacity type.
                if same_offerings and len(types) == self._max_instance_types:
                    break
        if not same_offerings:
            types.sort(key=lambda t: (cheapest_price(t, claim.requirements), t.instance_type.name))
        chosen = [t.instance_type for t in types[: self._max_instance_types]]
        requirements = claim.requirements.with_requirement(
            Requirement.new(wellknown.LABEL_INSTANCE_TYPE, "In", [t.name for t in chosen])
        )
        names = self._resources
        return ProposedNodeClaim(
            nodepool=claim.pool.option,
            hostname=claim.hostname,
            requirements=requirements,
            instance_types=chosen,
            pods=claim.pods,
            requests=_resource_list(names, total),
            daemon_requests=_resource_list(names, claim.daemon),
        )


def _resource_list(names: Sequence[str], vector: Vector) -> ResourceList:
    return ResourceList.from_milli({n: v for n, v in zip(names, vector, strict=True) if v})
