"""Every write the termination controllers make, in one place, so dry run cannot miss one.

Termination is the most destructive thing the autoprovisioner does: it evicts and deletes pods,
deletes Nodes and NodeClaims, and removes machines. ``ControllerContext.dry_run`` promises that
nothing is written and everything is logged; routing each write (Events included) through
``Actions`` keeps that promise by construction instead of by an ``if`` at every call site.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from karpenter_capi.core.api.meta import ConditionStatus
from karpenter_capi.core.clock import format_timestamp
from karpenter_capi.core.kube.client import JsonObject, KubeClient
from karpenter_capi.core.kube.errors import NotFound
from karpenter_capi.core.kube.events import EventRecorder
from karpenter_capi.core.kube.resources import Resource
from karpenter_capi.core.runtime.controller import ControllerContext
from karpenter_capi.core.termination.relations import finalizers_of


def _kind_name(resource: Resource, name: str, namespace: str | None) -> str:
    return f"{resource.kind} {namespace}/{name}" if namespace else f"{resource.kind} {name}"


class Actions:
    """Writes through ``ctx.client``, or logs them under ``ctx.dry_run``."""

    def __init__(self, ctx: ControllerContext, log: logging.Logger) -> None:
        self._client: KubeClient = ctx.client
        self._recorder: EventRecorder = ctx.recorder
        self.dry_run = ctx.dry_run
        self.log = log

    def event(
        self,
        resource: Resource,
        obj: Mapping[str, Any],
        event_type: str,
        reason: str,
        message: str,
        *,
        dedupe: timedelta | None = None,
    ) -> None:
        """Record an Event on ``obj``; ``resource`` supplies the kind, which list responses and
        informer caches do not carry on each item. ``dedupe``: see ``EventRecorder.record``."""
        meta = obj.get("metadata") or {}
        if self.dry_run:
            # An event said on every pass would flood a dry run's log: those go to DEBUG.
            self.log.log(
                logging.DEBUG if dedupe is not None else logging.INFO,
                "dry run: would record %s event %s on %s: %s",
                event_type,
                reason,
                _kind_name(resource, str(meta.get("name")), meta.get("namespace")),
                message,
            )
            return
        involved = {"apiVersion": resource.api_version, "kind": resource.kind, "metadata": meta}
        self._recorder.record(involved, event_type, reason, message, dedupe=dedupe)

    def evict(self, name: str, namespace: str) -> bool:
        """Evict a pod; False in dry run. Raises the API's error (429 when a PDB forbids)."""
        if self.dry_run:
            self.log.info("dry run: would evict pod %s/%s", namespace, name)
            return False
        self._client.evict(name, namespace)
        return True

    def delete(
        self,
        resource: Resource,
        name: str,
        namespace: str | None = None,
        *,
        grace_period_seconds: int | None = None,
    ) -> JsonObject | None:
        """Delete an object; ``None`` in dry run or when it is already gone."""
        what = _kind_name(resource, name, namespace)
        if self.dry_run:
            grace = "" if grace_period_seconds is None else f" (grace {grace_period_seconds}s)"
            self.log.info("dry run: would delete %s%s", what, grace)
            return None
        try:
            return self._client.delete(
                resource, name, namespace, grace_period_seconds=grace_period_seconds
            )
        except NotFound:
            return None

    def patch(
        self,
        resource: Resource,
        obj: Mapping[str, Any],
        body: JsonObject,
        *,
        subresource: str | None = None,
        what: str,
    ) -> JsonObject | None:
        """Merge-patch ``obj`` on the condition that it has not changed since it was read
        (its resourceVersion is a precondition: 409 ``Conflict`` otherwise)."""
        meta = obj.get("metadata") or {}
        name = str(meta.get("name"))
        namespace = meta.get("namespace")
        if self.dry_run:
            self.log.info("dry run: would %s on %s", what, _kind_name(resource, name, namespace))
            return None
        body = dict(body)
        body["metadata"] = {
            **(body.get("metadata") or {}),
            "resourceVersion": meta.get("resourceVersion"),
        }
        return self._client.patch(resource, name, body, namespace, subresource=subresource)

    def remove_finalizer(self, resource: Resource, obj: Mapping[str, Any], finalizer: str) -> bool:
        """Remove one finalizer, keeping the others; True once it is gone (or already was).

        A merge patch replaces the whole list, so the resourceVersion precondition is what keeps
        a finalizer another controller added meanwhile from being dropped.
        """
        finalizers = finalizers_of(obj)
        if finalizer not in finalizers:
            return True
        remaining = [f for f in finalizers if f != finalizer]
        try:
            self.patch(
                resource,
                obj,
                {"metadata": {"finalizers": remaining or None}},
                what=f"remove finalizer {finalizer}",
            )
        except NotFound:
            return True
        return not self.dry_run


def set_condition(
    obj: Mapping[str, Any],
    condition_type: str,
    status: ConditionStatus,
    *,
    reason: str,
    message: str,
    now: datetime,
) -> list[JsonObject] | None:
    """The object's conditions with one set, or ``None`` when nothing would change.

    ``lastTransitionTime`` moves only when the status does, as ``metav1.Condition`` requires.
    """
    current = (obj.get("status") or {}).get("conditions") or []
    conditions: list[JsonObject] = [dict(c) for c in current if isinstance(c, Mapping)]
    for condition in conditions:
        if condition.get("type") != condition_type:
            continue
        if (
            condition.get("status") == status.value
            and condition.get("reason") == reason
            and condition.get("message", "") == message
        ):
            return None
        if condition.get("status") != status.value:
            condition["lastTransitionTime"] = format_timestamp(now)
        condition.update(status=status.value, reason=reason, message=message)
        return conditions
    conditions.append(
        {
            "type": condition_type,
            "status": status.value,
            "reason": reason,
            "message": message,
            "lastTransitionTime": format_timestamp(now),
        }
    )
    return conditions


def condition_of(obj: Mapping[str, Any], condition_type: str) -> Mapping[str, Any] | None:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == condition_type:
            return condition
    return None
