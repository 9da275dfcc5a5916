"""Could these nodes go? The scheduling simulation every disruption decision rests on.

A command is only as good as its simulation: remove the candidates, give their pods to the same
solver provisioning uses (``core.scheduling.solver``), with every other node (registered or
still launching) as existing capacity, and see what it answers. Consolidation is valid when
every pod finds a place on the remaining nodes plus at most one new NodeClaim, and that
NodeClaim is cheaper than what it replaces; drift accepts any number of replacements.

The cluster is converted to solver input once per pass (``Simulator``), and each simulation
only filters it, so a pass over 1,000 nodes spends its time in the solver, not in parsing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Final

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.clock import Clock
from karpenter_capi.core.disruption.candidates import Candidate
from karpenter_capi.core.instancetype import InstanceType
from karpenter_capi.core.provisioning.inventory import NodePoolInventory
from karpenter_capi.core.provisioning.pending import is_provisionable
from karpenter_capi.core.provisioning.state import (
    ClusterSnapshot,
    disrupting_nodes,
    existing_nodes,
    moving_pods,
    nodepool_option,
    unbound,
)
from karpenter_capi.core.scheduling.model import (
    ExistingNode,
    NodePoolOption,
    Pod,
    ProposedNodeClaim,
    compatible_offerings,
    pod_key,
)
from karpenter_capi.core.scheduling.requirements import Requirement, Requirements
from karpenter_capi.core.scheduling.resources import ResourceList, pod_requests
from karpenter_capi.core.scheduling.solver import Solver

MIN_SPOT_TO_SPOT_TYPES: Final = 15
"""Upstream's floor: a spot node is only replaced by spot when at least this many cheaper
types are on offer, so the replacement is not the next type to be interrupted."""

SIMULATION_TIMEOUT_SECONDS: Final = 10.0
SIMULATION_PACKING_BUDGET_SECONDS: Final = 5.0
"""Re-packing safety net per simulation (``core.scheduling.packing``), as provisioning's: the
work is bounded by counts, so a consolidation decision does not depend on the machine's load
either; a shorter wall-clock net would bring that dependence back on a loaded machine."""


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

    @property
    def all_scheduled(self) -> bool:
        return not self.unschedulable


@dataclass
class Replacement:
    """A consolidation outcome: delete the candidates, launching ``replacements`` first."""

    replacements: list[ProposedNodeClaim]
    savings: float


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
    ) -> None:
        self._snapshot = snapshot
        self._clock = clock
        self._spot_to_spot = spot_to_spot
        self._timeout = timeout_seconds
        # A static NodePool never supplies a replacement (its nodes are existing capacity).
        self._options: list[NodePoolOption] = [
            nodepool_option(i, snapshot)
            for i in inventories
            if not (i.model is not None and i.model.is_static)
        ]
        disrupting = disrupting_nodes(snapshot)
        nodes = existing_nodes(snapshot, inventories, nominations or {})
        self._nodes: list[ExistingNode] = [n for n in nodes if n.name not in disrupting]
        self._moving: list[Pod] = moving_pods(snapshot)
        self._pending: list[Pod] = [p for p in snapshot.pods if is_provisionable(p)]
        # Room on a NodeClaim still launching, or a node not yet initialized, is a promise: a
        # pod that must move may not count on it (upstream rejects such a result too).
        self._not_ready = frozenset(
            n.name
            for n in self._nodes
            if n.in_flight or (n.nodepool and n.labels.get(wellknown.LABEL_INITIALIZED) != "true")
        )
        self.simulations = 0
        self.durations: list[float] = []
        """Seconds each solve took (``karpenter_scheduler_scheduling_duration_seconds``)."""
        self._label_requirements: dict[str, Requirements] = {}
        self._free = {n.name: _triple(n.allocatable.subtract(n.requested)) for n in self._nodes}
        frees = list(self._free.values())
        self._total_free = tuple(sum(max(f[i], 0) for f in frees) for i in range(3))
        # Per resource, the two largest free amounts: a node's own is never "elsewhere".
        self._top_free = [sorted((f[i] for f in frees), reverse=True)[:2] for i in range(3)]
        # Any NodePool may supply the replacement: every offering its requirements allow (and
        # available), cheapest first.
        self._cheap_types: list[tuple[float, tuple[int, int, int]]] = sorted(
            (o.price, _triple(it.allocatable))
            for option in self._options
            for it in option.instance_types
            for o in compatible_offerings(it, option.requirements)
        )

    def might_consolidate(self, candidate: Candidate) -> bool:
        """A necessary condition, in microseconds, for deleting the candidate or replacing it
        with one cheaper node, by resources alone (cpu, memory, pod slots): its pods must fit in
        the free room of the other nodes plus the largest cheaper type, and the pods too big for
        any other node's free room must fit together in that one new node. A candidate that
        fails it needs no simulation."""
        requests = [_triple(pod_requests(p, include_pod_count=True)) for p in candidate.pods]
        total = tuple(sum(r[i] for r in requests) for i in range(3))
        own = self._free.get(candidate.node_name, (0, 0, 0))
        elsewhere = [self._total_free[i] - max(own[i], 0) for i in range(3)]
        largest_free = [
            top[1] if len(top) > 1 and top[0] == own[i] else (top[0] if top else 0)
            for i, top in enumerate(self._top_free)
        ]
        biggest_cheaper = [0, 0, 0]
        for price, allocatable in self._cheap_types:
            if price >= candidate.price:
                break
            biggest_cheaper = [max(biggest_cheaper[i], allocatable[i]) for i in range(3)]
        if any(total[i] > elsewhere[i] + biggest_cheaper[i] for i in range(3)):
            return False
        homeless = [r for r in requests if any(r[i] > largest_free[i] for i in range(3))]
        need = [sum(r[i] for r in homeless) for i in range(3)]
        return all(need[i] <= biggest_cheaper[i] for i in range(3))

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
            existing_nodes=[n for n in self._nodes if n.name not in gone],
            daemonsets=self._snapshot.daemonsets,
            namespaces=self._snapshot.namespaces,
            clock=self._clock,
            timeout_seconds=self._timeout,
            label_requirements=self._label_requirements,
            packing_budget=SIMULATION_PACKING_BUDGET_SECONDS,
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
        )

    def consolidate(self, candidates: Sequence[Candidate]) -> Replacement | str:
        """Delete the candidates, or replace them with one cheaper node; else why not."""
        simulation = self.simulate(candidates)
        if not simulation.all_scheduled:
            key, why = next(iter(sorted(simulation.unschedulable.items())))
            return f"pod {key} would not schedule: {why}"
        if simulation.pending_only:
            return "pending pods need new capacity first"
        price = sum(c.price for c in candidates)
        if not simulation.new_nodeclaims:
            return Replacement([], price)
        if len(simulation.new_nodeclaims) > 1:
            return f"needs {len(simulation.new_nodeclaims)} new nodes"
        claim = simulation.new_nodeclaims[0]
        requirements = _pin_capacity_type(claim, price)
        cheaper = _cheaper_types(claim.instance_types, requirements, price)
        if not cheaper:
            return f"no replacement cheaper than {price:.4f}/h"
        all_spot = all(c.capacity_type == wellknown.CAPACITY_TYPE_SPOT for c in candidates)
        capacity = requirements.get(wellknown.LABEL_CAPACITY_TYPE)
        if all_spot and (capacity is None or capacity.has(wellknown.CAPACITY_TYPE_SPOT)):
            if not self._spot_to_spot:
                return "spot-to-spot consolidation is disabled"
            if len(candidates) == 1:
                if len(cheaper) < MIN_SPOT_TO_SPOT_TYPES:
                    return (
                        f"spot-to-spot needs {MIN_SPOT_TO_SPOT_TYPES} cheaper instance types, "
                        f"found {len(cheaper)}"
                    )
                cheaper = cheaper[:MIN_SPOT_TO_SPOT_TYPES]
        # The launch may fall back along the NodeClaim's instance-type requirement, so it must
        # name only the cheaper types, or a "consolidation" could end on a dearer node.
        requirements = requirements.with_requirement(
            Requirement.new(wellknown.LABEL_INSTANCE_TYPE, "In", [it.name for it in cheaper])
        )
        replacement = replace(claim, instance_types=cheaper, requirements=requirements)
        return Replacement([replacement], price - replacement.price)


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
