"""The NodePool's ``NodeRegistrationHealthy`` condition: can this pool actually make nodes?

A NodePool whose nodes never come up (a broken bootstrap template, an image that does not
join, a quota that lets the Machine exist but not boot) would otherwise look healthy forever
while every NodeClaim it makes times out. Liveness marks the condition False when a NodeClaim
of the pool is deleted for not launching or not registering, with the reason, so the user sees
it on ``kubectl describe nodepool``; the next successful registration marks it True again.
(Upstream weighs a window of recent outcomes; one outcome at a time is enough to tell the user
and keeps no state across restarts.) ``NodeRegistrationHealthy`` is informational: it is not a
dependent of the NodePool's ``Ready``, exactly as upstream.

It is written only when it changes (upstream: ``registration.go:
updateNodePoolRegistrationHealth`` patches when ``SetTrue`` changed the condition). A round's
NodeClaims register together, and every one after the first read the NodePool from a cache
that did not show the first's write yet: each wrote ``True`` again, over a resourceVersion the
server had moved past, and lost a ``409 Conflict`` that failed its whole reconcile (70 such in
``basic-1000``). ``RegistrationHealth`` remembers the version its ``True`` was written over:
while the cache still shows that version, the condition is ``True`` on the server already.
"""

from __future__ import annotations

from typing import Final

from karpenter_capi.core.api.nodepool import NodePoolConditionType
from karpenter_capi.core.clock import parse_timestamp
from karpenter_capi.core.kube.client import JsonObject
from karpenter_capi.core.kube.events import WARNING
from karpenter_capi.core.kube.resources import NODEPOOLS
from karpenter_capi.core.lifecycle.conditions import ConditionSet
from karpenter_capi.core.lifecycle.work import NodeClaimWork
from karpenter_capi.core.lifecycle.writes import Writes
from karpenter_capi.core.runtime.controller import WORKLOAD, ControllerContext

CONDITION: Final = str(NodePoolConditionType.NODE_REGISTRATION_HEALTHY)


def _owning_nodepool(ctx: ControllerContext, work: NodeClaimWork) -> JsonObject | None:
    """The NodePool of ``work``, if it is still the one that owns it (same uid)."""
    name = work.nodepool
    if not name:
        return None
    pool = ctx.caches.store(NODEPOOLS, WORKLOAD).get(name)
    if pool is None:
        return None
    uid = (pool.get("metadata") or {}).get("uid")
    for ref in (work.raw.get("metadata") or {}).get("ownerReferences") or ():
        if ref.get("kind") == NODEPOOLS.kind and ref.get("name") == name:
            # A NodePool deleted and recreated under the same name is another pool.
            return pool if not ref.get("uid") or ref.get("uid") == uid else None
    return None


class RegistrationHealth:
    """What this process wrote: NodePool name -> the resourceVersion a ``True`` patched."""

    def __init__(self) -> None:
        self._true_over: dict[str, str] = {}

    def written_true(self, pool: JsonObject) -> bool:
        """Whether ``pool``, as read, is the very version a ``True`` was written over (the
        cache has not shown that write yet)."""
        meta = pool.get("metadata") or {}
        version = str(meta.get("resourceVersion") or "")
        return bool(version) and self._true_over.get(str(meta.get("name"))) == version

    def wrote(self, pool: JsonObject, *, healthy: bool) -> None:
        meta = pool.get("metadata") or {}
        name = str(meta.get("name"))
        if healthy:
            self._true_over[name] = str(meta.get("resourceVersion") or "")
        else:
            self._true_over.pop(name, None)


def set_registration_health(
    ctx: ControllerContext,
    writes: Writes,
    work: NodeClaimWork,
    *,
    healthy: bool,
    reason: str = "",
    message: str = "",
    written: RegistrationHealth | None = None,
) -> None:
    """Set the owning NodePool's ``NodeRegistrationHealthy`` (no write when unchanged, nor
    when ``written`` says this process set it ``True`` over the version read).

    The whole condition list is written with the NodePool's resourceVersion as precondition;
    a ``Conflict`` propagates so the reconcile is retried against the fresh NodePool.
    """
    pool = _owning_nodepool(ctx, work)
    if pool is None:
        return
    if healthy and written is not None and written.written_true(pool):
        return
    meta = pool.get("metadata") or {}
    created = meta.get("creationTimestamp")
    generation = meta.get("generation")
    conditions = ConditionSet(
        (pool.get("status") or {}).get("conditions") or [],
        now=ctx.clock.now(),
        generation=int(generation) if generation is not None else None,
        created=parse_timestamp(str(created)) if created else None,
        dependents=(),
        root=None,
    )
    was_false = conditions.status(CONDITION) == "False"
    if healthy:
        if conditions.is_true(CONDITION):
            return
        conditions.set_true(CONDITION)
    else:
        conditions.set_false(CONDITION, reason, message)
    if not conditions.changed:
        return
    writes.patch(
        NODEPOOLS,
        pool,
        {
            "metadata": {"resourceVersion": meta.get("resourceVersion")},
            "status": {"conditions": conditions.to_json()},
        },
        subresource="status",
    )
    if written is not None and not writes.dry_run:
        written.wrote(pool, healthy=healthy)
    if not healthy and not was_false:
        writes.event(pool, WARNING, "NodeRegistrationUnhealthy", f"{reason}: {message}")
