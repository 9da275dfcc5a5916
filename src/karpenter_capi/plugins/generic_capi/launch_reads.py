"""What a launch reads: the Machine a NodeClaim is bound to, a resource's state, the NodeClaims
waiting on it, and the offering a resource makes.

``launch.Launcher`` decides and writes; every read it decides from goes through here, from the
API, the member-Machine cache or the cluster's mirrors (``mirror``), never from what a previous
call decided (the ``launch`` module docstring: each call takes one step from durable state).
The one thing it adds to what the API shows is ``inflight``: the intents this process sent that
the API does not show yet.

Where the mirrors follow watches (``ClusterMirrors.watched``: a real API server), the resource a
launch scales and the Machine a NodeClaim is bound to come from them too, not from a ``GET`` per
call (issue 28). The copies show this process's own writes (the barrier), so a launch decides
from the replicas its own last scale wrote; another actor's write may not show yet, and then the
scale, whose precondition is the copy's resourceVersion, answers 409: ``conflicted`` makes the
next read of that resource a ``GET`` (the copy takes the answer), and the launch decides again,
as after a 409 on a live read. So the launches are those of live reads. What the copies do not
hold, or a recorded Machine they do not show bound and alive, is asked of the API: a resource
is gone, and a recorded Machine lost, only on the API's word.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace

from karpenter_capi.plugin_api import KubeClient, PluginContext
from karpenter_capi.plugin_api.karpenter import NodeClass, wellknown
from karpenter_capi.plugin_api.kube import CapiResources, NotFound
from karpenter_capi.plugins.generic_capi.binding import (
    ANNOTATION_SCALABLE_RESOURCE,
    ClaimFacts,
    MachineFacts,
    machine_facts,
)
from karpenter_capi.plugins.generic_capi.inflight import LaunchesInFlight
from karpenter_capi.plugins.generic_capi.instances import MachineCache
from karpenter_capi.plugins.generic_capi.inventory import (
    Inventory,
    collect_inventory,
    raw_nodeclass,
)
from karpenter_capi.plugins.generic_capi.just_selected import JustSelected
from karpenter_capi.plugins.generic_capi.mirror import ClusterMirrors, WaitingClaims
from karpenter_capi.plugins.generic_capi.planning import Candidate
from karpenter_capi.plugins.generic_capi.scaling import (
    ResourceRef,
    ResourceState,
    owner_of,
    read_state,
)

InventoryOf = Callable[[NodeClass], Inventory]
"""The resources behind a NodeClass's offerings (default: the ones its selector matches)."""


