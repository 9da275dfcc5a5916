"""The ``generic_capi`` provider plugin: any Cluster API infrastructure as Karpenter capacity.

``GenericCapiPlugin`` is the entry point (``karpenter_capi.plugins`` group, name
``generic_capi``) and only wires hooks to the modules that do the work:

| Hook | Module |
|---|---|
| ``karpenter_capi_instance_types`` | ``inventory`` (what can be launched), ``nodeclass_status`` |
| ``karpenter_capi_create`` | ``launch`` (scale up, bind a Machine), ``planning`` |
| ``karpenter_capi_launch_watches`` | ``inflight`` (which NodeClaim a Machine's event wakes) |
| ``karpenter_capi_delete`` | ``delete`` (mark a Machine, scale down; cancel) |
| ``karpenter_capi_get``, ``karpenter_capi_list`` | ``instances`` (member Machines), ``unclaimed`` |
| ``karpenter_capi_is_drifted`` | ``drift`` |
| ``karpenter_capi_disruption_blocked`` | ``disruption`` (min sizes) |

``launch``, ``delete`` and ``instances`` read the NodeClaims and each resource's Machines through
``mirror`` (one list, then only the changes), so a poll costs no list of everything.

The core makes one ``GenericCapiPlugin`` per ``Plugins`` with the plugin's ``PluginContext``, and
the object keeps the per-cluster state (discovered CAPI version, caches, the launches in flight
that ``karpenter_capi_launch_watches`` wakes): a new ``Plugins`` (a restarted process, or a test
that builds one) starts from nothing but the API.

Plugin options (``--plugin-option generic_capi.<name>=<value>``): ``machine_timeout``,
``conflict_retries`` (``launch``), ``cache_ttl`` (``instances``), ``drift_remediation``
(``drift``), ``nodeclass_status`` (below), and the inventory's (``shape``).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from karpenter_capi.plugin_api import (
    Instance,
    InstanceType,
    LaunchResult,
    LaunchWatch,
    NodeClaim,
    NodeClassNotReadyError,
    PluginContext,
    RetryableCreateError,
    hookimpl,
)
from karpenter_capi.plugin_api.karpenter import NodeClass
from karpenter_capi.plugin_api.kube import (
    CAPI_NODECLASS_GROUP,
    ApiError,
    CapiResources,
    NotFound,
    capi_resources,
)
from karpenter_capi.plugins.generic_capi.binding import machine_facts
from karpenter_capi.plugins.generic_capi.delete import DeleteFailedError, Deleter
from karpenter_capi.plugins.generic_capi.disruption import blocked_by_min_size
from karpenter_capi.plugins.generic_capi.drift import DriftDetector, rollout_warnings
from karpenter_capi.plugins.generic_capi.inflight import LaunchesInFlight
from karpenter_capi.plugins.generic_capi.instances import (
    CACHE_TTL_OPTION,
    DEFAULT_CACHE_TTL,
    Instances,
    MachineCache,
    ResourceCache,
)
from karpenter_capi.plugins.generic_capi.inventory import (
    Inventory,
    UnavailableOfferings,
    collect_inventory,
    raw_nodeclass,
)
from karpenter_capi.plugins.generic_capi.just_selected import JustSelected
from karpenter_capi.plugins.generic_capi.launch import Launcher
from karpenter_capi.plugins.generic_capi.mirror import ClusterMirrors, KindMirrors
from karpenter_capi.plugins.generic_capi.nodeclass_status import (
    ManagementClusterError,
    management_cluster_error,
    ready_condition,
    update_nodeclass_status,
)
from karpenter_capi.plugins.generic_capi.planning import LaunchSettings, seconds_option
from karpenter_capi.plugins.generic_capi.provider_versions import StartChecks, cluster_api
from karpenter_capi.plugins.generic_capi.scaling import ResourceRef
from karpenter_capi.plugins.generic_capi.selection import MACHINE_DEPLOYMENT
from karpenter_capi.plugins.generic_capi.unclaimed import UnclaimedMachines

NODECLASS_KIND = "ClusterAPINodeClass"
NODECLASS_STATUS_OPTION = "nodeclass_status"
_NEEDS = (cluster_api("the generic_capi plugin"),)


@dataclass
class _State:
    """What the hooks build on first use: discovery needs the management cluster."""

    capi: CapiResources
    machines: MachineCache
    resources: ResourceCache
    launcher: Launcher
    deleter: Deleter
    instances: Instances
    drift: DriftDetector
    mirrors: ClusterMirrors
    inflight: LaunchesInFlight
    unclaimed: UnclaimedMachines
    selected: JustSelected


def _cache_ttl(ctx: PluginContext) -> float:
    return seconds_option(ctx.options, CACHE_TTL_OPTION, DEFAULT_CACHE_TTL, ctx.logger)


def _new_state(ctx: PluginContext) -> _State:
    capi = capi_resources(ctx.management, os.environ)
    ttl = _cache_ttl(ctx)
    machines = MachineCache(ctx.management, capi, ctx.clock, ttl)
    resources = ResourceCache(ctx.management, capi, ctx.clock, ttl)
    settings = LaunchSettings.from_options(ctx.options)
    unavailable = UnavailableOfferings.shared(ctx)
    mirrors = ClusterMirrors(ctx.management, ctx.workload, capi, kinds=KindMirrors.shared(ctx))
    inflight = LaunchesInFlight(ctx.clock.monotonic)
    selected = JustSelected()
    return _State(
        capi=capi,
        machines=machines,
        resources=resources,
        launcher=Launcher(
            ctx,
            capi,
            machines,
            unavailable,
            settings,
            mirrors=mirrors,
            inflight=inflight,
            selected=selected,
        ),
        deleter=Deleter(ctx, capi, machines, settings, mirrors),
        instances=Instances(ctx.management, capi, machines, resources, mirrors),
        drift=DriftDetector(ctx, capi, machines, mirrors),
        mirrors=mirrors,
        inflight=inflight,
        unclaimed=UnclaimedMachines(ctx, capi, machines, mirrors, settings),
        selected=selected,
    )


def _writes_status(ctx: PluginContext) -> bool:
    """Whether this hook call may write the NodeClass status and Events.

    Never in a dry run; otherwise unless the plugin option ``nodeclass_status`` is ``false``.
    """
    if ctx.dry_run:
        return False
    option = (ctx.option(NODECLASS_STATUS_OPTION) or "").strip().lower()
    return option != "false"


def _ours(nodeclass: NodeClass) -> bool:
    """A ClusterAPINodeClass without ``spec.launch``: one with a native launch mode belongs to
    the plugin of that mode (``capa``, ``capz``), even for drift, which this plugin would judge
    by scalable-resource templates such a NodeClass does not use."""
    raw = raw_nodeclass(nodeclass)
    if raw.get("kind", NODECLASS_KIND) != NODECLASS_KIND:
        return False
    return not (raw.get("spec") or {}).get("launch")


def _claims_our_kind(nodeclaim: NodeClaim) -> bool:
    return nodeclaim.spec.node_class_ref.kind == NODECLASS_KIND


def _unreadable_management(
    ctx: PluginContext, nodeclass: NodeClass, name: str, exc: ApiError
) -> str:
    """Log ``exc``, set the NodeClass's Ready=False for it; returns the condition's message.

    At WARNING once per change of the condition (each provisioning round meets the same
    outage again; the condition and its Event already say it), else at DEBUG."""
    inventory = management_cluster_error(exc)
    assert inventory.management_error is not None
    changed = _update_status(ctx, nodeclass, name, inventory)
    ctx.logger.log(
        logging.WARNING if changed or not _writes_status(ctx) else logging.DEBUG,
        "ClusterAPINodeClass %s: cannot read the management cluster: %s",
        name,
        exc,
    )
    return inventory.management_error[1]


def _update_status(
    ctx: PluginContext, nodeclass: NodeClass, name: str, inventory: Inventory
) -> bool:
    """Write the NodeClass status for ``inventory`` where allowed; a failed write is only
    logged (the next round writes it again). True when the condition changed."""
    if not _writes_status(ctx):
        return False
    try:
        return update_nodeclass_status(ctx, nodeclass, inventory)
    except ApiError as exc:
        ctx.logger.warning("ClusterAPINodeClass %s: cannot update its status: %s", name, exc)
        return False


def _selected_deployments(
    state: _State, inventory: Inventory
) -> list[tuple[str, str, Mapping[str, Any]]]:
    """The MachineDeployments ``inventory`` holds, as objects, for their rollout strategy:
    from the watch-fed copies where mirrors follow watches (``ClusterMirrors.scalable``, no
    request), else through ``ResourceCache`` (a ``GET`` at most once per ``cache_ttl``)."""
    deployments: list[tuple[str, str, Mapping[str, Any]]] = []
    for resource in inventory.resources:
        if resource.kind != MACHINE_DEPLOYMENT:
            continue
        ref = ResourceRef(resource.kind, resource.namespace, resource.name)
        found = state.mirrors.scalable(ref) if state.mirrors.watched else None
        if found is None:
            found = state.resources.get(ref)
        if found is not None:
            deployments.append((resource.namespace, resource.name, found))
    return deployments


def _name(nodeclaim: NodeClaim) -> str:
    return nodeclaim.name or "?"


class GenericCapiPlugin:
    """The ``generic_capi`` hooks over one ``PluginContext`` (one management cluster)."""

    def __init__(self, ctx: PluginContext) -> None:
        self._ctx = ctx
        self._lock = threading.Lock()
        self._built: _State | None = None
        self._versions = StartChecks(ctx)

    def _state(self) -> _State:
        """The state, built on first use (discovery reads the management cluster, which may be
        down: the inventory hook reports that as the NodeClass's condition)."""
        with self._lock:
            if self._built is None:
                self._built = _new_state(self._ctx)
            return self._built

    @hookimpl
    def karpenter_capi_nodeclass_kinds(self) -> list[tuple[str, str]]:
        return [(CAPI_NODECLASS_GROUP, NODECLASS_KIND)]

    @hookimpl
    def karpenter_capi_instance_types(self, nodeclass: NodeClass) -> list[InstanceType] | None:
        # The model as JSON once: each module below reads it as JSON, and a model_dump per
        # read was half of this hook's cost (issue 25).
        raw = raw_nodeclass(nodeclass)
        if not _ours(raw):
            return None
        ctx = self._ctx
        name = str((raw.get("metadata") or {}).get("name") or "")
        try:
            state = self._state()  # discovery, on first use
            inventory = collect_inventory(ctx, raw, state.capi)
        except NotFound:
            raise
        except ApiError as exc:
            # The management cluster is down, unreachable or refusing us: say so where users
            # look, and launch nothing (nothing else reads the inventory, so nothing is
            # deleted). The error itself (URL, port, connection object) is logged; the
            # NodePool's Event gets the stable sentence, so repeated rounds aggregate into one
            # Event. Not a NodeClassNotReadyError: that gives up a NodeClaim being launched,
            # and this is transient (the launch is retried with backoff).
            reason = _unreadable_management(ctx, raw, name, exc)
            raise ManagementClusterError(f"ClusterAPINodeClass {name}: {reason}") from exc
        self._versions.once(name, _NEEDS)  # once the management cluster answered
        deployments = _selected_deployments(state, inventory)
        inventory.notices.extend(rollout_warnings(raw, ctx.options, deployments))
        state.selected.keep(raw, inventory)
        _update_status(ctx, raw, name, inventory)
        if inventory.error is not None:
            raise NodeClassNotReadyError(name, inventory.error)
        if not inventory.instance_types:
            detail = "; ".join(str(p) for p in inventory.problems) or (
                "its scalableResourceSelector matches no MachineDeployment, MachineSet or "
                "MachinePool labelled node.cluster.x-k8s.io/karpenter-member"
            )
            raise NodeClassNotReadyError(name, f"no usable capacity: {detail}")
        return inventory.instance_types

    def explain_nodeclass(self, nodeclass: Mapping[str, Any]) -> list[str]:
        """What this NodeClass's Ready condition would say against it, read afresh, for
        ``karpenter-capi explain``: each resource left out and why, or the verdict itself
        when it is not ready for another reason. Empty for another plugin's NodeClass or when
        nothing is wrong. Writes nothing."""
        if not _ours(nodeclass):
            return []
        try:
            inventory = collect_inventory(self._ctx, nodeclass, self._state().capi)
        except ApiError as exc:
            inventory = management_cluster_error(exc)
        status, reason, message = ready_condition(inventory)
        left_out = [f"left out {problem}" for problem in inventory.problems]
        if status == "False" and not left_out:
            return [f"not ready ({reason}): {message}"]
        return left_out

    @hookimpl
    def karpenter_capi_create(
        self, nodeclaim: NodeClaim, instance_types: list[InstanceType], nodeclass: NodeClass
    ) -> LaunchResult | None:
        if not _ours(nodeclass):
            return None
        state = self._state()
        try:
            return state.launcher.create(nodeclaim, instance_types, nodeclass)
        except ApiError as exc:
            # A failed request is transient, not a plugin bug: the core retries with backoff.
            raise RetryableCreateError(f"Cluster API request failed: {exc}") from exc
        finally:
            state.selected.forget()

    @hookimpl
    def karpenter_capi_launch_watches(self) -> list[LaunchWatch]:
        state = self._state()
        inflight = state.inflight

        def nodeclaims(machine: Mapping[str, Any]) -> list[str]:
            return inflight.to_wake(machine_facts(machine))

        return [LaunchWatch(state.capi.machines, nodeclaims, "management")]

    @hookimpl
    def karpenter_capi_delete(self, nodeclaim: NodeClaim) -> bool | None:
        if not _claims_our_kind(nodeclaim):
            return None
        state = self._state()
        name = _name(nodeclaim)
        sent_to = state.inflight.intent_of(name)
        state.inflight.deleted(name, str(nodeclaim.metadata.uid or ""))
        try:
            return state.deleter.delete(nodeclaim, sent_to)
        except ApiError as exc:
            raise DeleteFailedError(
                f"removing the Machine of NodeClaim {_name(nodeclaim)} failed: {exc}"
            ) from exc

    @hookimpl
    def karpenter_capi_get(self, provider_id: str) -> Instance | None:
        return self._state().instances.get(provider_id)

    @hookimpl
    def karpenter_capi_list(self) -> list[Instance]:
        state = self._state()
        return [*state.instances.list(), *state.unclaimed.instances()]

    @hookimpl
    def karpenter_capi_is_drifted(self, nodeclaim: NodeClaim, nodeclass: NodeClass) -> str | None:
        if not _ours(nodeclass):
            return None
        return self._state().drift.is_drifted(nodeclaim, nodeclass)

    @hookimpl
    def karpenter_capi_disruption_blocked(self, nodeclaims: list[NodeClaim]) -> dict[str, str]:
        ours = [claim for claim in nodeclaims if _claims_our_kind(claim)]
        if not ours:
            return {}
        try:
            state = self._state()
            return blocked_by_min_size(ours, state.resources, state.mirrors)
        except ApiError as exc:
            # Unsure of the floors: keep every node rather than risk going below one.
            why = f"cannot read the scalable resources: {exc}"
            return {_name(claim): why for claim in ours}
