"""Deployments (``apps/v1``): keep ``spec.replicas`` pods from the template, and report them.

Workloads in the simulated cluster come from Deployments, so that pods the autoprovisioner's
drain evicts come back (pending, wanting capacity) and a scale-up creates pending pods, as in
a real cluster. This controller plays kube's Deployment and ReplicaSet controllers at once:

* **pods are owned by the Deployment directly** (a controller ownerReference to
  ``apps/v1 Deployment``, ``blockOwnerDeletion``), without a ReplicaSet in between. Nothing in
  the autoprovisioner looks at the ReplicaSet, the server's PodDisruptionBudget arithmetic finds
  the Deployment's scale through the pod's owner either way, and one object fewer keeps
  the emulation simple. Pods are named ``<deployment>-<5 random>`` (``generateName``);
* **active pods** (``FilterActivePods``: neither ``Succeeded``/``Failed`` nor being deleted)
  are counted; missing ones are created from ``spec.template`` (labels, annotations, spec),
  so an evicted or deleted pod is replaced at once, while it is still terminating;
* **scale-down** deletes the surplus in kube's ``ActivePodsWithRanks`` order: unscheduled
  before scheduled, ``Pending`` before ``Unknown`` before ``Running``, not Ready before Ready,
  Ready for a shorter time first, more restarts first, then the newest;
* **status**: ``replicas`` (active pods), ``readyReplicas``, ``availableReplicas`` (Ready;
  ``minReadySeconds`` is not honoured), ``updatedReplicas``, ``unavailableReplicas`` and
  ``observedGeneration``, written only when they change.

Not emulated: rollouts (a changed template does not replace running pods; new pods take the
new template), ``paused``, ``progressDeadlineSeconds``, conditions, revision annotations,
adoption of orphans matching the selector, slow-start batching of creations.
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from karpenter_capi.core.clock import Clock
from karpenter_capi.core.kube.client import JsonObject, KubeClient
from karpenter_capi.core.kube.errors import NotFound
from karpenter_capi.core.kube.resources import DEPLOYMENTS, PODS, Resource
from karpenter_capi.core.runtime.controller import DONE, WORKLOAD, Caches, Key, Result, Watch
from karpenter_capi.sim.capi.objects import (
    as_int,
    controlled_by,
    is_deleting,
    key_of,
    name_of,
    namespace_of,
    nested,
    uid_of,
)
from karpenter_capi.sim.workloads.objects import (
    Expectations,
    controller_key_of,
    created_seconds,
    is_active,
    is_ready,
    owner_reference,
    phase_of,
    ready_since,
)
from karpenter_capi.sim.workloads.settings import WorkloadSettings

_log = logging.getLogger(__name__)

_PHASE_RANK = {"Pending": 0, "Unknown": 1, "Running": 2}


def deletion_rank(pod: Mapping[str, Any]) -> tuple[int, int, int, float, int, float, str]:
    """Sort key putting the pod to delete first first (``ActivePodsWithRanks.Less``)."""
    restarts = sum(
        as_int(s.get("restartCount"))
        for s in nested(pod, "status", "containerStatuses") or []
        if isinstance(s, Mapping)
    )
    ready = is_ready(pod)
    return (
        1 if nested(pod, "spec", "nodeName") else 0,
        _PHASE_RANK.get(phase_of(pod), 1),
        1 if ready else 0,
        -ready_since(pod) if ready else 0.0,
        -restarts,
        -created_seconds(pod),
        name_of(pod),
    )


def pod_from_template(owner: Mapping[str, Any], kind: str) -> JsonObject:
    """A new pod of ``owner``'s ``spec.template``, owned by it (no name: ``generateName``)."""
    template = nested(owner, "spec", "template") or {}
    meta = template.get("metadata") or {}
    pod_meta: JsonObject = {
        "generateName": f"{name_of(owner)}-",
        "labels": dict(meta.get("labels") or {}),
        "ownerReferences": [owner_reference(owner, kind)],
    }
    if meta.get("annotations"):
        pod_meta["annotations"] = dict(meta["annotations"])
    spec = copy.deepcopy(dict(template.get("spec") or {}))
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": spec}


