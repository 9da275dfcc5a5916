"""Launch: turn a NodeClaim into exactly one more Machine of the cheapest resource that can
make it, without ever waiting for that Machine (DESIGN decision 2).

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
   pairs them with the free Machines; if this NodeClaim gets one it binds it (one write).
   Otherwise the replicas should be ``target`` = Machines that stay + waiting NodeClaims no free
   Machine serves (the shortfall), capped by the max-size annotation: the replicas are raised
   to ``target`` if lower, never beyond, through the scale subresource with a resourceVersion
   precondition. Every concurrent call computes the same target, so a burst of NodeClaims costs
   one or a few scale writes, and a restart cannot count a NodeClaim twice.

A resource that cannot serve the NodeClaim is left for the next cheapest: when the NodeClaim
falls beyond the max size, when conflicts persist (``conflict_retries``), or when no Machine was
bound within ``machine_timeout`` of the request. The last two give back the replica this
NodeClaim had asked for when it has no Machine yet; max size and the timeout also mark the
resource unavailable (``inventory.UnavailableOfferings``) for the solver. When no candidate is
left the call raises ``InsufficientCapacityError`` and the core deletes the NodeClaim.

While Machines of the resource are marked for deletion and the replicas already exclude them,
no scale-up is written: CAPI cannot remove marked Machines and add new ones in one replica
change, so the deletion goes first and the scale-up follows a few seconds later.

The counting rules themselves (waiting NodeClaims, pairing, target, ranking) are in
``planning``; this module reads, writes and decides what to try next. The NodeClaims and a
resource's Machines are read through ``mirror``: as fresh as a list, at the cost of the changes
since the previous call (a list per call made a burst of N NodeClaims cost O(N^2)).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from datetime import datetime, timedelta

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.clock import format_timestamp
from karpenter_capi.core.errors import InsufficientCapacityError, RetryableCreateError
from karpenter_capi.core.hookspecs import LaunchResult, NodeClass, PluginContext
from karpenter_capi.core.instancetype import InstanceType
from karpenter_capi.core.kube.client import KubeClient
from karpenter_capi.core.kube.discovery import CapiResources
from karpenter_capi.core.kube.errors import Conflict, NotFound
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
from karpenter_capi.plugins.generic_capi.instances import MachineCache
from karpenter_capi.plugins.generic_capi.inventory import UnavailableOfferings, collect_inventory
from karpenter_capi.plugins.generic_capi.mirror import ClusterMirrors, WaitingClaims
from karpenter_capi.plugins.generic_capi.planning import (
    Candidate,
    LaunchSettings,
    make_plan,
    nothing_available,
    rank_candidates,
    waiting_claims,
)
from karpenter_capi.plugins.generic_capi.scaling import (
    ResourceRef,
    ResourceState,
    owner_of,
    read_state,
    scale,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Outcome:
    """``machine`` when bound; ``waiting`` when the resource will serve the NodeClaim; else
    ``skip`` says why not (and ``mark`` whether the resource is unavailable for everyone)."""

    machine: MachineFacts | None = None
    waiting: bool = False
    skip: str = ""
    mark: bool = False


class Launcher:
    """The ``karpenter_capi_create`` logic for one management cluster (thread-safe: all state
    lives in the API; the caches only save reads)."""

    def __init__(
        self,
        ctx: PluginContext,
        capi: CapiResources,
        cache: MachineCache,
        unavailable: UnavailableOfferings,
        settings: LaunchSettings,
        *,
        mirrors: ClusterMirrors,
    ) -> None:
        self._ctx = ctx
        self._client: KubeClient = ctx.management
        self._capi = capi
        self._cache = cache
        self._mirrors = mirrors
        self._unavailable = unavailable
        self._settings = settings

    # --- entry point ----------------------------------------------------------------------------

    def create(
        self, nodeclaim: object, instance_types: Sequence[InstanceType], nodeclass: NodeClass
    ) -> LaunchResult:
        claim = claim_facts(nodeclaim)
        now = self._ctx.clock.now()
        intent = ResourceRef.parse(claim.intent) if claim.intent else None
        machine, lost = self._find_binding(claim)
        if machine is not None:
            owner = owner_of(machine) or intent
            candidate = self._describe(claim, owner, nodeclass)
            if candidate is None:
                raise RetryableCreateError(
                    f"Machine {machine.key} is bound but its scalable resource is unknown"
                )
            return self._bound(claim, candidate, machine, now)
        claims: WaitingClaims | None = None
        tried: list[Candidate] = []
        reasons: list[str] = []
        if intent is not None:
            sticky = self._describe(claim, intent, nodeclass)
            if sticky is not None:
                claims = self._claims()
                outcome = self._attempt(sticky, claim, claims, now, sticky=True)
                if outcome.machine is not None:
                    return self._bound(claim, sticky, outcome.machine, now)
                if outcome.waiting:
                    return self._waiting(claim, sticky, now, lost=lost, since=claim.requested_at)
                self._give_up_on(sticky, outcome, reasons)
                tried.append(sticky)
            else:
                # The resource it waited on is no longer described anywhere: withdraw its
                # replica there before choosing again, or it would be counted twice.
                claims = self._claims()
                state = self._read_state(intent)
                self._give_back(state, claim, claims.on(intent), self._cache.bound_claims())
        inventory = collect_inventory(self._ctx, nodeclass, self._capi)
        candidates = rank_candidates(instance_types, inventory, self._unavailable)
        for candidate in candidates:
            if any(candidate.ref == done.ref for done in tried):
                continue
            if claims is None:
                claims = self._claims()
            outcome = self._attempt(candidate, claim, claims, now, sticky=False)
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

    # --- reading --------------------------------------------------------------------------------

    def _claims(self) -> WaitingClaims:
        return self._mirrors.waiting()

    def _read_state(self, ref: ResourceRef) -> ResourceState | None:
        return read_state(self._client, self._capi, ref, self._mirrors.machines_of)

    def _find_binding(self, claim: ClaimFacts) -> tuple[MachineFacts | None, bool]:
        """The Machine bound to ``claim``, and whether a Machine it recorded was lost."""
        recorded = claim.machine_ref
        if recorded is not None:
            machine = self._get_machine(*recorded)
            if machine is not None and machine.bound_to(claim) and not machine.deleting:
                return machine, False
            return None, True
        for cached in self._cache.bound_to(claim.name):
            machine = self._get_machine(cached.namespace, cached.name)
            if machine is not None and machine.bound_to(claim) and not machine.deleting:
                return machine, False
        return None, False

    def _get_machine(self, namespace: str, name: str) -> MachineFacts | None:
        try:
            raw = self._client.get(self._capi.machines, name, namespace)
        except NotFound:
            self._cache.forget(namespace, name)
            return None
        machine = machine_facts(raw)
        self._cache.observe(machine)
        return machine

    def _describe(
        self, claim: ClaimFacts, ref: ResourceRef | None, nodeclass: NodeClass
    ) -> Candidate | None:
        """The offering ``ref`` makes, from the labels an earlier result gave the NodeClaim,
        else from the inventory."""
        if ref is None:
            return None
        labels = claim.labels
        instance_type = labels.get(wellknown.LABEL_INSTANCE_TYPE)
        if instance_type and claim.intent == ref.key:
            return Candidate(
                ref,
                instance_type,
                labels.get(wellknown.LABEL_TOPOLOGY_ZONE, ""),
                labels.get(wellknown.LABEL_CAPACITY_TYPE, wellknown.CAPACITY_TYPE_ON_DEMAND),
            )
        inventory = collect_inventory(self._ctx, nodeclass, self._capi)
        for resource in inventory.resources:
            if resource.key == ref.key:
                return Candidate(ref, resource.instance_type, resource.zone, resource.capacity_type)
        return None

    # --- one resource ---------------------------------------------------------------------------

    def _attempt(
        self,
        candidate: Candidate,
        claim: ClaimFacts,
        waiting: WaitingClaims,
        now: datetime,
        *,
        sticky: bool,
    ) -> _Outcome:
        ref = candidate.ref
        claims = waiting.on(ref)
        bound_elsewhere = self._cache.bound_claims()
        for _ in range(self._settings.conflict_retries):
            state = self._read_state(ref)
            if state is None:
                return _Outcome(skip=f"{ref} no longer exists")
            if state.deleting:
                return _Outcome(skip=f"{ref} is being deleted")
            self._cache.observe_all(state.machines)
            mine = bound_machine(claim, state.machines)
            if mine is not None:
                return _Outcome(machine=mine)
            others = waiting_claims(claims, state, bound_elsewhere, exclude=claim.name)
            plan = make_plan(state, [*others, claim])
            free = plan.pairs.get(claim.name)
            if free is not None:
                try:
                    written = self._client.patch(
                        self._capi.machines, free.name, bind_patch(free, claim), free.namespace
                    )
                except (Conflict, NotFound):
                    continue
                bound = machine_facts(written)
                self._cache.observe(bound)
                self._unavailable.clear(ref.key)
                log.info("bound Machine %s to NodeClaim %s", bound.key, claim.name)
                return _Outcome(machine=bound)
            since = claim.requested_at if sticky else None
            timeout = timedelta(seconds=self._settings.machine_timeout)
            if since is not None and now - since > timeout:
                self._give_back(state, claim, claims, bound_elsewhere)
                return _Outcome(
                    skip=f"{ref} produced no Machine within {self._settings.machine_timeout:g}s",
                    mark=True,
                )
            if not plan.serves(claim):
                if sticky:
                    self._give_back(state, claim, claims, bound_elsewhere)
                return _Outcome(
                    skip=f"{ref} is at its maximum size ({state.max_size} replicas)", mark=True
                )
            if state.marked and state.replicas <= len(state.alive):
                return _Outcome(waiting=True)  # a scale-down goes first (module docstring)
            if state.replicas >= plan.target:
                return _Outcome(waiting=True)
            try:
                scale(self._client, self._capi, state, plan.target)
            except Conflict:
                continue
            log.info(
                "scaled %s from %d to %d replicas for %d waiting NodeClaims (NodeClaim %s)",
                ref,
                state.replicas,
                plan.target,
                len(plan.unmatched),
                claim.name,
            )
            return _Outcome(waiting=True)
        return _Outcome(
            skip=f"{ref} kept changing ({self._settings.conflict_retries} conflicts in a row)"
        )

    def _give_back(
        self,
        state: ResourceState | None,
        claim: ClaimFacts,
        claims: Sequence[ClaimFacts],
        bound_elsewhere: AbstractSet[str],
    ) -> None:
        """Withdraw the replica ``claim`` asked ``state``'s resource for, if it has no Machine
        yet: lower the replicas by one, never below what the other waiting NodeClaims need,
        below the Machines that exist, or below the min size."""
        for _ in range(self._settings.conflict_retries):
            if state is None:
                return
            others = waiting_claims(claims, state, bound_elsewhere, exclude=claim.name)
            floor = max(make_plan(state, others).target, len(state.present), state.min_size or 0)
            if state.replicas <= floor:
                return
            try:
                scale(self._client, self._capi, state, state.replicas - 1)
            except Conflict:
                state = self._read_state(state.ref)
                continue
            log.info(
                "NodeClaim %s gave back its replica of %s (%d -> %d)",
                claim.name,
                state.ref,
                state.replicas,
                state.replicas - 1,
            )
            return

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
        since = claim.requested_at or now
        return candidate.result(
            self._annotations(candidate, since, machine, False), machine.provider_id
        )
