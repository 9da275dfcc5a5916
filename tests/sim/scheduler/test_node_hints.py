"""A Node event's hints read the Node once for all parked pods (``queue._NodeChange``), and
answer for every pod what each plugin's hint answers read pod by pod: a Node added, or changed,
that now passes the plugin's filter for the pod and did not before.

Checked against that rule written out, over every combination of Ready, taints and cordon on
the old and new Node and pods that tolerate the taints, the cordon, both or neither."""

from __future__ import annotations

import itertools
from typing import Any

from karpenter_capi.sim.scheduler import rules
from karpenter_capi.sim.scheduler.queue import (
    NODE_UNSCHEDULABLE,
    TAINT_TOLERATION,
    SchedulingQueue,
)

_TAINT = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
_CORDON_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}


def _node(ready: bool, tainted: bool, cordoned: bool) -> dict[str, Any]:
    return {
        "metadata": {"name": "n", "labels": {"kubernetes.io/hostname": "n"}},
        "spec": {"taints": [_TAINT] if tainted else [], "unschedulable": cordoned},
        "status": {
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "allocatable": {"cpu": "1", "memory": "1Gi", "pods": "10"},
        },
    }


def _pod(name: str, tolerates_taint: bool, tolerates_cordon: bool) -> dict[str, Any]:
    tolerations = []
    if tolerates_taint:
        tolerations.append({"key": "dedicated", "operator": "Equal", "value": "gpu"})
    if tolerates_cordon:
        tolerations.append({"key": _CORDON_TAINT["key"], "operator": "Exists"})
    return {
        "metadata": {"name": name, "namespace": "default"},
        # More than any Node has: NodeResourcesFit's hint never answers for it.
        "spec": {
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "8"}}}],
            "tolerations": tolerations,
        },
    }


def _passes(plugin: str, pod: dict[str, Any], node: dict[str, Any]) -> bool:
    if plugin == TAINT_TOLERATION:
        return rules.node_ready(node) and rules.untolerated_taint(pod, node) is None
    if not node["spec"].get("unschedulable"):
        return True
    return rules.untolerated_taint(pod, {"spec": {"taints": [_CORDON_TAINT]}}) is None


def test_each_node_event_brings_back_exactly_the_pods_its_hints_answer_for() -> None:
    states = list(itertools.product([False, True], repeat=3))
    pods = {
        f"p-{plugin}-{taint}-{cordon}": (
            plugin,
            _pod(f"p-{plugin}-{taint}-{cordon}", taint, cordon),
        )
        for plugin in (TAINT_TOLERATION, NODE_UNSCHEDULABLE)
        for taint, cordon in itertools.product([False, True], repeat=2)
    }
    checked = moved_total = 0
    for old_state in [None, *states]:
        for new_state in states:
            old = None if old_state is None else _node(*old_state)
            new = _node(*new_state)
            for key, (plugin, pod) in pods.items():
                queue = SchedulingQueue()
                queue.park(key, pod, frozenset({plugin}), 0.0)
                expected = _passes(plugin, pod, new) and (
                    old is None or not _passes(plugin, pod, old)
                )
                moved = queue.node_changed(old, new)
                assert moved == expected, (plugin, old_state, new_state, key)
                assert queue.parked(key) != expected
                checked += 1
                moved_total += moved
    assert checked == 9 * 8 * 8
    assert 0 < moved_total < checked
