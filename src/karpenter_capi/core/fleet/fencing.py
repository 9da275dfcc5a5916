"""Writes to a workload cluster only while this replica holds the cluster's Lease.

In fleet mode a cluster's controllers run on whichever replica holds the cluster's Lease
(``core.fleet.sharding``). Stopping them when the Lease goes is not enough on its own: a
controller thread may be in the middle of a round, or the replica may be partitioned from the
management cluster and not yet know. ``FencedClient`` wraps the client every controller of the
cluster is given and asks, before each write, whether the Lease is still held (``holds()`` turns
false once the renew deadline has passed, before any other replica may take the Lease over).
Reads pass through: reading is harmless and keeps caches warm for a quick return.

A refused write raises ``FencedError``, a 409 Conflict: controllers already treat a conflict as
"someone else changed this; re-read and try again later", logged as one line, which is what
happened; and nothing is marked on the object, since marking would be a write too.

A write that passed the check just before the Lease was lost still goes out; the hand-over
leaves a step between fencing and releasing for those to finish (see ``sharding``).
"""

from __future__ import annotations

import builtins
from collections.abc import Callable

from karpenter_capi.core.fleet.sharding import cluster_lease_name
from karpenter_capi.core.kube.client import (
    JsonObject,
    KubeClient,
    PatchType,
    Preconditions,
    PropagationPolicy,
)
from karpenter_capi.core.kube.errors import Conflict
from karpenter_capi.core.kube.forwarding import ForwardingClient
from karpenter_capi.core.kube.resources import PODS, Resource


class FencedError(Conflict):
    """A write to a cluster this replica no longer (or not yet) holds the Lease of."""

    reason = "Fenced"


class FencedClient(ForwardingClient):
    """A ``KubeClient`` for one workload cluster whose writes require ``holds()``.

    ``lease`` names the guarding Lease in messages (``namespace/name``); by default its name.
    """

    def __init__(
        self,
        inner: KubeClient,
        holds: Callable[[], bool],
        cluster: str,
        *,
        lease: str | None = None,
    ) -> None:
        super().__init__(inner)
        self._holds = holds
        self.cluster = cluster
        self.lease = lease or cluster_lease_name(cluster)

    def _check(self, verb: str, resource: Resource, name: str | None) -> None:
        if self._holds():
            return
        what = resource.plural + (f" {name}" if name else "")
        raise FencedError(
            f"cluster {self.cluster}: not sending {verb} {what}: this replica does not hold "
            f"the cluster's Lease {self.lease}; the replica that holds it serves the cluster"
        )

    # -- writes ------------------------------------------------------------------------------

    def create(
        self,
        resource: Resource,
        obj: JsonObject,
        namespace: str | None = None,
    ) -> JsonObject:
        self._check("create", resource, (obj.get("metadata") or {}).get("name"))
        return self.inner.create(resource, obj, namespace)

    def update(
        self,
        resource: Resource,
        obj: JsonObject,
        *,
        subresource: str | None = None,
    ) -> JsonObject:
        name = (obj.get("metadata") or {}).get("name")
        self._check("update", resource, f"{name}/{subresource}" if subresource else name)
        return self.inner.update(resource, obj, subresource=subresource)

    def patch(
        self,
        resource: Resource,
        name: str,
        patch: JsonObject | builtins.list[JsonObject],
        namespace: str | None = None,
        *,
        patch_type: PatchType = PatchType.MERGE,
        subresource: str | None = None,
    ) -> JsonObject:
        self._check("patch", resource, f"{name}/{subresource}" if subresource else name)
        return self.inner.patch(
            resource, name, patch, namespace, patch_type=patch_type, subresource=subresource
        )

    def delete(
        self,
        resource: Resource,
        name: str,
        namespace: str | None = None,
        *,
        preconditions: Preconditions | None = None,
        propagation_policy: PropagationPolicy | None = None,
        grace_period_seconds: int | None = None,
    ) -> JsonObject:
        self._check("delete", resource, name)
        return self.inner.delete(
            resource,
            name,
            namespace,
            preconditions=preconditions,
            propagation_policy=propagation_policy,
            grace_period_seconds=grace_period_seconds,
        )

    def evict(self, name: str, namespace: str, *, grace_period_seconds: int | None = None) -> None:
        self._check("evict", PODS, f"{namespace}/{name}")
        self.inner.evict(name, namespace, grace_period_seconds=grace_period_seconds)
