"""ReplicaSets (``apps/v1``): keep ``spec.replicas`` pods from the template, and report them.

Workloads in the simulated cluster come from Deployments, and a Deployment's pods come from
its ReplicaSet (``sim.workloads.deployments`` makes one per pod template), as in kube: a pod's
controller is ``apps/v1 ReplicaSet <deployment>-<pod-template-hash>``, whose controller is the
Deployment. So pods the autoprovisioner's drain evicts come back (pending, wanting capacity), a
scale-up creates pending pods, and the provisioner's batch window can tell when a burst is
complete (``ProvisioningController.complete`` counts the ReplicaSet's pods against its
``spec.replicas``). Modelled on ``pkg/controller/replicaset/replica_set.go``:

* **active pods** (``controller_utils.go: FilterActivePods``: neither ``Succeeded``/``Failed``
  nor being deleted) are counted; missing ones are created from ``spec.template`` (labels,
  annotations, spec) with a controller ownerReference to the ReplicaSet
  (``blockOwnerDeletion``), so an evicted or deleted pod is replaced at once, while it is still
  terminating (``manageReplicas``). At most ``burstReplicas`` (500) pods are created or deleted
  in one sync, as kube's controller does; the rest come at the next sync, once the cache shows
  the first ones (expectations). Pods are named ``<replicaset>-<5 random>`` (``generateName``);
* **scale-down** deletes the surplus in ``controller_utils.go: ActivePodsWithRanks`` order:
  unscheduled before scheduled, ``Pending`` before ``Unknown`` before ``Running``, not Ready
  before Ready, Ready for a shorter time first, more restarts first, then the newest (kube
  also ranks by ``controller.kubernetes.io/pod-deletion-cost`` and by how many of the
  ReplicaSet's pods share the pod's node, and compares Ready times on a log scale; not
  modelled);
* **status** (``replica_set_utils.go: calculateStatus``): ``replicas`` (active pods),
  ``fullyLabeledReplicas`` (those carrying every template label), ``readyReplicas``,
  ``availableReplicas`` (Ready; ``minReadySeconds`` is not honoured) and
  ``observedGeneration``, written only when they change. Every sync computes it over all the
  ReplicaSet's active pods (``syncReplicaSet``), and syncs are driven as kube's are: a pod
  event that can change the count enqueues its ReplicaSet's key, and the work queue syncs a
  key queued many times before a worker takes it once (client-go's workqueue), so 200 pods
  turning Ready one by one make as many syncs as the workers find the key anew. What a sync
  reads of each pod object is kept for the next (``_Counted``): the same status, read once
  per stored version of a pod.

Not emulated: ``slowStartBatch``'s doubling batches (every create here succeeds, so they make the
same pods), adoption and release of pods by selector (``claimPods``: pods are found by their
controller reference), the ``ReplicaFailure`` condition, ``terminatingReplicas``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Final

from karpenter_capi.core.clock import Clock
from karpenter_capi.core.kube.client import JsonObject, KubeClient
from karpenter_capi.core.kube.errors import NotFound
from karpenter_capi.core.kube.resources import PODS, REPLICASETS, Resource
from karpenter_capi.core.runtime.controller import DONE, WORKLOAD, Caches, Key, Result, Watch
from karpenter_capi.sim.apiserver.shared_reads import create_read_only
from karpenter_capi.sim.capi.objects import (
    as_int,
    controlled_by,
    is_deleting,
    key_of,
    labels_of,
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

BURST_REPLICAS: Final = 500
"""Pods a ReplicaSet creates or deletes in one sync (kube's ``BurstReplicas``)."""

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
    # The spec is the template's own, copied one level: the caller may set a field of it (the
    # DaemonSet's tolerations), and a create never changes the body it is given (the server
    # stores a private copy; a client sends its JSON).
    spec: JsonObject = dict(template.get("spec") or {})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": spec}


def _carries(labels: Mapping[str, str], wanted: list[tuple[str, str]]) -> bool:
    """Whether a pod's ``labels`` have every (key, value) of ``wanted``."""
    return all(labels.get(key) == value for key, value in wanted)


class _Counted:
    """What the last sync of one ReplicaSet read of each of its pods (active, Ready, carrying
    the template's labels), by stored pod object.

    A sync walks every pod of its ReplicaSet (``calculateStatus``), and one of 200 pods
    turning Ready one by one syncs 200 times: 40,000 reads of pods of which all but one did
    not change. A stored object is never changed in place (a write stores a new one), so
    what was read of it holds; each sync keeps only the pods it walked.
    """

    def __init__(self) -> None:
        self.wanted: list[tuple[str, str]] | None = None
        self.read: dict[int, tuple[JsonObject, bool, bool, bool]] = {}

    def walk(
        self, pods: list[JsonObject], wanted: list[tuple[str, str]]
    ) -> list[tuple[JsonObject, bool, bool]]:
        """(pod, Ready, labelled) of each active pod of ``pods``."""
        known = self.read if wanted == self.wanted else {}
        read: dict[int, tuple[JsonObject, bool, bool, bool]] = {}
        active: list[tuple[JsonObject, bool, bool]] = []
        for pod in pods:
            facts = known.get(id(pod))
            if facts is None or facts[0] is not pod:
                facts = (pod, is_active(pod), is_ready(pod), _carries(labels_of(pod), wanted))
            read[id(pod)] = facts
            if facts[1]:
                active.append((pod, facts[2], facts[3]))
        self.wanted, self.read = wanted, read
        return active


class ReplicaSetController:
    """Creates and deletes a ReplicaSet's pods to match ``spec.replicas``; writes its status."""

    name = "sim.workloads.replicaset"
    primary = REPLICASETS
    primary_cluster = WORKLOAD

    def __init__(
        self, client: KubeClient, caches: Caches, clock: Clock, settings: WorkloadSettings
    ) -> None:
        self.client, self.caches, self.clock, self.settings = client, caches, clock, settings
        self.expectations = Expectations(clock, settings.expectation_timeout)
        self._counted: dict[Key, tuple[str, str | None, bool, bool]] = {}
        """Pod key -> (uid, owner, active, Ready) as last counted (``_owner_of``)."""
        self._counted_by: dict[Key, _Counted] = {}  # ReplicaSet key -> its last sync's reads

    def watches(self) -> Sequence[Watch]:
        return [Watch(PODS, to_keys=self._owner_of)]

    def _owner_of(self, pod: JsonObject) -> list[Key]:
        """The ReplicaSet to reconcile for a pod event: only when the pod came, went, or
        changed in what a reconcile counts (its owner, uid, active or Ready); a status patch
        that changes none of them (a scheduling attempt's message, a binding) cannot change
        the replicas to create or delete, nor the status (kube's ReplicaSet controller syncs
        on every pod update; its sync would find nothing to do)."""
        key = key_of(pod)
        current = self.caches.store(PODS).get(key)
        if current is None:  # deleted (the cache moves before the handlers are told)
            self._counted.pop(key, None)
            owner = controller_key_of(pod, "ReplicaSet")
            return [owner] if owner else []
        if current is not pod and nested(pod, "metadata", "resourceVersion") != nested(
            current, "metadata", "resourceVersion"
        ):
            # The old side of an update: its owner lost the pod only if the owner changed.
            # (Most writes leave the references as they were: the same list, shared between
            # the stored versions, needs no second look.)
            refs = nested(pod, "metadata", "ownerReferences")
            if refs is not None and refs is nested(current, "metadata", "ownerReferences"):
                return []
            owner = controller_key_of(pod, "ReplicaSet")
            moved = owner != controller_key_of(current, "ReplicaSet")
            return [owner] if owner and moved else []
        owner = controller_key_of(pod, "ReplicaSet")
        counted = (uid_of(pod), owner, is_active(pod), is_ready(pod))
        if self._counted.get(key) == counted:
            return []
        self._counted[key] = counted
        return [owner] if owner else []

    def reads(self) -> Sequence[tuple[Resource, str]]:
        return []

    def reconcile(self, key: Key) -> Result:
        replicaset = self.caches.store(REPLICASETS).get(key)
        if replicaset is None:
            self.expectations.forget(key)
            self._counted_by.pop(key, None)
            return DONE
        pods_store = self.caches.store(PODS)
        namespace = namespace_of(replicaset)
        template_labels = nested(replicaset, "spec", "template", "metadata", "labels") or {}
        wanted = [(str(k), str(v)) for k, v in template_labels.items()]
        counted = self._counted_by.setdefault(key, _Counted())
        active = counted.walk(controlled_by(pods_store, replicaset), wanted)
        wait = self.expectations.wait(key, pods_store, namespace)
        result = DONE
        if wait is not None:
            result = Result(requeue_after=wait)
        elif not is_deleting(replicaset):
            replicas = as_int(nested(replicaset, "spec", "replicas"), 1)
            if len(active) < replicas:
                self._create(key, replicaset, min(replicas - len(active), BURST_REPLICAS))
            elif len(active) > replicas:
                pods = [pod for pod, _, _ in active]
                surplus = sorted(pods, key=deletion_rank)[: len(active) - replicas]
                self._delete(key, surplus[:BURST_REPLICAS])
        self._write_status(replicaset, active)
        return result

    def _create(self, key: Key, replicaset: JsonObject, count: int) -> None:
        for _ in range(count):
            created = create_read_only(
                self.client,
                PODS,
                pod_from_template(replicaset, "ReplicaSet"),
                namespace_of(replicaset),
            )
            self.expectations.created(key, name_of(created))

    def _delete(self, key: Key, pods: list[JsonObject]) -> None:
        for pod in pods:
            self.expectations.deleted(key, uid_of(pod))
            with contextlib.suppress(NotFound):
                self.client.delete(PODS, name_of(pod), namespace_of(pod))

    def _write_status(
        self, replicaset: JsonObject, active: list[tuple[JsonObject, bool, bool]]
    ) -> None:
        """``calculateStatus`` over the active pods, as (pod, Ready, labelled)."""
        labelled = sum(1 for _, _, carries in active if carries)
        ready = sum(1 for _, is_pod_ready, _ in active if is_pod_ready)
        desired = {
            "replicas": len(active),
            "fullyLabeledReplicas": labelled,
            "readyReplicas": ready,
            "availableReplicas": ready,
            "observedGeneration": as_int(nested(replicaset, "metadata", "generation"), 1),
        }
        current = replicaset.get("status") or {}
        if all(current.get(k) == v for k, v in desired.items()):
            return
        with contextlib.suppress(NotFound):
            self.client.patch(
                REPLICASETS,
                name_of(replicaset),
                {"status": desired},
                namespace_of(replicaset),
                subresource="status",
            )
        _log.debug("replicaset %s: %s", key_of(replicaset), desired)
