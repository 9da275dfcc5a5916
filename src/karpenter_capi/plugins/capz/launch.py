"""The ``CAPZMachinePool`` launch mode: one NodeClaim, one more VM in the cheapest pool.

The scaling, binding, fallback and cancelling logic is ``generic_capi``'s, unchanged: a pool is
a MachinePool, and ``generic_capi.launch.Launcher`` already launches on MachinePools (raise the
``scale`` subresource by one with a resourceVersion precondition, bind the NodeClaim to one new
MachinePool Machine in one optimistic write, fall back to the next offering when no Machine
comes within ``machine_timeout``, giving the replica back) and ``generic_capi.delete.Deleter``
removes exactly one pool Machine (mark it ``cluster.x-k8s.io/delete-machine``, lower the
replicas: CAPZ deletes the marked Machine first, drains it, then deletes its VM). What this
module adds:

* the inventory: every offering of the location, each backed by the pool that would make it
  (``offerings``), instead of the pools a selector matches;
* ``prepare``: before a pool is first read for a launch, it is created if missing
  (``pools.create_pool``), and a pool Cluster API reports failed is given up on: the NodeClaim
  withdraws its replica, the offering is unavailable for three minutes (``provider.unavailable``,
  seen by every NodeClass and by the solver) and the next cheapest pool is tried;
* ``sweep``: pools of ours with no replica, no Machine and no NodeClaim waiting on them are
  deleted ``pool_grace`` after they were first seen so (``empty-since`` annotation, so a restart
  keeps counting), and a pool asking for more replicas than it has Machines while no NodeClaim
  waits on it is scaled back (a replica left behind by a NodeClaim that went while its VM was
  being made), and a free Machine older than ``machine_timeout`` that no NodeClaim waits for is
  marked ``delete-machine`` and its replica removed (a VM whose NodeClaim went, or whose
  launch a crash lost before the core recorded it). It runs on the garbage collector's
  ``karpenter_capi_list`` call, minutes apart.

Drift: pool names carry a hash of the templates they were stamped from, so a NodeClaim whose
pool is not the one its offering would get today is drifted (``NodeClassDrift``) and Karpenter
replaces it through a new pool.

Every NodeClaim launched this way carries ``karpenter.cluster.x-k8s.io/launch:
CAPZMachinePool``, which is how ``delete`` knows it is this mode's.

Plugin options (``capz.<name>``): ``machine_timeout`` (default 2 minutes: a Flexible scale set
makes its VM objects fast; their provisioning is the core's launch timeout's business),
``conflict_retries``, ``round_window`` (as ``generic_capi``'s), ``pool_grace`` (default 10m).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any, Final

from karpenter_capi.plugin_api import (
    InstanceType,
    InsufficientCapacityError,
    LaunchResult,
    LaunchWatch,
    NodeClaim,
    NodeClassNotReadyError,
    PluginContext,
)
from karpenter_capi.plugin_api.karpenter import (
    NodeClass,
    format_timestamp,
    parse_timestamp,
    wellknown,
)
from karpenter_capi.plugin_api.kube import (
    ApiError,
    Conflict,
    JsonObject,
    NotFound,
    Preconditions,
    capi_resources,
)
from karpenter_capi.plugins._cloud.unavailable import UnavailableOfferings as OfferingMarks
from karpenter_capi.plugins.capz import versions
from karpenter_capi.plugins.capz.offerings import PoolInventory, build_inventory, load_templates
from karpenter_capi.plugins.capz.pools import (
    ANNOTATION_EMPTY_SINCE,
    AZURE_MACHINE_POOL_MACHINES,
    AZURE_MACHINE_POOLS,
    LABEL_LAUNCH,
    LAUNCH_MODE,
    VM_IN_PROGRESS,
    PoolOffering,
    create_pool,
    delete_pool_parts,
    failure_of,
    pool_name,
    pool_objects,
    scale_set_failure,
    vm_failure,
)
from karpenter_capi.plugins.capz.provider import CapzProvider
from karpenter_capi.plugins.generic_capi.binding import (
    ANNOTATION_MACHINE,
    ANNOTATION_SCALABLE_RESOURCE,
    claim_facts,
    machine_facts,
    mark_patch,
)
from karpenter_capi.plugins.generic_capi.delete import Deleter
from karpenter_capi.plugins.generic_capi.inflight import LaunchesInFlight
from karpenter_capi.plugins.generic_capi.instances import DEFAULT_CACHE_TTL, MachineCache
from karpenter_capi.plugins.generic_capi.launch import Launcher
from karpenter_capi.plugins.generic_capi.mirror import ClusterMirrors, KindMirrors
from karpenter_capi.plugins.generic_capi.planning import (
    Candidate,
    LaunchSettings,
    seconds_option,
    waiting_claims,
)
from karpenter_capi.plugins.generic_capi.scaling import (
    ResourceRef,
    ResourceState,
    read_state,
    scale,
)
from karpenter_capi.plugins.generic_capi.sources import UnavailableOfferings as ResourceMarks

log = logging.getLogger(__name__)

ANNOTATION_LAUNCH: Final = LABEL_LAUNCH
"""On a NodeClaim: the launch mode that made it (``CAPZMachinePool``)."""
DRIFT_REASON: Final = "NodeClassDrift"
POOL_GRACE_OPTION: Final = "pool_grace"
DEFAULT_POOL_GRACE: Final = 600.0


def launch_spec(nodeclass: NodeClass) -> Any | None:
    """The NodeClass's ``spec.launch`` when it asks for this mode, else ``None``."""
    spec = getattr(nodeclass, "spec", None)
    launch = getattr(spec, "launch", None)
    mode = getattr(launch, "mode", None)
    return launch if mode is not None and str(mode) == LAUNCH_MODE else None


