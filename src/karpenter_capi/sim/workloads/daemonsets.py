"""DaemonSets (``apps/v1``): one pod on every node that should run it, removed when it goes.

Every node of the simulated cluster carries its daemons (their requests are on the node, their
pods in a drain's list, which must skip them), and the autoprovisioner's DaemonSet overhead
(``core.scheduling.daemons``) is checked against what lands, so nothing of it is used here.
This controller plays kube's DaemonSet controller (``pkg/controller/daemon``):

* **which nodes**: ``NodeShouldRunDaemonPod`` on the template pod with the controller's
  automatic tolerations (``tolerations.with_daemon_tolerations``: not-ready and unreachable
  ``NoExecute``; disk-, memory-, pid-pressure and unschedulable ``NoSchedule``;
  network-unavailable for host-network pods). The ``nodeSelector`` and one required node
  affinity term must match the node's labels (``matchFields`` on ``metadata.name`` too); an
  untolerated ``NoExecute`` taint removes the pod, an untolerated ``NoSchedule`` one only
  keeps a new pod off (one already there stays). Nodes being deleted get no new pod;
* **placement**: the pod is created with ``spec.nodeName`` set, bypassing the scheduler. kube
  (since 1.12) instead pins the pod with a ``matchFields`` node affinity and lets the default
  scheduler bind it; the outcome, a pod bound to that node, is the same, without depending on
  the scheduler stand-in. Pods are ``<daemonset>-<5 random>``, controlled by the DaemonSet;
* **cleanup**: pods of nodes that are gone, extra pods on a node (the newest go), ``Failed``
  pods (replaced) and pods on nodes that should no longer run them are deleted;
* **status**: ``desiredNumberScheduled``, ``currentNumberScheduled``, ``numberMisscheduled``,
  ``numberReady``, ``numberAvailable``, ``numberUnavailable``, ``updatedNumberScheduled``,
  ``observedGeneration``, written only when they change.

Not emulated: rolling updates (a changed template does not replace pods), ``minReadySeconds``,
surge, history (ControllerRevisions), the ``pod-template-generation`` label.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from typing import Any

from karpenter_capi.core.clock import Clock
from karpenter_capi.core.kube.client import JsonObject, KubeClient
from karpenter_capi.core.kube.errors import NotFound
from karpenter_capi.core.kube.resources import DAEMONSETS, NODES, PODS, Resource
from karpenter_capi.core.runtime.controller import DONE, WORKLOAD, Caches, Key, Result, Watch
from karpenter_capi.sim.capi.objects import (
    as_int,
    controlled_by,
    is_deleting,
    name_of,
    namespace_of,
    nested,
    uid_of,
)
from karpenter_capi.sim.workloads.objects import (
    Expectations,
    Fit,
    controller_key_of,
    created_seconds,
    daemon_fit,
    is_active,
    is_ready,
    phase_of,
)
from karpenter_capi.sim.workloads.replicasets import pod_from_template
from karpenter_capi.sim.workloads.settings import WorkloadSettings
from karpenter_capi.sim.workloads.tolerations import with_daemon_tolerations

_log = logging.getLogger(__name__)


class DaemonSetController:
    """Keeps one pod of each DaemonSet on every node that should run it."""

    name = "sim.workloads.daemonset"
    primary = DAEMONSETS
    primary_cluster = WORKLOAD

    def __init__(
        self, client: KubeClient, caches: Caches, clock: Clock, settings: WorkloadSettings
    ) -> None:
        self.client, self.caches, self.clock, self.settings = client, caches, clock, settings
        self.expectations = Expectations(clock, settings.expectation_timeout)

    def watches(self) -> Sequence[Watch]:
        def owner(pod: JsonObject) -> list[Key]:
            key = controller_key_of(pod, "DaemonSet")
            return [key] if key else []

        def every_daemonset(_node: JsonObject) -> list[Key]:
            return self.caches.store(DAEMONSETS).keys()

        return [Watch(PODS, to_keys=owner), Watch(NODES, to_keys=every_daemonset)]

    def reads(self) -> Sequence[tuple[Resource, str]]:
        return []

    def reconcile(self, key: Key) -> Result:
        daemonset = self.caches.store(DAEMONSETS).get(key)
        if daemonset is None:
            self.expectations.forget(key)
            return DONE
        pods_store = self.caches.store(PODS)
        nodes = {name_of(n): n for n in self.caches.store(NODES).list()}
        template = _daemon_pod(daemonset)
        fits = {name: daemon_fit(template, node) for name, node in nodes.items()}
        pods = controlled_by(pods_store, daemonset)
        by_node: dict[str, list[JsonObject]] = {}
        for pod in pods:
            if is_active(pod):
                by_node.setdefault(str(nested(pod, "spec", "nodeName") or ""), []).append(pod)

        wait = self.expectations.wait(key, pods_store, namespace_of(daemonset))
        if wait is None and not is_deleting(daemonset):
            self._sync(key, daemonset, fits, pods, by_node)
        self._write_status(daemonset, fits, by_node)
        return DONE if wait is None else Result(requeue_after=wait)

    def _sync(
        self,
        key: Key,
        daemonset: JsonObject,
        fits: dict[str, Fit],
        pods: list[JsonObject],
        by_node: dict[str, list[JsonObject]],
    ) -> None:
        doomed = [p for p in pods if phase_of(p) == "Failed" and not is_deleting(p)]
        for node_name, node_pods in by_node.items():
            fit = fits.get(node_name)
            if fit is None or not fit.should_continue:
                doomed += node_pods  # node gone (or unbound), or it must leave
            elif len(node_pods) > 1:
                doomed += sorted(node_pods, key=created_seconds)[1:]
        for node_name, fit in sorted(fits.items()):
            if fit.should_run and not by_node.get(node_name):
                pod = _daemon_pod(daemonset)
                pod["spec"]["nodeName"] = node_name
                created = self.client.create(PODS, pod, namespace_of(daemonset))
                self.expectations.created(key, name_of(created))
        for pod in doomed:
            self.expectations.deleted(key, uid_of(pod))
            with contextlib.suppress(NotFound):
                self.client.delete(PODS, name_of(pod), namespace_of(pod))

    def _write_status(
        self, daemonset: JsonObject, fits: dict[str, Fit], by_node: dict[str, list[JsonObject]]
    ) -> None:
        desired = sum(1 for fit in fits.values() if fit.should_run)
        scheduled = [n for n, ps in by_node.items() if ps and n in fits and fits[n].should_run]
        misscheduled = sum(
            1 for n, ps in by_node.items() if ps and not (n in fits and fits[n].should_run)
        )
        ready = sum(1 for n in scheduled if any(is_ready(p) for p in by_node[n]))
        status: dict[str, Any] = {
            "observedGeneration": as_int(nested(daemonset, "metadata", "generation"), 1),
            "desiredNumberScheduled": desired,
            "currentNumberScheduled": len(scheduled),
            "updatedNumberScheduled": len(scheduled),
            "numberMisscheduled": misscheduled,
            "numberReady": ready,
            "numberAvailable": ready,
            "numberUnavailable": max(0, desired - ready),
        }
        current = daemonset.get("status") or {}
        if all(current.get(k) == v for k, v in status.items()):
            return
        with contextlib.suppress(NotFound):
            self.client.patch(
                DAEMONSETS,
                name_of(daemonset),
                {"status": status},
                namespace_of(daemonset),
                subresource="status",
            )


def _daemon_pod(daemonset: JsonObject) -> JsonObject:
    """A new pod of ``daemonset`` with the DaemonSet controller's tolerations (no node yet)."""
    pod = pod_from_template(daemonset, "DaemonSet")
    pod["spec"]["tolerations"] = with_daemon_tolerations(pod["spec"])
    return pod
