"""A kubelet stand-in for pods: start bound pods, finish graceful deletions, collect orphans.

The autoprovisioner's decisions depend on pods being Running and Ready (PodDisruptionBudgets,
consolidation, drain) and on deletions that end on their own (a drain waits for its evicted
pods to go). The in-memory API server removes a pod without finalizers at once, so only pods
held by someone's finalizers ever wait for a kubelet. This controller plays the three parts of
kube that move a pod after scheduling:

* **kubelet start**: a pod bound to a Ready Node (``spec.nodeName``) becomes ``Running`` after
  the start delay (``WorkloadSettings.start_delay``, or the pod's
  ``sim.karpenter.cluster.x-k8s.io/start-delay`` annotation), counted from the moment this
  controller first saw it bound to a Ready Node (kept in memory: a restarted emulation counts
  again). It gets ``startTime``, running ``containerStatuses`` and the conditions
  ``PodReadyToStartContainers``, ``Initialized``, ``ContainersReady``, ``Ready`` and
  ``PodScheduled`` True (a ``PodScheduled`` the scheduler wrote is kept). A pod on a Node that
  is not Ready waits for it;
* **kubelet stop**: a bound pod being deleted (``deletionTimestamp``; it still exists, so
  finalizers hold it, none of them ours) is finished ``min(deletionGracePeriodSeconds,
  termination_cap)`` seconds after its deletion began (``deletionTimestamp`` minus the grace
  period): its status turns ``Succeeded`` (simulated containers exit 0 on SIGTERM) with Ready
  False, and it is deleted with grace 0, as the kubelet does; the finalizers' owners then
  release it;
* **pod garbage collection**: a pod bound to a Node that is gone is deleted (grace 0), as kube's
  pod GC deletes orphaned pods (without its 40 s quarantine). A Node being deleted but held by
  a finalizer still exists, so its pods stay, and only eviction moves them, as on a real cluster.

Not emulated: a Running pod on a Node turning NotReady stays Ready (the node lifecycle
controller's taint-based eviction and readiness flip are not played), restarts, probes, init
containers, resource admission (a bound pod always starts), ``activeDeadlineSeconds``, pods
that complete on their own (Jobs).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from karpenter_capi.core.clock import Clock, format_timestamp
from karpenter_capi.core.kube.client import JsonObject, KubeClient
from karpenter_capi.core.kube.errors import NotFound
from karpenter_capi.core.kube.indexes import BY_NODE_NAME
from karpenter_capi.core.kube.resources import NODES, PODS, Resource
from karpenter_capi.core.runtime.controller import DONE, WORKLOAD, Caches, Key, Result, Watch
from karpenter_capi.sim.capi.machine import node_is_ready
from karpenter_capi.sim.capi.objects import (
    deleted_at,
    is_deleting,
    name_of,
    namespace_of,
    nested,
    uid_of,
)
from karpenter_capi.sim.capi.settings import delay_from
from karpenter_capi.sim.workloads.objects import is_terminal, phase_of
from karpenter_capi.sim.workloads.settings import ANNOTATION_START_DELAY, WorkloadSettings

_log = logging.getLogger(__name__)

_RUNNING_CONDITIONS = (
    "PodReadyToStartContainers",
    "Initialized",
    "ContainersReady",
    "Ready",
    "PodScheduled",
)


def _containers(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    containers = nested(pod, "spec", "containers")
    return [c for c in containers if isinstance(c, Mapping)] if isinstance(containers, list) else []


def _conditions(pod: Mapping[str, Any], wanted: Mapping[str, str], now: str) -> list[JsonObject]:
    """The pod's conditions with ``wanted`` statuses; unchanged ones keep their transition
    time, others' conditions stay."""
    existing = nested(pod, "status", "conditions")
    by_type: dict[str, JsonObject] = {}
    for entry in existing if isinstance(existing, list) else []:
        if isinstance(entry, Mapping) and entry.get("type"):
            by_type[str(entry["type"])] = dict(entry)
    for kind, status in wanted.items():
        current = by_type.get(kind)
        if current is None or current.get("status") != status:
            by_type[kind] = {"type": kind, "status": status, "lastTransitionTime": now}
    return list(by_type.values())


