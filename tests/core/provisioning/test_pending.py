"""``is_provisionable`` reads each field once (it is asked of every pod on every look); its
answer must stay upstream's ``IsProvisionable``, written out plainly here, for every mix of the
fields it reads."""

from __future__ import annotations

import itertools
from typing import Any

from karpenter_capi.core.provisioning.pending import is_owned_by_daemonset, is_provisionable


def _rules(pod: dict[str, Any]) -> bool:
    """The rules as the module docstring says them, one by one."""
    metadata, spec, status = pod["metadata"], pod["spec"], pod["status"]
    if spec.get("nodeName") or metadata.get("deletionTimestamp"):
        return False
    if status.get("phase") not in (None, "Pending"):
        return False
    if is_owned_by_daemonset(pod):
        return False
    if any(ref.get("kind") == "Node" for ref in metadata.get("ownerReferences") or []):
        return False
    scheduled = [c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"]
    return bool(
        scheduled
        and scheduled[0].get("status") == "False"
        and scheduled[0].get("reason") == "Unschedulable"
    )


OWNERS = [
    None,
    [],
    [{"kind": "ReplicaSet", "controller": True}],
    [{"kind": "DaemonSet", "controller": True}],
    [{"kind": "DaemonSet"}],
    [{"kind": "ReplicaSet", "controller": True}, {"kind": "Node", "name": "n"}],
]
CONDITIONS = [
    None,
    [],
    [{"type": "Ready", "status": "False"}],
    [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
    [{"type": "PodScheduled", "status": "False", "reason": "SchedulerError"}],
    [{"type": "PodScheduled", "status": "True"}],
    [
        {"type": "PodScheduled", "status": "True"},
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"},
    ],
]


def test_the_same_answer_as_the_rules_for_every_mix() -> None:
    seen = set()
    for node, deleting, phase, owners, conditions in itertools.product(
        [None, "", "node-a"],
        [None, "2026-12-03T00:00:00Z"],
        [None, "Pending", "Running", "Succeeded"],
        OWNERS,
        CONDITIONS,
    ):
        pod: dict[str, Any] = {
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {},
            "status": {},
        }
        if node is not None:
            pod["spec"]["nodeName"] = node
        if deleting:
            pod["metadata"]["deletionTimestamp"] = deleting
        if phase:
            pod["status"]["phase"] = phase
        if owners is not None:
            pod["metadata"]["ownerReferences"] = owners
        if conditions is not None:
            pod["status"]["conditions"] = conditions
        answer = is_provisionable(pod)
        assert answer is _rules(pod), pod
        seen.add(answer)
    assert seen == {True, False}


def test_a_pod_without_metadata_spec_or_status_is_not_provisionable() -> None:
    assert is_provisionable({}) is False
