"""A NodePool's ``status.resources`` and ``status.nodes``: what it has launched, as upstream counts.

``kubectl get nodepools`` shows ``status.nodes`` in its Nodes column, ``kubectl scale`` reads it
as the scale subresource's current replicas, and ``status.resources`` is what the NodePool's
nodes add up to (``karpenter_nodepools_usage`` upstream). Upstream's ``nodepool.counter`` sums
the capacity of the NodePool's nodes that are launched (their capacity is known) and not marked
for deletion (deleting, or held by a disruption command), plus ``nodes``: their count; with
``cpu``, ``memory``, ``pods``, ``ephemeral-storage`` and ``nodes`` always present, at zero when
nothing runs. This controller writes the same through the status subresource when the
NodePool's NodeClaims or Nodes change it, at most once per ``WRITE_INTERVAL`` per NodePool.

Upstream's counter (``nodepool/counter/controller.go: Reconcile``, ``Register``) does not
watch NodeClaims or Nodes: it counts each NodePool when it is created and then every 5 s, so a
scale-up round costs a NodePool one status write per 5 s. Reacting to every event wrote once
per NodeClaim of a round instead (a write, and a watch event to every watcher of NodePools,
for each). So the first change is written at once (sooner than upstream), and the changes
that follow within the interval wait for its end and go in one write, counted from the
caches as they stand then. Nothing in the controller reads these figures back: they are for
``kubectl`` and the scale subresource.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.api.nodeclaim import NodeClaimConditionType
from karpenter_capi.core.kube.client import JsonObject
from karpenter_capi.core.kube.resources import NODECLAIMS, NODEPOOLS, NODES, Resource
from karpenter_capi.core.lifecycle.writes import Writes
from karpenter_capi.core.runtime.controller import (
    DONE,
    WORKLOAD,
    ControllerContext,
    Key,
    Result,
    Watch,
)
from karpenter_capi.core.values.resources import ResourceList

NAME: Final = "nodepool.counter"
BASE_RESOURCES: Final = ("cpu", "memory", "pods", "ephemeral-storage", "nodes")
"""Always reported, at zero when the NodePool has nothing (upstream's ``BaseResources``)."""
WRITE_INTERVAL: Final = 5.0
"""Seconds between two status writes of one NodePool (upstream's counter polls every 5 s)."""


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _pool_of(obj: Mapping[str, Any]) -> str:
    return str((_meta(obj).get("labels") or {}).get(wellknown.LABEL_NODEPOOL, ""))


def _marked_for_deletion(claim: Mapping[str, Any], node: Mapping[str, Any] | None) -> bool:
    if _meta(claim).get("deletionTimestamp"):
        return True
    conditions = (claim.get("status") or {}).get("conditions") or []
    kind = NodeClaimConditionType.DISRUPTION_REASON.value
    if any(c.get("type") == kind and c.get("status") == "True" for c in conditions):
        return True
    if node is None:
        return False
    if _meta(node).get("deletionTimestamp"):
        return True
    taints = (node.get("spec") or {}).get("taints") or []
    return any(t.get("key") == wellknown.TAINT_DISRUPTED_KEY for t in taints)


def _counted(claim: Mapping[str, Any], node: Mapping[str, Any] | None) -> ResourceList | None:
    """What one NodeClaim (and its Node) adds to its NodePool's count; ``None``: nothing."""
    if _marked_for_deletion(claim, node):
        return None
    # The Node's own capacity once it has registered, what the launch reported before.
    status = claim.get("status") or {}
    capacity = ((node or {}).get("status") or {}).get("capacity") or status.get("capacity")
    if not capacity:
        return None  # not launched yet: nothing to count
    return ResourceList.parse(capacity)


Counted = dict[str, tuple[Mapping[str, Any], Mapping[str, Any] | None, ResourceList | None]]
"""What ``nodepool_resources`` found each NodeClaim adds, by name, with the very NodeClaim and
Node objects it read (the informer cache replaces an object when it changes)."""


def nodepool_resources(
    nodepool: str,
    nodeclaims: Iterable[Mapping[str, Any]],
    nodes: Iterable[Mapping[str, Any]],
    memo: Counted | None = None,
) -> tuple[ResourceList, Counted]:
    """The capacity of ``nodepool``'s launched nodes not marked for deletion, and ``nodes``;
    and what each NodeClaim added. ``memo``, the last call's, gives what a NodeClaim adds
    while it and its Node are the very objects read then."""
    by_name = {str(_meta(n).get("name")): n for n in nodes}
    total = ResourceList.from_milli(dict.fromkeys(BASE_RESOURCES, 0))
    count = 0
    counted: Counted = {}
    for claim in nodeclaims:
        if _pool_of(claim) != nodepool:
            continue
        status = claim.get("status") or {}
        node = by_name.get(str(status.get("nodeName"))) if status.get("nodeName") else None
        name = str(_meta(claim).get("name"))
        kept = memo.get(name) if memo is not None else None
        if kept is not None and kept[0] is claim and kept[1] is node:
            capacity = kept[2]
        else:
            capacity = _counted(claim, node)
        counted[name] = (claim, node, capacity)
        if capacity is None:
            continue
        total = total.add(capacity)
        count += 1
    return total.add(ResourceList.from_milli({"nodes": count * 1000})), counted


class NodePoolCounterController:
    """Keeps every NodePool's ``status.resources`` and ``status.nodes``."""

    name = NAME
    primary = NODEPOOLS
    primary_cluster = WORKLOAD

    def __init__(self, ctx: ControllerContext) -> None:
        self._ctx = ctx
        self._writes = Writes(ctx, NAME)
        # NodePool -> (the resourceVersion a status write patched, the status written). While
        # the informer's copy is still at that version it has not shown the write yet, and
        # the same status computed again would be written again for nothing.
        self._written: dict[str, tuple[str, dict[str, Any]]] = {}
        # NodePool -> what its last reconcile found each NodeClaim adds: a reconcile comes with
        # every event of any of its NodeClaims and Nodes, and reads each of them again.
        self._counted: dict[str, Counted] = {}
        # NodePool -> when (clock.monotonic) its status was last written.
        self._last_write: dict[str, float] = {}

    def watches(self) -> Sequence[Watch]:
        return [Watch(NODECLAIMS, self._pool_key), Watch(NODES, self._pool_key)]

    def reads(self) -> Sequence[tuple[Resource, str]]:
        return [(NODEPOOLS, WORKLOAD), (NODECLAIMS, WORKLOAD), (NODES, WORKLOAD)]

    @staticmethod
    def _pool_key(obj: JsonObject) -> Iterable[Key]:
        name = _pool_of(obj)
        return (name,) if name else ()

    def reconcile(self, key: Key) -> Result:
        caches = self._ctx.caches
        pool = caches.store(NODEPOOLS).get(key)
        if pool is None:
            self._written.pop(key, None)
            self._counted.pop(key, None)
            self._last_write.pop(key, None)
            return DONE
        found, self._counted[key] = nodepool_resources(
            key, caches.store(NODECLAIMS).list(), caches.store(NODES).list(), self._counted.get(key)
        )
        resources = found.to_dict()
        nodes = ResourceList.parse({"nodes": resources["nodes"]}).value("nodes")
        status = pool.get("status") or {}
        current = dict(status.get("resources") or {})
        same = ResourceList.parse(current) == ResourceList.parse(resources)
        if same and status.get("nodes") == nodes:
            return DONE
        # A merge patch keeps keys it does not name: a resource gone from every node is nulled.
        patch: dict[str, Any] = {name: None for name in current if name not in resources}
        patch.update(resources)
        body = {"status": {"resources": patch, "nodes": nodes}}
        version = str((pool.get("metadata") or {}).get("resourceVersion") or "")
        if version and self._written.get(key) == (version, body):
            return DONE  # written over this very version: its watch event brings it back
        now = self._ctx.clock.monotonic()
        last = self._last_write.get(key)
        if last is not None and now - last < WRITE_INTERVAL:
            # Written within the interval: this change and those that follow go together at its
            # end, counted again then.
            return Result(requeue_after=WRITE_INTERVAL - (now - last))
        self._writes.patch(NODEPOOLS, pool, body, subresource="status")
        if not self._writes.dry_run:  # a dry run's copy never changes: it says each time
            self._written[key] = (version, body)
            self._last_write[key] = now
        return DONE
