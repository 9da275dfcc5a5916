"""kube-scheduler's nominator: which pending pods are nominated to which node, and their room.

``status.nominatedNodeName`` is where kube-scheduler's preemption says a pod will go, and,
since KEP-5278, where a cluster autoscaler or Karpenter says it planned the pod. kube-scheduler
treats it the same whoever wrote it (read in ``pkg/scheduler``):

- ``schedule_one.go: findNodesThatFitPod`` tries the nominated node alone first
  (``evaluateNominatedNode``) and takes it, unscored, when it passes the filters; only then
  does it look at every node.
- ``framework/runtime/framework.go: RunFilterPluginsWithNominatedPods`` filters every node with
  the pods nominated to it added (``addGENominatedPods``: those of equal or higher priority,
  other than the pod itself), so a pod does not take the room another pod was planned into.
- ``backend/queue/nominator.go`` keeps the nominations of the pods in the queue; a pod leaves it
  when it is assumed on a node (``DeleteNominatedPodIfExists``) or when its attempt fails
  (``schedule_one.go: handleSchedulingFailure`` with ``clearNominatedNode``: the failed attempt
  also clears the field on the pod).
- The API server clears the field when it receives the pod's binding (KEP-5278).

Only the additive filters (resources and the pod count) see the nominated pods here: the
stand-in's spreading and affinity filters count bound pods only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from karpenter_capi.core.kube.cache import object_key
from karpenter_capi.core.kube.client import JsonObject
from karpenter_capi.sim.scheduler import rules

__all__ = ["Nominator", "nominated_node", "priority"]


def nominated_node(pod: Mapping[str, Any]) -> str | None:
    """The pod's ``status.nominatedNodeName``, or None when unset."""
    value = (pod.get("status") or {}).get("nominatedNodeName")
    return str(value) if value else None


def priority(pod: Mapping[str, Any]) -> int:
    return int((pod.get("spec") or {}).get("priority") or 0)


class Nominator:
    """The nominations of one cycle's pending pods, kept current as the cycle goes."""

    def __init__(self, pending: Iterable[JsonObject]) -> None:
        # node -> pod key -> (priority, requests)
        self._on: dict[str, dict[str, tuple[int, dict[str, int]]]] = {}
        self._node_of: dict[str, str] = {}
        for pod in pending:
            node = nominated_node(pod)
            if node is not None:
                key = object_key(pod)
                self._node_of[key] = node
                self._on.setdefault(node, {})[key] = (priority(pod), rules.pod_requests(pod))

    def empty(self) -> bool:
        """No pod of the cycle is nominated to any node (any more)."""
        return not self._node_of

    def node_of(self, pod: JsonObject) -> str | None:
        return self._node_of.get(object_key(pod))

    def remove(self, pod: JsonObject) -> None:
        """The pod was assumed on a node, or its attempt failed: it reserves nothing now."""
        key = object_key(pod)
        node = self._node_of.pop(key, None)
        if node is not None:
            self._on[node].pop(key, None)

    def reserved(self, node: str, pod: JsonObject) -> dict[str, int]:
        """What the pods nominated to ``node`` with at least ``pod``'s priority request there
        (``addGENominatedPods``); empty when none is."""
        nominated = self._on.get(node)
        if not nominated:
            return {}
        own, floor = object_key(pod), priority(pod)
        total: dict[str, int] = {}
        for key, (their_priority, requests) in nominated.items():
            if key == own or their_priority < floor:
                continue
            for name, amount in requests.items():
                total[name] = total.get(name, 0) + amount
        return total
