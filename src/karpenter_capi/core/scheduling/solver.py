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
are kept in price order with a moving cut-off instead of being refiltered for every pod, and
what a class found on a claim is kept until a pod lands on it (``_fit_claim``).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Final

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.clock import Clock, SystemClock
from karpenter_capi.core.scheduling import highs, packing, packing_problem
from karpenter_capi.core.scheduling._solver_view import (
    SolverNode,
    build_nodes,
    build_pools,
    build_topology,
    largest_first,
    limits_reason,
    new_pod_class,
    node_window,
    nominated_index,
    proposed_claims,
    resource_names,
)
from karpenter_capi.core.scheduling.claim_fit import (
    HOST_PORT,
    LABELS,
    RESOURCES,
    TAINT,
    ClaimFits,
)
from karpenter_capi.core.scheduling.claims import (
    HOSTNAME_PLACEHOLDER,
    ClaimState,
    CompatibleTypes,
    Fit,
    PodClass,
    PoolState,
    RuledOut,
    TypeInfo,
    add,
    claim_window,
    first_fit,
    fits,
    limit_use,
    max_capacity,
    min_values_problem,
    untolerated_pool_taint,
)
from karpenter_capi.core.scheduling.collector import collection_paused
from karpenter_capi.core.scheduling.daemons import DaemonOverhead, DaemonSetObject
from karpenter_capi.core.scheduling.nofit import (
    named_node_reason,
    no_type_reason,
    too_small_reason,
)
from karpenter_capi.core.scheduling.packing_memo import PackingMemo
from karpenter_capi.core.scheduling.podspec import (
    SPEC_ERRORS,
    PodObject,
    PodSpec,
    PodSpecs,
    key_of,
    parse_pod,
    pod_key,
)
from karpenter_capi.core.scheduling.preferences import relax, strictly_untolerated
from karpenter_capi.core.scheduling.repack import Repacker
from karpenter_capi.core.scheduling.solver_io import (
    ExistingNode,
    NodePoolOption,
    SolveResult,
)
from karpenter_capi.core.scheduling.topology import Topology
from karpenter_capi.core.values.refusal import Refusal
from karpenter_capi.core.values.requirements import Requirement, Requirements

log = logging.getLogger(__name__)

DEFAULT_MAX_INSTANCE_TYPES: Final = 60
DEFAULT_TIMEOUT_SECONDS: Final = 60.0
_DEADLINE_CHECK_EVERY: Final = 64

_NO_NODE_MATCHES_TERM: Final = Refusal(
    "its required node affinity term is empty or selects by field, which no new node matches"
)
_NO_NODEPOOL: Final = Refusal("no NodePool is available")


