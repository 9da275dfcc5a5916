"""Static provisioning and deprovisioning: keep ``spec.replicas`` NodeClaims per static NodePool.

Upstream Karpenter runs two controllers per static NodePool and so do we, with upstream's names
and log lines. ``static.provisioning`` creates the missing NodeClaims (capped by
``limits.nodes``) once the NodePool is ``Ready``; ``static.deprovisioning`` deletes the surplus
when ``replicas`` goes down. Scale-down ignores disruption budgets (the user asked for it) but
not PodDisruptionBudgets: deleting a NodeClaim hands it to the termination controllers, which
drain it as any other. What to do and which NodeClaims go is decided by ``plan``.

Both count the NodePool's NodeClaims from a fresh list, not the informer cache: a NodeClaim
created or deleted a moment ago may not be in the cache yet, and counting from it would create
or delete the same replica twice. Each reconcile is woken by the NodePool (``replicas``, its
``Ready`` condition) and by its NodeClaims, and requeues itself each minute as upstream does.
Every action is logged at INFO and recorded as an Event on the NodePool: ``ScaledUp``,
``ScaledDown``, and ``NodeLimitReached`` when ``limits.nodes`` holds replicas back.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from pydantic import ValidationError

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.api.nodepool import NodePool, NodePoolConditionType
from karpenter_capi.core.kube.client import JsonObject
from karpenter_capi.core.kube.errors import ApiError
from karpenter_capi.core.kube.events import NORMAL, WARNING
from karpenter_capi.core.kube.indexes import BY_NODE_NAME
from karpenter_capi.core.kube.resources import (
    CLUSTER_API_NODE_CLASSES,
    DAEMONSETS,
    NODECLAIMS,
    NODEPOOLS,
    NODES,
    PODS,
    Resource,
)
from karpenter_capi.core.observability.logs import ref
from karpenter_capi.core.provisioning.inventory import resolve_nodepool
from karpenter_capi.core.provisioning.nodeclaims import log_created, nodeclaim_body
from karpenter_capi.core.provisioning.nodepools import nodepool_option
from karpenter_capi.core.provisioning.state import ClusterSnapshot
from karpenter_capi.core.runtime.controller import (
    DONE,
    WORKLOAD,
    ControllerContext,
    Key,
    Result,
    Watch,
)
from karpenter_capi.core.scheduling.solver_io import ProposedNodeClaim
from karpenter_capi.core.static.plan import (
    CAPPED_RETRY,
    OVERPROVISIONED,
    ReplicaPlan,
    plan_replicas,
    pool_of,
    scale_down_choice,
    static_nodeclaim,
)
from karpenter_capi.core.termination.actions import Actions

log = logging.getLogger(__name__)

RESYNC: Final = 60.0
"""Upstream requeues every static NodePool each minute, whatever happened."""
HELD_RETRY: Final = 30.0
"""How soon a pool held back by ``limits.nodes`` or a broken NodeClass looks again."""
REASON_PROVISIONED: Final = "provisioned"


def _ready(raw: Mapping[str, Any]) -> bool:
    return any(
        c.get("type") == NodePoolConditionType.READY.value and c.get("status") == "True"
        for c in (raw.get("status") or {}).get("conditions") or []
    )


class _StaticBase:
    """What both controllers share: their NodePool, the watch, the fresh count."""

    name: str
    primary = NODEPOOLS
    primary_cluster = WORKLOAD

    def __init__(self, ctx: ControllerContext) -> None:
        self._ctx = ctx
        self._actions = Actions(ctx, log)
        # What was last said at INFO per NodePool, so a pool waiting on its limit is not
        # reported every 30 s.
        self._said: dict[str, str] = {}

    def watches(self) -> Sequence[Watch]:
        return [Watch(NODECLAIMS, self._pool_key)]

    def reads(self) -> Sequence[tuple[Resource, str]]:
        return [(NODEPOOLS, WORKLOAD), (NODECLAIMS, WORKLOAD)]

    def _pool_key(self, claim: JsonObject) -> Iterable[Key]:
        name = pool_of(claim)
        if not name:
            return ()
        pool = self._ctx.caches.store(NODEPOOLS).get(name)
        if pool is None or (pool.get("spec") or {}).get("replicas") is None:
            return ()
        return (name,)

    def _static_pool(self, key: Key) -> tuple[JsonObject, NodePool] | None:
        """The static NodePool ``key`` names, unless gone, deleting, dynamic or invalid."""
        raw = self._ctx.caches.store(NODEPOOLS).get(key)
        if raw is None or (raw.get("metadata") or {}).get("deletionTimestamp"):
            self._said.pop(key, None)
            return None
        if (raw.get("spec") or {}).get("replicas") is None:
            return None
        try:
            return raw, NodePool.model_validate(raw)
        except ValidationError:
            return None  # readiness says why on the NodePool; nothing to act on

    def _nodeclaims(self, nodepool: str) -> list[Mapping[str, Any]]:
        """The pool's NodeClaims as the API has them now."""
        selector = f"{wellknown.LABEL_NODEPOOL}={nodepool}"
        return list(self._ctx.client.list(NODECLAIMS, label_selector=selector).items)

    def _say(self, nodepool: str, message: str, **fields: Any) -> None:
        """INFO the first time, DEBUG while nothing changes."""
        said = f"{message} {sorted(fields.items())}"
        level = logging.DEBUG if self._said.get(nodepool) == said else logging.INFO
        self._said[nodepool] = said
        log.log(level, message, extra={"NodePool": ref(nodepool), **fields})