class PodKubelet:
    """Starts bound pods, finishes their graceful deletion, deletes those of vanished Nodes."""

    name = "sim.workloads.kubelet"
    primary = PODS
    primary_cluster = WORKLOAD

    def __init__(
        self, client: KubeClient, caches: Caches, clock: Clock, settings: WorkloadSettings
    ) -> None:
        self.client, self.caches, self.clock, self.settings = client, caches, clock, settings
        self._seen_ready: dict[Key, tuple[str, float]] = {}
        """Pod key → (uid, monotonic time it was first seen bound to a Ready Node)."""

    def watches(self) -> Sequence[Watch]:
        def pods_on(node: JsonObject) -> list[Key]:
            return self.caches.store(PODS).index_keys(BY_NODE_NAME, name_of(node))

        return [Watch(NODES, to_keys=pods_on)]

    def reads(self) -> Sequence[tuple[Resource, str]]:
        return []

    def reconcile(self, key: Key) -> Result:
        pod = self.caches.store(PODS).get(key)
        if pod is None:
            self._seen_ready.pop(key, None)
            return DONE
        node_name = nested(pod, "spec", "nodeName")
        if not node_name:
            return DONE  # the scheduler's business
        if is_deleting(pod):
            return self._finish(pod)
        node = self.caches.store(NODES).get(str(node_name))
        if node is None:
            # Pod GC collects pods of Nodes that no longer exist; a Node being deleted still
            # exists (a drain may hold it), so its pods stay until evicted.
            _log.info("pod %s: node %s is gone, deleting the pod", key, node_name)
            self._delete(pod)
            return DONE
        if phase_of(pod) != "Pending":
            return DONE
        if not node_is_ready(node):
            self._seen_ready.pop(key, None)
            return DONE
        seen = self._seen_ready.get(key)
        if seen is None or seen[0] != uid_of(pod):
            seen = self._seen_ready[key] = (uid_of(pod), self.clock.monotonic())
        delay = delay_from([pod], ANNOTATION_START_DELAY, self.settings.start_delay)
        left = seen[1] + delay - self.clock.monotonic()
        if left > 0:
            return Result(requeue_after=left)
        self._start(pod)
        self._seen_ready.pop(key, None)
        return DONE

    def _start(self, pod: JsonObject) -> None:
        now = format_timestamp(self.clock.now())
        statuses = [
            {
                "name": c.get("name"),
                "image": c.get("image", ""),
                "imageID": "",
                "containerID": f"sim://{uid_of(pod)}/{c.get('name')}",
                "ready": True,
                "started": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": now}},
            }
            for c in _containers(pod)
        ]
        wanted = dict.fromkeys(_RUNNING_CONDITIONS, "True")
        status = {
            "phase": "Running",
            "startTime": now,
            "conditions": _conditions(pod, wanted, now),
            "containerStatuses": statuses,
        }
        self._write_status(pod, status)

    def _finish(self, pod: JsonObject) -> Result:
        meta = pod.get("metadata") or {}
        deletion = deleted_at(pod)
        grace = float(meta.get("deletionGracePeriodSeconds") or 0)
        if deletion is not None:
            began = deletion - timedelta(seconds=grace)
            done = began + timedelta(seconds=min(grace, self.settings.termination_cap))
            left = (done - self.clock.now()).total_seconds()
            if left > 0:
                return Result(requeue_after=left)
        if not is_terminal(pod):
            now = format_timestamp(self.clock.now())
            statuses = [
                {
                    "name": c.get("name"),
                    "image": c.get("image", ""),
                    "imageID": "",
                    "ready": False,
                    "started": False,
                    "restartCount": 0,
                    "state": {
                        "terminated": {"exitCode": 0, "reason": "Completed", "finishedAt": now}
                    },
                }
                for c in _containers(pod)
            ]
            wanted = {"Ready": "False", "ContainersReady": "False"}
            status = {
                "phase": "Succeeded",
                "conditions": _conditions(pod, wanted, now),
                "containerStatuses": statuses,
            }
            if not self._write_status(pod, status):
                return DONE
        self._delete(pod)
        return DONE

    def _write_status(self, pod: JsonObject, status: JsonObject) -> bool:
        try:
            self.client.patch(
                PODS, name_of(pod), {"status": status}, namespace_of(pod), subresource="status"
            )
        except NotFound:
            return False
        return True

    def _delete(self, pod: JsonObject) -> None:
        with contextlib.suppress(NotFound):
            self.client.delete(PODS, name_of(pod), namespace_of(pod), grace_period_seconds=0)
