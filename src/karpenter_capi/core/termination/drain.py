"""Cordon and drain one node: the disrupted taint, evictions in tiers, and deadline deletes.

A drain is not one call but a sequence of reconciles, each of which looks at the pods still on
the node and does the next thing: evict the tier in progress, retry evictions a
PodDisruptionBudget refused (per pod, with exponential backoff, so one stubborn PDB neither
hammers the API server nor holds up the other pods of its tier), and delete pods whose time has
come because the NodeClaim's ``terminationGracePeriod`` runs out. It never waits in place: it
returns when it wants to be called again, which the controller hands to its driver as
``requeue_after``. The rules for each pod are in ``pods.py``.

Evictions go through the Eviction API so PodDisruptionBudgets are honoured; only the deadline
overrides them (and the ``do-not-disrupt`` annotation), by deleting pods outright, as upstream
Karpenter does.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from pydantic import ValidationError

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.api.views import PodView
from karpenter_capi.core.clock import Clock, format_timestamp
from karpenter_capi.core.kube.backoff import Backoff
from karpenter_capi.core.kube.client import JsonObject
from karpenter_capi.core.kube.errors import ApiError, Conflict, NotFound, TooManyRequests
from karpenter_capi.core.kube.events import NORMAL
from karpenter_capi.core.kube.resources import NODES, PODS
from karpenter_capi.core.observability.logs import ref
from karpenter_capi.core.observability.metrics import Metrics
from karpenter_capi.core.termination import pods as podrules
from karpenter_capi.core.termination.actions import Actions

# Without a timer to wait for, look again this often: pods leaving the node also wake the
# controller through its pod watch, this only bounds how stale a missed event can leave it.
DRAIN_RECHECK_SECONDS: Final = 10.0
# Per-pod retry of a refused eviction, as upstream's eviction queue: exponential, capped.
EVICTION_BACKOFF_INITIAL: Final = 1.0
EVICTION_BACKOFF_CAP: Final = 60.0
# Keeps a node out of external load balancers while it drains (upstream does the same).
LABEL_EXCLUDE_FROM_LOAD_BALANCERS: Final = "node.kubernetes.io/exclude-from-external-load-balancers"
FORCED_REASON: Final = "Forceful Termination"
# The cause the Eviction API gives when a PodDisruptionBudget refuses (kube's
# ``policyv1.DisruptionBudgetCause``).
DISRUPTION_BUDGET_CAUSE: Final = "DisruptionBudget"


@dataclass
class DrainResult:
    """What one drain step found and did."""

    drained: bool
    """No pod on the node needs to leave it any more."""
    requeue_after: float
    """Seconds until the next step is due (the earliest retry, delete time or recheck)."""
    waiting: list[str] = field(default_factory=list)
    evicted: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    """Why pods could not be removed: PDB refusals, do-not-disrupt, API errors."""


def _taints_with_disrupted(node: Mapping[str, Any]) -> list[JsonObject] | None:
    """The node's taints with ``karpenter.sh/disrupted:NoSchedule``, or None if already there."""
    spec = node.get("spec") or {}
    taints = [dict(t) for t in spec.get("taints") or [] if isinstance(t, Mapping)]
    key, effect = wellknown.TAINT_DISRUPTED_KEY, wellknown.TAINT_DISRUPTED_EFFECT
    ours = [t for t in taints if t.get("key") == key]
    if len(ours) == 1 and ours[0].get("effect") == effect and not ours[0].get("value"):
        return None
    # Another taint with our key (another value or effect) is replaced, as upstream does.
    kept = [t for t in taints if t.get("key") != key]
    return [*kept, {"key": key, "effect": effect}]


