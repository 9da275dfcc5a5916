"""Expiration: a NodeClaim older than its ``expireAfter`` is deleted, budgets or not.

Upstream Karpenter v1 treats expiry as forceful: no budget, no simulation, no replacement
launched first; the NodeClaim is deleted and the termination controllers drain it within its
``terminationGracePeriod`` (PDBs are honoured until that deadline). Its pods go pending and
provisioning launches what they need. ``expireAfter`` is copied from the NodePool template onto
each NodeClaim at creation, so changing the NodePool does not re-date existing nodes (that is
drift). Each NodeClaim is requeued for the moment it expires; nothing polls.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import timedelta

from karpenter_capi.core.api.duration import DurationError, parse_duration
from karpenter_capi.core.clock import parse_timestamp
from karpenter_capi.core.disruption.orchestration import write_disruption_reason
from karpenter_capi.core.kube.events import NORMAL
from karpenter_capi.core.kube.resources import NODECLAIMS, Resource
from karpenter_capi.core.runtime.controller import (
    DONE,
    WORKLOAD,
    ControllerContext,
    Key,
    Result,
    Watch,
)
from karpenter_capi.core.termination.actions import Actions

log = logging.getLogger(__name__)

EXPIRED = "Expired"


class ExpirationController:
    """Deletes NodeClaims past their ``expireAfter``."""

    name = "nodeclaim.expiration"
    primary = NODECLAIMS
    primary_cluster = WORKLOAD

    def __init__(self, ctx: ControllerContext) -> None:
        self._ctx = ctx
        self._actions = Actions(ctx, log)

    def watches(self) -> Sequence[Watch]:
        return []

    def reads(self) -> Sequence[tuple[Resource, str]]:
        return []

    def reconcile(self, key: Key) -> Result:
        claim = self._ctx.caches.store(NODECLAIMS).get(key)
        if claim is None:
            return DONE
        meta = claim.get("metadata") or {}
        raw = (claim.get("spec") or {}).get("expireAfter")
        if meta.get("deletionTimestamp") or not raw or raw == "Never":
            return DONE
        try:
            expire_after = parse_duration(str(raw))
        except DurationError:
            return DONE  # the CRD's pattern keeps this out; nothing sensible to do
        created = parse_timestamp(str(meta.get("creationTimestamp")))
        remaining = created + expire_after - self._ctx.clock.now()
        if remaining > timedelta(0):
            return Result(requeue_after=remaining.total_seconds())
        name = str(meta.get("name"))
        message = f"Disrupting NodeClaim: {EXPIRED} (expireAfter {raw})"
        write_disruption_reason(self._ctx, self._actions, name, EXPIRED, f"expireAfter {raw}")
        self._actions.event(NODECLAIMS, claim, NORMAL, "DisruptionTerminating", message)
        log.info("NodeClaim %s expired (expireAfter %s): deleting it", name, raw)
        self._actions.delete(NODECLAIMS, name)
        metrics = self._ctx.metrics
        if metrics is not None and not self._ctx.dry_run:
            labels = meta.get("labels") or {}
            metrics.nodeclaim_disrupted(
                str(labels.get("karpenter.sh/nodepool", "")),
                reason="expired",
                capacity_type=str(labels.get("karpenter.sh/capacity-type", "")),
            )
        return DONE
