"""Which pods the provisioner is responsible for.

Karpenter only acts on pods kube-scheduler has already tried and failed to place: a pod that is
merely new may still fit on an existing node. The rules follow upstream's ``IsProvisionable``:
not bound, not terminating, not a DaemonSet pod (DaemonSets are node overhead, not demand), not
owned by a node (static pods), and marked ``PodScheduled=False`` with reason ``Unschedulable``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from karpenter_capi.core.scheduling.podspec import pod_key

__all__ = ["is_owned_by_daemonset", "is_provisionable", "pod_key"]


def _condition(pod: Mapping[str, Any], condition_type: str) -> Mapping[str, Any] | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == condition_type:
            return condition  # type: ignore[no-any-return]
    return None


def is_owned_by_daemonset(pod: Mapping[str, Any]) -> bool:
    owners = (pod.get("metadata") or {}).get("ownerReferences") or []
    return any(ref.get("kind") == "DaemonSet" and ref.get("controller") for ref in owners)


def is_provisionable(pod: Mapping[str, Any]) -> bool:
    """Whether the provisioner should find capacity for this pod."""
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    if spec.get("nodeName") or metadata.get("deletionTimestamp"):
        return False
    if (pod.get("status") or {}).get("phase") not in (None, "Pending"):
        return False
    if is_owned_by_daemonset(pod):
        return False
    if any(ref.get("kind") == "Node" for ref in metadata.get("ownerReferences") or []):
        return False
    scheduled = _condition(pod, "PodScheduled")
    return bool(
        scheduled
        and scheduled.get("status") == "False"
        and scheduled.get("reason") == "Unschedulable"
    )
