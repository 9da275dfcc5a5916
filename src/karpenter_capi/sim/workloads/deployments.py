"""Deployments (``apps/v1``): one ReplicaSet per pod template, scaled with the Deployment.

Workloads in the simulated cluster come from Deployments and, as in kube, a Deployment's pods
come from a ReplicaSet it controls (``sim.workloads.replicasets`` keeps the ReplicaSet's pods).
The chain matters to the autoprovisioner: its batch window closes early once every new pod's
controlling ``apps/v1 ReplicaSet`` has all its replicas (``core.provisioning.batcher``), and
the server's PodDisruptionBudget arithmetic walks pod -> ReplicaSet -> Deployment for the
scale. Modelled on ``pkg/controller/deployment`` (``sync.go``, ``util/deployment_util.go``):

* **the new ReplicaSet** (``sync.go: getNewReplicaSet``): the ReplicaSet whose template equals
  the Deployment's, ignoring the ``pod-template-hash`` label (``EqualIgnoreHash``). When there
  is none, one is created, named ``<deployment>-<hash>``, with ``pod-template-hash: <hash>``
  added to its selector, to its labels and to its template's labels (so to its pods), a
  controller ownerReference to the Deployment (``blockOwnerDeletion``), ``spec.replicas`` and
  ``minReadySeconds`` of the Deployment, and the annotations of
  ``deployment_util.go: SetNewReplicaSetAnnotations``: the Deployment's own (but
  ``kubectl.kubernetes.io/last-applied-configuration`` and the ``deployment.kubernetes.io``
  ones), ``deployment.kubernetes.io/revision`` (one above the old ReplicaSets' highest),
  ``desired-replicas`` (the Deployment's replicas) and ``max-replicas`` (plus ``MaxSurge``:
  ``rollingUpdate.maxSurge``, 25% rounded up by default, 0 for ``Recreate``). A name taken by
  a ReplicaSet of another template bumps ``status.collisionCount``, which enters the hash;
* **the hash** (``controller_utils.go: ComputeHash``): kube hashes the template with fnv32a
  (over its Go value as ``DeepHashObject`` prints it, then ``collisionCount``) and renders the
  decimal digits with ``rand.SafeEncodeString``. Here fnv32a runs over the template's canonical
  JSON (sorted keys) and the same collision bytes, rendered the same way: as deterministic and
  as stable for one template, but a kube cluster would name the same template differently;
* **scaling** (``sync.go: scale``, ``scaleReplicaSet``): the new ReplicaSet is kept at the
  Deployment's ``spec.replicas`` (with ``desired-replicas``/``max-replicas`` updated), so
  scaling the Deployment scales it, and its ReplicaSet creates or deletes the pods;
* **status** (``sync.go: calculateStatus``, written by ``syncDeploymentStatus``/
  ``syncStatusOnly``): summed over the Deployment's ReplicaSets' statuses: ``replicas``,
  ``readyReplicas``, ``availableReplicas``, ``updatedReplicas`` (the new ReplicaSet's),
  ``unavailableReplicas`` (their ``spec.replicas`` less available) and ``observedGeneration``
  (and ``collisionCount`` once set), written only when they change. A Deployment being
  deleted only has its status synced.

Not emulated: rollouts. A changed template makes its new ReplicaSet at the full count and
scales the old ones to 0 at once (neither RollingUpdate's maxSurge/maxUnavailable steps nor
Recreate's wait for the old pods), ``paused``, ``progressDeadlineSeconds``, conditions, the
Deployment's own ``revision`` annotation, ``revision-history``, ``revisionHistoryLimit``
clean-up, adoption of orphaned ReplicaSets matching the selector. The ReplicaSet controller
(``replicasets``) lists what it does not model.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any, Final

from karpenter_capi.core.clock import Clock
from karpenter_capi.core.kube.client import JsonObject, KubeClient
from karpenter_capi.core.kube.errors import AlreadyExists, NotFound
from karpenter_capi.core.kube.resources import DEPLOYMENTS, REPLICASETS, Resource
from karpenter_capi.core.runtime.controller import DONE, WORKLOAD, Caches, Key, Result, Watch
from karpenter_capi.sim.capi.objects import (
    annotations_of,
    as_int,
    controlled_by,
    controller_ref,
    is_deleting,
    key_of,
    name_of,
    namespace_of,
    nested,
    uid_of,
)
from karpenter_capi.sim.workloads.objects import (
    controller_key_of,
    created_seconds,
    owner_reference,
)
from karpenter_capi.sim.workloads.settings import WorkloadSettings

_log = logging.getLogger(__name__)

LABEL_POD_TEMPLATE_HASH: Final = "pod-template-hash"
ANNOTATION_REVISION: Final = "deployment.kubernetes.io/revision"
ANNOTATION_DESIRED_REPLICAS: Final = "deployment.kubernetes.io/desired-replicas"
ANNOTATION_MAX_REPLICAS: Final = "deployment.kubernetes.io/max-replicas"
_NOT_COPIED: Final = frozenset(
    {
        "kubectl.kubernetes.io/last-applied-configuration",
        ANNOTATION_REVISION,
        "deployment.kubernetes.io/revision-history",
        ANNOTATION_DESIRED_REPLICAS,
        ANNOTATION_MAX_REPLICAS,
        "deprecated.deployment.rollback.to",
    }
)
"""Annotations of the Deployment its ReplicaSets do not get (``annotationsToSkip``)."""

_SAFE_ALPHABET: Final = "bcdfghjklmnpqrstvwxz2456789"  # rand.SafeEncodeString's: no vowels
_FNV32_OFFSET: Final = 0x811C9DC5
_FNV32_PRIME: Final = 0x01000193


def _fnv32a(data: bytes, value: int = _FNV32_OFFSET) -> int:
    for byte in data:
        value = ((value ^ byte) * _FNV32_PRIME) & 0xFFFFFFFF
    return value


def template_hash(template: Mapping[str, Any], collision_count: int | None = None) -> str:
    """The ``pod-template-hash`` of a pod template (see the module's docstring)."""
    value = _fnv32a(json.dumps(template, sort_keys=True, separators=(",", ":")).encode())
    if collision_count is not None:
        value = _fnv32a((collision_count & 0xFFFFFFFF).to_bytes(4, "little") + bytes(4), value)
    return "".join(_SAFE_ALPHABET[b % len(_SAFE_ALPHABET)] for b in str(value).encode())


def _without_hash(template: Any) -> Any:
    """The template with its ``pod-template-hash`` label dropped (``EqualIgnoreHash``)."""
    if not isinstance(template, Mapping):
        return template
    labels = nested(template, "metadata", "labels")
    if not isinstance(labels, Mapping) or LABEL_POD_TEMPLATE_HASH not in labels:
        return template
    stripped = copy.deepcopy(dict(template))
    del stripped["metadata"]["labels"][LABEL_POD_TEMPLATE_HASH]
    return stripped


def max_surge(deployment: Mapping[str, Any]) -> int:
    """``deployment_util.go: MaxSurge``: pods over ``spec.replicas`` a rollout may add."""
    strategy = nested(deployment, "spec", "strategy") or {}
    if strategy.get("type", "RollingUpdate") != "RollingUpdate":
        return 0
    surge = (strategy.get("rollingUpdate") or {}).get("maxSurge", "25%")
    replicas = as_int(nested(deployment, "spec", "replicas"), 1)
    if isinstance(surge, str) and surge.endswith("%"):
        # ``ResolveFenceposts``: the surge's percentage rounds up.
        return math.ceil(replicas * as_int(surge[:-1]) / 100)
    return as_int(surge)


class DeploymentController:
    """Keeps a Deployment's new ReplicaSet at its replicas; writes the Deployment's status."""

    name = "sim.workloads.deployment"
    primary = DEPLOYMENTS
    primary_cluster = WORKLOAD

    def __init__(
        self, client: KubeClient, caches: Caches, clock: Clock, settings: WorkloadSettings
    ) -> None:
        self.client, self.caches, self.clock, self.settings = client, caches, clock, settings

    def watches(self) -> Sequence[Watch]:
        return [Watch(REPLICASETS, to_keys=self._owner_of)]

    @staticmethod
    def _owner_of(replicaset: JsonObject) -> list[Key]:
        owner = controller_key_of(replicaset, "Deployment")
        return [owner] if owner else []

    def reads(self) -> Sequence[tuple[Resource, str]]:
        return []

    def reconcile(self, key: Key) -> Result:
        deployment = self.caches.store(DEPLOYMENTS).get(key)
        if deployment is None:
            return DONE
        owned = sorted(
            controlled_by(self.caches.store(REPLICASETS), deployment),
            key=lambda rs: (created_seconds(rs), name_of(rs)),
        )
        template = nested(deployment, "spec", "template") or {}
        new = next(
            (rs for rs in owned if _without_hash(nested(rs, "spec", "template")) == template), None
        )
        if not is_deleting(deployment):
            old = [rs for rs in owned if rs is not new]
            if new is None:
                new = self._create_replicaset(deployment, old)
                if new is None:
                    return DONE  # a hash collision: the status write brings the next try
                owned = [*[rs for rs in owned if name_of(rs) != name_of(new)], new]
            else:
                self._scale(deployment, new, self._annotations(deployment, new, old))
            for rs in old:
                if as_int(nested(rs, "spec", "replicas"), 1) != 0:
                    self._scale(deployment, rs, {}, replicas=0)
        self._write_status(deployment, new, owned)
        return DONE

    def _annotations(
        self, deployment: JsonObject, replicaset: JsonObject | None, old: list[JsonObject]
    ) -> dict[str, str]:
        """``SetNewReplicaSetAnnotations``: what the new ReplicaSet's annotations should be."""
        current = annotations_of(replicaset) if replicaset is not None else {}
        wanted = {k: v for k, v in annotations_of(deployment).items() if k not in _NOT_COPIED}
        highest = max(
            (as_int(annotations_of(rs).get(ANNOTATION_REVISION)) for rs in old), default=0
        )
        revision = as_int(current.get(ANNOTATION_REVISION))
        wanted[ANNOTATION_REVISION] = str(max(revision, highest + 1))
        replicas = as_int(nested(deployment, "spec", "replicas"), 1)
        wanted[ANNOTATION_DESIRED_REPLICAS] = str(replicas)
        wanted[ANNOTATION_MAX_REPLICAS] = str(replicas + max_surge(deployment))
        return wanted

    def _create_replicaset(
        self, deployment: JsonObject, old: list[JsonObject]
    ) -> JsonObject | None:
        """Create the Deployment's ReplicaSet for its template; the ReplicaSet, or ``None``
        after a hash collision (``collisionCount`` bumped)."""
        collisions = nested(deployment, "status", "collisionCount")
        template = copy.deepcopy(nested(deployment, "spec", "template") or {})
        digest = template_hash(template, collisions if isinstance(collisions, int) else None)
        metadata = template.setdefault("metadata", {})
        metadata["labels"] = {**(metadata.get("labels") or {}), LABEL_POD_TEMPLATE_HASH: digest}
        selector = copy.deepcopy(nested(deployment, "spec", "selector") or {})
        selector["matchLabels"] = {
            **(selector.get("matchLabels") or {}),
            LABEL_POD_TEMPLATE_HASH: digest,
        }
        spec: JsonObject = {
            "replicas": as_int(nested(deployment, "spec", "replicas"), 1),
            "selector": selector,
            "template": template,
        }
        min_ready = nested(deployment, "spec", "minReadySeconds")
        if min_ready:
            spec["minReadySeconds"] = min_ready
        name = f"{name_of(deployment)}-{digest}"
        body: JsonObject = {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": name,
                "labels": dict(metadata["labels"]),
                "annotations": self._annotations(deployment, None, old),
                "ownerReferences": [owner_reference(deployment, "Deployment")],
            },
            "spec": spec,
        }
        namespace = namespace_of(deployment)
        try:
            return self.client.create(REPLICASETS, body, namespace)
        except AlreadyExists:
            pass
        # The cache may not show a ReplicaSet this controller made a moment ago: ask the server.
        with contextlib.suppress(NotFound):
            existing = self.client.get(REPLICASETS, name, namespace)
            ref = controller_ref(existing) or {}
            same = _without_hash(nested(existing, "spec", "template")) == nested(
                deployment, "spec", "template"
            )
            if ref.get("uid") == uid_of(deployment) and same:
                return existing
        count = (collisions if isinstance(collisions, int) else 0) + 1
        with contextlib.suppress(NotFound):
            self.client.patch(
                DEPLOYMENTS,
                name_of(deployment),
                {"status": {"collisionCount": count}},
                namespace,
                subresource="status",
            )
        _log.info(
            "deployment %s: ReplicaSet %s collides, collisionCount %d",
            key_of(deployment),
            name,
            count,
        )
        return None

    def _scale(
        self,
        deployment: JsonObject,
        replicaset: JsonObject,
        annotations: Mapping[str, str],
        replicas: int | None = None,
    ) -> None:
        """``scaleReplicaSet``: the ReplicaSet's replicas (the Deployment's unless told) and
        annotations, written when either differs."""
        wanted = as_int(nested(deployment, "spec", "replicas"), 1) if replicas is None else replicas
        current = annotations_of(replicaset)
        changed = {k: v for k, v in annotations.items() if current.get(k) != v}
        min_ready = nested(deployment, "spec", "minReadySeconds")
        patch: JsonObject = {}
        if as_int(nested(replicaset, "spec", "replicas"), 1) != wanted:
            patch["spec"] = {"replicas": wanted}
        if replicas is None and nested(replicaset, "spec", "minReadySeconds") != min_ready:
            patch.setdefault("spec", {})["minReadySeconds"] = min_ready
        if changed:
            patch["metadata"] = {"annotations": changed}
        if not patch:
            return
        with contextlib.suppress(NotFound):
            self.client.patch(REPLICASETS, name_of(replicaset), patch, namespace_of(replicaset))

    def _write_status(
        self, deployment: JsonObject, new: JsonObject | None, owned: list[JsonObject]
    ) -> None:
        def total(field: str, of: list[JsonObject]) -> int:
            return sum(as_int(nested(rs, "status", field)) for rs in of)

        available = total("availableReplicas", owned)
        wanted = sum(as_int(nested(rs, "spec", "replicas"), 1) for rs in owned)
        desired: JsonObject = {
            "observedGeneration": as_int(nested(deployment, "metadata", "generation"), 1),
            "replicas": total("replicas", owned),
            "updatedReplicas": total("replicas", [new] if new is not None else []),
            "readyReplicas": total("readyReplicas", owned),
            "availableReplicas": available,
            "unavailableReplicas": max(0, wanted - available),
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
