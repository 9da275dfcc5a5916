"""Garbage collection: NodeClaims and machines that lost their other half.

Two kinds of leftovers appear however careful the lifecycle is, and both cost something:

* **A NodeClaim whose machine is gone.** Someone deleted the instance or the Machine by hand,
  or the cloud reclaimed it (spot). The NodeClaim would keep its pods nominated and count
  against the NodePool's limits forever. Every launched NodeClaim whose provider ID the
  plugins' ``list`` does not show is checked once more with ``get`` (a list may lag behind a
  launch), and deleted when that says ``InstanceNotFoundError`` too, unless its Node still
  reports Ready: then the kubelet is alive, whatever the provider says (upstream's rule).
* **A machine no NodeClaim claims.** A crash between ``create`` and the NodeClaim's status
  write, or a NodeClaim force-deleted without its finalizer, leaves capacity that is paid for
  and used by nobody. An instance from ``list`` that no NodeClaim claims, by provider ID or by
  ``nodeclaim_name``, is deleted through the ``delete`` hook once it has stayed unclaimed for
  ``orphan_grace`` (default 30 s, upstream's) across two passes: a launch that is still being
  recorded is never mistaken for a leak by one unlucky snapshot. Its Node, if one joined, is
  deleted too so its pods move sooner.

The ``delete`` hook takes a NodeClaim, so an orphan is handed to it as a minimal NodeClaim
built from the ``Instance`` (see ``orphan_nodeclaim``): its name is the NodeClaim the instance
names (else the instance's name), ``status.providerID`` its provider ID, the instance's labels
plus type/zone/capacity type as labels, and the annotation ``ORPHAN_INSTANCE_ANNOTATION`` with
the instance's name for plugins that identify machines by name.

Which NodeClaims count is read from the API, not the cache: deciding to delete a machine on a
lagging cache is the one mistake this controller must not make. Instances are listed first, so
the NodeClaims read are at least as recent as the instances they are compared with.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final

from pydantic import ValidationError

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.api.nodeclaim import NodeClaim
from karpenter_capi.core.errors import InstanceNotFoundError, ProviderError
from karpenter_capi.core.hookspecs import Instance
from karpenter_capi.core.kube.client import JsonObject
from karpenter_capi.core.kube.errors import ApiError
from karpenter_capi.core.kube.events import WARNING
from karpenter_capi.core.kube.resources import NODECLAIMS, NODES, Resource
from karpenter_capi.core.lifecycle.conditions import TRUE
from karpenter_capi.core.lifecycle.launch import LAUNCHED
from karpenter_capi.core.lifecycle.metrics import LifecycleReporter
from karpenter_capi.core.lifecycle.nodes import node_is_ready, nodes_for_provider_id
from karpenter_capi.core.lifecycle.writes import Writes
from karpenter_capi.core.plugin_host import PluginError
from karpenter_capi.core.runtime.controller import WORKLOAD, ControllerContext, Result

NAME: Final = "nodeclaim.garbagecollection"
DEFAULT_INTERVAL: Final = 120.0
DEFAULT_ORPHAN_GRACE: Final = 30.0
ORPHAN_INSTANCE_ANNOTATION: Final = "karpenter.cluster.x-k8s.io/orphaned-instance"
"""On the NodeClaim handed to ``delete`` for an orphan: the ``Instance.name`` to delete."""
# How ``Plugins.get`` says that no plugin claimed the ID, as opposed to a plugin saying "gone".
_UNKNOWN_TO_PLUGINS: Final = "no enabled plugin knows it"
_PLACEHOLDER_NODECLASS: Final = {
    "group": wellknown.NODECLASS_GROUP,
    "kind": wellknown.NODECLASS_KIND,
    "name": "orphaned-instance",
}


def orphan_nodeclaim(instance: Instance) -> NodeClaim:
    """A minimal NodeClaim naming an instance no NodeClaim claims, for the ``delete`` hook."""
    labels = dict(instance.labels)
    for key, value in (
        (wellknown.LABEL_INSTANCE_TYPE, instance.instance_type),
        (wellknown.LABEL_TOPOLOGY_ZONE, instance.zone),
        (wellknown.LABEL_CAPACITY_TYPE, instance.capacity_type),
    ):
        if value:
            labels[key] = value
    status: dict[str, Any] = {}
    if instance.provider_id:
        status["providerID"] = instance.provider_id
    if instance.image_id:
        status["imageID"] = instance.image_id
    return NodeClaim.model_validate(
        {
            "metadata": {
                "name": instance.nodeclaim_name or instance.name,
                "labels": labels,
                "annotations": {ORPHAN_INSTANCE_ANNOTATION: instance.name},
            },
            "spec": {"requirements": [], "nodeClassRef": dict(_PLACEHOLDER_NODECLASS)},
            "status": status,
        }
    )


def _launched(claim: Mapping[str, Any]) -> bool:
    for condition in (claim.get("status") or {}).get("conditions") or ():
        if condition.get("type") == LAUNCHED:
            return bool(condition.get("status") == TRUE)
    return False


class NodeClaimGarbageCollector:
    """Periodic (``interval`` s) cleanup of vanished machines and orphaned instances."""

    name = NAME

    def __init__(
        self,
        ctx: ControllerContext,
        *,
        interval: float = DEFAULT_INTERVAL,
        orphan_grace: float = DEFAULT_ORPHAN_GRACE,
    ) -> None:
        self._ctx = ctx
        self.interval = interval
        self._orphan_grace = orphan_grace
        self._writes = Writes(ctx, NAME)
        self._metrics = LifecycleReporter(ctx.metrics, NAME)
        self._unclaimed_since: dict[str, datetime] = {}
        self._kinds: set[tuple[str, str]] | None = None
        # The listing failure last logged at WARNING: an outage is one line, not one a round.
        self._list_failure: str | None = None

    def reads(self) -> Sequence[tuple[Resource, str]]:
        return ((NODES, WORKLOAD),)

    def run_once(self) -> Result:
        try:
            with self._metrics.provider_call("List", "all"):
                instances = self._ctx.plugins.list_instances()
            nodeclaims = self._ctx.client.list(NODECLAIMS).items
        except (ProviderError, PluginError, ApiError) as exc:
            message = f"{NAME}: cannot list instances or NodeClaims: {exc}"
            repeated = message == self._list_failure
            self._list_failure = message
            self._ctx.log.log(logging.DEBUG if repeated else logging.WARNING, "%s", message)
            return Result(requeue_after=self.interval)
        self._list_failure = None
        self._collect_vanished(nodeclaims, instances)
        next_due = self._collect_orphans(nodeclaims, instances)
        return Result(requeue_after=min(self.interval, next_due))

    # NodeClaims whose machine is gone.

    def _served(self, claim: Mapping[str, Any]) -> bool:
        """Whether an enabled plugin serves the NodeClaim's NodeClass kind (else not ours)."""
        if self._kinds is None:
            try:
                self._kinds = set(self._ctx.plugins.nodeclass_kinds())
            except PluginError:
                self._kinds = set()
        ref = (claim.get("spec") or {}).get("nodeClassRef") or {}
        return (ref.get("group"), ref.get("kind")) in self._kinds

    def _collect_vanished(self, nodeclaims: list[JsonObject], instances: list[Instance]) -> None:
        listed = {i.provider_id for i in instances if i.provider_id}
        for claim in nodeclaims:
            meta = claim.get("metadata") or {}
            provider_id = str((claim.get("status") or {}).get("providerID") or "")
            if (
                meta.get("deletionTimestamp")
                or not provider_id
                or provider_id in listed
                or not _launched(claim)
                or not self._served(claim)
            ):
                continue
            try:
                with self._metrics.provider_call("Get", "all"):
                    self._ctx.plugins.get(provider_id)
                continue
            except InstanceNotFoundError as exc:
                if _UNKNOWN_TO_PLUGINS in str(exc):
                    # No enabled plugin recognises the ID (its plugin was disabled): that is
                    # not evidence the machine is gone.
                    self._ctx.log.warning("%s: %s; keeping NodeClaim", NAME, exc)
                    continue
            except (ProviderError, PluginError) as exc:
                self._ctx.log.warning("%s: cannot check %s: %s", NAME, provider_id, exc)
                continue
            nodes = nodes_for_provider_id(self._ctx.caches, provider_id)
            if any(node_is_ready(node) for node in nodes):
                self._ctx.log.info(
                    "%s: provider reports %s gone but its Node is Ready; keeping NodeClaim %s",
                    NAME,
                    provider_id,
                    meta.get("name"),
                )
                continue
            message = f"instance {provider_id} no longer exists; deleting the NodeClaim"
            self._ctx.log.info("%s: NodeClaim %s: %s", NAME, meta.get("name"), message)
            self._writes.event(claim, WARNING, "InstanceGarbageCollected", message)
            try:
                deleted = self._writes.delete(NODECLAIMS, claim)
            except ApiError as exc:
                self._ctx.log.warning("%s: deleting %s failed: %s", NAME, meta.get("name"), exc)
                continue
            if deleted:
                labels = meta.get("labels") or {}
                self._metrics.disrupted(
                    "garbage_collected",
                    labels.get(wellknown.LABEL_NODEPOOL, ""),
                    labels.get(wellknown.LABEL_CAPACITY_TYPE, ""),
                )

    # Machines no NodeClaim claims.

    def _collect_orphans(self, nodeclaims: list[JsonObject], instances: list[Instance]) -> float:
        """Delete instances unclaimed for the grace period; seconds until the next is due."""
        claimed_ids = {
            str((c.get("status") or {}).get("providerID"))
            for c in nodeclaims
            if (c.get("status") or {}).get("providerID")
        }
        claimed_names = {str(c["metadata"]["name"]) for c in nodeclaims}
        now = self._ctx.clock.now()
        next_due = self.interval
        unclaimed: dict[str, datetime] = {}
        for instance in instances:
            if (instance.provider_id and instance.provider_id in claimed_ids) or (
                instance.nodeclaim_name and instance.nodeclaim_name in claimed_names
            ):
                continue
            key = instance.provider_id or f"name:{instance.name}"
            since = self._unclaimed_since.get(key, now)
            unclaimed[key] = since
            waited = (now - since).total_seconds()
            if waited < self._orphan_grace:
                next_due = min(next_due, self._orphan_grace - waited)
                continue
            if self._delete_orphan(instance):
                unclaimed.pop(key)
        # Forget instances that were claimed or disappeared since.
        self._unclaimed_since = unclaimed
        return next_due

    def _delete_orphan(self, instance: Instance) -> bool:
        """Ask the plugins to delete ``instance``; True once it is gone."""
        label = instance.provider_id or instance.name
        if self._writes.dry_run:
            self._writes.would("delete orphaned instance %s", label)
            return False
        try:
            claim = orphan_nodeclaim(instance)
        except ValidationError as exc:
            self._ctx.log.warning("%s: cannot describe orphan %s: %s", NAME, label, exc)
            return False
        try:
            with self._metrics.provider_call("Delete", "all"):
                plugin = self._ctx.plugins.delete(claim)
        except InstanceNotFoundError:
            self._ctx.log.info("%s: orphaned instance %s is gone", NAME, label)
            return True
        except (ProviderError, PluginError) as exc:
            self._ctx.log.warning("%s: deleting orphaned instance %s failed: %s", NAME, label, exc)
            return False
        self._ctx.log.info(
            "%s: deleting instance %s (plugin %s): no NodeClaim claims it", NAME, label, plugin
        )
        if instance.provider_id:
            self._delete_nodes(instance.provider_id)
        return False

    def _delete_nodes(self, provider_id: str) -> None:
        for node in nodes_for_provider_id(self._ctx.caches, provider_id):
            if (node.get("metadata") or {}).get("deletionTimestamp"):
                continue
            try:
                self._writes.delete(NODES, node)
            except ApiError as exc:
                self._ctx.log.warning(
                    "%s: deleting node %s failed: %s", NAME, node["metadata"].get("name"), exc
                )