def is_pool_claim(nodeclaim: NodeClaim) -> bool:
    """Whether ``nodeclaim`` was launched (or is being launched) by this mode."""
    return claim_facts(nodeclaim).annotations.get(ANNOTATION_LAUNCH) == LAUNCH_MODE


class _Marks(ResourceMarks):
    """The launch logic marks a pool it gave up on by resource key; a pool is one offering,
    so the mark also goes to the provider's offering cache, which every inventory reads."""

    def __init__(self, ctx: PluginContext, offerings: OfferingMarks, pools: PoolIndex) -> None:
        super().__init__(ctx.clock)
        self._offerings = offerings
        self._pools = pools

    def mark(self, key: str, reason: str) -> None:
        super().mark(key, reason)
        found = self._pools.get(key)
        if found is not None:
            instance_type, zone, capacity_type = found
            self._offerings.mark(instance_type, zone, capacity_type, reason)

    def clear(self, key: str) -> None:
        super().clear(key)
        found = self._pools.get(key)
        if found is not None:
            self._offerings.clear(*found)


class PoolIndex:
    """Resource key -> the pool spec last built for it (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._specs: dict[str, Any] = {}

    def update(self, inventory: PoolInventory) -> None:
        with self._lock:
            self._specs.update(inventory.pools)

    def spec(self, key: str) -> Any | None:
        with self._lock:
            return self._specs.get(key)

    def get(self, key: str) -> tuple[str, str, str] | None:
        spec = self.spec(key)
        if spec is None:
            return None
        return (spec.offering.vm_size, spec.zone_label, spec.offering.capacity_type)


class PoolLaunch:
    """The launch mode for one plugin context (thread-safe, like ``Launcher``)."""

    def __init__(self, ctx: PluginContext, provider: CapzProvider) -> None:
        self._ctx = ctx
        self._provider = provider
        self._client = ctx.management
        self.capi = capi_resources(ctx.management, os.environ)
        settings = LaunchSettings.from_options(ctx.options)
        self.settings = settings
        self.grace = seconds_option(ctx.options, POOL_GRACE_OPTION, DEFAULT_POOL_GRACE, ctx.logger)
        self.pools = PoolIndex()
        self.marks = _Marks(ctx, provider.unavailable, self.pools)
        self.mirrors = ClusterMirrors(
            ctx.management, ctx.workload, self.capi, kinds=KindMirrors.shared(ctx)
        )
        self.inflight = LaunchesInFlight(ctx.clock.monotonic)
        self.machines = MachineCache(ctx.management, self.capi, ctx.clock, DEFAULT_CACHE_TTL)
        self.launcher = Launcher(
            ctx,
            self.capi,
            self.machines,
            self.marks,
            settings,
            mirrors=self.mirrors,
            inflight=self.inflight,
            inventory=self.inventory,
            prepare=self._prepare,
        )
        self.deleter = Deleter(ctx, self.capi, self.machines, settings, self.mirrors)
        self._version_checked: set[str] = set()

    # --- inventory -----------------------------------------------------------------------------

    def inventory(self, nodeclass: NodeClass) -> PoolInventory:
        launch = launch_spec(nodeclass)
        name = str(getattr(getattr(nodeclass, "metadata", None), "name", "") or "")
        if launch is None:
            raise NodeClassNotReadyError(name, f"spec.launch.mode is not {LAUNCH_MODE}")
        if name not in self._version_checked:
            self._version_checked.add(name)  # once per process and NodeClass: at start
            versions.check(self._ctx, name)
        templates = load_templates(self._client, self._provider, name, launch)
        inventory = build_inventory(self._provider, templates, self.capi, self.marks)
        self.pools.update(inventory)
        return inventory

    def instance_types(self, nodeclass: NodeClass) -> list[InstanceType]:
        return self.inventory(nodeclass).instance_types

    # --- launch --------------------------------------------------------------------------------

    def create(
        self, nodeclaim: NodeClaim, instance_types: Sequence[InstanceType], nodeclass: NodeClass
    ) -> LaunchResult:
        result = self.launcher.create(nodeclaim, instance_types, nodeclass)
        if result.provider_id and self._vm_in_progress(result):
            # Not launched until Azure has made the VM: a VM that fails is still this
            # launch's to fall back from (the core would only wait for a Node that never comes).
            result = replace(result, provider_id=None)
        return replace(result, annotations={**result.annotations, ANNOTATION_LAUNCH: LAUNCH_MODE})

    def _vm_in_progress(self, result: LaunchResult) -> bool:
        """Whether the VM of the Machine ``result`` bound is still being made; raise
        ``InsufficientCapacityError`` (the offering marked unavailable) if it failed. A Machine
        or VM record that cannot be read is taken as made: the core's timeouts still apply."""
        namespace, _, name = result.annotations.get(ANNOTATION_MACHINE, "").partition("/")
        try:
            machine = self._client.get(self.capi.machines, name, namespace) if name else None
            ref = ((machine or {}).get("spec") or {}).get("infrastructureRef") or {}
            if ref.get("kind") != AZURE_MACHINE_POOL_MACHINES.kind or not ref.get("name"):
                return False
            pool_machine = self._client.get(AZURE_MACHINE_POOL_MACHINES, ref["name"], namespace)
        except ApiError:
            return False
        failure = vm_failure(pool_machine)
        if failure is not None:
            key = result.annotations.get(ANNOTATION_SCALABLE_RESOURCE, "")
            reason = f"VM {ref['name']} of {key} failed: {failure}"
            if key:
                self.marks.mark(key, reason)
            log.warning("not launching on %s: %s", key, reason)
            raise InsufficientCapacityError(reason)
        state = (pool_machine.get("status") or {}).get("provisioningState")
        return state in VM_IN_PROGRESS

    def _prepare(self, candidate: Candidate) -> str | None:
        ref = candidate.ref
        spec = self.pools.spec(ref.key)  # None: not ours to make (reading it reports it gone)
        try:
            pool = self._client.get(self.capi.machine_pools, ref.name, ref.namespace)
        except NotFound:
            if spec is None:
                return None
            if self._ctx.dry_run:
                return f"{ref} does not exist (dry run: not created)"
            pool = create_pool(self._client, self.capi, self._objects(spec))
            log.info(
                "created MachinePool %s (%s, %s, zone %s) at 0 replicas",
                ref,
                spec.offering.vm_size,
                spec.offering.capacity_type,
                spec.offering.zone or "none",
            )
            return None
        failure = failure_of(pool)
        if failure is None and spec is not None:
            failure = self._scale_set_failure(ref, spec)
        if failure is not None:
            return f"{ref} failed: {failure}"
        return None

    def _objects(self, spec: Any) -> tuple[JsonObject, JsonObject, JsonObject]:
        return pool_objects(
            spec.templates,
            spec.offering,
            self.capi,
            zone_label=spec.zone_label,
            annotations=spec.annotations,
        )

    def _scale_set_failure(self, ref: ResourceRef, spec: Any) -> str | None:
        """What CAPZ reports of the pool's scale set; a pool left half-made by a process that
        died between its writes (MachinePool, no AzureMachinePool) is completed."""
        try:
            azure_pool = self._client.get(AZURE_MACHINE_POOLS, ref.name, ref.namespace)
        except NotFound:
            if self._ctx.dry_run:
                return "its AzureMachinePool does not exist (dry run: not created)"
            create_pool(self._client, self.capi, self._objects(spec))
            log.info("created the missing parts of MachinePool %s", ref)
            return None
        return scale_set_failure(azure_pool)

    def watches(self) -> list[LaunchWatch]:
        inflight = self.inflight

        def nodeclaims(machine: Mapping[str, Any]) -> list[str]:
            return inflight.to_wake(machine_facts(machine))

        return [LaunchWatch(self.capi.machines, nodeclaims, "management")]

    # --- drift -------------------------------------------------------------------------------

    def is_drifted(self, nodeclaim: NodeClaim, nodeclass: NodeClass) -> str | None:
        """``NodeClassDrift`` when the NodeClaim's pool was stamped from other templates than
        the NodeClass names today (pool names carry the templates' hash, ``pools.pool_name``)."""
        launch = launch_spec(nodeclass)
        claim = claim_facts(nodeclaim)
        intent = ResourceRef.parse(claim.intent) if claim.intent else None
        instance_type = claim.labels.get(wellknown.LABEL_INSTANCE_TYPE)
        capacity_type = claim.labels.get(wellknown.LABEL_CAPACITY_TYPE)
        if launch is None or intent is None or not instance_type or not capacity_type:
            return None
        name = str(getattr(getattr(nodeclass, "metadata", None), "name", "") or "")
        templates = load_templates(self._client, self._provider, name, launch)
        zone_label = claim.labels.get(wellknown.LABEL_TOPOLOGY_ZONE, "")
        zone = zone_label.removeprefix(f"{templates.location}-") if zone_label else ""
        expected = pool_name(
            name, PoolOffering(instance_type, capacity_type, zone), templates.digest
        )
        return None if intent.name == expected else DRIFT_REASON

    # --- delete --------------------------------------------------------------------------------

    def sent_to(self, nodeclaim: NodeClaim) -> str | None:
        """The pool this process last sent ``nodeclaim`` to, while the core has not recorded
        it or the NodeClaim is still in flight."""
        return self.inflight.intent_of(claim_facts(nodeclaim).name)

    def delete(self, nodeclaim: NodeClaim) -> bool | None:
        # The pool this process last sent the NodeClaim to goes along, as generic_capi's
        # delete passes it: deleted before the core wrote that intent, the NodeClaim would
        # otherwise leave the replica it asked for standing (a Node nobody waits for).
        facts = claim_facts(nodeclaim)
        sent_to = self.inflight.intent_of(facts.name)
        self.inflight.deleted(facts.name, facts.uid)
        return self.deleter.delete(nodeclaim, sent_to)

    # --- empty pools ---------------------------------------------------------------------------

    def sweep(self) -> None:
        """Scale back replicas nobody waits for, then delete pools empty for ``grace``."""
        listed = self._client.list(
            self.capi.machine_pools, label_selector=f"{LABEL_LAUNCH}={LAUNCH_MODE}"
        )
        waiting = self.mirrors.waiting()
        bound = self.machines.bound_claims()
        for pool in listed.items:
            meta = pool.get("metadata") or {}
            ref = ResourceRef("MachinePool", str(meta.get("namespace")), str(meta.get("name")))
            try:
                self._sweep_one(ref, waiting.on(ref), bound)
            except ApiError as exc:
                log.warning("could not tidy up %s: %s", ref, exc)

    def _sweep_one(self, ref: ResourceRef, claims: Sequence[Any], bound: Any) -> None:
        state = read_state(self._client, self.capi, ref, self.mirrors.machines_of)
        if state is None or state.deleting:
            if state is None:
                delete_pool_parts(self._client, ref.namespace, ref.name)
            return
        others = waiting_claims(claims, state, bound)
        if others or any(self.inflight.intents_on(ref.key)):
            self._not_empty(state.obj)
            return
        if self._remove_strays(state):
            return
        if self._scale_to_present(state):
            return
        if state.machines:
            self._not_empty(state.obj)
            return
        self._delete_when_empty_long_enough(state)

    def _scale_to_present(self, state: ResourceState) -> bool:
        """Lower the pool's replicas to the Machines it has when no NodeClaim waits for the
        rest; whether that was needed (written, or lost to a write that changed it)."""
        needed = len(state.present)
        if state.replicas <= needed:
            return False
        try:
            scale(self._client, self.capi, state, needed)
        except (Conflict, NotFound):
            return True
        log.info(
            "scaled %s from %d to %d: no NodeClaim waits for the rest",
            state.ref,
            state.replicas,
            needed,
        )
        return True

    def _delete_when_empty_long_enough(self, state: ResourceState) -> None:
        """Mark an empty pool with when it was first seen empty; delete it once that is
        ``grace`` ago (conditional on its uid and resourceVersion)."""
        ref = state.ref
        since_raw = str(state.meta.get("annotations", {}).get(ANNOTATION_EMPTY_SINCE) or "")
        now = self._ctx.clock.now()
        if not since_raw:
            self._annotate(state.obj, format_timestamp(now))
            return
        try:
            since = parse_timestamp(since_raw)
        except ValueError:
            self._annotate(state.obj, format_timestamp(now))
            return
        if now - since < timedelta(seconds=self.grace):
            return
        try:
            self._client.delete(
                self.capi.machine_pools,
                ref.name,
                ref.namespace,
                preconditions=Preconditions(
                    uid=str(state.meta.get("uid") or "") or None,
                    resource_version=state.resource_version or None,
                ),
            )
        except (Conflict, NotFound):
            return  # it changed (a launch chose it) or went: look again next time
        delete_pool_parts(self._client, ref.namespace, ref.name)
        log.info("deleted empty MachinePool %s (empty since %s)", ref, since_raw)

    def _remove_strays(self, state: ResourceState) -> bool:
        """Remove the pool's free Machines older than ``machine_timeout`` (no NodeClaim waits
        on the pool): VMs made for a NodeClaim that went before it could take one, or whose
        launch was lost with its process. Marked, then the replicas lowered, as a delete does;
        whether it wrote."""
        horizon = self._ctx.clock.now() - timedelta(seconds=self.settings.machine_timeout)
        strays = [m for m in state.machines if m.free and m.created <= horizon]
        if not strays:
            return False
        mark_at = format_timestamp(self._ctx.clock.now())
        for machine in strays:
            try:
                written = self._client.patch(
                    self.capi.machines,
                    machine.name,
                    mark_patch(machine, mark_at),
                    machine.namespace,
                )
            except (Conflict, NotFound):
                return True  # it changed (a NodeClaim took it): look again next time
            state.replace(machine_facts(written))
        desired = len(state.alive)
        if state.replicas > desired:
            with contextlib.suppress(Conflict, NotFound):
                scale(self._client, self.capi, state, desired)
        log.info(
            "removing %d Machine(s) of %s that no NodeClaim took: %s",
            len(strays),
            state.ref,
            ", ".join(m.key for m in strays),
        )
        return True

    def _annotate(self, pool: JsonObject, value: str | None) -> None:
        meta = pool.get("metadata") or {}
        patch = {
            "metadata": {
                "resourceVersion": meta.get("resourceVersion"),
                "annotations": {ANNOTATION_EMPTY_SINCE: value},
            }
        }
        try:
            self._client.patch(
                self.capi.machine_pools, str(meta.get("name")), patch, str(meta.get("namespace"))
            )
        except (Conflict, NotFound):
            return

    def _not_empty(self, pool: JsonObject) -> None:
        annotations = (pool.get("metadata") or {}).get("annotations") or {}
        if ANNOTATION_EMPTY_SINCE in annotations:
            self._annotate(pool, None)
