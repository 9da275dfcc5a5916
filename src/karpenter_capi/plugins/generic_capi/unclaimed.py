"""The safety net under replica give-back: Machines of opted-in resources that no NodeClaim
ever claimed are adopted or removed, so none runs forever for nobody.

Every replica this plugin raises is for a NodeClaim, and the NodeClaim gives it back when it
goes before binding a Machine (``delete``'s cancel, ``launch``'s fallback). Some ways of going
leave no trace to give it back from: a process that restarts between the raise and the core's
write of the intent, a NodeClaim whose finalizer is removed by hand, a roll-out that outlasts
the NodeClaim. The Machine CAPI then makes is *free* (``binding``), older than every NodeClaim
that comes later, so no launch will ever take it; the issue that motivated this module found
such Machines running for minutes with nothing to claim or remove them.

So, as cluster-autoscaler removes a node group's machines that never became a useful node
within ``max-node-provision-time`` (15 min), and as Karpenter's garbage collection removes
instances that no NodeClaim claims: a free Machine of an opted-in resource (selected with the
opt-in label, not paused or being deleted) created more than ``unclaimed_ttl`` ago (plugin
option, default 15 min, the core's registration TTL: no NodeClaim waits that long for its
Machine) is *unclaimed*. Then:

- a NodeClaim waiting on the resource that no newer Machine serves **adopts** it
  (``binding.match``), and gives back the replica it had asked for;
- otherwise ``karpenter_capi_list`` reports it as an instance no NodeClaim claims, and the
  core's garbage collector hands it to ``karpenter_capi_delete`` after its own grace: the
  Machine is marked ``cluster.x-k8s.io/delete-machine`` and the replicas lowered, under the
  roll-out rule (``delete``), with a Warning Event on the Machine and on its resource. It is
  listed without its provider ID, so the garbage collector leaves its Node alone: CAPI drains
  it before the Machine goes, since pods may run on it.

A resource's min size (``cluster-api-autoscaler-node-group-min-size``) is the floor it keeps:
only the unclaimed Machines beyond it are listed, oldest first. Opting a resource in hands its
replicas above the min size to Karpenter, as opting a node group in to the cluster-autoscaler
does: replicas a user runs by hand on such a resource are removed after ``unclaimed_ttl``
unless the min size keeps them.
"""

from __future__ import annotations

import logging
from collections.abc import Set as AbstractSet
from dataclasses import replace
from datetime import datetime

from karpenter_capi.plugin_api import Instance, KubeClient, PluginContext
from karpenter_capi.plugin_api.kube import ApiError, CapiResources
from karpenter_capi.plugins.generic_capi.binding import MachineFacts
from karpenter_capi.plugins.generic_capi.instances import MachineCache, to_instance
from karpenter_capi.plugins.generic_capi.mirror import ClusterMirrors, WaitingClaims
from karpenter_capi.plugins.generic_capi.planning import LaunchSettings, make_plan, waiting_claims
from karpenter_capi.plugins.generic_capi.scaling import ResourceRef, ResourceState, owner_of
from karpenter_capi.plugins.generic_capi.selection import select

log = logging.getLogger(__name__)


def unclaimed_in(
    state: ResourceState,
    waiting: WaitingClaims,
    bound_elsewhere: AbstractSet[str],
    unclaimed_before: datetime,
) -> list[MachineFacts]:
    """The unclaimed Machines of one resource that no waiting NodeClaim adopts, beyond its min
    size, oldest first."""
    others = waiting_claims(waiting.on(state.ref), state, bound_elsewhere)
    plan = make_plan(state, others, unclaimed_before=unclaimed_before)
    taken = {m.key for m in plan.pairs.values()}
    found = sorted(
        (
            m
            for m in state.machines
            if m.free
            and m.created < unclaimed_before
            and m.key not in taken
            and owner_of(m) == state.ref
        ),
        key=lambda m: (m.created, m.name),
    )
    room = max(0, len(state.alive) - (state.min_size or 0))
    return found[:room]


class UnclaimedMachines:
    """Finds the unclaimed Machines of one management cluster for ``karpenter_capi_list``."""

    def __init__(
        self,
        ctx: PluginContext,
        capi: CapiResources,
        cache: MachineCache,
        mirrors: ClusterMirrors,
        settings: LaunchSettings,
    ) -> None:
        self._ctx = ctx
        self._client: KubeClient = ctx.management
        self._capi = capi
        self._cache = cache
        self._mirrors = mirrors
        self._settings = settings
        self._said: str | None = None

    def instances(self) -> list[Instance]:
        """The unclaimed Machines as instances no NodeClaim claims; ``[]`` (logged once per
        change) when the management cluster cannot be read, so the Machines bound to
        NodeClaims are still listed."""
        try:
            found = self._find()
        except ApiError as exc:
            said = f"cannot look for unclaimed Machines: {exc}"
            if said != self._said:
                log.warning("%s", said)
                self._said = said
            return []
        self._said = None
        # No provider ID: the garbage collector would delete the Node at once, and CAPI drains
        # it before the Machine goes.
        return [replace(to_instance(m), provider_id=None) for m in found]

    def _find(self) -> list[MachineFacts]:
        unclaimed_before = self._settings.unclaimed_before(self._ctx.clock.now())
        waiting = self._mirrors.waiting()
        bound = self._cache.bound_claims()
        found: list[MachineFacts] = []
        for resource, obj in select(self._client, self._capi, None).selected:
            meta = obj.get("metadata") or {}
            ref = ResourceRef(resource.kind, str(meta.get("namespace") or ""), str(meta["name"]))
            state = ResourceState(ref, obj, self._mirrors.machines_of(ref))
            found.extend(unclaimed_in(state, waiting, bound, unclaimed_before))
        return found