class Drainer:
    """Drains nodes step by step; remembers per-pod eviction backoff between steps."""

    def __init__(
        self,
        actions: Actions,
        clock: Clock,
        metrics: Metrics | None,
        log: logging.Logger,
    ) -> None:
        self._actions = actions
        self._clock = clock
        self._metrics = metrics
        self._log = log
        self._lock = threading.Lock()
        self._backoffs: dict[str, dict[str, Backoff]] = {}

    def _count_eviction(self, code: int) -> None:
        if self._metrics is not None:
            self._metrics.eviction_request(code)

    def forget(self, node_name: str) -> None:
        """Drop what was remembered about a node (it is gone or no longer terminating)."""
        with self._lock:
            self._backoffs.pop(node_name, None)

    # --- cordon ---------------------------------------------------------------------------------

    def taint(self, node: Mapping[str, Any]) -> bool:
        """Make sure the node carries the disrupted taint; True when it was written now.

        Raises ``Conflict`` when the node changed since it was read.
        """
        taints = _taints_with_disrupted(node)
        labels = (node.get("metadata") or {}).get("labels") or {}
        needs_label = labels.get(LABEL_EXCLUDE_FROM_LOAD_BALANCERS) is None
        if taints is None and not needs_label:
            return False
        body: JsonObject = {}
        if taints is not None:
            body["spec"] = {"taints": taints}
        if needs_label:
            body["metadata"] = {"labels": {LABEL_EXCLUDE_FROM_LOAD_BALANCERS: "karpenter"}}
        self._actions.patch(
            NODES, node, body, what=f"taint {wellknown.TAINT_DISRUPTED_KEY}:NoSchedule"
        )
        if taints is not None and not self._actions.dry_run:
            name = (node.get("metadata") or {}).get("name")
            self._log.info(
                "tainted node",
                extra={
                    "Node": ref(str(name)),
                    "taint": f"{wellknown.TAINT_DISRUPTED_KEY}:{wellknown.TAINT_DISRUPTED_EFFECT}",
                },
            )
        return True

    # --- drain ----------------------------------------------------------------------------------

    def drain(
        self,
        node_name: str,
        raw_pods: Sequence[Mapping[str, Any]],
        deadline: datetime | None,
        *,
        reason: str = FORCED_REASON,
    ) -> DrainResult:
        """One step: delete pods whose deadline has come, evict the current tier.

        ``deadline`` is when every pod must be gone (the NodeClaim's termination time) or None;
        ``reason`` labels the pods-drained metric (the NodeClaim's disruption reason).
        """
        now = self._clock.now()
        pods = self._views(raw_pods)
        waiting = [pod for pod in pods if podrules.is_waiting(pod, now)]
        result = DrainResult(
            drained=not waiting,
            requeue_after=DRAIN_RECHECK_SECONDS,
            waiting=[podrules.describe(pod) for pod in waiting],
        )
        backoffs = self._node_backoffs(node_name, {_pod_id(pod) for pod in waiting})
        timers: list[float] = [DRAIN_RECHECK_SECONDS]

        if deadline is not None:
            self._delete_expiring(waiting, deadline, now, result, timers)
        remaining = [pod for pod in waiting if podrules.describe(pod) not in set(result.deleted)]
        for pod in remaining:
            deleted_at = pod.metadata.deletion_timestamp
            if deleted_at is not None:
                # It stops blocking once it is stuck; look again then.
                stuck_at = deleted_at + podrules.STUCK_TERMINATING_AFTER
                timers.append((stuck_at - now).total_seconds())

        current = podrules.current_tier(remaining)
        for pod in remaining:
            if current is None or podrules.tier(pod) != current:
                continue
            if podrules.has_do_not_disrupt(pod) and not podrules.is_terminating(pod):
                until = "" if deadline is None else f" until {format_timestamp(deadline)}"
                result.problems.append(
                    f"pod {podrules.describe(pod)} has {wellknown.ANNOTATION_DO_NOT_DISRUPT}"
                    f" and blocks the drain{until}"
                )
                continue
            if not podrules.is_evictable(pod, now):
                continue
            backoff = backoffs.setdefault(_pod_id(pod), self._new_backoff())
            if not backoff.ready():
                timers.append(backoff.remaining())
                continue
            self._evict(pod, backoff, reason, result, timers)

        result.requeue_after = max(0.0, min(timers))
        return result

    def _views(self, raw_pods: Sequence[Mapping[str, Any]]) -> list[PodView]:
        views = []
        for raw in raw_pods:
            try:
                views.append(PodView.model_validate(raw))
            except ValidationError as error:
                meta = raw.get("metadata") or {}
                # A pod we cannot read cannot be classified; it cannot block the node forever.
                self._log.warning(
                    "ignoring unreadable pod %s/%s: %s",
                    meta.get("namespace"),
                    meta.get("name"),
                    error,
                )
        return views

    def _new_backoff(self) -> Backoff:
        # No jitter: each pod has its own backoff, so there is nothing to de-synchronise.
        return Backoff(
            self._clock,
            initial=EVICTION_BACKOFF_INITIAL,
            cap=EVICTION_BACKOFF_CAP,
            jitter=0.0,
        )

    def _node_backoffs(self, node_name: str, live: set[str]) -> dict[str, Backoff]:
        with self._lock:
            backoffs = self._backoffs.setdefault(node_name, {})
            for pod_id in [pod_id for pod_id in backoffs if pod_id not in live]:
                del backoffs[pod_id]
            return backoffs

    def _delete_expiring(
        self,
        waiting: Sequence[PodView],
        deadline: datetime,
        now: datetime,
        result: DrainResult,
        timers: list[float],
    ) -> None:
        left = (deadline - now).total_seconds()
        for pod in waiting:
            if podrules.is_terminating(pod):
                # Evicted earlier with a longer grace period than is now left: shorten it.
                if podrules.outlives(pod, deadline):
                    self._force_delete(pod, max(0, int(left)), deadline, result)
                continue
            delete_at = podrules.delete_time(pod, deadline)
            if now >= delete_at:
                grace = max(0, min(podrules.grace_seconds(pod), int(left)))
                self._force_delete(pod, grace, deadline, result)
            else:
                timers.append((delete_at - now).total_seconds())

    def _force_delete(
        self, pod: PodView, grace: int, deadline: datetime, result: DrainResult
    ) -> None:
        name, namespace = pod.metadata.name, pod.metadata.namespace
        raw = {"metadata": {"name": name, "namespace": namespace, "uid": pod.metadata.uid}}
        message = (
            f"Deleting the pod to accommodate the terminationTime {format_timestamp(deadline)} of "
            f"the node. The pod was granted {grace} seconds of grace-period of its "
            f"{podrules.grace_seconds(pod)} terminationGracePeriodSeconds. This bypasses the PDB "
            f"of the pod and the do-not-disrupt annotation."
        )
        self._actions.event(PODS, raw, NORMAL, "Disrupted", message)
        result.deleted.append(podrules.describe(pod))
        if self._actions.delete(PODS, name, namespace, grace_period_seconds=grace) is None:
            return  # dry run, or it was gone already
        self._log.info(
            "deleted pod %s/%s with grace period %ds to end by the node's deadline %s",
            namespace,
            name,
            grace,
            format_timestamp(deadline),
        )

    def _evict(
        self,
        pod: PodView,
        backoff: Backoff,
        reason: str,
        result: DrainResult,
        timers: list[float],
    ) -> None:
        name, namespace = pod.metadata.name, pod.metadata.namespace
        described = podrules.describe(pod)
        try:
            evicted = self._actions.evict(name, namespace)
        except (NotFound, Conflict) as error:
            # 404: already gone; 409: replaced by another pod of that name. Nothing to evict.
            self._count_eviction(error.code)
            return
        except TooManyRequests as error:
            self._count_eviction(error.code)
            timers.append(backoff.fail(at_least=float(error.retry_after_seconds or 0)))
            result.problems.append(f"evicting pod {described}: {_refusal(error)}")
            return
        except ApiError as error:
            self._count_eviction(error.code)
            timers.append(backoff.fail(at_least=float(error.retry_after_seconds or 0)))
            result.problems.append(f"evicting pod {described} failed: {error.message}")
            self._log.warning("evicting pod %s failed: %r", described, error)
            return
        if not evicted:  # dry run
            return
        backoff.reset()
        self._count_eviction(200)
        if self._metrics is not None:
            self._metrics.pod_drained(reason)
        raw = {"metadata": {"name": name, "namespace": namespace, "uid": pod.metadata.uid}}
        self._actions.event(PODS, raw, NORMAL, "Evicted", "Evicted pod")
        # One line per pod is noise at INFO: the pod's Evicted Event says it to whom it concerns.
        self._log.debug("evicted pod %s", described)
        result.evicted.append(described)


def _pod_id(pod: PodView) -> str:
    # The uid tells a pod from its replacement of the same name; the name keeps it readable.
    return f"{podrules.describe(pod)}/{pod.metadata.uid}"


def _refusal(error: ApiError) -> str:
    """Why a 429 refused an eviction: a PodDisruptionBudget (with the budget's own
    explanation) or the API server throttling us."""
    causes = error.details.get("causes") if isinstance(error.details, dict) else None
    budget = [
        str(cause.get("message") or "")
        for cause in causes or []
        if isinstance(cause, Mapping) and cause.get("reason") == DISRUPTION_BUDGET_CAUSE
    ]
    if budget:
        return f"violates a PDB: {' '.join([error.message, *budget]).strip()}"
    return f"throttled by the API server: {error.message}"
