"""Liveness: give up on a NodeClaim that does not come up in time.

A NodeClaim stuck before registration holds its pods hostage: they are nominated to it and the
provisioner will not launch elsewhere for them. So, as upstream:

* not ``Launched`` within ``launch_timeout`` (5 min) of its creation, or
* ``Launched`` but not ``Registered`` within ``registration_timeout`` (15 min) of the launch,

the NodeClaim is deleted (its finalizer lets termination release whatever was started), with a
Warning Event, and the owning NodePool's ``NodeRegistrationHealthy`` goes False with the reason
(the launch failure when there was one). Before the deadline the step asks to be woken at it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Final

from karpenter_capi.core.api.duration import format_duration
from karpenter_capi.core.kube.events import WARNING
from karpenter_capi.core.kube.resources import NODECLAIMS
from karpenter_capi.core.lifecycle.conditions import AWAITING_RECONCILIATION
from karpenter_capi.core.lifecycle.health import set_registration_health
from karpenter_capi.core.lifecycle.launch import LAUNCHED, REASON_LAUNCHING
from karpenter_capi.core.lifecycle.metrics import LifecycleReporter
from karpenter_capi.core.lifecycle.registration import REGISTERED
from karpenter_capi.core.lifecycle.work import NodeClaimWork
from karpenter_capi.core.lifecycle.writes import Writes
from karpenter_capi.core.runtime.controller import DONE, ControllerContext, Result

DEFAULT_LAUNCH_TIMEOUT: Final = 5 * 60.0
DEFAULT_REGISTRATION_TIMEOUT: Final = 15 * 60.0


class Liveness:
    """The liveness step of the NodeClaim lifecycle controller."""

    def __init__(
        self,
        ctx: ControllerContext,
        writes: Writes,
        metrics: LifecycleReporter,
        *,
        launch_timeout: float,
        registration_timeout: float,
    ) -> None:
        self._ctx = ctx
        self._writes = writes
        self._metrics = metrics
        self._launch_timeout = launch_timeout
        self._registration_timeout = registration_timeout

    def reconcile(self, work: NodeClaimWork) -> Result:
        conditions = work.conditions
        if conditions.is_true(REGISTERED):
            return DONE
        now = self._ctx.clock.now()
        if not conditions.is_true(LAUNCHED):
            started = work.created or now
            left = (started - now).total_seconds() + self._launch_timeout
            if left > 0:
                return Result(requeue_after=left)
            reason = conditions.reason(LAUNCHED)
            if reason in ("", AWAITING_RECONCILIATION, REASON_LAUNCHING):
                # No failure to show: say what did not happen.
                reason, message = (
                    "LaunchTimeout",
                    f"NodeClaim {work.name} was not launched within "
                    f"{_duration(self._launch_timeout)}",
                )
            else:
                message = conditions.message(LAUNCHED)
            self._timed_out(work, "LaunchTimeout", "launch_timeout", reason, message)
            return DONE
        launched_at = conditions.last_transition(LAUNCHED) or now
        left = (launched_at - now).total_seconds() + self._registration_timeout
        if left > 0:
            return Result(requeue_after=left)
        self._timed_out(
            work,
            "RegistrationTimeout",
            "registration_timeout",
            "RegistrationFailed",
            f"Failed to register node: no Node with provider ID {work.provider_id} joined "
            f"within {_duration(self._registration_timeout)} of launch",
        )
        return DONE

    def _timed_out(
        self, work: NodeClaimWork, event_reason: str, metric_reason: str, reason: str, message: str
    ) -> None:
        set_registration_health(
            self._ctx, self._writes, work, healthy=False, reason=reason, message=message
        )
        self._ctx.log.warning("deleting nodeclaim %s: %s: %s", work.name, reason, message)
        self._writes.event(work.raw, WARNING, event_reason, message)
        if self._writes.delete(NODECLAIMS, work.raw):
            self._metrics.disrupted(metric_reason, work.nodepool, work.capacity_type)
        work.deleted = True


def _duration(seconds: float) -> str:
    return format_duration(timedelta(seconds=round(seconds)))