class DeploymentController:
    """Creates and deletes a Deployment's pods to match ``spec.replicas``; writes its status."""

    name = "sim.workloads.deployment"
    primary = DEPLOYMENTS
    primary_cluster = WORKLOAD

    def __init__(
        self, client: KubeClient, caches: Caches, clock: Clock, settings: WorkloadSettings
    ) -> None:
        self.client, self.caches, self.clock, self.settings = client, caches, clock, settings
        self.expectations = Expectations(clock, settings.expectation_timeout)
        self._counted: dict[Key, tuple[str, str | None, bool, bool]] = {}
        """Pod key -> (uid, owner, active, Ready) as last counted (``_owner_of``)."""

    def watches(self) -> Sequence[Watch]:
        return [Watch(PODS, to_keys=self._owner_of)]

    def _owner_of(self, pod: JsonObject) -> list[Key]:
        """The Deployment to reconcile for a pod event: only when the pod came, went, or
        changed in what a reconcile counts (its owner, uid, active or Ready); a status patch
        that changes none of them (a scheduling attempt's message, a binding) cannot change
        the replicas to create or delete, nor the status (kube's ReplicaSet controller syncs
        on every pod update; its sync would find nothing to do)."""
        owner = controller_key_of(pod, "Deployment")
        key = key_of(pod)
        current = self.caches.store(PODS).get(key)
        if current is None:  # deleted (the cache moves before the handlers are told)
            self._counted.pop(key, None)
            return [owner] if owner else []
        version = nested(pod, "metadata", "resourceVersion")
        if version != nested(current, "metadata", "resourceVersion"):
            # The old side of an update: its owner lost the pod only if the owner changed.
            moved = owner != controller_key_of(current, "Deployment")
            return [owner] if owner and moved else []
        counted = (uid_of(pod), owner, is_active(pod), is_ready(pod))
        if self._counted.get(key) == counted:
            return []
        self._counted[key] = counted
        return [owner] if owner else []

    def reads(self) -> Sequence[tuple[Resource, str]]:
        return []

    def reconcile(self, key: Key) -> Result:
        deployment = self.caches.store(DEPLOYMENTS).get(key)
        if deployment is None:
            self.expectations.forget(key)
            return DONE
        pods_store = self.caches.store(PODS)
        namespace = namespace_of(deployment)
        pods = controlled_by(pods_store, deployment)
        active = [p for p in pods if is_active(p)]
        wait = self.expectations.wait(key, pods_store, namespace)
        result = DONE
        if wait is not None:
            result = Result(requeue_after=wait)
        elif not is_deleting(deployment):
            wanted = as_int(nested(deployment, "spec", "replicas"), 1)
            if len(active) < wanted:
                self._create(key, deployment, wanted - len(active))
            elif len(active) > wanted:
                surplus = sorted(active, key=deletion_rank)[: len(active) - wanted]
                self._delete(key, surplus)
        self._write_status(deployment, active)
        return result

    def _create(self, key: Key, deployment: JsonObject, count: int) -> None:
        for _ in range(count):
            created = self.client.create(
                PODS, pod_from_template(deployment, "Deployment"), namespace_of(deployment)
            )
            self.expectations.created(key, name_of(created))

    def _delete(self, key: Key, pods: list[JsonObject]) -> None:
        for pod in pods:
            self.expectations.deleted(key, uid_of(pod))
            with contextlib.suppress(NotFound):
                self.client.delete(PODS, name_of(pod), namespace_of(pod))

    def _write_status(self, deployment: JsonObject, active: list[JsonObject]) -> None:
        ready = sum(1 for p in active if is_ready(p))
        wanted = as_int(nested(deployment, "spec", "replicas"), 1)
        desired = {
            "observedGeneration": as_int(nested(deployment, "metadata", "generation"), 1),
            "replicas": len(active),
            "updatedReplicas": len(active),
            "readyReplicas": ready,
            "availableReplicas": ready,
            "unavailableReplicas": max(0, wanted - ready),
        }
        current = deployment.get("status") or {}
        if all(current.get(k) == v for k, v in desired.items()):
            return
        with contextlib.suppress(NotFound):
            self.client.patch(
                DEPLOYMENTS,
                name_of(deployment),
                {"status": desired},
                namespace_of(deployment),
                subresource="status",
            )
        _log.debug("deployment %s: %s", key_of(deployment), desired)
