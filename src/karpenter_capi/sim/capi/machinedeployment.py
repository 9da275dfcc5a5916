"""The MachineDeployment controller of the emulation: MachineSets per template, and rollouts.

The autoprovisioner scales MachineDeployments through their scale subresource and must cope
with what CAPI does in response, including a rollout started by someone editing the template
at the same time. This controller reproduces CAPI's ``internal/controllers/machinedeployment``
(``rolloutRolling``, ``rolloutOnDelete``, ``mdutil``) closely enough for that:

* the current MachineSet is the one whose ``machine-template-hash`` label is the hash of the
  deployment's template without its in-place fields (``templates.template_hash``); it is named
  ``<deployment>-<hash>``, labelled with the template's labels, the hash and
  ``cluster.x-k8s.io/deployment-name``, selects the deployment's selector plus the hash, and is
  controlled by the deployment (ownerReference). Orphan sets the selector matches are adopted;
* revisions: the current set's ``machinedeployment.clusters.x-k8s.io/revision`` is one more than
  any old set's, and the deployment carries the current set's revision; every scale of a set
  also records ``desired-replicas`` and ``max-replicas`` on it. The deployment's annotations
  (but the emulation's own) and deletion order are propagated to its sets in place;
* ``RollingUpdate`` (default ``maxSurge`` 1, ``maxUnavailable`` 0, integers or percentages):
  the new set grows while the total stays within ``replicas + maxSurge``; old sets shrink,
  unhealthy replicas first, while at least ``replicas - maxUnavailable`` Machines stay
  available. A plain scale (no template change) only resizes the current set;
* ``OnDelete``: old sets are marked ``disable-machine-create`` and shrink only as their Machines
  are deleted by someone else (or when the deployment scales down); the new set grows into the
  room that leaves;
* once a rollout is complete, old sets at zero are deleted (v1beta1 keeps
  ``spec.revisionHistoryLimit`` of them, default 1);
* status: ``replicas``, ``readyReplicas``, ``availableReplicas``, up-to-date and unavailable
  counts, ``selector``, ``observedGeneration`` and ``phase``, in the deployment's layout.

``spec.paused`` stops rollouts and scaling (status is still written); the
``cluster.x-k8s.io/paused`` annotation stops everything.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from karpenter_capi.core.clock import Clock
from karpenter_capi.core.kube.client import JsonObject, KubeClient
from karpenter_capi.core.kube.errors import AlreadyExists, NotFound
from karpenter_capi.core.runtime.controller import DONE, MANAGEMENT, Caches, Key, Result, Watch
from karpenter_capi.core.values.selectors import selector_matches
from karpenter_capi.sim.capi._rollout import (
    ON_DELETE,
    ROLLING_UPDATE,
    MachineSetView,
    by_creation,
    deployment_status,
    fenceposts,
    new_replicas_on_delete,
    new_replicas_rolling,
    revision_of,
)
from karpenter_capi.sim.capi.objects import (
    ANNOTATION_DESIRED_REPLICAS,
    ANNOTATION_DISABLE_MACHINE_CREATE,
    ANNOTATION_MAX_REPLICAS,
    ANNOTATION_REVISION,
    LABEL_CLUSTER_NAME,
    LABEL_DEPLOYMENT_NAME,
    LABEL_TEMPLATE_HASH,
    annotations_of,
    capi_resources,
    controlled_by,
    controller_key,
    controller_ref,
    desired_replicas,
    in_namespace,
    is_deleting,
    is_paused,
    key_of,
    label_value,
    labels_of,
    merge_diff,
    metadata,
    name_of,
    namespace_of,
    nested,
    new_controller_ref,
    resource_at,
)
from karpenter_capi.sim.capi.settings import (
    ANNOTATION_SHAPE,
    SIM_DOMAIN,
    EmulationSettings,
)
from karpenter_capi.sim.capi.shapes import (
    Strategy,
    md_deletion_order,
    ms_deletion_order,
    ms_deletion_order_spec,
    revision_history_limit,
    rollout_strategy,
    shape_of,
)
from karpenter_capi.sim.capi.templates import deployment_selector, template_hash

_log = logging.getLogger(__name__)

# Deployment annotations CAPI does not copy onto its MachineSets (mdutil annotationsToSkip),
# plus the emulation's own, which are read from the deployment itself.
_NOT_COPIED = (
    "kubectl.kubernetes.io/last-applied-configuration",
    ANNOTATION_REVISION,
    ANNOTATION_DESIRED_REPLICAS,
    ANNOTATION_MAX_REPLICAS,
    "deployment.kubernetes.io/revision-history",
)


def _copied_annotations(md: Mapping[str, Any]) -> dict[str, str]:
    return {
        k: v
        for k, v in annotations_of(md).items()
        if k not in _NOT_COPIED and not k.startswith(SIM_DOMAIN)
    }


class MachineDeploymentController:
    """Reconciles MachineDeployments into MachineSets; see the module docstring."""

    name = "sim.capi.machinedeployment"
    primary_cluster = MANAGEMENT

    def __init__(
        self,
        management: KubeClient,
        caches: Caches,
        clock: Clock,
        settings: EmulationSettings | None = None,
    ) -> None:
        self.client = management
        self.caches = caches
        self.clock = clock
        self.settings = settings or EmulationSettings()
        self.primary, self.machine_sets, _, _ = capi_resources(self.settings.version)

    def watches(self) -> Sequence[Watch]:
        return [Watch(self.machine_sets, to_keys=self._set_to_deployments, cluster=MANAGEMENT)]

    def reads(self) -> Sequence[tuple[Any, str]]:
        return []

    def _set_to_deployments(self, ms: JsonObject) -> Iterable[Key]:
        owner = controller_key(ms, "MachineDeployment")
        if owner is not None:
            return [owner]
        if controller_ref(ms) is not None:
            return []
        labels = labels_of(ms)
        deployments = in_namespace(self.caches.store(self.primary, MANAGEMENT), namespace_of(ms))
        return [
            key_of(md)
            for md in deployments
            if selector_matches(deployment_selector(md), labels, nil_matches=False)
        ]

    # -- reconcile -------------------------------------------------------------------------------

    def reconcile(self, key: Key) -> Result:
        md = self.caches.store(self.primary, MANAGEMENT).get(key)
        if md is None or is_deleting(md) or is_paused(md):
            return DONE
        shape = shape_of(md, self.settings.default_shape)
        strategy = rollout_strategy(md, shape)
        current_hash = template_hash(md)
        sets = [MachineSetView(ms, desired_replicas(ms)) for ms in self._machine_sets(md)]
        new = next(
            (s for s in sets if labels_of(s.obj).get(LABEL_TEMPLATE_HASH) == current_hash), None
        )
        old = [s for s in sets if s is not new]

        if nested(md, "spec", "paused") is True:
            self._write_status(md, shape, new, old)
            return DONE
        if new is None:
            return self._create_new_set(md, shape, strategy, current_hash, old)

        self._sync_revision(md, new, old)
        self._sync_in_place(md, shape, sets)
        if strategy.type == ON_DELETE:
            self._rollout_on_delete(md, strategy, new, old)
        else:
            if strategy.type != ROLLING_UPDATE:
                _log.warning(
                    "MachineDeployment %s: unknown strategy %r, rolling as RollingUpdate",
                    key,
                    strategy.type,
                )
            self._rollout_rolling(md, strategy, new, old)
        complete = self._write_status(md, shape, new, old)
        if complete:
            self._cleanup(md, shape, old)
        return DONE

    def _machine_sets(self, md: JsonObject) -> list[JsonObject]:
        store = self.caches.store(self.machine_sets, MANAGEMENT)
        sets = [ms for ms in controlled_by(store, md) if not is_deleting(ms)]
        selector = deployment_selector(md)
        for ms in in_namespace(store, namespace_of(md)):
            if controller_ref(ms) is not None or is_deleting(ms):
                continue
            if selector_matches(selector, labels_of(ms), nil_matches=False):
                refs = list(metadata(ms).get("ownerReferences") or [])
                refs.append(new_controller_ref(md, "MachineDeployment", self.primary.version))
                patch = {
                    "metadata": {
                        "ownerReferences": refs,
                        "resourceVersion": metadata(ms).get("resourceVersion"),
                    }
                }
                try:
                    sets.append(
                        self.client.patch(self.machine_sets, name_of(ms), patch, namespace_of(ms))
                    )
                except NotFound:
                    continue
        return sets

    # -- the current MachineSet ------------------------------------------------------------------

    def _create_new_set(
        self,
        md: JsonObject,
        shape: str,
        strategy: Strategy,
        current_hash: str,
        old: list[MachineSetView],
    ) -> Result:
        replicas = desired_replicas(md)
        start = MachineSetView({}, 0)
        if strategy.type == ON_DELETE:
            size = new_replicas_on_delete(md, start, old)
        else:
            size = new_replicas_rolling(md, strategy, start, old)
        revision = max((revision_of(s.obj) for s in old), default=0) + 1
        surge, _ = fenceposts(strategy, replicas)
        body = self._new_set_body(
            md, shape, current_hash, replicas=size, revision=revision, max_replicas=replicas + surge
        )
        try:
            self.client.create(resource_at(self.machine_sets, shape), body, namespace_of(md))
        except AlreadyExists:
            # Our cache has not seen it yet (or a deleted one is still going): look again soon.
            return Result(requeue_after=1.0)
        self._annotate(md, {ANNOTATION_REVISION: str(revision)})
        return DONE

    def _new_set_body(
        self,
        md: JsonObject,
        shape: str,
        current_hash: str,
        *,
        replicas: int,
        revision: int,
        max_replicas: int,
    ) -> JsonObject:
        name = f"{name_of(md)}-{current_hash}"
        template: JsonObject = copy.deepcopy(dict(nested(md, "spec", "template") or {}))
        template_meta = dict(template.get("metadata") or {})
        template_labels = dict(template_meta.get("labels") or {})
        template_labels[LABEL_TEMPLATE_HASH] = current_hash
        template_labels[LABEL_DEPLOYMENT_NAME] = label_value(name_of(md))
        template_meta["labels"] = template_labels
        template["metadata"] = template_meta
        selector = deployment_selector(md)
        match_labels = dict(selector.get("matchLabels") or {})
        match_labels[LABEL_TEMPLATE_HASH] = current_hash
        selector["matchLabels"] = match_labels
        labels = dict(template_labels)
        cluster = nested(md, "spec", "clusterName")
        if cluster:
            labels[LABEL_CLUSTER_NAME] = label_value(str(cluster))
        annotations = _copied_annotations(md)
        annotations[ANNOTATION_REVISION] = str(revision)
        annotations[ANNOTATION_DESIRED_REPLICAS] = str(desired_replicas(md))
        annotations[ANNOTATION_MAX_REPLICAS] = str(max_replicas)
        annotations[ANNOTATION_SHAPE] = shape
        spec: JsonObject = {"replicas": replicas, "selector": selector, "template": template}
        if cluster:
            spec["clusterName"] = cluster
        order = md_deletion_order(md, shape)
        if order:
            spec.update(ms_deletion_order_spec(order, shape))
        return {
            "apiVersion": resource_at(self.machine_sets, shape).api_version,
            "kind": "MachineSet",
            "metadata": {
                "name": name,
                "namespace": namespace_of(md),
                "labels": labels,
                "annotations": annotations,
                "ownerReferences": [new_controller_ref(md, "MachineDeployment", shape)],
            },
            "spec": spec,
        }

    def _sync_revision(
        self, md: JsonObject, new: MachineSetView, old: Sequence[MachineSetView]
    ) -> None:
        max_old = max((revision_of(s.obj) for s in old), default=0)
        revision = revision_of(new.obj)
        if revision <= max_old or revision == 0:
            # A template went back to an older set: it becomes the newest revision again.
            revision = max_old + 1
            self._patch_set(
                new, {"metadata": {"annotations": {ANNOTATION_REVISION: str(revision)}}}
            )
        if annotations_of(md).get(ANNOTATION_REVISION) != str(revision):
            self._annotate(md, {ANNOTATION_REVISION: str(revision)})

    def _sync_in_place(self, md: JsonObject, shape: str, sets: Sequence[MachineSetView]) -> None:
        """Propagate what changes without a rollout to every set: the deletion order and the
        deployment's annotations (added or changed ones; a removed one stays on the sets)."""
        order = md_deletion_order(md, shape)
        annotations = _copied_annotations(md)
        for s in sets:
            ms_shape = shape_of(s.obj, shape)
            wanted: JsonObject = {"metadata": {"annotations": annotations}}
            if ms_deletion_order(s.obj, ms_shape) != order:
                wanted["spec"] = ms_deletion_order_spec(order, ms_shape)
            self._patch_set(s, wanted)

    # -- RollingUpdate ---------------------------------------------------------------------------

    def _rollout_rolling(
        self, md: JsonObject, strategy: Strategy, new: MachineSetView, old: list[MachineSetView]
    ) -> None:
        replicas = desired_replicas(md)
        surge, max_unavailable = fenceposts(strategy, replicas)
        max_unavailable = min(max_unavailable, replicas) if replicas else 0
        self._enable_creation(new)
        # Scale up (or down past the deployment's size), as reconcileNewMachineSet.
        if new.replicas > replicas:
            self._scale(md, new, replicas, surge)
        elif new.replicas < replicas:
            self._scale(md, new, new_replicas_rolling(md, strategy, new, old), surge)

        self._scale_down_old_sets(md, new, old, replicas - max_unavailable, surge)

    def _scale_down_old_sets(
        self,
        md: JsonObject,
        new: MachineSetView,
        old: list[MachineSetView],
        min_available: int,
        surge: int,
    ) -> None:
        """Scale down old sets, as reconcileOldMachineSets: unhealthy replicas first, then
        healthy ones while ``min_available`` Machines stay available."""
        old_count = sum(s.replicas for s in old)
        if old_count == 0:
            return
        all_count = old_count + new.replicas
        new_unavailable = new.replicas - new.available
        max_scaled_down = all_count - min_available - new_unavailable
        if max_scaled_down <= 0:
            return
        self._scale_down_unhealthy(md, old, max_scaled_down, surge)
        # Then healthy ones, keeping minAvailable Machines available.
        available = sum(s.available for s in [*old, new])
        if available <= min_available:
            return
        budget = available - min_available
        for s in by_creation(old):
            if budget <= 0:
                break
            if s.replicas == 0:
                continue
            down = min(s.replicas, budget)
            self._scale(md, s, s.replicas - down, surge)
            budget -= down

    def _scale_down_unhealthy(
        self, md: JsonObject, old: list[MachineSetView], max_scaled_down: int, surge: int
    ) -> None:
        """Unhealthy replicas of old sets go first: they cost no availability."""
        cleaned = 0
        for s in by_creation(old):
            if cleaned >= max_scaled_down:
                break
            if s.replicas == 0 or s.replicas <= s.available:
                continue
            down = min(max_scaled_down - cleaned, s.replicas - s.available)
            self._scale(md, s, s.replicas - down, surge)
            cleaned += down

    # -- OnDelete --------------------------------------------------------------------------------

    def _rollout_on_delete(
        self, md: JsonObject, strategy: Strategy, new: MachineSetView, old: list[MachineSetView]
    ) -> None:
        replicas = desired_replicas(md)
        surge, _ = fenceposts(strategy, replicas)
        self._enable_creation(new)
        if new.replicas > replicas:
            self._scale(md, new, replicas, surge)
        elif new.replicas < replicas:
            self._scale(md, new, new_replicas_on_delete(md, new, old), surge)

        # Old sets never make Machines again; they follow deletions, and a deployment scale-down.
        scale_down = sum(s.replicas for s in [*old, new]) - replicas
        for s in by_creation(old):
            if ANNOTATION_DISABLE_MACHINE_CREATE not in annotations_of(s.obj):
                self._patch_set(
                    s,
                    {"metadata": {"annotations": {ANNOTATION_DISABLE_MACHINE_CREATE: "true"}}},
                )
            if s.replicas <= 0:
                continue
            target = s.replicas
            gone = s.replicas - s.status_replicas
            if gone > 0:
                # Machines deleted by hand: the set shrinks to what is left.
                target = s.status_replicas
                scale_down -= gone
            if scale_down > 0 and target > 0:
                down = min(scale_down, target)
                target -= down
                scale_down -= down
            if target != s.replicas:
                self._scale(md, s, target, surge)

    # -- writes ----------------------------------------------------------------------------------

    def _enable_creation(self, new: MachineSetView) -> None:
        # A set that was old once (OnDelete) and is current again may create Machines again.
        if ANNOTATION_DISABLE_MACHINE_CREATE in annotations_of(new.obj):
            self._patch_set(
                new, {"metadata": {"annotations": {ANNOTATION_DISABLE_MACHINE_CREATE: None}}}
            )

    def _scale(self, md: JsonObject, s: MachineSetView, replicas: int, surge: int) -> None:
        """``scaleMachineSet``: replicas and the deployment's sizes, in one write."""
        desired = desired_replicas(md)
        wanted = {
            "metadata": {
                "annotations": {
                    ANNOTATION_DESIRED_REPLICAS: str(desired),
                    ANNOTATION_MAX_REPLICAS: str(desired + surge),
                }
            },
            "spec": {"replicas": max(0, replicas)},
        }
        s.replicas = max(0, replicas)
        self._patch_set(s, wanted)

    def _patch_set(self, s: MachineSetView, wanted: Mapping[str, Any]) -> None:
        patch = merge_diff(s.obj, wanted)
        if not patch:
            return
        try:
            s.obj = self.client.patch(self.machine_sets, s.name, patch, namespace_of(s.obj))
        except NotFound:
            return

    def _annotate(self, md: JsonObject, annotations: Mapping[str, str]) -> None:
        patch = merge_diff(md, {"metadata": {"annotations": dict(annotations)}})
        if patch:
            try:
                self.client.patch(self.primary, name_of(md), patch, namespace_of(md))
            except NotFound:
                return

    # -- status and cleanup ----------------------------------------------------------------------

    def _write_status(
        self, md: JsonObject, shape: str, new: MachineSetView | None, old: Sequence[MachineSetView]
    ) -> bool:
        """Write the deployment's status; answer whether the rollout is complete
        (``mdutil.DeploymentComplete``)."""
        status, complete = deployment_status(md, shape, new, old)
        patch = merge_diff(md.get("status"), status)
        if patch:
            try:
                self.client.patch(
                    self.primary,
                    name_of(md),
                    {"status": patch},
                    namespace_of(md),
                    subresource="status",
                )
            except NotFound:
                return False
        return complete

    def _cleanup(self, md: JsonObject, shape: str, old: Sequence[MachineSetView]) -> None:
        """Delete old sets that are empty, beyond the revision history the layout keeps."""
        empty = [s for s in old if s.replicas == 0 and s.status_replicas == 0]
        keep = revision_history_limit(md, shape)
        empty.sort(key=lambda s: revision_of(s.obj))
        for s in empty[: max(0, len(empty) - keep)]:
            try:
                self.client.delete(self.machine_sets, s.name, namespace_of(s.obj))
            except NotFound:
                continue
