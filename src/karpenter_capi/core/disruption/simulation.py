"""Could these nodes go? The scheduling simulation every disruption decision rests on.

A command is only as good as its simulation: remove the candidates, give their pods to the same
solver provisioning uses (``core.scheduling.solver``), with every other node (registered or
still launching) as existing capacity, and see what it answers. Consolidation is valid when
every pod finds a place on the remaining nodes plus new NodeClaims that together cost less
than what they replace; drift accepts any replacements.

The cluster is converted to solver input once per pass (``Simulator``: the existing nodes'
vectors, label requirements, host ports, topology domains and pod counts, in an
``ExistingView``), and each simulation only leaves its candidates out of it, so a pass over
10,000 nodes spends its time placing the candidates' pods, not rebuilding the cluster. The next
pass makes its view from this one, reading again only the nodes that changed (``_view``).

Unlike upstream, which replaces one node or several by at most one new node, a consolidation
may launch as many replacements as the solver proposes (one node by several smaller ones, or
several by fewer or cheaper ones), as long as they cost strictly less in total than what they
replace, whatever offering each launch falls back to (``consolidate``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Final

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.clock import Clock
from karpenter_capi.core.disruption.candidates import Candidate, bound_pods
from karpenter_capi.core.disruption.passfacts import PassFacts, pass_facts
from karpenter_capi.core.instancetype import InstanceType
from karpenter_capi.core.provisioning.inventory import NodePoolInventory
from karpenter_capi.core.provisioning.nodepools import nodepool_option
from karpenter_capi.core.provisioning.pending import is_provisionable
from karpenter_capi.core.provisioning.state import (
    ClusterSnapshot,
    ParsedCluster,
    Parses,
    disrupting_nodes,
    existing_nodes,
    moving_pods,
    unbound,
)
from karpenter_capi.core.scheduling.existing_view import ExistingView
from karpenter_capi.core.scheduling.podspec import PodObject, PodSpec, pod_key
from karpenter_capi.core.scheduling.solver import Solver
from karpenter_capi.core.scheduling.solver_io import (
    ExistingNode,
    NodePoolOption,
    ProposedNodeClaim,
    compatible_offerings,
)
from karpenter_capi.core.values.requirements import Requirement, Requirements
from karpenter_capi.core.values.resources import ResourceList

MIN_SPOT_TO_SPOT_TYPES: Final = 15
"""Upstream's floor: a spot node is only replaced by spot when at least this many cheaper
types are on offer, so the replacement is not the next type to be interrupted."""

SIMULATION_TIMEOUT_SECONDS: Final = 10.0
SIMULATION_PACKING_BUDGET_SECONDS: Final = 5.0
"""Re-packing safety net per simulation (``core.scheduling.packing``), as provisioning's: the
work is bounded by counts, so a consolidation decision does not depend on the machine's load
either; a much shorter net would bring that dependence back on a loaded machine."""


def _view(
    nodes: Sequence[ExistingNode],
    parsed: ParsedCluster,
    parses: Callable[[ExistingNode], list[PodSpec] | None] | None = None,
) -> ExistingView:
    """The solver's view of ``nodes``, made from the last pass's.

    ``existing_nodes`` hands back the very ``ExistingNode`` of the last pass for a node of
    which nothing changed (its version, its bound pods' versions, its nominations), so
    identity says what the last view still describes: the same nodes are that view, and
    otherwise the new view takes from it what it read of every node still the same and reads
    only the others (``ExistingView``'s ``previous``). A launching NodeClaim, or a node with a
    pod without a uid or version, is a new object every pass: read again each time.
    ``parses``: a node's pods' parses, when the pass read them (``PassFacts.parses``)."""
    kept = parsed.existing_view
    previous = kept if isinstance(kept, ExistingView) else None
    if (
        previous is not None
        and len(previous.nodes) == len(nodes)
        and all(a is b for a, b in zip(previous.nodes, nodes, strict=True))
    ):
        return previous
    view = ExistingView(nodes, parsed.specs, previous, parses)
    parsed.existing_view = view
    return view


def _disrupting(snapshot: ClusterSnapshot, facts: PassFacts) -> frozenset[str]:
    """``state.disrupting_nodes`` read from the pass's facts of its Nodes and NodeClaims."""
    names = {f.name for _, f in facts.nodes(snapshot.nodes) if f.disrupted or f.deleting}
    names.update(
        f.node_name
        for _, f in facts.claims(snapshot.nodeclaims)
        if f.node_name and (f.deleting or f.interrupted)
    )
    return frozenset(names)


def _triple(resources: ResourceList) -> tuple[int, int, int]:
    """cpu, memory and pod slots in milli-units: what the quick feasibility check compares."""
    return (resources.milli("cpu"), resources.milli("memory"), resources.milli("pods"))


@dataclass
class Simulation:
    """What the solver answered for moving some candidates' pods.

    ``unschedulable`` lists only pods that must move (a pending pod nothing can hold is not the
    command's concern); ``pending_only`` counts new NodeClaims only pending pods need."""

    unschedulable: dict[str, str] = field(default_factory=dict)
    new_nodeclaims: list[ProposedNodeClaim] = field(default_factory=list)
    pending_only: int = 0
    placed: dict[str, list[PodObject]] = field(default_factory=dict)
    """Existing node -> the pods the solver put there (what a benchmark applies)."""

    @property
    def all_scheduled(self) -> bool:
        return not self.unschedulable


@dataclass
class Replacement:
    """A consolidation outcome: delete the candidates, launching ``replacements`` first."""

    replacements: list[ProposedNodeClaim]
    savings: float


class _Reading:
    """What a ``Simulator`` reads of the cluster before any simulation: the NodePools as
    options, the existing nodes and their solver view, the pods already moving and the pending
    ones, and what the quick check (``might_consolidate``) compares."""

    def __init__(
        self,
        snapshot: ClusterSnapshot,
        inventories: Sequence[NodePoolInventory],
        nominations: Mapping[str, frozenset[str]],
        parsed: ParsedCluster,
    ) -> None:
        self.inventories = tuple(inventories)  # alive while kept: their ids are in its key
        self._existing_key: object = None
        """The Nodes' and NodeClaims' versions, the NodePools and the nominations: what the
        existing nodes are made of but their pods (``_existing``)."""
        self._bound: Mapping[str, Sequence[PodObject]] = {}
        self._parses: Callable[[str, Sequence[PodObject]], Parses | None] | None = None
        self._all: list[ExistingNode] = []
        facts = pass_facts(parsed)
        previous = facts.last("simulator")
        last = previous if isinstance(previous, _Reading) else None
        # A static NodePool never supplies a replacement (its nodes are existing capacity).
        # What the NodePools' NodeClaims count against their limits changes only with them.
        claims = facts.claim_versions(snapshot.nodeclaims)
        self._options_key = None if claims is None else (claims, tuple(map(id, inventories)))
        if (
            last is not None
            and self._options_key is not None
            and (last._options_key == self._options_key)
        ):
            self.options: list[NodePoolOption] = last.options
        else:
            self.options = [
                nodepool_option(i, snapshot)
                for i in inventories
                if not (i.model is not None and i.model.is_static)
            ]
        if facts.has_read(snapshot):
            # The pass read every object's facts: walked here instead of the raw objects.
            disrupting = _disrupting(snapshot, facts)
            by_node = bound_pods(snapshot.pods, facts)
            bound = {name: pods.bound for name, pods in by_node.items()}
            key = facts.node_versions(snapshot.nodes, snapshot.nodeclaims)
            if key is not None:
                self._existing_key = (key, tuple(map(id, inventories)), dict(nominations))
            self._bound = bound
            self._parses = lambda _, pods: facts.parses(pods)
            nodes = self._existing(
                snapshot,
                inventories=inventories,
                nominations=nominations,
                parsed=parsed,
                facts=facts,
                last=last,
            )
            self.moving: list[PodObject] = (
                [
                    unbound(p)
                    for p, f in facts.pods(snapshot.pods)
                    if f.reschedulable and f.node_name in disrupting
                ]
                if disrupting
                else []
            )
            self.pending: list[PodObject] = [
                p for p, f in facts.pods(snapshot.pods) if not f.node_name and is_provisionable(p)
            ]
        else:
            disrupting = disrupting_nodes(snapshot)
            nodes = existing_nodes(snapshot, inventories, nominations, parsed)
            self.moving = moving_pods(snapshot, disrupting)
            self.pending = [p for p in snapshot.pods if is_provisionable(p)]
        self._all = nodes
        self.nodes: list[ExistingNode] = [n for n in nodes if n.name not in disrupting]
        # Every simulation solves over these nodes but its candidates: turned into solver input
        # once (``ExistingView``), each simulation leaving its candidates out of it.
        reads = self._parses is not None  # the nodes' pods' parses as the pass read them
        self.view = _view(self.nodes, parsed, (lambda n: facts.specs_of(n.pods)) if reads else None)
        self._parses = None
        # Room on a NodeClaim still launching, or a node not yet initialized, is a promise: a
        # pod that must move may not count on it (upstream rejects such a result too).
        self.not_ready = frozenset(
            n.name
            for n in self.nodes
            if n.in_flight or (n.nodepool and n.labels.get(wellknown.LABEL_INITIALIZED) != "true")
        )
        # A node the last pass read as the very same ``ExistingNode`` has the same free room.
        kept: dict[str, tuple[ExistingNode, tuple[int, int, int]]] = {}
        if last is not None:
            kept = {n.name: (n, last.free[n.name]) for n in last.nodes}
        self.free: dict[str, tuple[int, int, int]] = {}
        for n in self.nodes:
            found = kept.get(n.name)
            self.free[n.name] = (
                found[1]
                if found is not None and found[0] is n
                else _triple(n.allocatable.subtract(n.requested))
            )
        frees = list(self.free.values())
        self.total_free = tuple(sum(max(f[i], 0) for f in frees) for i in range(3))
        # Per resource, the two largest free amounts: a node's own is never "elsewhere".
        self.top_free = [sorted((f[i] for f in frees), reverse=True)[:2] for i in range(3)]
        # Any NodePool may supply the replacement: every offering its requirements allow (and
        # available), cheapest first.
        offered = sorted(
            (o.price, _triple(it.allocatable))
            for option in self.options
            for it in option.instance_types
            for o in compatible_offerings(it, option.requirements)
        )
        # Each node shape once, at its cheapest price: what the quick check compares.
        self.shapes: list[tuple[float, tuple[int, int, int]]] = []
        seen: set[tuple[int, int, int]] = set()
        for price, allocatable in offered:
            if allocatable not in seen:
                seen.add(allocatable)
                self.shapes.append((price, allocatable))

    def _existing(
        self,
        snapshot: ClusterSnapshot,
        *,
        inventories: Sequence[NodePoolInventory],
        nominations: Mapping[str, frozenset[str]],
        parsed: ParsedCluster,
        facts: PassFacts,
        last: _Reading | None,
    ) -> list[ExistingNode]:
        """``existing_nodes``, the last pass's but for the nodes whose bound pods changed,
        while the Nodes, the NodeClaims, the NodePools and the nominations are the same: only
        those nodes are read again (a status update of a few pods touches a few nodes)."""
        bound = self._bound
        parses = self._parses
        if last is None or self._existing_key is None or last._existing_key != self._existing_key:
            return existing_nodes(snapshot, inventories, nominations, parsed, bound, parses=parses)
        before = last._bound
        changed = {
            n.name
            for n in last._all
            if not n.in_flight and bound.get(n.name) is not before.get(n.name)
        }
        if not changed:
            return list(last._all)
        some = ClusterSnapshot(
            pods=[],
            nodes=[node for node, f in facts.nodes(snapshot.nodes) if f.name in changed],
            nodeclaims=[c for c, f in facts.claims(snapshot.nodeclaims) if f.node_name in changed],
            daemonsets=[],
        )
        again = {
            n.name: n
            for n in existing_nodes(
                some, inventories, nominations, parsed, bound, some=True, parses=parses
            )
        }
        if again.keys() != changed:
            return existing_nodes(snapshot, inventories, nominations, parsed, bound, parses=parses)
        return [again[n.name] if n.name in changed and not n.in_flight else n for n in last._all]


class Simulator:
    """The cluster as solver input, built once per pass; ``simulate`` filters it.

    Capacity already spoken for is accounted for in every simulation, as upstream's
    ``SimulateScheduling`` does: the pods of nodes already being disrupted (tainted
    ``karpenter.sh/disrupted``, or whose NodeClaim is deleting) must move too, so they are placed
    alongside the candidates' pods and their nodes offer no room; and pending pods are placed
    first on what they were promised (the provisioner's nominations). A command is valid only if
    every pod that must move finds a place; a pending pod that still does not fit anywhere is
    provisioning's business, but a new node that only pending pods need makes the command wait.
    """

    def __init__(
        self,
        snapshot: ClusterSnapshot,
        inventories: Sequence[NodePoolInventory],
        clock: Clock,
        *,
        spot_to_spot: bool = False,
        timeout_seconds: float = SIMULATION_TIMEOUT_SECONDS,
        nominations: Mapping[str, frozenset[str]] | None = None,
        parsed: ParsedCluster | None = None,
    ) -> None:
        """``parsed``: parsed pods and bound-pod sums kept across passes."""
        self._snapshot = snapshot
        self._bound = parsed if parsed is not None else ParsedCluster()
        self._clock = clock
        self._spot_to_spot = spot_to_spot
        self._timeout = timeout_seconds
        facts = pass_facts(parsed)
        # Over the very object versions of the last pass (and the same NodePools and
        # nominations), the reading is the last pass's: nothing in it could have changed.
        key = facts.versions_of(snapshot.pods, snapshot.nodes, snapshot.nodeclaims)
        nominated = tuple(sorted((nominations or {}).items()))
        reading = facts.remember(
            "simulator",
            None if key is None else (key, tuple(map(id, inventories)), nominated),
            lambda: _Reading(snapshot, inventories, nominations or {}, self._bound),
        )
        self._options = reading.options
        self._nodes = reading.nodes
        self._view = reading.view
        self._moving = reading.moving
        self._pending = reading.pending
        self._not_ready = reading.not_ready
        self._free = reading.free
        self._total_free = reading.total_free
        self._top_free = reading.top_free
        self._shapes = reading.shapes
        self.simulations = 0
        self.durations: list[float] = []
        """Seconds each solve took (``karpenter_scheduler_scheduling_duration_seconds``)."""

    def might_consolidate(self, candidate: Candidate) -> bool:
        """A necessary condition, in microseconds, for deleting the candidate or replacing it
        with new nodes cheaper in total, by resources alone (cpu, memory, pod slots).

        The pods that fit in no other node's free room need new nodes, and those must cost
        strictly less than the candidate; ``_cost_floor`` gives a lower bound on what new nodes
        holding them cost. The other pods must fit in the free room elsewhere plus what new
        nodes cheaper than the candidate can hold at best (its price times the most of each
        resource a dollar buys among the cheaper types). A candidate that fails it needs no
        simulation."""
        requests = [_triple(self._bound.specs.get(p).requests) for p in candidate.pods]
        total = tuple(sum(r[i] for r in requests) for i in range(3))
        own = self._free.get(candidate.node_name, (0, 0, 0))
        elsewhere = [self._total_free[i] - max(own[i], 0) for i in range(3)]
        largest_free = [
            top[1] if len(top) > 1 and top[0] == own[i] else (top[0] if top else 0)
            for i, top in enumerate(self._top_free)
        ]
        cheaper = [(p, a) for p, a in self._shapes if p < candidate.price]
        new_room = [
            max((candidate.price * a[i] / p if p > 0 else math.inf for p, a in cheaper), default=0)
            for i in range(3)
        ]
        if any(0 < total[i] - elsewhere[i] >= new_room[i] for i in range(3)):
            return False
        homeless = [r for r in requests if any(r[i] > largest_free[i] for i in range(3))]
        return _cost_floor(homeless, cheaper) < candidate.price

    def simulate(self, candidates: Sequence[Candidate]) -> Simulation:
        """Place every pod of ``candidates`` elsewhere, as if the candidates were gone (with the
        pods already moving and the pending ones, see the class docstring)."""
        self.simulations += 1
        gone = {c.node_name for c in candidates} | {c.name for c in candidates}
        moving = [unbound(p) for c in candidates for p in c.pods] + self._moving
        if not moving:
            return Simulation()
        solver = Solver(
            self._options,
            existing_nodes=self._view.without(gone),
            daemonsets=self._snapshot.daemonsets,
            namespaces=self._snapshot.namespaces,
            clock=self._clock,
            timeout_seconds=self._timeout,
            packing_budget=SIMULATION_PACKING_BUDGET_SECONDS,
            pod_specs=self._bound.specs,
            packing_memo=self._bound.packing,
        )
        started = self._clock.monotonic()
        result = solver.solve(moving + self._pending)
        self.durations.append(self._clock.monotonic() - started)
        must_move = {pod_key(p) for p in moving}
        unschedulable = {k: why for k, why in result.unschedulable.items() if k in must_move}
        for name, placed in result.existing.items():
            if name in self._not_ready:
                for pod in placed:
                    if pod_key(pod) in must_move:
                        unschedulable[pod_key(pod)] = f"would wait for {name}, not initialized yet"
        return Simulation(
            unschedulable,
            list(result.new_nodeclaims),
            pending_only=sum(
                1 for c in result.new_nodeclaims if not any(pod_key(p) in must_move for p in c.pods)
            ),
            placed=dict(result.existing),
        )

    def consolidate(self, candidates: Sequence[Candidate]) -> Replacement | str:
        """Delete the candidates, or replace them with new nodes cheaper in total; else why not.

        The solver proposes the replacements: its greedy pass, re-packed into the cheapest set
        of NodeClaims it finds (``core.scheduling.packing``), so one node may become several
        smaller ones and several may become fewer. Their total must be strictly below the
        candidates' price, as upstream's rule for one replacement. The saving is then shared out
        evenly: each replacement may launch only the types with an offering below its own
        cheapest price plus its share, so whatever offering each launch falls back to, the new
        nodes together still cost less than the old ones (with one replacement, its allowance
        is the candidates' price: upstream's rule exactly). Every command therefore lowers the
        cluster's price strictly, and no sequence of them can go round in circles. A move
        that does not lower the number of nodes (one into several, or N into N or more) must
        also save more than the cheapest of its new nodes costs (docs/disruption.md says why).
        Among
        several replacements, one that could be of a candidate's own type must also be cheaper
        than that candidate: two nodes replaced by two, one of them the same type as before,
        restarts pods for a saving that replacing the other alone makes.
        """
        simulation = self.simulate(candidates)
        if not simulation.all_scheduled:
            key, why = next(iter(sorted(simulation.unschedulable.items())))
            return f"pod {key} would not schedule: {why}"
        if simulation.pending_only:
            return "pending pods need new capacity first"
        price = sum(c.price for c in candidates)
        claims = simulation.new_nodeclaims
        if not claims:
            return Replacement([], price)
        total = sum(claim.price for claim in claims)
        if total >= price:
            if len(claims) == 1:
                return f"no replacement cheaper than {price:.4f}/h"
            return (
                f"its pods need {len(claims)} new nodes costing {total:.4f}/h, "
                f"not less than {price:.4f}/h"
            )
        share = (price - total) / len(claims)
        all_spot = all(c.capacity_type == wellknown.CAPACITY_TYPE_SPOT for c in candidates)
        own = _own_type_prices(candidates) if len(claims) > 1 else {}
        replacements = []
        for claim in claims:
            allowance = min(
                [
                    claim.price + share,
                    *(own[it.name] for it in claim.instance_types if it.name in own),
                ]
            )
            replacement = self._restricted(claim, allowance, all_spot, len(candidates))
            if isinstance(replacement, str):
                return replacement
            replacements.append(replacement)
        savings = price - sum(r.price for r in replacements)
        churn = _saves_too_little(replacements, len(candidates), savings)
        return churn if churn is not None else Replacement(replacements, savings)

    def _restricted(
        self, claim: ProposedNodeClaim, allowance: float, all_spot: bool, replaced: int
    ) -> ProposedNodeClaim | str:
        """``claim`` allowed only the types with an offering below ``allowance``, its capacity
        type pinned (``_pin_capacity_type``); or why it cannot be (spot-to-spot rules)."""
        requirements = _pin_capacity_type(claim, allowance)
        cheaper = _cheaper_types(claim.instance_types, requirements, allowance)
        if not cheaper:
            return f"no replacement cheaper than {allowance:.4f}/h"
        capacity = requirements.get(wellknown.LABEL_CAPACITY_TYPE)
        if all_spot and (capacity is None or capacity.has(wellknown.CAPACITY_TYPE_SPOT)):
            if not self._spot_to_spot:
                return "spot-to-spot consolidation is disabled"
            if replaced == 1:
                # Upstream's rule for one spot node, applied to each of its replacements: none
                # of them is the next type to be interrupted.
                if len(cheaper) < MIN_SPOT_TO_SPOT_TYPES:
                    return (
                        f"spot-to-spot needs {MIN_SPOT_TO_SPOT_TYPES} cheaper instance types, "
                        f"found {len(cheaper)}"
                    )
                cheaper = cheaper[:MIN_SPOT_TO_SPOT_TYPES]
        # The launch may fall back along the NodeClaim's instance-type requirement, so it must
        # name only the allowed types, or a "consolidation" could end on dearer nodes.
        requirements = requirements.with_requirement(
            Requirement.new(wellknown.LABEL_INSTANCE_TYPE, "In", [it.name for it in cheaper])
        )
        return replace(claim, instance_types=cheaper, requirements=requirements)


def _cost_floor(
    pods: Sequence[tuple[int, int, int]], shapes: Sequence[tuple[float, tuple[int, int, int]]]
) -> float:
    """A lower bound on the price of new nodes of ``shapes`` (price, allocatable) holding
    ``pods``; infinite when one fits none.

    In each resource, two dual-feasible weights of a pod on a node give a bound (the weights of
    the pods sharing a node sum to at most 1, so each pod can be charged its weight times the
    node's price, at the shape that makes that least): its share of the node, and 1 when it
    takes more than half of it (two such pods never share one node). The second catches what
    the first misses: two 1.8-CPU pods need two 2-CPU nodes, not 1.8 of one. The best of the
    six bounds is the floor."""
    counts: dict[tuple[int, int, int], int] = {}
    for pod in pods:
        counts[pod] = counts.get(pod, 0) + 1
    share = [0.0, 0.0, 0.0]
    half = [0.0, 0.0, 0.0]
    for pod, count in counts.items():
        holders = [(p, a) for p, a in shapes if all(pod[j] <= a[j] for j in range(3))]
        if not holders:
            return math.inf
        for i in range(3):
            share[i] += count * min(p * pod[i] / a[i] if a[i] else 0.0 for p, a in holders)
            half[i] += count * min(p if 2 * pod[i] > a[i] else 0.0 for p, a in holders)
    return max(*share, *half)


def _cheaper_types(
    types: Sequence[InstanceType], requirements: Requirements, price: float
) -> list[InstanceType]:
    """The types with an offering the requirements allow that costs less than ``price``."""
    return [
        it for it in types if any(o.price < price for o in compatible_offerings(it, requirements))
    ]


def _pin_capacity_type(claim: ProposedNodeClaim, price: float) -> Requirements:
    """The replacement's requirements, pinned so its launch cannot end dearer than ``price``.

    When the replacement may be spot or on-demand, the saving was computed on the cheapest
    offering, usually spot; upstream then pins it to spot, so a spot shortage fails the launch
    (and the node stays) instead of falling back to dearer on-demand. That rule assumes every
    type has spot offerings, as on AWS. Most Cluster API catalogs are on-demand only: there it
    would leave nothing to launch, and no node would ever be replaced. So spot is pinned only
    when a cheaper spot offering exists; otherwise spot is excluded and the cheaper on-demand
    (or reserved) offerings are what the replacement may launch.
    """
    requirements = claim.requirements
    capacity = requirements.get(wellknown.LABEL_CAPACITY_TYPE)
    may_be_spot = capacity is None or capacity.has(wellknown.CAPACITY_TYPE_SPOT)
    may_be_on_demand = capacity is None or capacity.has(wellknown.CAPACITY_TYPE_ON_DEMAND)
    if not (may_be_spot and may_be_on_demand):
        return requirements
    spot = requirements.with_requirement(
        Requirement.new(wellknown.LABEL_CAPACITY_TYPE, "In", [wellknown.CAPACITY_TYPE_SPOT])
    )
    if _cheaper_types(claim.instance_types, spot, price):
        return spot
    return requirements.with_requirement(
        Requirement.new(wellknown.LABEL_CAPACITY_TYPE, "NotIn", [wellknown.CAPACITY_TYPE_SPOT])
    )


def _own_type_prices(candidates: Sequence[Candidate]) -> dict[str, float]:
    """The cheapest candidate price of each candidate's own instance type.

    Against churn, with several replacements (upstream's ``filterOutSameInstanceType``): one
    that could be a candidate's own type must be cheaper than that candidate, or keeping the
    candidate would save as much with fewer pods moved. One replacement is left as before (the
    caller asks only with several): a merge into a candidate's type still removes the other
    nodes.
    """
    own: dict[str, float] = {}
    for candidate in candidates:
        if candidate.instance_type is not None:
            name = candidate.instance_type.name
            own[name] = min(own.get(name, math.inf), candidate.price)
    return own


def _saves_too_little(
    replacements: Sequence[ProposedNodeClaim], candidates: int, savings: float
) -> str | None:
    """Why a move that does not lower the number of nodes is not worth it: it must save more
    than the cheapest of its new nodes costs (docs/disruption.md)."""
    if len(replacements) <= 1 or len(replacements) < candidates:
        return None
    smallest = min(r.price for r in replacements)
    if savings > smallest:
        return None
    return (
        f"{len(replacements)} new nodes would save {savings:.4f}/h, no more than "
        f"the cheapest of them costs ({smallest:.4f}/h)"
    )
