"""Re-packing the greedy pass's unconstrained NodeClaims: to a packing problem and back.

Why it exists: ``packing.py`` optimizes plain numbers (node types, pod groups, patterns); this
module decides which of the greedy pass's claims it may touch, turns them into such a problem,
and turns an accepted plan back into claims built the way the greedy pass builds them, so that
``_solver_view.proposed_claim`` emits them like any other. Kept out of ``solver.py``, which only
calls ``Repacker.repack`` once its greedy pass is done.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.scheduling import highs, packing, packing_problem
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
    untolerated_pool_taint,
)
from karpenter_capi.core.scheduling.daemons import DaemonOverhead
from karpenter_capi.core.scheduling.packing_memo import PackingMemo
from karpenter_capi.core.scheduling.podspec import PodObject, pod_key
from karpenter_capi.core.scheduling.preferences import strictly_untolerated
from karpenter_capi.core.scheduling.solver_io import compatible_offerings
from karpenter_capi.core.values.requirements import Requirement, Requirements

if TYPE_CHECKING:
    from karpenter_capi.core.scheduling._solver_view import SolverNode

MAX_CATALOG = 128
"""A NodePool with more types is left to greedy without looking for dominated ones (the
search is quadratic in the types, per family)."""
MAX_NODES = 8
"""Existing nodes with room a family's re-packing may fill at most (each is a node kind of its
own, against ``packing.MAX_TYPES``): those greedy put its pods on first, then by position."""


@dataclass
class _Existing:
    """An existing node a family may fill: the family's pods greedy put there (free to move)
    and the room it has without them."""

    node: SolverNode
    pods: list[PodObject]
    room: Vector


class Repacker:
    """Re-packs the families of one solve's claims (see ``repack``) within the optimizer's
    work budget, each solve under a ``budget``-second safety net (``packing.optimize``);
    ``outcomes`` says what it decided for each family."""

    def __init__(
        self,
        *,
        class_of: Callable[[PodObject], PodClass],
        compatible_types: Callable[[PoolState, Requirements, PodClass], list[TypeInfo]],
        daemons: DaemonOverhead,
        budget: float,
        backend: highs.HiGHS | None = None,
        plans_nominated: bool = False,
        memo: PackingMemo | None = None,
    ) -> None:
        self._class_of = class_of
        self._compatible_types = compatible_types
        self._daemons = daemons
        self._budget = budget
        self._backend = backend
        self._nominated = plans_nominated
        self._memo = memo
        self._claims: list[ClaimState] = []
        self._nodes: Sequence[SolverNode] = ()
        self._taken: set[str] = set()  # pods on existing nodes a family already moves
        self.outcomes: list[packing_problem.PackingOutcome] = []

    def repack(
        self,
        claims: list[ClaimState],
        originals: Mapping[str, PodObject],
        nodes: Sequence[SolverNode] = (),
    ) -> list[ClaimState]:
        """``claims``, each family that only unconstrained pods hold re-packed if cheaper.

        A family shares a NodePool, requirements (but the hostname) and DaemonSet overhead, so
        its pods may move between its claims. A claim stays as greedy made it if its pool has
        ``minValues`` or more than ``packing.MAX_TYPES`` types once dominated ones are left out
        (``_undominated``), or one of its pods has topology, pod (anti-)affinity, host ports or
        a hostname requirement, or was placed only once relaxed.

        With plans nominated, the existing ``nodes`` with room are in the plan too, for free
        (``_existing``): greedy fills them first with whatever comes, the plan with the pods
        they save most on; their pods are then nominated there like a new node's.
        """
        self._claims = list(claims)
        # Only nodes a nomination reaches: NodeClaims, launching or registered (a NodePool's).
        self._nodes = [n for n in nodes if n.node.in_flight or n.node.nodepool is not None]
        if not self._nominated:
            self._nodes = []
        self._taken = set()
        for (_, requirements, daemon), family in self._families(originals).items():
            types = [
                t
                for t in family[0].pool.types
                if requirements.conflict_with(t.requirements) is None
                and compatible_offerings(t.instance_type, requirements)
                and fits(daemon, t.allocatable)
            ]
            own: dict[str, list[PodObject]] = {}
            for claim in family:
                for pod in claim.pods:
                    own.setdefault(self._class_of(pod).signature, []).append(pod)
            existing = self._existing(family, requirements, own, originals)
            groups = _with_pods(own, existing, self._class_of)
            allowed = [
                {id(t) for t in self._compatible_types(family[0].pool, requirements, pod_class)}
                for pod_class in (self._class_of(pods[0]) for pods in groups.values())
            ]
            kept = _undominated(types, allowed, requirements, limits=family[0].pool.remaining)
            if len(kept) > packing.MAX_TYPES:
                greedy_cost = sum(
                    cheapest_price(_greedy_type(c, requirements), requirements) for c in family
                )
                self.outcomes.append(packing_problem.PackingOutcome("too-large", greedy_cost))
                continue
            if len(kept) + len(existing) > packing.MAX_TYPES:
                existing = existing[: packing.MAX_TYPES - len(kept)]
                groups = _with_pods(own, existing, self._class_of)
                allowed = allowed[: len(groups)]
            for entry in existing:
                self._taken.update(pod_key(pod) for pod in entry.pods)
            problem = self._packing_problem(family, requirements, kept, own)
            work = packing.Work()  # the family's, shared by both solves (dives stop on it)
            if existing:
                # With the existing nodes' room only: a second solve without it found a cheaper
                # plan on 3 of the benchmark's 65 seeds with existing nodes (0.08-1.2%) and a
                # dearer one on 1, for 80% more CPU on them (docs/benchmarks.md).
                roomy = self._packing_problem(family, requirements, kept, groups, existing)
                outcome = self._optimize(roomy, plans_nominated=True, work=work)
                if outcome.cost is not None:
                    problem, own = roomy, groups
                else:
                    existing = []
            else:
                outcome = self._optimize(problem, plans_nominated=self._nominated, work=work)
            if outcome.bins is not None and self._nominated:
                # Equal-cost plans differ in node count; with the plan nominated it is realized
                # as made, so the fewest nodes for its price is safe to take (without, the
                # readiness model judged this plan's nodes, so it stays as judged).
                bins = tuple(packing_problem.fewest_nodes(problem, outcome.bins))
                cost = packing_problem.plan_cost(problem, bins)
                outcome = dataclasses.replace(outcome, bins=bins, cost=cost, worst=cost)
            if outcome.bins is not None:
                before = self._claims
                self._replace(
                    family, types, own, outcome, problem, allowed=allowed, existing=existing
                )
                if self._claims is before:  # no cheaper once built as NodeClaims: greedy's stay
                    outcome = dataclasses.replace(outcome, status="voided", bins=None, cost=None)
            self.outcomes.append(outcome)
        return self._claims

    def _optimize(
        self, problem: packing_problem.PackingProblem, *, plans_nominated: bool, work: packing.Work
    ) -> packing_problem.PackingOutcome:
        """``packing.optimize``'s outcome for ``problem``, kept in the memo when there is one
        (``work`` is the family's own and starts empty, so it is not part of what decides)."""

        def solve() -> packing_problem.PackingOutcome:
            return packing.optimize(
                problem,
                budget=self._budget,
                backend=self._backend,
                plans_nominated=plans_nominated,
                work=work,
            )

        if self._memo is None:
            return solve()
        return self._memo.outcome((problem, self._budget, self._backend, plans_nominated), solve)

    def _families(
        self, originals: Mapping[str, PodObject]
    ) -> dict[tuple[int, Requirements, Vector], list[ClaimState]]:
        """The claims whose pods may move between them, by pool, requirements but the hostname,
        and DaemonSet overhead; a claim whose pool or pods rule a re-pack out is in none."""
        families: dict[tuple[int, Requirements, Vector], list[ClaimState]] = {}
        for claim in self._claims:
            pool = claim.pool
            if pool.min_values or len(pool.types) > MAX_CATALOG:
                continue
            if all(self._movable(pod, originals) for pod in claim.pods):
                key = (id(pool), _without_hostname(claim.requirements), claim.daemon)
                families.setdefault(key, []).append(claim)
        return families

    def _movable(self, pod: PodObject, originals: Mapping[str, PodObject]) -> bool:
        pod_class = self._class_of(pod)
        return (
            originals.get(pod_key(pod)) is pod
            and not pod_class.topological
            and not pod_class.host_ports
            and pod_class.requirements is not None
            and wellknown.LABEL_HOSTNAME not in pod_class.requirements
        )

    def _existing(
        self,
        family: Sequence[ClaimState],
        requirements: Requirements,
        groups: Mapping[str, Sequence[PodObject]],
        originals: Mapping[str, PodObject],
    ) -> list[_Existing]:
        """The existing nodes the family's pods may go to with room for one, at most
        ``MAX_NODES``, those with pods greedy put there that a claim of the family could hold
        instead first (but pods a node was launched for, which go back to it, and pods another
        family moves): those join the family."""
        found: list[_Existing] = []
        if not self._nodes:
            return found
        classes = [self._class_of(group[0]) for group in groups.values()]
        for node in self._nodes:
            pods = [
                pod
                for pod in node.placed
                if pod_key(pod) not in node.node.nominated
                and pod_key(pod) not in self._taken
                and self._movable(pod, originals)
                and self._joins(family, requirements, groups, self._class_of(pod))
            ]
            room = tuple(a - t for a, t in zip(node.allocatable, node.total, strict=True))
            for pod in pods:
                room = add(room, self._class_of(pod).vector)
            if pods or any(fits(c.vector, room) and _accepts(node, c) for c in classes):
                found.append(_Existing(node, pods, room))
        found.sort(key=lambda entry: not entry.pods)  # stable: then by position
        return found[:MAX_NODES]

    def _joins(
        self,
        family: Sequence[ClaimState],
        requirements: Requirements,
        groups: Mapping[str, Sequence[PodObject]],
        pod_class: PodClass,
    ) -> bool:
        """Whether a claim of the family could hold pods of ``pod_class``: it has some, or
        the class asks for nothing the family's requirements do not already say and tolerates
        its NodePool's taints."""
        if pod_class.signature in groups:
            return True
        pool = family[0].pool
        assert pod_class.requirements is not None
        return (
            untolerated_pool_taint(pod_class, pool) is None
            and requirements.merged(pod_class.requirements) == requirements
            and bool(self._compatible_types(pool, requirements, pod_class))
        )

    def _packing_problem(
        self,
        claims: Sequence[ClaimState],
        requirements: Requirements,
        types: Sequence[TypeInfo],
        groups: Mapping[str, Sequence[PodObject]],
        existing: Sequence[_Existing] = (),
    ) -> packing_problem.PackingProblem:
        daemon = claims[0].daemon
        pool = claims[0].pool
        signatures = list(groups)
        index = {id(t): i for i, t in enumerate(types)}
        pod_groups = []
        for signature in signatures:
            pod_class = self._class_of(groups[signature][0])
            allowed = self._compatible_types(pool, requirements, pod_class)
            nodes = [n for n, e in enumerate(existing) if _accepts(e.node, pod_class)]
            pod_groups.append(
                packing_problem.PodGroup(
                    pod_class.vector,
                    len(groups[signature]),
                    frozenset(index[id(t)] for t in allowed if id(t) in index)
                    | {len(types) + n for n in nodes},
                )
            )
        bin_types = tuple(
            packing_problem.BinType(
                tuple(a - d for a, d in zip(t.allocatable, daemon, strict=True)),
                cheapest_price(t, requirements),
                limit_use(t.capacity),
            )
            for t in types
        ) + tuple(
            packing_problem.BinType(e.room, 0.0, (0,) * len(daemon), available=1) for e in existing
        )
        greedy = []
        partial = packing_problem.PackingProblem(bin_types, tuple(pod_groups), (), ())
        for claim in claims:
            cheapest = _greedy_type(claim, requirements)
            counts = [0] * len(signatures)
            for pod in claim.pods:
                counts[signatures.index(self._class_of(pod).signature)] += 1
            kind = index.get(id(cheapest))
            if kind is None:  # dominated: its dominator holds the pods for no more
                kind = packing_problem.cheapest_type(partial, counts)
                assert kind is not None
            greedy.append(packing_problem.Bin(kind, tuple(counts)))
        for n, entry in enumerate(existing):
            if entry.pods:
                counts = [0] * len(signatures)
                for pod in entry.pods:
                    counts[signatures.index(self._class_of(pod).signature)] += 1
                greedy.append(packing_problem.Bin(len(types) + n, tuple(counts)))
        queue = sorted(
            (pod for signature in signatures for pod in groups[signature]), key=_queue_order
        )
        limit = None
        if pool.remaining is not None:
            limit = pool.remaining
            for claim in claims:
                limit = add(limit, limit_use(claim.reserved))
        return packing_problem.PackingProblem(
            bin_types,
            tuple(pod_groups),
            tuple(greedy),
            tuple(signatures.index(self._class_of(p).signature) for p in queue),
            limit,
            daemon,
        )

    def _replace(
        self,
        claims: Sequence[ClaimState],
        types: Sequence[TypeInfo],
        groups: Mapping[str, Sequence[PodObject]],
        outcome: packing_problem.PackingOutcome,
        problem: packing_problem.PackingProblem,
        *,
        allowed: Sequence[set[int]],
        existing: Sequence[_Existing] = (),
    ) -> None:
        """Swap ``claims`` for the plan's nodes, built as ``_place_on_new_claim`` builds one,
        and put the pods it plans on ``existing`` nodes there instead of greedy's.

        Each lists every type that holds its pods and, as greedy does, fits what is left of the
        NodePool's limits, and under limits none counting more against them than the type it
        was planned with (else the first claims' largest types use up the limits the plan
        fits in); if that leaves the plan no cheaper, greedy's claims stay.
        """
        assert outcome.bins is not None
        pool, daemon, taints = claims[0].pool, claims[0].daemon, claims[0].taints
        requirements = _without_hostname(claims[0].requirements)
        remaining = problem.limit
        waiting = [list(groups[signature]) for signature in groups]
        hostnames = [claim.hostname for claim in claims]
        built: list[ClaimState] = []
        on_nodes: dict[int, list[PodObject]] = {}
        for plan_bin in sorted(outcome.bins, key=lambda b: -problem.types[b.type].price):
            pods = [waiting[g].pop() for g, n in enumerate(plan_bin.counts) for _ in range(n)]
            if problem.types[plan_bin.type].available is not None:  # an existing node
                on_nodes[plan_bin.type - (len(problem.types) - len(existing))] = pods
                continue
            pods_total = packing_problem.load(problem, plan_bin.counts)
            total = add(pods_total, daemon)
            # Every type of the family that holds them, dominated ones too (launch fallbacks).
            present = [allowed[g] for g, n in enumerate(plan_bin.counts) if n]
            listed = [
                t
                for t in types
                if all(id(t) in ids for ids in present) and fits(total, t.allocatable)
            ]
            if remaining is not None:
                # Under limits, no type counting more than the planned one: each claim counts
                # at its largest type, and the plan fits the limits at its planned types.
                bound = problem.types[plan_bin.type].limit_use
                listed = [
                    t
                    for t in listed
                    if fits(limit_use(t.capacity), remaining) and fits(limit_use(t.capacity), bound)
                ]
            # Judged as its cheapest type: a limit that rules that type out voids it.
            planned = problem.types[plan_bin.type].price
            if not listed or min(cheapest_price(t, requirements) for t in listed) > planned:
                return
            reserved: Vector = ()
            if remaining is not None:
                reserved = max_capacity(listed)
                remaining = tuple(
                    r - u for r, u in zip(remaining, limit_use(reserved), strict=True)
                )
            hostname = (
                hostnames[len(built)]
                if len(built) < len(hostnames)
                else f"{HOSTNAME_PLACEHOLDER}{len(self._claims) + len(built):04d}"
            )
            named = requirements.with_requirement(
                Requirement.new(wellknown.LABEL_HOSTNAME, "In", [hostname])
            )
            ports = self._daemons.host_ports_for_node(named, taints)
            built.append(
                ClaimState(
                    0,
                    pool,
                    hostname,
                    named,
                    taints,
                    listed,
                    0,
                    pods_total,
                    daemon,
                    ports,
                    reserved,
                    pods,
                )
            )
        cost = sum(min(cheapest_price(t, requirements) for t in c.types) for c in built)
        if cost >= outcome.greedy_cost * (1 - packing.EPSILON):
            return
        if pool.remaining is not None and remaining is not None:
            pool.remaining = remaining
        for n, entry in enumerate(existing):
            moved = {id(pod) for pod in entry.pods}
            node = entry.node
            node.placed = [pod for pod in node.placed if id(pod) not in moved]
            node.placed += on_nodes.get(n, [])
            node.total = tuple(a - r for a, r in zip(node.allocatable, entry.room, strict=True))
            for pod in on_nodes.get(n, []):
                node.total = add(node.total, self._class_of(pod).vector)
        first = self._claims.index(claims[0])
        replaced = {id(c) for c in claims}
        kept = [c for c in self._claims if id(c) not in replaced]
        kept[first:first] = built
        for number, claim in enumerate(kept):
            claim.index = number
        self._claims = kept


def _with_pods(
    groups: Mapping[str, Sequence[PodObject]],
    existing: Sequence[_Existing],
    class_of: Callable[[PodObject], PodClass],
) -> dict[str, list[PodObject]]:
    """``groups`` and the pods greedy put on ``existing`` nodes, by class (theirs first)."""
    result = {signature: list(pods) for signature, pods in groups.items()}
    for entry in existing:
        for pod in entry.pods:
            result.setdefault(class_of(pod).signature, []).append(pod)
    return result


def _greedy_type(claim: ClaimState, requirements: Requirements) -> TypeInfo:
    """The type greedy's claim would launch: its cheapest that holds its pods."""
    total = add(claim.pods_total, claim.daemon)
    fitting = [t for t in claim.types[claim.first :] if fits(total, t.allocatable)]
    return min(fitting, key=lambda t: cheapest_price(t, requirements))


def _undominated(
    types: Sequence[TypeInfo],
    allowed: Sequence[set[int]],
    requirements: Requirements,
    *,
    limits: Vector | None,
) -> list[TypeInfo]:
    """``types`` less each one another makes useless to the plan: one that every pod group
    allowed on it may use too, at least as large in every resource, no dearer in any zone and
    capacity type it is offered in (and, under NodePool limits, counting no more against them).

    Any plan using a dominated type costs no less with its dominator, so the optimizer need
    not see it; a catalog of hundreds of sizes and families is often a few dozen that matter.
    Ties keep the first.
    """
    offers = [_offer_prices(t, requirements) for t in types]
    kept: list[TypeInfo] = []
    for a, small in enumerate(types):
        groups = [ids for ids in allowed if id(small) in ids]
        dominated = False
        for b, big in enumerate(types):
            if b == a or not all(id(big) in ids for ids in groups):
                continue
            if not fits(small.allocatable, big.allocatable):
                continue
            if limits is not None and not fits(limit_use(big.capacity), limit_use(small.capacity)):
                continue
            if any(offers[b].get(key, math.inf) > price for key, price in offers[a].items()):
                continue
            same = (
                big.allocatable == small.allocatable
                and offers[b] == offers[a]
                and (limits is None or big.capacity == small.capacity)
            )
            if not same or b < a:
                dominated = True
                break
        if not dominated:
            kept.append(small)
    return kept


def _offer_prices(info: TypeInfo, requirements: Requirements) -> dict[tuple[str, str], float]:
    prices: dict[tuple[str, str], float] = {}
    for offering in compatible_offerings(info.instance_type, requirements):
        key = (offering.zone, offering.capacity_type)
        prices[key] = min(prices.get(key, math.inf), offering.price)
    return prices


def _without_hostname(requirements: Requirements) -> Requirements:
    return Requirements(r for key, r in requirements.items() if key != wellknown.LABEL_HOSTNAME)


def _queue_order(pod: PodObject) -> tuple[int, str, str]:
    """kube-scheduler's active queue: priority descending, then creation time."""
    spec = pod.get("spec") or {}
    meta = pod.get("metadata") or {}
    return (-(spec.get("priority") or 0), meta.get("creationTimestamp") or "", pod_key(pod))


def _accepts(node: SolverNode, pod_class: PodClass) -> bool:
    """Whether ``node`` takes pods of ``pod_class`` but for room (the solver's own checks for
    a pod without topology or host ports: taints, then labels or, in flight, requirements)."""
    assert pod_class.requirements is not None
    if strictly_untolerated(pod_class.tolerations, node.node.taints) is not None:
        return False
    if node.node.in_flight:
        return node.requirements.incompatibility(pod_class.requirements) is None
    return pod_class.requirements.satisfied_by(node.node.labels)