class Solver(ClaimFits):
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
        daemonsets: Sequence[DaemonSetObject] | DaemonOverhead = (),
        namespaces: Mapping[str, Mapping[str, str]] | None = None,
        max_instance_types: int = DEFAULT_MAX_INSTANCE_TYPES,
        clock: Clock | None = None,
        timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
        packing_budget: float = packing.DEFAULT_BUDGET_SECONDS,
        packing_backend: highs.HiGHS | None = None,
        plans_nominated: bool = False,
        pod_specs: PodSpecs | None = None,
        packing_memo: PackingMemo | None = None,
    ) -> None:
        """``packing_budget``: each re-packing solve's safety net, CPU s (``packing.py``; 0
        disables it); ``packing_outcomes`` says what it decided. ``plans_nominated``: pods are
        nominated to their planned nodes (KEP-5278), so no readiness model applies. Kept across
        rounds: ``pod_specs``, parsed pods (fresh if not given); ``packing_memo``, outcomes."""
        # Upstream's OrderByWeight: heaviest first, ties by name, later names first.
        self._options = sorted(nodepools, key=lambda p: (p.weight, p.name), reverse=True)
        self._existing = existing_nodes
        self._daemons = DaemonOverhead.of(daemonsets)
        self._namespaces = dict(namespaces or {})
        self._max_instance_types = max_instance_types
        self._clock = clock or SystemClock()
        self._timeout = timeout_seconds
        self._resources: tuple[str, ...] = ()
        self._classes: dict[str, PodClass] = {}
        self._claims: list[ClaimState] = []
        self._claims_by_host: dict[str, ClaimState] = {}
        self._topology_rejections: dict[tuple[object, ...], RuledOut] = {}
        self._nodes: list[SolverNode] = []
        self._pools: list[PoolState] = []
        self._topology: Topology | None = None
        self._compatible_types = CompatibleTypes()
        self._packing_budget = packing_budget
        self._packing_backend = packing_backend
        self._plans_nominated = plans_nominated
        self._packing_memo = packing_memo
        self._specs = pod_specs if pod_specs is not None else PodSpecs()
        # Each pod JSON the solve handles (relaxed copies too) by identity, for the re-packing
        # stage, which holds pods as JSON; the specs keep the mappings alive.
        self._spec_by_id: dict[int, PodSpec] = {}
        self.packing_outcomes: list[packing_problem.PackingOutcome] = []

    # -- set-up (the rest of it, once per round, is in _solver_view.py) -------------------

    def _remember(self, spec: PodSpec) -> PodSpec:
        self._spec_by_id[id(spec.raw)] = spec
        return spec

    def _class_of(self, pod: PodObject) -> PodClass:
        """The class of ``pod`` given as JSON (what the re-packing stage holds)."""
        spec = self._spec_by_id.get(id(pod))
        return self._class_for(spec if spec and spec.raw is pod else parse_pod(pod))

    def _class_for(self, pod: PodSpec) -> PodClass:
        """The class of pods sharing ``pod``'s scheduling spec, made on its first pod."""
        found = self._classes.get(pod.class_key)
        if found is not None:
            return found
        assert self._topology is not None
        pod_class = new_pod_class(pod, self._resources, self._topology, self._topology_rejections)
        self._classes[pod.class_key] = pod_class
        return pod_class

    # -- solving ----------------------------------------------------------------------------

    @collection_paused()
    def solve(self, pods: Sequence[PodObject]) -> SolveResult:
        """Place ``pods``; see the module docstring for the order things are tried in."""
        deadline = self._clock.monotonic() + self._timeout
        errors: dict[str, str] = {}
        parse, by_id = self._specs.get, self._spec_by_id
        specs = [parse(pod) for pod in pods]
        by_id.update((id(s.raw), s) for s in specs)  # what _remember does, for every pod at once
        errors.update((s.key, s.problem) for s in specs if s.problem is not None)
        readable = [s for s in specs if s.problem is None]
        self._resources = resource_names(self._options, readable, self._existing)
        self._pools = build_pools(self._options, self._resources)
        self._nodes = build_nodes(self._existing, self._resources, self._daemons, self._specs)
        self._nominated_to = nominated_index(self._nodes)
        self._topology = build_topology(
            self._pools, self._existing, readable, self._namespaces, self._specs
        )
        result = SolveResult()
        # Pods a node or claim was launched or counted for go first, biggest first: taken in
        # size order with the rest, others could fill the room kept for them.
        nominated = frozenset().union(*(n.nominated for n in self._existing))
        ordered = largest_first(readable, self._pools)
        queue = deque(
            sorted(ordered, key=lambda p: p.key not in nominated) if nominated else ordered
        )
        relaxed_any = False
        stalled = 0  # pods retried since the last one was placed
        handled = 0
        while queue:
            if handled % _DEADLINE_CHECK_EVERY == 0 and self._clock.monotonic() > deadline:
                result.timed_out = True
                for spec in queue:
                    errors.setdefault(spec.key, "the solve timed out before reaching it")
                break
            handled += 1
            spec = queue.popleft()
            key = spec.key
            try:
                why = self._place(spec)
            except SPEC_ERRORS as exc:  # what unreadable_pod did not foresee
                log.warning("cannot place pod %s: %r", key, exc)
                errors[key] = f"cannot read its spec: {exc}"
                continue
            if why is None:
                errors.pop(key, None)
                stalled = 0
                continue
            errors[key] = why.reason
            relaxed = relax(spec)
            if relaxed is not None:
                relaxed_any = True
                queue.append(self._remember(relaxed))
                continue
            # Nothing left to relax; retry once everything else has had its turn, since a
            # pod placed later (an affinity target) may make room for it.
            stalled += 1
            if stalled <= len(queue):
                queue.append(spec)
        for claim in self._claims:
            claim.seen = {}  # what the greedy pass kept per class: no use after it
        # Report the pods as given, not the relaxed copies that were placed.
        originals = {p.key: p.raw for p in readable}
        if self._packing_budget > 0 and self._claims:
            repacker = Repacker(
                class_of=self._class_of,
                compatible_types=self._compatible_types,
                daemons=self._daemons,
                budget=self._packing_budget,
                backend=self._packing_backend,
                plans_nominated=self._plans_nominated,
                memo=self._packing_memo,
            )
            self._claims = repacker.repack(self._claims, originals, self._nodes)
            self.packing_outcomes = repacker.outcomes
        for node in self._nodes:
            if node.placed:
                result.existing[node.node.name] = [originals[pod_key(p)] for p in node.placed]
        # Without a relaxed copy or two pods of one key, every pod placed is the one given.
        if relaxed_any or len(originals) != len(readable):
            known = self._spec_by_id  # the specs of the pods handed over, by identity
            for claim in self._claims:
                claim.pods = [originals[key_of(p, known.get(id(p)))] for p in claim.pods]
        result.new_nodeclaims = proposed_claims(
            self._claims, self._resources, self._max_instance_types
        )
        result.unschedulable = errors
        return result

    def _place(self, spec: PodSpec) -> Refusal | None:
        """Put ``spec`` on a node or claim (existing, in-flight, then new), or say why not."""
        pod_class = self._class_for(spec)
        pod = spec.raw
        if pod_class.requirements is None:
            return _NO_NODE_MATCHES_TERM
        # Back to the in-flight NodeClaim this pod was launched for, before anything else.
        for node in self._nominated_to.get(spec.key, ()):
            if self._node_refusal(node, pod_class, spec) is None:
                self._place_on_node(node, pod_class, pod, spec)
                return None
        hosts = zones = None
        if pod_class.topological:
            assert self._topology is not None
            hosts = self._topology.affinity_domains(spec, wellknown.LABEL_HOSTNAME)
            zones = self._topology.affinity_domains(spec, wellknown.LABEL_TOPOLOGY_ZONE)
        if self._nodes:
            for node in node_window(self._nodes, pod_class, hosts):
                if self._node_refusal(node, pod_class, spec) is None:
                    self._place_on_node(node, pod_class, pod, spec)
                    return None
        elsewhere = None if zones is None else pod_class.elsewhere.setdefault(zones, RuledOut())
        claims = claim_window(self._claims, self._claims_by_host, pod_class, hosts, zones)
        best = self._best_fit(claims, pod_class, spec, zones, elsewhere)
        if best is not None:
            self._commit(best, pod_class, pod, spec)
            return None
        pinned = pod_class.requirements.get(wellknown.LABEL_HOSTNAME)
        if pinned is not None:
            # Merged with a new claim's own hostname this would come out empty, not refused.
            named = named_node_reason(pinned, {n.hostname for n in self._nodes})
            if named is not None:
                return Refusal(named)
        reasons = []
        for pool in self._pools:
            why = self._place_on_new_claim(pool, pod_class, pod, spec)
            if why is None:
                return None
            reasons.append(f"NodePool {pool.option.name}: {why.reason}")
        if not reasons:
            return _NO_NODEPOOL
        return Refusal("; ".join(reasons))

    def _node_refusal(self, node: SolverNode, pod_class: PodClass, spec: PodSpec) -> Refusal | None:
        """Why the existing node cannot take a pod of ``pod_class``, or ``None`` if it can.

        Checks only; a refusal that lasts (taints, labels, room, ports) also marks the node as
        never again for this pod class.
        """
        assert pod_class.requirements is not None
        assert self._topology is not None
        lasting = None
        if strictly_untolerated(pod_class.tolerations, node.node.taints) is not None:
            lasting = TAINT
        elif (
            node.requirements.incompatibility(pod_class.requirements) is not None
            if node.node.in_flight
            else not pod_class.requirements.satisfied_by(node.node.labels)
        ):
            lasting = LABELS
        elif not fits(add(node.total, pod_class.vector), node.allocatable):
            lasting = RESOURCES
        elif pod_class.host_ports and node.ports.conflicts(pod_class.host_ports):
            lasting = HOST_PORT
        if lasting is not None:
            pod_class.rejected_nodes.add(node.index)
            return lasting
        if pod_class.topological:
            narrowed = self._topology.add_requirements(
                spec, pod_class.required, node.requirements, node.node.taints
            )
            if isinstance(narrowed, Refusal):
                return narrowed
        return None

    def _place_on_node(
        self, node: SolverNode, pod_class: PodClass, pod: PodObject, spec: PodSpec
    ) -> None:
        """Commit ``pod`` to an existing node :meth:`_node_refusal` found no reason against."""
        assert self._topology is not None
        self._topology.record(spec, node.requirements)
        node.total = add(node.total, pod_class.vector)
        node.ports.add(pod_class.host_ports)
        node.placed.append(pod)

    def _commit(self, fit: Fit, pod_class: PodClass, pod: PodObject, spec: PodSpec) -> None:
        assert self._topology is not None
        claim = fit.claim
        claim.requirements = fit.requirements
        claim.types, claim.first = fit.types, fit.first
        claim.pods_total, claim.daemon = fit.pods_total, fit.daemon
        claim.ports.add(pod_class.host_ports)
        claim.pods.append(pod)
        claim.version += 1
        claim.seen = {}
        self._topology.record(spec, fit.requirements)

    def _place_on_new_claim(
        self, pool: PoolState, pod_class: PodClass, pod: PodObject, spec: PodSpec
    ) -> Refusal | None:
        """Open a new claim in ``pool`` holding ``pod``, or say why the pool cannot."""
        assert pod_class.requirements is not None
        assert self._topology is not None
        taint = untolerated_pool_taint(pod_class, pool)
        if taint is not None:
            return Refusal(f"taint {taint} not tolerated")
        why = pool.requirements.incompatibility(pod_class.requirements)
        if why is not None:
            return Refusal(f"incompatible requirements: {why.reason}")
        hostname = f"{HOSTNAME_PLACEHOLDER}{len(self._claims):04d}"
        base = pod_class.pool_requirements.get(pool.option.name)
        if base is None:
            base = pool.requirements.merged(pod_class.requirements)
            pod_class.pool_requirements[pool.option.name] = base
        # Requirement.new(hostname, "In", [hostname]), built directly: the name is a string.
        unnarrowed = requirements = base.with_requirement(
            Requirement(wellknown.LABEL_HOSTNAME, False, frozenset((hostname,)))
        )
        taints = pool.option.taints
        if pod_class.topological:
            self._topology.register_domain(wellknown.LABEL_HOSTNAME, hostname)
            narrowed = self._topology.add_requirements(
                spec, pod_class.required, requirements, taints
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
        found = self._new_claim_types(pool, pod_class, requirements, base, unnarrowed)
        if isinstance(found, Refusal):
            return found
        types = found
        if pool.remaining is not None:
            remaining = pool.remaining
            within = [t for t in types if fits(limit_use(t.capacity), remaining)]
            if not within:
                return Refusal(limits_reason(self._resources, types, remaining))
            types = within
        first = first_fit(types, 0, total, pod_class)
        if first is None:
            needed = pod_class.requests.add(self._daemons.for_node(requirements, taints))
            return Refusal(too_small_reason([t.instance_type for t in types], needed))
        if pool.min_values:
            problem = min_values_problem(requirements, types[first:], total)
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
        self._topology.record(spec, requirements)
        return None

    def _new_claim_types(
        self,
        pool: PoolState,
        pod_class: PodClass,
        requirements: Requirements,
        base: Requirements,
        unnarrowed: Requirements,
    ) -> list[TypeInfo] | Refusal:
        """The pool's types a new claim with ``requirements`` may be, or why there are none.

        ``base`` is the pool's requirements merged with the class's, ``unnarrowed`` that with
        the claim's hostname, before the topology narrowed it."""
        if requirements is unnarrowed and wellknown.LABEL_HOSTNAME not in base:
            # What the types are chosen by (all but the hostname) is the class's in the pool.
            types = self._compatible_types.by_relevant(pool, base, pod_class)
        else:
            types = self._compatible_types(pool, requirements, pod_class)
        if types:
            return types
        relevant = Requirements(
            r for key, r in requirements.items() if key != wellknown.LABEL_HOSTNAME
        )
        if pod_class.topological:
            return Refusal(f"no instance type is offered where its topology allows ({relevant})")
        return Refusal(
            no_type_reason(
                pool.option.instance_types,
                relevant,
                lambda it: (
                    not it.taints or strictly_untolerated(pod_class.tolerations, it.taints) is None
                ),
            )
        )