class StaticProvisioningController(_StaticBase):
    """Creates the NodeClaims a static NodePool is missing (upstream ``static.provisioning``)."""

    name = "static.provisioning"

    def reads(self) -> Sequence[tuple[Resource, str]]:
        return [*super().reads(), (DAEMONSETS, WORKLOAD), (CLUSTER_API_NODE_CLASSES, WORKLOAD)]

    def __init__(self, ctx: ControllerContext) -> None:
        super().__init__(ctx)
        # NodePool -> when its last round was cut to CREATE_PER_ROUND, and what it was told.
        self._limited: dict[str, tuple[float, str]] = {}

    def reconcile(self, key: Key) -> Result:
        found = self._static_pool(key)
        if found is None:
            self._limited.pop(key, None)
            return DONE
        raw, pool = found
        if not _ready(raw):
            # Readiness says why; its status write wakes this controller again.
            return DONE
        waiting = self._capped_wait(pool.name)
        if waiting is not None:
            return waiting
        claims = self._nodeclaims(pool.name)
        plan = plan_replicas(pool, claims)
        if plan.create <= 0:
            if plan.held:
                self._held(raw, plan)
                return Result(requeue_after=HELD_RETRY)
            self._said.pop(pool.name, None)
            return Result(requeue_after=RESYNC)
        proposal = self._proposal(raw, claims)
        if isinstance(proposal, str):
            self._say(pool.name, "cannot provision nodeclaims for static nodepool", error=proposal)
            self._actions.event(NODEPOOLS, raw, WARNING, "FailedScaleUp", proposal)
            return Result(requeue_after=HELD_RETRY)
        self._said.pop(pool.name, None)
        self._scale_up(raw, plan, proposal)
        if plan.held:
            self._held(raw, plan)
        if plan.limited:
            return self._limit(raw, plan)
        self._limited.pop(pool.name, None)
        return Result(requeue_after=RESYNC)

    def _capped_wait(self, nodepool: str) -> Result | None:
        """While a pool cut to CREATE_PER_ROUND waits out CAPPED_RETRY, the rest of the wait:
        its own NodeClaims' events wake it at once, the cap is per CAPPED_RETRY."""
        limited = self._limited.get(nodepool)
        if limited is None:
            return None
        waited = self._ctx.clock.monotonic() - limited[0]
        return Result(requeue_after=CAPPED_RETRY - waited) if waited < CAPPED_RETRY else None

    def _proposal(
        self, raw: JsonObject, claims: Sequence[Mapping[str, Any]]
    ) -> ProposedNodeClaim | str:
        """The NodeClaim every new replica copies, or why the pool cannot have one."""
        inventory = resolve_nodepool(self._ctx.client, self._ctx.plugins, raw)
        if inventory.error:
            return inventory.error
        snapshot = ClusterSnapshot(pods=[], nodes=[], nodeclaims=list(claims), daemonsets=[])
        return static_nodeclaim(
            nodepool_option(inventory, snapshot), self._ctx.caches.store(DAEMONSETS).list()
        )

    def _scale_up(self, raw: JsonObject, plan: ReplicaPlan, proposal: ProposedNodeClaim) -> None:
        """Create the plan's NodeClaims from the proposal and say so on the pool."""
        log.info(
            "provisioning nodeclaims to satisfy replica count",
            extra={
                "NodePool": ref(plan.nodepool),
                "current": plan.count.active,
                "desired": plan.replicas,
                "provision-count": plan.create,
            },
        )
        created = []
        for _ in range(plan.create):
            body = nodeclaim_body(raw, proposal)
            if self._ctx.dry_run:
                log_created("(dry run)", proposal, dry_run=True)
                continue
            name = str(self._ctx.client.create(NODECLAIMS, body)["metadata"]["name"])
            created.append(name)
            log_created(name, proposal)
            if self._ctx.metrics is not None:
                self._ctx.metrics.nodeclaim_created(plan.nodepool, reason=REASON_PROVISIONED)
        types = ", ".join(t.name for t in proposal.instance_types[:3])
        self._actions.event(
            NODEPOOLS,
            raw,
            NORMAL,
            "ScaledUp",
            f"Created {plan.create} NodeClaim(s) ({', '.join(created) or 'dry run'}) to reach "
            f"{plan.replicas} replicas from {plan.count.active} (cheapest first: {types})",
        )

    def _limit(self, raw: JsonObject, plan: ReplicaPlan) -> Result:
        """Say once per change that the pool is filled a round at a time; wait for the next."""
        said = self._limited.get(plan.nodepool)
        self._limited[plan.nodepool] = (self._ctx.clock.monotonic(), plan.limited)
        if said is None or said[1] != plan.limited:
            log.warning(
                "static nodepool creates nodeclaims a round at a time: %s",
                plan.limited,
                extra={"NodePool": ref(plan.nodepool)},
            )
            self._actions.event(NODEPOOLS, raw, WARNING, "ScaleUpLimited", plan.limited)
        return Result(requeue_after=CAPPED_RETRY)

    def _held(self, raw: JsonObject, plan: ReplicaPlan) -> None:
        self._say(
            plan.nodepool,
            "nodepool node limit reached",
            current=plan.count.active,
            desired=plan.replicas,
            nodeclaims=plan.count.total,
        )
        self._actions.event(NODEPOOLS, raw, WARNING, "NodeLimitReached", plan.describe())