class LaunchReads:
    """The reads of one ``Launcher`` (thread-safe: the caches and mirrors it reads through are)."""

    def __init__(
        self,
        ctx: PluginContext,
        capi: CapiResources,
        cache: MachineCache,
        mirrors: ClusterMirrors,
        inflight: LaunchesInFlight,
        *,
        inventory: InventoryOf | None = None,
        selected: JustSelected | None = None,
    ) -> None:
        self._ctx = ctx
        self._just_selected = selected
        self.inventory_of: InventoryOf = inventory or self._selected
        self._inflight = inflight
        self._client: KubeClient = ctx.management
        self._capi = capi
        self._cache = cache
        self._mirrors = mirrors
        self._lock = threading.Lock()
        self._conflicted: set[str] = set()
        """Resources whose copy a write found stale (``conflicted``)."""

    def on(self, waiting: WaitingClaims, ref: ResourceRef) -> list[ClaimFacts]:
        """The NodeClaims that may wait on ``ref``: as the API shows them, with the intents
        this process has sent to the core and the API does not show yet (``inflight``)."""
        key = ref.key
        sent = self._inflight.intents_on(key)
        claims = []
        for claim in waiting.on(ref):
            if self._inflight.was_deleted(claim):
                continue  # a copy that lags may show it as it was before it went
            where = self._inflight.intent_of(claim.name)
            if where is None or where == key:
                claims.append(claim)
                sent.pop(claim.name, None)
        for name in sent:
            shown = waiting.find(name)
            if shown is not None:
                annotations = {**shown.annotations, ANNOTATION_SCALABLE_RESOURCE: key}
                claims.append(replace(shown, annotations=annotations))
        return claims

    def read_state(self, ref: ResourceRef) -> ResourceState | None:
        """``ref`` and its Machines as of now (module docstring: from the mirrors where they
        follow watches, except right after a write to ``ref`` answered 409)."""
        if not self._mirrors.watched:
            return read_state(self._client, self._capi, ref, self._mirrors.machines_of)
        with self._lock:
            live = ref.key in self._conflicted
            self._conflicted.discard(ref.key)
        obj = None if live else self._mirrors.scalable(ref)
        if obj is None:
            # Not in the copy (made a moment ago by someone else, or gone), or the copy was
            # just found stale: the API says, and the copy takes its answer.
            try:
                obj = self._client.get(ref.resource(self._capi), ref.name, ref.namespace)
            except NotFound:
                self._mirrors.saw_scalable(ref, None)
                return None
            self._mirrors.saw_scalable(ref, obj)
        return ResourceState(ref, obj, self._mirrors.machines_of(ref))

    def conflicted(self, ref: ResourceRef) -> None:
        """A write to ``ref`` with the resourceVersion of its copy answered 409: the copy lags
        someone else's write, so the next ``read_state`` of ``ref`` asks the API (retrying
        on the same copy would fail the same way until the retries ran out)."""
        if self._mirrors.watched:
            with self._lock:
                self._conflicted.add(ref.key)

    def find_binding(self, claim: ClaimFacts) -> tuple[MachineFacts | None, bool]:
        """The Machine bound to ``claim``, and whether a Machine it recorded was lost."""
        recorded = claim.machine_ref
        if recorded is not None:
            machine = self._held(claim, *recorded) or self._get_machine(*recorded)
            if machine is not None and machine.bound_to(claim) and not machine.deleting:
                return machine, False
            return None, True
        for cached in self._cache.bound_to(claim.name):
            machine = self._held(claim, cached.namespace, cached.name, owner_of(cached))
            machine = machine or self._get_machine(cached.namespace, cached.name)
            if machine is not None and machine.bound_to(claim) and not machine.deleting:
                return machine, False
        return None, False

    def _held(
        self, claim: ClaimFacts, namespace: str, name: str, owner: ResourceRef | None = None
    ) -> MachineFacts | None:
        """Machine ``namespace/name`` from the mirror of its resource's Machines (``owner``,
        else the resource ``claim`` waits on) when that mirror shows it bound to ``claim`` and
        not deleting: as a list made now would, and this process's binds included (the
        barrier). Anything else (not held, not bound, deleting) is for the API to confirm:
        only a ``GET`` may say a recorded Machine was lost."""
        if not self._mirrors.watched:
            return None
        ref = owner or (ResourceRef.parse(claim.intent) if claim.intent else None)
        if ref is None:
            return None
        machine = self._mirrors.machine(ref, namespace, name)
        if machine is None or not machine.bound_to(claim) or machine.deleting:
            return None
        self._cache.observe(machine)
        return machine

    def _get_machine(self, namespace: str, name: str) -> MachineFacts | None:
        try:
            raw = self._client.get(self._capi.machines, name, namespace)
        except NotFound:
            self._cache.forget(namespace, name)
            return None
        machine = machine_facts(raw)
        self._cache.observe(machine)
        return machine

    def describe(
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
        inventory = self.inventory_of(nodeclass)
        for resource in inventory.resources:
            if resource.key == ref.key:
                return Candidate(ref, resource.instance_type, resource.zone, resource.capacity_type)
        return None

    def refresh_machine(self, ref: ResourceRef, machine: MachineFacts) -> None:
        """Read ``machine`` from the API after a write to it failed (409 or 404) and give the
        answer to ``ref``'s mirror, which may lag the API by seconds on a loaded machine:
        retrying on the same stale copy failed the same way until the retries ran out."""
        try:
            raw = self._client.get(self._capi.machines, machine.name, machine.namespace)
        except NotFound:
            self._cache.forget(machine.namespace, machine.name)
            self._mirrors.machine_gone(ref, machine.key)
            return
        self._cache.observe(self._mirrors.saw_machine(ref, raw))

    def _selected(self, nodeclass: NodeClass) -> Inventory:
        if self._just_selected is not None:
            kept = self._just_selected.take(raw_nodeclass(nodeclass))
            if kept is not None:
                return kept
        return collect_inventory(self._ctx, nodeclass, self._capi)
