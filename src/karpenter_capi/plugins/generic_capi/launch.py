"""Launch: turn a NodeClaim into exactly one more Machine of the cheapest resource that can
make it, without ever waiting for that Machine (design decision 3, "Launch never waits").

The lifecycle controller calls ``create`` for a NodeClaim every few seconds until the result
carries a provider ID. Each call takes one step from durable state, never from memory, so any
process can take the next one after a crash:

1. **Bound already?** The NodeClaim's ``cluster.x-k8s.io/machine`` annotation, the member-Machine
   cache, or the resource's Machines name its Machine: answer with the Machine's provider ID
   once CAPI has set it. A Machine that failed marks its resource unavailable and reports
   insufficient capacity, so the pods are simulated again elsewhere.
2. **Which resource.** The one the NodeClaim already waits on (annotation
   ``karpenter.cluster.x-k8s.io/scalable-resource``, recorded through the result), else the
   cheapest available offering the core passed, mapped to the resources behind it through the
   inventory (ties: resource price, instance type, zone, capacity type, resource key).
3. **Bind or scale.** One read of the resource, its Machines and the NodeClaims gives the
   waiting NodeClaims (those naming the resource, not deleting, not bound). ``binding.match``
   pairs them with the free Machines; if this NodeClaim gets one it binds it (one write). A
   Machine nobody claimed for ``unclaimed_ttl`` it adopts, giving back its own replica.
   Otherwise the replicas should be ``target`` = Machines that stay + waiting NodeClaims no free
   Machine serves (the shortfall), capped by the max-size annotation: the replicas are raised
   to ``target`` if lower, never beyond, through the scale subresource with a resourceVersion
   precondition. Every concurrent call computes the same target, and a restart cannot count a
   NodeClaim twice.

One write per round. The waiting NodeClaims include those this process sent to the resource
and whose intent the core has not written yet (``inflight``: otherwise the next NodeClaim of
the round would bind the Machine made for the previous one, which would ask again only at its
next poll). And a NodeClaim's first call that would raise the replicas leaves that to the last
NodeClaim of its round: it records its choice, then, if another NodeClaim of this plugin's kind
created within ``round_window`` has chosen nothing yet, it only waits. One the core could not
launch (a hand-made NodeClaim whose NodePool does not exist) is not waited for: its call may
never come, and every launch beside it would wait a whole poll. The call that finds none
closes the round: it raises its own resource and every resource left to it (``_close_round``),
each to its target from a fresh read. Recording before looking means that of two concurrent
first calls at least one sees the other's choice, so some call always closes the round.

A resource that cannot serve the NodeClaim is left for the next cheapest: when the NodeClaim
falls beyond the max size, or when no Machine was bound within ``machine_timeout`` of the
request. The timeout gives back the replica this NodeClaim had asked for when it has no Machine
yet (first listing the Machines, so a copy that lags cannot hide one already made for it:
giving back would remove that Machine); both mark the resource unavailable
(``inventory.UnavailableOfferings``) for the solver.
Conflicts are not a reason to move: a 409 says the resource or a Machine changed since it was
read, not that it cannot make the Node, so after ``conflict_retries`` fresh reads the NodeClaim
stays where it is and its next poll tries again (moving on left the replica asked for here
standing and bought a second Node elsewhere: issue 25's extra Node under load). For the same
reason a give-back that met only conflicts keeps the NodeClaim waiting where it is. When no
candidate is left the call raises ``InsufficientCapacityError`` and the core deletes the
NodeClaim. A replica is never given back while a MachineDeployment rolls out
(``scaling.withdrawal_unsafe``: CAPI would remove a running Machine instead), so a timed-out
NodeClaim keeps waiting there.

While Machines of the resource are marked for deletion and the replicas already exclude them,
no scale-up is written: CAPI cannot remove marked Machines and add new ones in one replica
change, so the deletion goes first and the scale-up follows a few seconds later.

A native plugin reuses this logic for resources it creates itself (``capz``'s MachinePools,
one per VM size, priority and zone): it passes its own ``inventory`` (the pools that would
serve each offering, whether they exist yet or not) and a ``prepare`` step that creates a pool
before its first read, or names why the pool cannot serve (its provider reports it failed): the
NodeClaim then gives back the replica it asked for and falls through to the next candidate, and
the resource is marked unavailable.

The counting rules themselves (waiting NodeClaims, pairing, target, ranking) are in
``planning``, the reads in ``launch_reads``; this module writes and decides what to try next.
The NodeClaims and a resource's Machines are read through ``mirror``: as fresh as a list, at
the cost of the changes since the previous call (a list per call made a burst of N NodeClaims
cost O(N^2)).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from datetime import datetime, timedelta

from karpenter_capi.plugin_api import (
    InstanceType,
    InsufficientCapacityError,
    KubeClient,
    LaunchResult,
    NodeClaim,
    PluginContext,
    RetryableCreateError,
)
from karpenter_capi.plugin_api.karpenter import NodeClass, format_timestamp
from karpenter_capi.plugin_api.kube import ApiError, CapiResources, Conflict, NotFound
from karpenter_capi.plugins.generic_capi.binding import (
    ANNOTATION_MACHINE,
    ANNOTATION_REQUESTED_AT,
    ANNOTATION_SCALABLE_RESOURCE,
    ClaimFacts,
    MachineFacts,
    bind_patch,
    bound_machine,
    claim_facts,
    machine_facts,
)
from karpenter_capi.plugins.generic_capi.inflight import LaunchesInFlight
from karpenter_capi.plugins.generic_capi.instances import MachineCache
from karpenter_capi.plugins.generic_capi.inventory import UnavailableOfferings
from karpenter_capi.plugins.generic_capi.just_selected import JustSelected
from karpenter_capi.plugins.generic_capi.launch_reads import InventoryOf, LaunchReads
from karpenter_capi.plugins.generic_capi.mirror import ClusterMirrors, WaitingClaims
from karpenter_capi.plugins.generic_capi.planning import (
    Candidate,
    LaunchSettings,
    Plan,
    make_plan,
    nothing_available,
    rank_candidates,
    waiting_claims,
)
from karpenter_capi.plugins.generic_capi.scaling import (
    ResourceRef,
    ResourceState,
    owner_of,
    scale,
    withdrawal_blocked,
)

log = logging.getLogger(__name__)

Prepare = Callable[[Candidate], str | None]
"""Called before a candidate resource is read: makes it exist if it may (a native plugin's
lazily created pool), or says why it cannot serve now (a pool its provider reports failed)."""


@dataclass(frozen=True)
class _Outcome:
    """``machine`` when bound; ``waiting`` when the resource will serve the NodeClaim; else
    ``skip`` says why not (and ``mark`` whether the resource is unavailable for everyone)."""

    machine: MachineFacts | None = None
    waiting: bool = False
    skip: str = ""
    mark: bool = False


@dataclass
class _Call:
    """One ``create`` call: its NodeClaim, its time, and what it read, read at most once."""

    claim: ClaimFacts
    now: datetime
    may_defer: bool = False
    """Its first call here, with no resource chosen yet: it may leave the scale-up to the
    last NodeClaim of its round."""
    waiting: WaitingClaims | None = None
    choosing: bool | None = None

    def claims(self, mirrors: ClusterMirrors) -> WaitingClaims:
        if self.waiting is None:
            self.waiting = mirrors.waiting()
        return self.waiting


class Launcher:
    """The ``karpenter_capi_create`` logic for one management cluster (thread-safe: what it
    decides from lives in the API, plus the intents this process sent that the API does not
    show yet, ``inflight``; the caches only save reads)."""

    def __init__(
        self,
        ctx: PluginContext,
        capi: CapiResources,
        cache: MachineCache,
        unavailable: UnavailableOfferings,
        settings: LaunchSettings,
        *,
        mirrors: ClusterMirrors,
        inflight: LaunchesInFlight,
        inventory: InventoryOf | None = None,
        prepare: Prepare | None = None,
        selected: JustSelected | None = None,
    ) -> None:
        self._ctx = ctx
        self._reads = LaunchReads(
            ctx, capi, cache, mirrors, inflight, inventory=inventory, selected=selected
        )
        self._prepare = prepare
        self._inflight = inflight
        self._client: KubeClient = ctx.management
        self._capi = capi
        self._cache = cache
        self._mirrors = mirrors
        self._unavailable = unavailable
        self._settings = settings

    # --- entry point ----------------------------------------------------------------------------

    def create(
        self, nodeclaim: NodeClaim, instance_types: Sequence[InstanceType], nodeclass: NodeClass
    ) -> LaunchResult:
        call = _Call(claim_facts(nodeclaim), self._ctx.clock.now())
        name = call.claim.name
        self._inflight.ran(name)
        call.may_defer = not call.claim.intent and not self._inflight.has_intent(name)
        try:
            result = self._create(call, instance_types, nodeclass)
        except InsufficientCapacityError:
            self._inflight.done(name)
            self._close_round(call)
            raise
        self._close_round(call)
        return result

    def _create(
        self, call: _Call, instance_types: Sequence[InstanceType], nodeclass: NodeClass
    ) -> LaunchResult:
        claim, now = call.claim, call.now
        # The resource the API records, else the one this process last sent the NodeClaim to:
        # a call that failed after its scale write (its answer lost: a timeout, a dropped
        # connection) returned no result for the core to record, yet the write may have
        # raised the replicas for it. Choosing afresh could send it elsewhere and leave that
        # replica standing (issue 25); the resource decides again from a fresh read instead.
        sent = claim.intent or self._inflight.intent_of(claim.name) or ""
        intent = ResourceRef.parse(sent) if sent else None
        machine, lost = self._reads.find_binding(claim)
        if machine is not None:
            owner = owner_of(machine) or intent
            candidate = self._reads.describe(claim, owner, nodeclass)
            if candidate is None:
                raise RetryableCreateError(
                    f"Machine {machine.key} is bound but its scalable resource is unknown"
                )
            return self._bound(claim, candidate, machine, now)
        tried: list[Candidate] = []
        reasons: list[str] = []
        if intent is not None:
            sticky = self._reads.describe(claim, intent, nodeclass)
            if sticky is not None:
                outcome = self._attempt(sticky, call, sticky=True)
                if outcome.machine is not None:
                    return self._bound(claim, sticky, outcome.machine, now)
                if outcome.waiting:
                    return self._waiting(claim, sticky, now, lost=lost, since=claim.requested_at)
                self._give_up_on(sticky, outcome, reasons)
                tried.append(sticky)
            else:
                # The resource it waited on is no longer described anywhere: withdraw its
                # replica there before choosing again, or it would be counted twice.
                state = self._reads.read_state(intent)
                claims = self._reads.on(call.claims(self._mirrors), intent)
                self._give_back(state, claim, claims, self._cache.bound_claims())
        inventory = self._reads.inventory_of(nodeclass)
        candidates = rank_candidates(instance_types, inventory, self._unavailable)
        for candidate in candidates:
            if any(candidate.ref == done.ref for done in tried):
                continue
            outcome = self._attempt(candidate, call, sticky=False)
            if outcome.machine is not None:
                return self._bound(claim, candidate, outcome.machine, now)
            if outcome.waiting:
                return self._waiting(claim, candidate, now, lost=lost, since=None)
            self._give_up_on(candidate, outcome, reasons)
            tried.append(candidate)
        detail = "; ".join(reasons) or nothing_available(inventory)
        raise InsufficientCapacityError(
            detail,
            [(c.instance_type, c.offering) for c in tried if c.offering is not None],
        )

    # --- the round (the reads: ``launch_reads``) ------------------------------------------------

    def _choosing(self, call: _Call) -> bool:
        """Whether another NodeClaim of this round has yet to choose its resource: created
        within ``round_window``, launched by this plugin, with no intent in the API or here,
        and not held back by the core (``ClaimFacts.launch_held``)."""
        if call.choosing is None:
            claim = call.claim
            window = self._settings.round_window
            horizon = call.now - timedelta(seconds=window)
            call.choosing = window > 0 and any(
                other.name != claim.name
                and other.node_class_kind == claim.node_class_kind
                and other.created >= horizon
                and not other.launch_held  # a hand-made one may never get here (issue 24)
                and not self._inflight.has_intent(other.name)
                for other in call.claims(self._mirrors).choosing
            )
        return call.choosing

    # --- one resource ---------------------------------------------------------------------------

    def _attempt(self, candidate: Candidate, call: _Call, *, sticky: bool) -> _Outcome:
        ref = candidate.ref
        claim, now = call.claim, call.now
        claims = self._reads.on(call.claims(self._mirrors), ref)
        bound_elsewhere = self._cache.bound_claims()
        problem = self._prepare(candidate) if self._prepare is not None else None
        if problem is not None:
            if sticky:
                self._give_back(self._reads.read_state(ref), claim, claims, bound_elsewhere)
            return _Outcome(skip=problem, mark=True)
        for _ in range(self._settings.conflict_retries):
            state = self._reads.read_state(ref)
            if state is None or state.deleting:
                gone = "no longer exists" if state is None else "is being deleted"
                return _Outcome(skip=f"{ref} {gone}")
            self._cache.observe_all(state.machines)
            mine = bound_machine(claim, state.machines)
            if mine is not None:
                return _Outcome(machine=mine)
            others = waiting_claims(claims, state, bound_elsewhere, exclude=claim.name)
            plan = self._plan(state, [*others, claim], now)
            free = plan.pairs.get(claim.name)
            if free is not None:
                try:
                    written = self._client.patch(
                        self._capi.machines, free.name, bind_patch(free, claim), free.namespace
                    )
                except (Conflict, NotFound):
                    # The copy the bind was made from lags the API: read the Machine itself,
                    # so the next try decides from what the API has (``mirror`` docstring).
                    self._reads.refresh_machine(ref, free)
                    continue
                bound = machine_facts(written)
                self._cache.observe(bound)
                self._unavailable.clear(ref.key)
                log.info("bound Machine %s to NodeClaim %s", bound.key, claim.name)
                if free.created < self._settings.unclaimed_before(now):
                    self._adopted(state, bound, claim, claims, bound_elsewhere)
                return _Outcome(machine=bound)
            since = claim.requested_at if sticky else None
            timeout = timedelta(seconds=self._settings.machine_timeout)
            if since is not None and now - since > timeout:
                if self._machine_on_its_way(state, [*others, claim], claim):
                    self._inflight.intend(claim, ref.key)
                    return _Outcome(waiting=True)
                return self._expired(state, claim, claims, bound_elsewhere)
            if not plan.serves(claim):
                if sticky:
                    self._give_back(state, claim, claims, bound_elsewhere)
                return _Outcome(
                    skip=f"{ref} is at its maximum size ({state.max_size} replicas)", mark=True
                )
            # Sent here from now on: the NodeClaims that choose after this one count it.
            self._inflight.intend(claim, ref.key)
            if call.may_defer and state.replicas < plan.target and self._choosing(call):
                # The last NodeClaim of the round raises the replicas for all (module docstring).
                self._inflight.defer(ref.key, claim.name)
                return _Outcome(waiting=True)
            if self._raise(state, plan, claim.name) is None:
                continue
            return _Outcome(waiting=True)
        # Conflicts say the resource or its Machines changed, not that it cannot serve: the
        # NodeClaim stays with it and the next poll decides again from fresh reads. Moving on
        # would leave a replica raised here for it standing, and buy a second Node elsewhere.
        self._inflight.intend(claim, ref.key)
        log.info(
            "NodeClaim %s stays with %s after %d conflicts in a row; trying again at its next poll",
            claim.name,
            ref,
            self._settings.conflict_retries,
        )
        return _Outcome(waiting=True)

    def _machine_on_its_way(
        self, state: ResourceState, waiting: Sequence[ClaimFacts], claim: ClaimFacts
    ) -> bool:
        """Whether a list of the resource's Machines made now gives ``claim`` a Machine its
        copy does not show yet. Giving the replica back is the one step that cannot be taken
        back (CAPI removes the Machine made for it), and the copy may lag the API by seconds on
        a loaded machine: before it, the Machines are listed, and the copy takes what the list
        shows (``Mirror.saw``), so the next call binds the Machine instead."""
        ref = state.ref
        listed = self._client.list(
            self._capi.machines, ref.namespace, label_selector=ref.machine_selector
        )
        fresh = [self._mirrors.saw_machine(ref, raw) for raw in listed.items]
        plan = self._plan(
            ResourceState(state.ref, state.obj, fresh), waiting, self._ctx.clock.now()
        )
        if claim.name not in plan.pairs:
            return False
        log.info(
            "NodeClaim %s keeps waiting on %s past machine_timeout: Machine %s is on its way",
            claim.name,
            state.ref,
            plan.pairs[claim.name].key,
        )
        return True

    def _expired(
        self,
        state: ResourceState,
        claim: ClaimFacts,
        claims: Sequence[ClaimFacts],
        bound_elsewhere: AbstractSet[str],
    ) -> _Outcome:
        """No Machine within ``machine_timeout``: give the replica back and look elsewhere; if that
        would remove another Machine or met only conflicts, keep waiting here (deleting the
        NodeClaim withdraws it)."""
        if not self._give_back(state, claim, claims, bound_elsewhere):
            self._inflight.intend(claim, state.ref.key)
            return _Outcome(waiting=True)
        timeout = self._settings.machine_timeout
        return _Outcome(skip=f"{state.ref} produced no Machine within {timeout:g}s", mark=True)

    def _plan(self, state: ResourceState, waiting: Sequence[ClaimFacts], now: datetime) -> Plan:
        return make_plan(state, waiting, unclaimed_before=self._settings.unclaimed_before(now))

    def _adopted(
        self,
        state: ResourceState,
        machine: MachineFacts,
        claim: ClaimFacts,
        claims: Sequence[ClaimFacts],
        bound_elsewhere: AbstractSet[str],
    ) -> None:
        """``claim`` took a Machine nobody had claimed (``unclaimed``): the replica it may have
        asked for is not needed any more, so it is given back before CAPI makes its Machine."""
        log.info(
            "NodeClaim %s adopted Machine %s of %s, which no NodeClaim had claimed for %gs",
            claim.name,
            machine.key,
            state.ref,
            self._settings.unclaimed_ttl,
        )
        state.replace(machine)
        self._give_back(state, claim, claims, bound_elsewhere)

    def _raise(self, state: ResourceState, plan: Plan, on_behalf: str) -> bool | None:
        """Raise the replicas to ``plan.target`` unless they are there or a scale-down must go
        first; whether it wrote, ``None`` on a conflict."""
        counted = {*plan.pairs, *(c.name for c in plan.unmatched)}
        if state.marked and state.replicas <= len(state.alive):
            return False  # a scale-down goes first (module docstring)
        if state.replicas >= plan.target:
            self._inflight.covered(state.ref.key, counted)
            return False
        try:
            scale(self._client, self._capi, state, plan.target)
        except Conflict:
            self._reads.conflicted(state.ref)
            return None
        self._inflight.covered(state.ref.key, counted)
        log.info(
            "scaled %s from %d to %d replicas for %d waiting NodeClaims (NodeClaim %s)",
            state.ref,
            state.replicas,
            plan.target,
            len(plan.unmatched),
            on_behalf,
        )
        return True

    def _close_round(self, call: _Call) -> None:
        """When no NodeClaim of the round is left to choose, raise the replicas of every
        resource whose scale-up was left to this moment."""
        deferred = self._inflight.deferred()
        if not deferred:
            return
        try:
            if self._choosing(call):
                return
            for key in deferred:
                ref = ResourceRef.parse(key)
                if ref is not None:
                    self._raise_deferred(ref, call.claim.name)
        except ApiError as exc:
            # The NodeClaims that waited are polled and raise the replicas themselves.
            log.warning("could not raise the replicas left to the end of a round: %s", exc)

    def _raise_deferred(self, ref: ResourceRef, on_behalf: str) -> None:
        for _ in range(self._settings.conflict_retries):
            state = self._reads.read_state(ref)
            if state is None or state.deleting:
                self._inflight.covered(ref.key, None)
                return
            claims = self._reads.on(self._mirrors.waiting(), ref)
            others = waiting_claims(claims, state, self._cache.bound_claims())
            plan = self._plan(state, others, self._ctx.clock.now())
            if self._raise(state, plan, on_behalf) is not None:
                self._inflight.covered(ref.key, None)
                return
        self._inflight.covered(ref.key, None)

    def _give_back(
        self,
        state: ResourceState | None,
        claim: ClaimFacts,
        claims: Sequence[ClaimFacts],
        bound_elsewhere: AbstractSet[str],
    ) -> bool:
        """Withdraw the replica ``claim`` asked ``state``'s resource for, if it has no Machine
        yet: lower the replicas by one, never below what the other waiting NodeClaims need,
        below the Machines that exist, or below the min size. False when it must not, because a
        MachineDeployment is rolling out and CAPI would remove a running Machine instead
        (``scaling.withdrawal_unsafe``), or could not, every write answering 409."""
        for _ in range(self._settings.conflict_retries):
            if state is None:
                return True
            others = waiting_claims(claims, state, bound_elsewhere, exclude=claim.name)
            plan = self._plan(state, others, self._ctx.clock.now())
            floor = max(plan.target, len(state.present), state.min_size or 0)
            if state.replicas <= floor:
                return True
            why = withdrawal_blocked(self._client, self._capi, state)
            if why is not None:
                log.info(
                    "NodeClaim %s keeps its replica of %s for now: %s", claim.name, state.ref, why
                )
                return False
            try:
                scale(self._client, self._capi, state, state.replicas - 1)
            except Conflict:
                self._reads.conflicted(state.ref)
                state = self._reads.read_state(state.ref)
                continue
            log.info(
                "NodeClaim %s gave back its replica of %s (%d -> %d)",
                claim.name,
                state.ref,
                state.replicas,
                state.replicas - 1,
            )
            return True
        # Not given back: conflicts all the way. Said so, or the NodeClaim would move on and
        # leave its replica standing here (a second Node for one NodeClaim).
        return False

    def _give_up_on(self, candidate: Candidate, outcome: _Outcome, reasons: list[str]) -> None:
        reasons.append(outcome.skip)
        if outcome.mark:
            self._unavailable.mark(candidate.ref.key, outcome.skip)
        log.info("not launching on %s: %s", candidate.ref, outcome.skip)

    # --- results --------------------------------------------------------------------------------

    def _annotations(
        self, candidate: Candidate, since: datetime, machine: MachineFacts | None, lost: bool
    ) -> dict[str, str]:
        annotations = {
            ANNOTATION_SCALABLE_RESOURCE: candidate.ref.key,
            ANNOTATION_REQUESTED_AT: format_timestamp(since),
        }
        if machine is not None and machine.provider_id:
            # Recorded with the provider ID, in the core's write that launches the NodeClaim:
            # until then the Machine's own annotation is the record (one write fewer per node).
            annotations[ANNOTATION_MACHINE] = machine.key
        elif lost:
            annotations[ANNOTATION_MACHINE] = ""  # the recorded Machine is gone: forget it
        return annotations

    def _waiting(
        self,
        claim: ClaimFacts,
        candidate: Candidate,
        now: datetime,
        *,
        lost: bool,
        since: datetime | None,
    ) -> LaunchResult:
        self._inflight.intend(claim, candidate.ref.key)
        return candidate.result(self._annotations(candidate, since or now, None, lost))

    def _bound(
        self, claim: ClaimFacts, candidate: Candidate, machine: MachineFacts, now: datetime
    ) -> LaunchResult:
        if machine.failed and not machine.provider_id:
            reason = f"Machine {machine.key} of {candidate.ref} failed"
            self._unavailable.mark(candidate.ref.key, reason)
            raise InsufficientCapacityError(
                reason,
                [(candidate.instance_type, candidate.offering)] if candidate.offering else None,
            )
        if machine.provider_id:
            self._inflight.done(claim.name)
        else:
            self._inflight.bound(claim.name)
        since = claim.requested_at or now
        return candidate.result(
            self._annotations(candidate, since, machine, False), machine.provider_id
        )