class StaticDeprovisioningController(_StaticBase):
    """Deletes a static NodePool's surplus NodeClaims (upstream ``static.deprovisioning``)."""

    name = "static.deprovisioning"

    def reads(self) -> Sequence[tuple[Resource, str]]:
        return [*super().reads(), (NODES, WORKLOAD), (PODS, WORKLOAD)]

    def reconcile(self, key: Key) -> Result:
        found = self._static_pool(key)
        if found is None:
            return DONE
        raw, pool = found
        claims = self._nodeclaims(pool.name)
        nodes = self._ctx.caches.store(NODES).list()
        plan = plan_replicas(pool, claims, nodes)
        if plan.delete <= 0:
            return Result(requeue_after=RESYNC)
        pods = self._ctx.caches.store(PODS)
        node_names = {str((c.get("status") or {}).get("nodeName") or "") for c in claims}
        chosen = scale_down_choice(
            pool.name,
            plan.delete,
            nodeclaims=claims,
            nodes=nodes,
            pods_by_node={n: pods.by_index(BY_NODE_NAME, n) for n in node_names if n},
            now=self._ctx.clock.now(),
        )
        log.info(
            "deprovisioning nodeclaims to satisfy replica count",
            extra={
                "NodePool": ref(pool.name),
                "current": plan.count.active,
                "desired": plan.replicas,
                "deprovision-count": plan.delete,
            },
        )
        deleted = []
        for choice in chosen:
            message = (
                f"Disrupting NodeClaim: {OVERPROVISIONED} (NodePool {pool.name} scaled to "
                f"{plan.replicas} replicas; chosen as {choice.why})"
            )
            try:
                result = self._actions.delete(NODECLAIMS, choice.name)
            except ApiError as error:
                log.warning("static.deprovisioning: cannot delete %s: %s", choice.name, error)
                continue
            if result is None and not self._ctx.dry_run:
                continue  # already gone: another writer got there first
            deleted.append(choice.name)
            log.info(
                "deleting nodeclaim",
                extra={
                    "NodeClaim": ref(choice.name),
                    "NodePool": ref(pool.name),
                    "why": choice.why,
                },
            )
            self._actions.event(
                NODECLAIMS, choice.nodeclaim, NORMAL, "DisruptionTerminating", message
            )
            if self._ctx.metrics is not None and not self._ctx.dry_run:
                labels = (choice.nodeclaim.get("metadata") or {}).get("labels") or {}
                self._ctx.metrics.nodeclaim_disrupted(
                    pool.name,
                    reason=OVERPROVISIONED.lower(),
                    capacity_type=str(labels.get(wellknown.LABEL_CAPACITY_TYPE, "")),
                )
        if deleted:
            self._actions.event(
                NODEPOOLS,
                raw,
                NORMAL,
                "ScaledDown",
                f"Deleting {len(deleted)} NodeClaim(s) ({', '.join(deleted)}) to reach "
                f"{plan.replicas} replicas from {plan.count.active}",
            )
        return Result(requeue_after=RESYNC)
