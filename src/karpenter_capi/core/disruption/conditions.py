"""What disruption needs to know about each NodeClaim, kept on the NodeClaim itself.

Upstream Karpenter records on every NodeClaim when a pod last arrived on or left its node
(``status.lastPodEventTime``), whether it has been quiet for the NodePool's ``consolidateAfter``
(the ``Consolidatable`` condition), and whether it still matches what its NodePool and NodeClass
would launch today (the ``Drifted`` condition, with the reason: ``NodePoolDrifted`` when the
template hash differs, ``RequirementsDrifted`` when its labels no longer meet the NodePool's
requirements, or the provider's own reason from ``karpenter_capi_is_drifted``). Keeping them in
the status makes a pass over 1,000 nodes a read of the cache, survives restarts, and shows
users with ``kubectl describe`` why a node is or is not being consolidated.

Pod events are seen through the pod informer, as upstream's ``podevents`` controller sees them:
a pod arriving on a node (at its ``PodScheduled`` time), leaving it, starting to terminate or
finishing wakes that node's NodeClaim, which writes the time (at most once per
``POD_EVENT_DEDUPE``, so a busy node costs one write per interval, not one per pod); status
churn (readiness, restarts) and DaemonSet pods are not events. Provider drift is asked at most
every ``DRIFT_RECHECK`` per NodeClaim, since a plugin may call its cloud.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Final

from pydantic import ValidationError

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.api.meta import ConditionStatus
from karpenter_capi.core.api.nodeclaim import NodeClaim, NodeClaimConditionType
from karpenter_capi.core.api.nodeclass import ClusterAPINodeClass
from karpenter_capi.core.api.nodepool import NodePool
from karpenter_capi.core.clock import format_timestamp, parse_timestamp
from karpenter_capi.core.disruption.candidates import condition_true
from karpenter_capi.core.errors import ProviderError
from karpenter_capi.core.kube.cache import object_key
from karpenter_capi.core.kube.client import JsonObject
from karpenter_capi.core.kube.errors import Conflict, NotFound
from karpenter_capi.core.kube.indexes import BY_PROVIDER_ID
from karpenter_capi.core.kube.resources import (
    CLUSTER_API_NODE_CLASSES,
    NODECLAIMS,
    NODEPOOLS,
    NODES,
    PODS,
    Resource,
)
from karpenter_capi.core.plugin_host import PluginError
from karpenter_capi.core.provisioning.nodeclaims import NODEPOOL_HASH_VERSION
from karpenter_capi.core.provisioning.state import MIRROR_POD_ANNOTATION
from karpenter_capi.core.runtime.controller import (
    DONE,
    WORKLOAD,
    ControllerContext,
    Key,
    Result,
    Watch,
)
from karpenter_capi.core.termination.actions import Actions, set_condition
from karpenter_capi.core.values.requirements import Requirements

log = logging.getLogger(__name__)

POD_EVENT_DEDUPE: Final = timedelta(seconds=10)
DRIFT_RECHECK: Final = 300.0
NODEPOOL_DRIFTED: Final = "NodePoolDrifted"
REQUIREMENTS_DRIFTED: Final = "RequirementsDrifted"
_CONSOLIDATABLE = NodeClaimConditionType.CONSOLIDATABLE.value
_DRIFTED = NodeClaimConditionType.DRIFTED.value


def _pool_of(obj: Mapping[str, Any]) -> str:
    return str(((obj.get("metadata") or {}).get("labels") or {}).get(wellknown.LABEL_NODEPOOL, ""))


def _transition(claim: Mapping[str, Any], condition_type: str) -> datetime | None:
    for condition in (claim.get("status") or {}).get("conditions") or []:
        if condition.get("type") == condition_type and condition.get("lastTransitionTime"):
            return parse_timestamp(str(condition["lastTransitionTime"]))
    return None


class NodeClaimDisruptionController:
    """Maintains ``lastPodEventTime``, ``Consolidatable`` and ``Drifted`` on NodeClaims."""

    name = "nodeclaim.disruption"
    primary = NODECLAIMS
    primary_cluster = WORKLOAD

    def __init__(self, ctx: ControllerContext) -> None:
        self._ctx = ctx
        self._actions = Actions(ctx, log)
        self._lock = threading.Lock()
        self._pod_events: dict[Key, datetime] = {}
        self._pod_states: dict[Key, tuple[str, bool, bool]] = {}
        self._dry_run_status: dict[Key, JsonObject] = {}
        self._dry_run_writes: dict[Key, int] = {}
        self._drift_checked: dict[Key, tuple[float, str | None]] = {}
        self._pools: dict[str, tuple[str, NodePool, str, Requirements]] = {}

    def watches(self) -> Sequence[Watch]:
        return [
            Watch(PODS, self._pod_to_claims),
            Watch(NODEPOOLS, self._pool_to_claims),
            Watch(NODES, self._node_to_claims),
        ]

    def reads(self) -> Sequence[tuple[Resource, str]]:
        return [(CLUSTER_API_NODE_CLASSES, WORKLOAD)]

    # -- event mapping -------------------------------------------------------------------

    def _claims_of_node(self, node_name: str) -> list[Key]:
        node = self._ctx.caches.store(NODES).get_by_name(node_name)
        provider_id = ((node or {}).get("spec") or {}).get("providerID")
        if not provider_id:
            return []
        claims = self._ctx.caches.store(NODECLAIMS).by_index(BY_PROVIDER_ID, str(provider_id))
        return [object_key(c) for c in claims]

    def _pod_to_claims(self, pod: JsonObject) -> Iterable[Key]:
        """Claims of the node a pod arrived on, left, or finished on; records when.

        Called for every pod event, and for an update once with the old object and once with
        the new, so what a node cares about (bound where, terminating, finished) is remembered
        per pod and only a change counts. An arrival counts at the pod's ``PodScheduled`` time,
        so a restart, which sees every pod anew, does not reset ``consolidateAfter``.
        """
        meta = pod.get("metadata") or {}
        node_name = (pod.get("spec") or {}).get("nodeName")
        if not node_name or _stays_with_node(pod):
            return ()
        key = object_key(pod)
        gone = self._ctx.caches.store(PODS).get(key) is None  # the cache moves first
        phase = (pod.get("status") or {}).get("phase")
        state = (str(node_name), bool(meta.get("deletionTimestamp")), phase in _FINISHED)
        with self._lock:
            previous = self._pod_states.get(key)
            if gone:
                self._pod_states.pop(key, None)
            else:
                self._pod_states[key] = state
        if not gone and previous == state:
            return ()
        now = self._ctx.clock.now()
        at = now
        if not gone and previous is None and not state[1] and not state[2]:
            at = _scheduled_at(pod) or now
        keys = self._claims_of_node(str(node_name))
        for claim in keys:
            self._remember_event(claim, at)
        return keys

    def _remember_event(self, key: Key, at: datetime) -> None:
        """The latest pod event of a NodeClaim not yet written to its status."""
        with self._lock:
            recorded = self._pod_events.get(key)
            self._pod_events[key] = at if recorded is None else max(recorded, at)

    def _pool_to_claims(self, pool: JsonObject) -> Iterable[Key]:
        name = str((pool.get("metadata") or {}).get("name", ""))
        return [
            object_key(c) for c in self._ctx.caches.store(NODECLAIMS).list() if _pool_of(c) == name
        ]

    def _node_to_claims(self, node: JsonObject) -> Iterable[Key]:
        provider_id = (node.get("spec") or {}).get("providerID")
        if not provider_id:
            return ()
        claims = self._ctx.caches.store(NODECLAIMS).by_index(BY_PROVIDER_ID, str(provider_id))
        return [object_key(c) for c in claims]

    # -- reconcile -----------------------------------------------------------------------

    def reconcile(self, key: Key) -> Result:
        cached = self._ctx.caches.store(NODECLAIMS).get(key)
        with self._lock:
            event_at = self._pod_events.pop(key, None) if cached is not None else None
        if cached is None or (cached.get("metadata") or {}).get("deletionTimestamp"):
            with self._lock:
                self._pod_events.pop(key, None)
                self._dry_run_status.pop(key, None)
                self._dry_run_writes.pop(key, None)
            self._drift_checked.pop(key, None)
            return DONE
        claim = self.with_dry_run_status(cached)
        if not condition_true(claim, NodeClaimConditionType.INITIALIZED):
            return DONE
        pool = self._pool(_pool_of(claim))
        if pool is None:
            return DONE
        now = self._ctx.clock.now()
        status: dict[str, Any] = {}
        last_event = _last_pod_event(claim)
        if event_at is not None and (
            last_event is None or event_at - last_event >= POD_EVENT_DEDUPE
        ):
            last_event = event_at
            status["lastPodEventTime"] = format_timestamp(event_at)
        working: Mapping[str, Any] = claim
        requeue: list[float] = [DRIFT_RECHECK]
        consolidatable, wait = self._consolidatable(claim, pool[1], last_event, now)
        if wait is not None:
            requeue.append(wait)
        conditions = self._apply(working, _CONSOLIDATABLE, consolidatable, now)
        if conditions is not None:
            working = {
                **working,
                "status": {**(working.get("status") or {}), "conditions": conditions},
            }
            status["conditions"] = conditions
        drifted = self._drift(key, claim, pool)
        conditions = self._apply(working, _DRIFTED, drifted, now)
        if conditions is not None:
            status["conditions"] = conditions
        if status and not self._write(claim, status):
            if event_at is not None:
                # Not written: keep the event for the retry, or consolidateAfter would count
                # from an older one.
                with self._lock:
                    recorded = self._pod_events.get(key)
                    self._pod_events[key] = (
                        event_at if recorded is None else max(recorded, event_at)
                    )
            return Result(requeue_after=0.5)
        return Result(requeue_after=max(min(requeue), 0.5))

    def _apply(
        self, claim: Mapping[str, Any], condition_type: str, reason: str | None, now: datetime
    ) -> list[JsonObject] | None:
        """The conditions with ``condition_type`` True (reason) or removed (None)."""
        current = (claim.get("status") or {}).get("conditions") or []
        if reason is None:
            if not any(c.get("type") == condition_type for c in current):
                return None
            return [dict(c) for c in current if c.get("type") != condition_type]
        return set_condition(
            claim, condition_type, ConditionStatus.TRUE, reason=reason, message="", now=now
        )

    def _consolidatable(
        self,
        claim: Mapping[str, Any],
        pool: NodePool,
        last_event: datetime | None,
        now: datetime,
    ) -> tuple[str | None, float | None]:
        """``(reason or None, seconds until it becomes consolidatable or None)``."""
        if pool.is_static:
            return None, None  # a static NodePool's nodes are never consolidated
        ready_at = consolidatable_at(claim, pool, last_event, now)
        if ready_at is None:
            return None, None
        if now >= ready_at:
            return _CONSOLIDATABLE, None
        return None, (ready_at - now).total_seconds()

    def _drift(
        self, key: Key, claim: Mapping[str, Any], pool: tuple[str, NodePool, str, Requirements]
    ) -> str | None:
        _, model, template_hash, requirements = pool
        annotations = (claim.get("metadata") or {}).get("annotations") or {}
        if (
            annotations.get(wellknown.ANNOTATION_NODEPOOL_HASH_VERSION) == NODEPOOL_HASH_VERSION
            and annotations.get(wellknown.ANNOTATION_NODEPOOL_HASH)
            and annotations[wellknown.ANNOTATION_NODEPOOL_HASH] != template_hash
        ):
            return NODEPOOL_DRIFTED
        labels = dict((claim.get("metadata") or {}).get("labels") or {})
        node_name = (claim.get("status") or {}).get("nodeName")
        node = self._ctx.caches.store(NODES).get_by_name(str(node_name)) if node_name else None
        if node is not None:
            labels.update((node.get("metadata") or {}).get("labels") or {})
        if not requirements.satisfied_by(labels):
            return REQUIREMENTS_DRIFTED
        return self._provider_drift(key, claim, model)

    def _provider_drift(self, key: Key, claim: Mapping[str, Any], pool: NodePool) -> str | None:
        now = self._ctx.clock.monotonic()
        checked = self._drift_checked.get(key)
        if checked is not None and now - checked[0] < DRIFT_RECHECK:
            return checked[1]
        reason: str | None = None
        ref = pool.spec.template.spec.node_class_ref
        raw_class = self._ctx.caches.store(CLUSTER_API_NODE_CLASSES).get_by_name(ref.name)
        if raw_class is not None:
            try:
                model = NodeClaim.model_validate(claim)
            except ValidationError:
                # The lifecycle controller marks an invalid NodeClaim (once); nothing to ask.
                self._drift_checked[key] = (now, None)
                return None
            try:
                reason = self._ctx.plugins.is_drifted(
                    model, ClusterAPINodeClass.model_validate(raw_class)
                )
            except (PluginError, ProviderError, ValidationError) as error:
                log.warning("drift check of NodeClaim %s failed: %s", key, error)
                reason = checked[1] if checked is not None else None
        self._drift_checked[key] = (now, reason)
        return reason

    def _pool(self, name: str) -> tuple[str, NodePool, str, Requirements] | None:
        raw = self._ctx.caches.store(NODEPOOLS).get_by_name(name)
        if raw is None:
            return None
        version = str((raw.get("metadata") or {}).get("resourceVersion", ""))
        cached = self._pools.get(name)
        if cached is not None and cached[0] == version:
            return cached
        try:
            model = NodePool.model_validate(raw)
        except ValidationError:
            return None
        template = (raw.get("spec") or {}).get("template") or {}
        requirements = Requirements.from_dicts(
            (template.get("spec") or {}).get("requirements") or []
        ).merged(Requirements.from_labels((template.get("metadata") or {}).get("labels") or {}))
        entry = (version, model, model.template_hash(), requirements)
        self._pools[name] = entry
        return entry

    def with_dry_run_status(self, claim: Mapping[str, Any]) -> Mapping[str, Any]:
        """Under ``--dry-run`` nothing is written, so what would have been is kept here and laid
        over the cached NodeClaim: the disruption pass then decides (and logs) as it would. The
        overlay is another version of the object, as a write would have made: its
        ``resourceVersion`` says so (``+dry-run.N``), so what was read of the cached version
        (``passfacts.PassFacts``) is not taken for it."""
        if not self._ctx.dry_run:
            return claim
        with self._lock:
            key = object_key(claim)
            status = self._dry_run_status.get(key)
            writes = self._dry_run_writes.get(key, 0)
        if not status:
            return claim
        meta = claim.get("metadata") or {}
        version = f"{meta.get('resourceVersion') or ''}+dry-run.{writes}"
        return {
            **claim,
            "metadata": {**meta, "resourceVersion": version},
            "status": {**(claim.get("status") or {}), **status},
        }

    def _write(self, claim: Mapping[str, Any], status: JsonObject) -> bool:
        """Patch the status; False when the cache was behind (Conflict) or the claim is gone."""
        if self._ctx.dry_run:
            with self._lock:
                key = object_key(claim)
                self._dry_run_status[key] = {**self._dry_run_status.get(key, {}), **status}
                self._dry_run_writes[key] = self._dry_run_writes.get(key, 0) + 1
            return True
        try:
            self._actions.patch(
                NODECLAIMS, claim, {"status": status}, subresource="status", what="update status"
            )
        except (Conflict, NotFound):
            return False
        return True


def consolidatable_at(
    claim: Mapping[str, Any],
    pool: NodePool,
    last_event: datetime | None = None,
    now: datetime | None = None,
) -> datetime | None:
    """When ``claim`` has been quiet for its NodePool's ``consolidateAfter`` (None: ``Never``).

    Quiet since its last pod event (``last_event``, else ``status.lastPodEventTime``) or its
    initialization, whichever is later; ``now`` when it has neither.
    """
    after = pool.spec.disruption.consolidate_after.value
    if after is None:
        return None
    last_event = last_event or _last_pod_event(claim)
    initialized = _transition(claim, NodeClaimConditionType.INITIALIZED.value)
    known = [t for t in (last_event, initialized) if t is not None]
    if not known and now is None:
        return None
    since = max(known) if known else now
    assert since is not None
    return since + after


def _last_pod_event(claim: Mapping[str, Any]) -> datetime | None:
    raw = (claim.get("status") or {}).get("lastPodEventTime")
    return parse_timestamp(str(raw)) if raw else None


def _stays_with_node(pod: Mapping[str, Any]) -> bool:
    """DaemonSet and static (mirror) pods come and go with the node: not pod events."""
    meta = pod.get("metadata") or {}
    if MIRROR_POD_ANNOTATION in (meta.get("annotations") or {}):
        return True
    return any(
        ref.get("kind") in ("DaemonSet", "Node") for ref in meta.get("ownerReferences") or []
    )


def _scheduled_at(pod: Mapping[str, Any]) -> datetime | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "True":
            raw = condition.get("lastTransitionTime")
            return parse_timestamp(str(raw)) if raw else None
    return None


_FINISHED: Final = ("Succeeded", "Failed")
