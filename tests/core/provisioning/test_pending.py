"""``is_provisionable`` reads each field once (it is asked of every pod on every look); its
answer must stay upstream's ``IsProvisionable``, written out plainly here, for every mix of the
fields it reads."""

from __future__ import annotations

import itertools
import logging
from typing import Any

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.plugin_host import PluginEnvironment, Plugins
from karpenter_capi.core.provisioning.pending import is_owned_by_daemonset, is_provisionable
from karpenter_capi.core.provisioning.provisioner import Provisioner
from karpenter_capi.core.provisioning.state import ClusterSnapshot
from karpenter_capi.sim.cluster import new_cluster


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


def _waiting(name: str, node: str | None = None) -> dict[str, Any]:
    spec = {"nodeName": node} if node else {}
    condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
        "status": {"phase": "Pending", "conditions": [condition]},
    }


def test_the_provisioner_asks_again_of_each_new_version_of_a_pod_in_order() -> None:
    """A look keeps each pod's answer while the snapshot holds that very object (a cache
    replaces an object on each new version): a new object is asked again."""
    clock = FakeClock()
    server = new_cluster(clock=clock)
    plugins = Plugins.load(
        ["generic_capi"],
        PluginEnvironment(
            workload=server, management=server, clock=clock, logger=logging.getLogger("t")
        ),
    )
    provisioner = Provisioner(server, plugins, clock)
    a, b, c = _waiting("a"), _waiting("b"), _waiting("c", node="n")
    assert provisioner.pending_pods(ClusterSnapshot([a, b, c], [], [], [])) == [a, b]
    bound_b, waiting_c = _waiting("b", node="n"), _waiting("c")
    later = ClusterSnapshot([waiting_c, a, bound_b], [], [], [])
    assert provisioner.pending_pods(later) == [waiting_c, a]
    assert provisioner.pending_pods(ClusterSnapshot([], [], [], [])) == []
