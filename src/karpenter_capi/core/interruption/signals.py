"""Interruption notices read off the Nodes, for clusters without a cloud queue.

Users who run no SQS queue often run a node-local handler that learns of an interruption from
the instance metadata service and marks the Node; those marks are documented upstream:

* aws-node-termination-handler taints the Node (``pkg/node/node.go``: ``SpotInterruptionTaint``,
  ``ScheduledMaintenanceTaint``, ``ASGLifecycleTerminationTaint``,
  ``RebalanceRecommendationTaint``), value the event ID, effect ``NoSchedule`` by default;
* on Azure, the Node Problem Detector that AKS ships reads Scheduled Events from IMDS and sets
  the Node condition ``VMEventScheduled`` with the event as its reason (``PreemptScheduled``,
  ``TerminateScheduled``, ``RedeployScheduled``, ``RebootScheduled``, ``FreezeScheduled``);
  AKS's own node auto-drain cordons and drains on Preempt, Redeploy and Terminate only.

Each such mark becomes an ``InterruptionNotice`` for the Node's provider ID, so the controller
treats it exactly like a queue message (without a receipt: there is nothing to acknowledge).
A Node's mark carries no time, so a spot mark's deadline is counted from when it is first seen:
EC2's two minutes for the handler's taint, the 30 seconds Azure Scheduled Events give at least
before a Preempt (its documented minimum ``NotBefore``); the controller writes it on the NodeClaim
at once, so seeing the mark again later does not move it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, Final

from karpenter_capi.core.hookspecs import (
    INSTANCE_TERMINATED,
    REBALANCE_RECOMMENDATION,
    SCHEDULED_CHANGE,
    SPOT_INTERRUPTED,
    InterruptionNotice,
)

NTH_TAINTS: Final[Mapping[str, str]] = {
    "aws-node-termination-handler/spot-itn": SPOT_INTERRUPTED,
    "aws-node-termination-handler/scheduled-maintenance": SCHEDULED_CHANGE,
    "aws-node-termination-handler/asg-lifecycle-termination": INSTANCE_TERMINATED,
    "aws-node-termination-handler/rebalance-recommendation": REBALANCE_RECOMMENDATION,
}
"""aws-node-termination-handler's taint keys, and the notice each one means."""

VM_EVENT_CONDITION: Final = "VMEventScheduled"
AZURE_EVENT_REASONS: Final[Mapping[str, str]] = {
    "PreemptScheduled": SPOT_INTERRUPTED,
    "TerminateScheduled": SCHEDULED_CHANGE,
    "RedeployScheduled": SCHEDULED_CHANGE,
}
"""The Scheduled Events AKS drains for; Reboot and Freeze keep the VM and need no action."""


EC2_SPOT_NOTICE: Final = timedelta(minutes=2)
AZURE_PREEMPT_NOTICE: Final = timedelta(seconds=30)


def _notice(
    provider_id: str, kind: str, detail: str, deadline: datetime | None = None
) -> InterruptionNotice:
    return InterruptionNotice(kind=kind, instance=provider_id, deadline=deadline, detail=detail)


def node_notices(node: Mapping[str, Any], now: datetime) -> list[InterruptionNotice]:
    """The interruption notices a Node's taints and conditions carry (usually none), as seen
    at ``now``."""
    spec = node.get("spec") or {}
    provider_id = str(spec.get("providerID") or "")
    if not provider_id:
        return []
    notices = []
    for taint in spec.get("taints") or ():
        kind = NTH_TAINTS.get(str(taint.get("key") or ""))
        if kind is not None:
            deadline = now + EC2_SPOT_NOTICE if kind == SPOT_INTERRUPTED else None
            detail = f"aws-node-termination-handler taint {taint['key']}"
            notices.append(_notice(provider_id, kind, detail, deadline))
    for condition in (node.get("status") or {}).get("conditions") or ():
        if condition.get("type") != VM_EVENT_CONDITION or condition.get("status") != "True":
            continue
        reason = str(condition.get("reason") or "")
        kind = AZURE_EVENT_REASONS.get(reason)
        if kind is not None:
            deadline = now + AZURE_PREEMPT_NOTICE if kind == SPOT_INTERRUPTED else None
            notices.append(_notice(provider_id, kind, f"Azure Scheduled Event {reason}", deadline))
    return notices


def nodes_notices(nodes: Iterable[Mapping[str, Any]], now: datetime) -> list[InterruptionNotice]:
    return [notice for node in nodes for notice in node_notices(node, now)]
