"""Delete: remove exactly the Machine of a NodeClaim, or withdraw the replica it asked for.

Lowering a scalable resource's replicas lets CAPI choose which Machine goes, so a targeted delete is
two writes (design decision 4, "Deletes target one Machine"): mark the Machine
``cluster.x-k8s.io/delete-machine`` (resourceVersion precondition), then lower the replicas through
the scale subresource (resourceVersion precondition) so that the marked Machines are the ones in
excess. The lowering is computed, not remembered: the replicas should be the number of Machines that
stay (neither deleting nor marked), so one scale write covers every Machine marked so far (deletes
batch per resource), and a retry after a crash between the two writes finds the marked Machine and
finishes the job. If the scale write keeps failing, the mark this call wrote is removed again, so a
later unrelated scale-down does not take this Machine by surprise.

The termination controller calls the hook again every few seconds until it raises
``InstanceNotFoundError``: the hook answers ``True`` while the Machine exists (CAPI drains and
deletes it), and "not found" once it is gone.

Guards:

- **Rollouts.** A MachineDeployment is not scaled down while a rollout would let CAPI pick
  another Machine (``scaling.rollout_in_progress``); the hook answers ``True`` and tries again.
- **Min size.** A resource at its ``cluster-api-autoscaler-node-group-min-size`` is never
  scaled below it. Its Machine is replaced instead: deleted with the replicas unchanged, so the
  MachineSet makes a new one (which becomes ordinary CAPI capacity, or serves a waiting
  NodeClaim). ``get`` reports the headroom so disruption can avoid choosing such nodes.

A NodeClaim deleted before a Machine was bound to it is *cancelled* (``cancel``): if a free
Machine that no other waiting NodeClaim needs was made for it, that Machine is bound to it and
marked in one write and removed as above; else, if its replica is still in flight, the replicas
are lowered by one, never below what the other waiting NodeClaims need or below the Machines
that exist. Another NodeClaim's Machine is never touched.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Final

from karpenter_capi.plugin_api import (
    InstanceNotFoundError,
    KubeClient,
    NodeClaim,
    PluginContext,
    ProviderError,
)
from karpenter_capi.plugin_api.karpenter import format_timestamp
from karpenter_capi.plugin_api.kube import (
    WARNING,
    ApiError,
    CapiResources,
    Conflict,
    EventRecorder,
    NotFound,
    Preconditions,
)
from karpenter_capi.plugins.generic_capi.binding import (
    ANNOTATION_DELETE_MACHINE,
    ANNOTATION_ORPHANED_INSTANCE,
    ClaimFacts,
    MachineFacts,
    bind_patch,
    bound_machine,
    claim_facts,
    machine_facts,
    mark_patch,
    unmark_patch,
)
from karpenter_capi.plugins.generic_capi.instances import MachineCache
from karpenter_capi.plugins.generic_capi.mirror import ClusterMirrors
from karpenter_capi.plugins.generic_capi.planning import LaunchSettings, make_plan, waiting_claims
from karpenter_capi.plugins.generic_capi.scaling import (
    ResourceRef,
    ResourceState,
    machine_sets_of,
    owner_of,
    read_state,
    rollout_in_progress,
    scale,
    withdrawal_blocked,
)
from karpenter_capi.plugins.generic_capi.selection import MACHINE_DEPLOYMENT

log = logging.getLogger(__name__)

_GONE: Final = "its Machine no longer exists"
REASON_UNCLAIMED: Final = "UnclaimedMachine"


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:g}m" if seconds >= 60 else f"{seconds:g}s"


class DeleteFailedError(ProviderError):
    """Removing a Machine failed this time (an API error); the termination controller calls
    the hook again with backoff."""


class ScaleDownFailedError(DeleteFailedError):
    """The replicas could not be lowered (conflicts persisted); the mark was removed."""


class Deleter:
    """The ``karpenter_capi_delete`` logic for one management cluster."""

    def __init__(
        self,
        ctx: PluginContext,
        capi: CapiResources,
        cache: MachineCache,
        settings: LaunchSettings,
        mirrors: ClusterMirrors,
    ) -> None:
        self._ctx = ctx
        self._client: KubeClient = ctx.management
        self._capi = capi
        self._cache = cache
        self._settings = settings
        self._mirrors = mirrors
        self._events = EventRecorder(ctx.management, ctx.clock)
        self._announced: set[str] = set()
        """Unclaimed Machines whose removal was logged and recorded (once per Machine)."""
        self._unrecorded: dict[tuple[str, str], str] = {}
        """(NodeClaim name, uid) -> the resource this process last sent it to, for a NodeClaim
        deleted before the core wrote that intent on it, until its cancel is done."""

    def delete(self, nodeclaim: NodeClaim, sent_to: str | None = None) -> bool | None:
        """``sent_to``: the resource this process last sent the NodeClaim to (``inflight``),
        which the NodeClaim may not show yet (or shows an older one, before a fallback):
        deleted right after the ``create`` that raised the replicas, its replica would
        otherwise never be given back."""
        claim = claim_facts(nodeclaim)
        machine, ours = self._find(claim)
        if machine is not None:
            if machine.deleting:
                return True
            if ANNOTATION_ORPHANED_INSTANCE in claim.annotations:
                return self._remove_orphan(machine, claim)
            return self._remove(machine, claim)
        if ours:
            # It had a Machine (recorded, or an orphan's): never cancel on its behalf.
            raise InstanceNotFoundError(claim.name, _GONE)
        key = (claim.name, claim.uid)
        if sent_to and sent_to != claim.intent:
            self._unrecorded[key] = sent_to
        # What this process sent last is newer than what the API shows (a fallback's intent).
        recorded = self._unrecorded.get(key) or claim.intent
        intent = ResourceRef.parse(recorded) if recorded else None
        if intent is None:
            return None
        try:
            return self._cancel(intent, claim)
        except InstanceNotFoundError:
            self._unrecorded.pop(key, None)
            raise

    # --- finding the Machine ----------------------------------------------------------------

    def _get(self, namespace: str, name: str) -> MachineFacts | None:
        try:
            machine = machine_facts(self._client.get(self._capi.machines, name, namespace))
        except NotFound:
            self._cache.forget(namespace, name)
            return None
        self._cache.observe(machine)
        return machine

    def _find(self, claim: ClaimFacts) -> tuple[MachineFacts | None, bool]:
        """The Machine bound to ``claim`` (deleting ones included), and whether the NodeClaim
        is this plugin's even when no Machine is found."""
        orphan = claim.annotations.get(ANNOTATION_ORPHANED_INSTANCE, "")
        namespace, slash, name = orphan.partition("/")
        if slash and namespace and name:
            # The garbage collector's stand-in for a Machine nobody claims (``unclaimed``).
            return self._get(namespace, name), True
        recorded = claim.machine_ref
        if recorded is not None:
            machine = self._get(*recorded)
            if machine is not None and machine.bound_to(claim):
                return machine, True
        candidates = self._cache.bound_to(claim.name)
        if claim.provider_id:
            by_id = self._cache.by_provider_id(claim.provider_id)
            if by_id is not None:
                candidates.append(by_id)
        for cached in candidates:
            machine = self._get(cached.namespace, cached.name)
            if machine is not None and machine.bound_to(claim):
                return machine, True
        intent = ResourceRef.parse(claim.intent) if claim.intent else None
        if intent is not None:
            machines = self._mirrors.machines_of(intent)
            found = bound_machine(claim, machines, include_deleting=True)
            if found is not None:
                return found, True
        return None, recorded is not None

    # --- a Machine the garbage collector found unclaimed -----------------------------------

    def _remove_orphan(self, machine: MachineFacts, claim: ClaimFacts) -> bool:
        """The garbage collector's stand-in names ``machine``: a Machine bound to a NodeClaim
        that is gone (the stand-in has its name), or one no NodeClaim ever claimed
        (``unclaimed``). Either may have been claimed since the collector looked."""
        if machine.claim and machine.claim != claim.name:
            raise InstanceNotFoundError(
                claim.name, f"Machine {machine.key} is claimed by NodeClaim {machine.claim} now"
            )
        if machine.claim or machine.member:
            return self._remove(machine, claim)
        owner = owner_of(machine)
        state = (
            read_state(self._client, self._capi, owner, self._mirrors.machines_of)
            if owner
            else None
        )
        stays = None if state is None else len(state.alive) - (0 if machine.marked else 1)
        if (
            state is not None
            and state.min_size is not None
            and stays is not None
            and stays < state.min_size
        ):
            # The resource's floor: CAPI capacity, never replaced (that would churn forever).
            raise InstanceNotFoundError(
                claim.name, f"Machine {machine.key} is kept: {owner} is at its min size"
            )
        if not machine.marked and machine.key not in self._announced:
            self._announced.add(machine.key)
            where = f" of {owner}" if owner else ""
            message = (
                f"Machine {machine.key}{where} was claimed by no NodeClaim for "
                f"{_minutes(self._settings.unclaimed_ttl)} (its NodeClaim went before it "
                f"was made); removing it with {ANNOTATION_DELETE_MACHINE} and lowering the "
                "replicas"
            )
            log.warning("%s", message)
            self._events.record(machine.raw, WARNING, REASON_UNCLAIMED, message)
            if state is not None:
                self._events.record(state.obj, WARNING, REASON_UNCLAIMED, message)
        return self._remove(machine, claim)

    # --- a bound Machine --------------------------------------------------------------------

    def _remove(self, machine: MachineFacts, claim: ClaimFacts) -> bool:
        owner = owner_of(machine)
        if owner is None:
            log.info("Machine %s has no scalable resource; deleting it", machine.key)
            return self._delete_machine(machine)
        wrote: MachineFacts | None = None
        try:
            for _ in range(self._settings.conflict_retries):
                state = read_state(self._client, self._capi, owner, self._mirrors.machines_of)
                if state is None:
                    # Nothing would replace it: delete the Machine itself.
                    return self._delete_machine(machine)
                decided = self._decide(owner, machine, claim, state, wrote)
                if isinstance(decided, bool):
                    return decided
                current = decided
                if not current.marked:
                    marked = self._mark(current, state)
                    if marked is None:
                        continue
                    current = wrote = marked
                if self._scale_to_alive(owner, state, current, claim):
                    return True
        except ApiError:
            self._unmark(wrote)
            raise
        self._unmark(wrote)
        raise ScaleDownFailedError(
            f"could not lower the replicas of {owner} to remove Machine {machine.key}: "
            f"{self._settings.conflict_retries} conflicts in a row"
        )

    def _decide(
        self,
        owner: ResourceRef,
        machine: MachineFacts,
        claim: ClaimFacts,
        state: ResourceState,
        wrote: MachineFacts | None,
    ) -> bool | MachineFacts:
        """The Machine as just read, to be marked and scaled away; or the outcome when it
        must not be: already deleting, replaced at min size, or a rollout under way."""
        current = next((m for m in state.machines if m.key == machine.key), None)
        if current is None:
            raise InstanceNotFoundError(claim.name, _GONE)
        if current.deleting:
            return True
        stays = len(state.alive) - (0 if current.marked else 1)
        if state.min_size is not None and stays < state.min_size:
            return self._replace(current, state, wrote)
        if owner.kind == MACHINE_DEPLOYMENT:
            marked = [*state.marked, *([] if current.marked else [current])]
            sets = machine_sets_of(self._client, self._capi, owner)
            why = rollout_in_progress(state.obj, sets, marked)
            if why is not None:
                log.info("not scaling %s down for %s yet: %s", owner, current.key, why)
                return True
        return current

    def _mark(self, current: MachineFacts, state: ResourceState) -> MachineFacts | None:
        """Mark the Machine as the one to remove when its owner scales down; None when the
        write lost to another (read again)."""
        try:
            written = self._client.patch(
                self._capi.machines,
                current.name,
                mark_patch(current, format_timestamp(self._ctx.clock.now())),
                current.namespace,
            )
        except Conflict:
            return None
        marked = machine_facts(written)
        self._cache.observe(marked)
        state.replace(marked)
        return marked

    def _scale_to_alive(
        self, owner: ResourceRef, state: ResourceState, current: MachineFacts, claim: ClaimFacts
    ) -> bool:
        """Lower the owner's replicas to its Machines not marked; False when the write lost to
        another (read again)."""
        desired = len(state.alive)
        if state.replicas <= desired:
            return True
        try:
            scale(self._client, self._capi, state, desired)
        except Conflict:
            return False
        log.info(
            "scaled %s down from %d to %d replicas to remove Machine %s (NodeClaim %s)",
            owner,
            state.replicas,
            desired,
            current.key,
            claim.name,
        )
        return True

    def _replace(
        self, machine: MachineFacts, state: ResourceState, wrote: MachineFacts | None
    ) -> bool:
        """At min size: delete the Machine and keep the replicas, so CAPI makes a new one."""
        self._unmark(wrote)
        log.info(
            "%s is at its minimum size (%s); replacing Machine %s instead of scaling down",
            state.ref,
            state.min_size,
            machine.key,
        )
        return self._delete_machine(machine)

    def _delete_machine(self, machine: MachineFacts) -> bool:
        try:
            self._client.delete(
                self._capi.machines,
                machine.name,
                machine.namespace,
                preconditions=Preconditions(uid=machine.uid or None),
            )
        except NotFound:
            raise InstanceNotFoundError(machine.key, _GONE) from None
        return True

    def _unmark(self, machine: MachineFacts | None) -> None:
        """Remove a mark this call wrote, if the Machine is still as we left it."""
        if machine is None:
            return
        try:
            written = self._client.patch(
                self._capi.machines, machine.name, unmark_patch(machine), machine.namespace
            )
        except (Conflict, NotFound):
            return
        except ApiError as exc:
            log.warning("could not remove the delete mark of Machine %s: %s", machine.key, exc)
            return
        self._cache.observe(machine_facts(written))

    # --- a NodeClaim without a Machine ------------------------------------------------------

    def _cancel(self, ref: ResourceRef, claim: ClaimFacts) -> bool:
        claims: Sequence[ClaimFacts] | None = None
        for _ in range(self._settings.conflict_retries):
            state = read_state(self._client, self._capi, ref, self._mirrors.machines_of)
            if state is None:
                raise InstanceNotFoundError(claim.name, f"{ref} no longer exists")
            if claims is None:
                claims = self._mirrors.waiting().on(ref)
            others = waiting_claims(claims, state, self._cache.bound_claims(), exclude=claim.name)
            plan = make_plan(
                state,
                others,
                unclaimed_before=self._settings.unclaimed_before(self._ctx.clock.now()),
            )
            taken = {m.key for m in plan.pairs.values()}
            surplus = sorted(
                (
                    m
                    for m in state.machines
                    if m.free and m.key not in taken and m.created >= claim.created
                ),
                key=lambda m: (m.created, m.name),
                reverse=True,
            )
            minimum = state.min_size or 0
            if surplus and len(state.alive) - 1 >= minimum:
                victim = surplus[0]
                patch = bind_patch(victim, claim, mark_at=format_timestamp(self._ctx.clock.now()))
                try:
                    written = self._client.patch(
                        self._capi.machines, victim.name, patch, victim.namespace
                    )
                except (Conflict, NotFound):
                    continue
                bound = machine_facts(written)
                self._cache.observe(bound)
                log.info("NodeClaim %s cancelled: removing its Machine %s", claim.name, bound.key)
                return self._remove(bound, claim)
            floor = max(plan.target, len(state.present), minimum)
            if state.in_flight > 0 and state.replicas > floor:
                why = withdrawal_blocked(self._client, self._capi, state)
                if why is not None:
                    # Once its Machine exists it is the surplus above; or the roll-out ends.
                    log.info(
                        "not withdrawing NodeClaim %s's replica of %s yet: %s", claim.name, ref, why
                    )
                    return True
                try:
                    scale(self._client, self._capi, state, state.replicas - 1)
                except Conflict:
                    continue
                log.info(
                    "NodeClaim %s cancelled: withdrew its replica of %s (%d -> %d)",
                    claim.name,
                    ref,
                    state.replicas,
                    state.replicas - 1,
                )
            raise InstanceNotFoundError(claim.name, "no Machine was bound to it")
        raise ScaleDownFailedError(
            f"could not withdraw the replica NodeClaim {claim.name} asked {ref} for: "
            f"{self._settings.conflict_retries} conflicts in a row"
        )
