"""The MachineSet controller of the emulation: keep ``spec.replicas`` Machines, no more, no less.

This is where a replica change becomes Machines, whether the change came from the
autoprovisioner through the scale subresource of a MachineSet, or from a MachineDeployment
scaling its current MachineSet. It follows CAPI's ``internal/controllers/machineset``:

* the Machines of a set are those whose controller reference is the set, plus orphans its
  selector matches (adopted); Machines being deleted still count, so a scale-down does not
  delete a second Machine while the first is still going;
* a scale-up creates Machines named ``<set>-<random>`` from the template, with the labels
  ``cluster.x-k8s.io/set-name`` (and ``deployment-name`` when the set belongs to a deployment),
  the ``machine.cluster.x-k8s.io`` finalizer and a controller reference; it does nothing while
  the set carries ``machinedeployment.clusters.x-k8s.io/disable-machine-create`` (OnDelete
  rollouts put it on old sets);
* a scale-down deletes by priority (``getMachinesToDeletePrioritized``): Machines already being
  deleted first, then those annotated ``cluster.x-k8s.io/delete-machine``, then unhealthy ones
  (no nodeRef, a failure reason, ``NodeHealthy`` or ``HealthCheckSucceeded`` False), then by the
  deletion order (``spec.deletePolicy`` in v1beta1, ``spec.deletion.order`` in v1beta2):
  ``Random`` (the default; ties broken by name, as upstream), ``Newest`` or ``Oldest``;
* status: ``replicas`` (every Machine, deleting ones too), ``readyReplicas`` and
  ``availableReplicas`` (Machines whose ``Ready``/``Available`` condition is True),
  ``upToDateReplicas`` and ``selector``, in the set's layout (``shapes``).

What a create or delete does reaches the cache later; until it has (or 30 s of clock time have
passed) the set waits, like upstream's expectations, so a second reconcile on a stale cache
cannot create or delete twice.
"""

from __future__ import annotations

import copy
import logging
import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from karpenter_capi.core.api.wellknown import ANNOTATION_CAPI_DELETE_MACHINE
from karpenter_capi.core.clock import Clock
from karpenter_capi.core.kube.client import JsonObject, KubeClient
from karpenter_capi.core.kube.errors import AlreadyExists, NotFound
from karpenter_capi.core.runtime.controller import (
    DONE,
    MANAGEMENT,
    Caches,
    Key,
    Result,
    Watch,
)
from karpenter_capi.core.values.selectors import selector_matches, selector_to_string
from karpenter_capi.sim.capi.objects import (
    ANNOTATION_DISABLE_MACHINE_CREATE,
    LABEL_CLUSTER_NAME,
    LABEL_DEPLOYMENT_NAME,
    LABEL_SET_NAME,
    LABEL_TEMPLATE_HASH,
    MACHINE_FINALIZER,
    annotations_of,
    capi_resources,
    controlled_by,
    controller_key,
    controller_ref,
    created_at,
    desired_replicas,
    generated_name,
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
from karpenter_capi.sim.capi.settings import ANNOTATION_SHAPE, EmulationSettings
from karpenter_capi.sim.capi.shapes import (
    clone_ref,
    condition_status,
    failure_of,
    ms_deletion_order,
    replica_status,
    shape_of,
)
from karpenter_capi.sim.capi.templates import machine_set_selector, template_hash

_log = logging.getLogger(__name__)

# Upstream's delete priorities (machineset_deletion_order.go).
MUST_DELETE: Final = 100.0
SHOULD_DELETE_FIRST: Final = 80.0
BETTER_DELETE: Final = 50.0
COULD_DELETE: Final = 20.0
MUST_NOT_DELETE: Final = 0.0
_SECONDS_PER_TEN_DAYS: Final = 864000.0

DELETION_ORDERS: Final = ("Random", "Newest", "Oldest")
EXPECTATION_TIMEOUT: Final = 30.0


# --- which Machine goes first -------------------------------------------------------------------


def is_machine_healthy(machine: Mapping[str, Any]) -> bool:
    """Upstream's ``isMachineHealthy``: a nodeRef, no failure, no failed health condition."""
    if not nested(machine, "status", "nodeRef", "name"):
        return False
    if failure_of(machine) is not None:
        return False
    if condition_status(machine, "NodeHealthy") == "False":
        return False
    return condition_status(machine, "HealthCheckSucceeded") != "False"


def delete_priority(machine: Mapping[str, Any], order: str, now: datetime) -> float:
    """How much ``machine`` should go on a scale-down (higher first), for ``order``."""
    if is_deleting(machine):
        return MUST_DELETE
    if ANNOTATION_CAPI_DELETE_MACHINE in annotations_of(machine):
        return SHOULD_DELETE_FIRST
    if not is_machine_healthy(machine):
        return BETTER_DELETE
    if order == "Random" or not order:
        return COULD_DELETE
    created = created_at(machine)
    if created is None:
        oldest = MUST_NOT_DELETE
    else:
        age = (now - created).total_seconds()
        oldest = (
            MUST_NOT_DELETE
            if age < 0
            else BETTER_DELETE * (1.0 - math.exp(-age / _SECONDS_PER_TEN_DAYS))
        )
    return oldest if order == "Oldest" else BETTER_DELETE - oldest


def machines_to_delete(
    machines: Sequence[Mapping[str, Any]], count: int, order: str, now: datetime
) -> list[Mapping[str, Any]]:
    """The ``count`` Machines a scale-down removes, highest priority first, ties by name."""
    if count <= 0:
        return []
    ranked = sorted(machines, key=lambda m: (-delete_priority(m, order, now), name_of(m)))
    return ranked[:count]


# --- readiness, shared with the MachineDeployment and MachinePool controllers -------------------


def is_ready(machine: Mapping[str, Any]) -> bool:
    return condition_status(machine, "Ready") == "True"


def is_available(machine: Mapping[str, Any]) -> bool:
    return condition_status(machine, "Available") == "True"


# --- the controller -----------------------------------------------------------------------------


_NAME_ATTEMPTS: Final = 5


@dataclass
class _Expectations:
    """Writes this controller made that its cache may not show yet."""

    created: set[str] = field(default_factory=set)
    deleted: set[str] = field(default_factory=set)
    deadline: float = 0.0


class MachineSetController:
    """Reconciles MachineSets: Machines created and deleted to match ``spec.replicas``."""

    name = "sim.capi.machineset"
    primary_cluster = MANAGEMENT

    def __init__(
        self,
        management: KubeClient,
        caches: Caches,
        clock: Clock,
        settings: EmulationSettings | None = None,
        *,
        rand: random.Random | None = None,
    ) -> None:
        self.client = management
        self.caches = caches
        self.clock = clock
        self.settings = settings or EmulationSettings()
        self.rand = rand or random.Random(self.settings.seed)
        self._drawn = 0
        self.deployments, self.primary, self.machines, _ = capi_resources(self.settings.version)
        self._expectations: dict[Key, _Expectations] = {}

    def watches(self) -> Sequence[Watch]:
        return [
            Watch(self.machines, to_keys=self._machine_to_sets, cluster=MANAGEMENT),
            # A template change makes the set's Machines out of date (status only).
            Watch(self.deployments, to_keys=self._deployment_to_sets, cluster=MANAGEMENT),
        ]

    def reads(self) -> Sequence[tuple[Any, str]]:
        return []

    def _machine_to_sets(self, machine: JsonObject) -> Iterable[Key]:
        owner = controller_key(machine, "MachineSet")
        if owner is not None:
            return [owner]
        if controller_ref(machine) is not None or is_deleting(machine):
            return []
        # An orphan: every set whose selector matches it may adopt it.
        labels = labels_of(machine)
        sets = in_namespace(self.caches.store(self.primary, MANAGEMENT), namespace_of(machine))
        return [
            key_of(ms)
            for ms in sets
            if selector_matches(machine_set_selector(ms), labels, nil_matches=False)
        ]

    def _deployment_to_sets(self, md: JsonObject) -> Iterable[Key]:
        return [key_of(ms) for ms in controlled_by(self.caches.store(self.primary, MANAGEMENT), md)]

    def reconcile(self, key: Key) -> Result:
        ms = self.caches.store(self.primary, MANAGEMENT).get(key)
        if ms is None:
            self._expectations.pop(key, None)
            return DONE
        if is_deleting(ms) or is_paused(ms):
            # Garbage collection deletes the Machines of a deleted set (ownerReferences).
            return DONE
        shape = shape_of(ms, self.settings.default_shape)
        selector = machine_set_selector(ms)
        machines = self._machines(ms, selector)
        waiting = self._wait_for_cache(key, machines)
        if waiting is not None:
            return waiting
        self._write_status(ms, shape, selector, machines)

        diff = len(machines) - desired_replicas(ms)
        if diff < 0:
            if ANNOTATION_DISABLE_MACHINE_CREATE in annotations_of(ms):
                return DONE
            if not self._create(ms, shape, -diff):
                return Result(requeue_after=1.0)
        elif diff > 0:
            order = ms_deletion_order(ms, shape)
            if order and order not in DELETION_ORDERS:
                # Upstream refuses to scale down rather than guess (getDeletePriorityFunc).
                _log.warning(
                    "MachineSet %s: unsupported deletion order %r (Random, Newest or Oldest); "
                    "not scaling down",
                    key,
                    order,
                )
                return DONE
            self._delete(key, machines_to_delete(machines, diff, order, self.clock.now()))
        return DONE

    # -- machines --------------------------------------------------------------------------------

    def _machines(self, ms: JsonObject, selector: JsonObject) -> list[JsonObject]:
        store = self.caches.store(self.machines, MANAGEMENT)
        owned = controlled_by(store, ms)
        for machine in in_namespace(store, namespace_of(ms)):
            if controller_ref(machine) is not None or is_deleting(machine):
                continue
            if not selector_matches(selector, labels_of(machine), nil_matches=False):
                continue
            adopted = self._adopt(ms, machine)
            if adopted is not None:
                owned.append(adopted)
        return owned

    def _adopt(self, ms: JsonObject, machine: JsonObject) -> JsonObject | None:
        refs = list(metadata(machine).get("ownerReferences") or [])
        refs.append(new_controller_ref(ms, "MachineSet", self.primary.version))
        patch = {
            "metadata": {
                "ownerReferences": refs,
                "resourceVersion": metadata(machine).get("resourceVersion"),
            }
        }
        try:
            return self.client.patch(self.machines, name_of(machine), patch, namespace_of(machine))
        except (NotFound, AlreadyExists):
            return None

    def _create(self, ms: JsonObject, shape: str, count: int) -> bool:
        """Create ``count`` Machines; ``False`` when name clashes kept one from being made
        (the caller requeues, as CAPI's reconcile returns the error and is retried)."""
        key = key_of(ms)
        expect = self._expect(key)
        for _ in range(count):
            for _attempt in range(_NAME_ATTEMPTS):
                try:
                    created = self.client.create(
                        resource_at(self.machines, shape),
                        self._new_machine(ms, shape),
                        namespace_of(ms),
                    )
                except AlreadyExists:
                    continue  # a name clash: draw another
                expect.created.add(key_of(created))
                break
            else:
                _log.warning("MachineSet %s: every Machine name drawn was taken; retrying", key)
                return False
        return True

    def _names(self, ms: JsonObject) -> random.Random:
        """Where a new Machine's random suffix comes from: the seed, the set and its current
        resourceVersion. A generator seeded once would, in an emulation restarted with the same
        seed (the chaos harness restarts it with the controller), draw again the names of the
        Machines it already made; the set's resourceVersion moves with every change, so a new
        process draws new names, and the run stays deterministic."""
        self._drawn += 1
        meta = ms.get("metadata") or {}
        return random.Random(
            f"{self.settings.seed}/{meta.get('namespace')}/{meta.get('name')}"
            f"/{meta.get('resourceVersion')}/{self._drawn}"
        )

    def _new_machine(self, ms: JsonObject, shape: str) -> JsonObject:
        name = generated_name(name_of(ms), self._names(ms))
        namespace = namespace_of(ms)
        template = nested(ms, "spec", "template") or {}
        template_meta = template.get("metadata") or {}
        labels = {str(k): str(v) for k, v in (template_meta.get("labels") or {}).items()}
        labels[LABEL_SET_NAME] = label_value(name_of(ms))
        deployment = labels_of(ms).get(LABEL_DEPLOYMENT_NAME)
        if deployment:
            labels[LABEL_DEPLOYMENT_NAME] = deployment
        spec: JsonObject = copy.deepcopy(dict(template.get("spec") or {}))
        cluster = nested(ms, "spec", "clusterName") or spec.get("clusterName")
        if cluster:
            spec["clusterName"] = cluster
            labels[LABEL_CLUSTER_NAME] = label_value(str(cluster))
        spec.pop("providerID", None)
        infra = clone_ref(spec.get("infrastructureRef"), name, namespace, shape)
        if infra is not None:
            spec["infrastructureRef"] = infra
        bootstrap = spec.get("bootstrap")
        if isinstance(bootstrap, dict) and "configRef" in bootstrap:
            config = clone_ref(bootstrap["configRef"], name, namespace, shape)
            bootstrap["configRef"] = config
        annotations = {str(k): str(v) for k, v in (template_meta.get("annotations") or {}).items()}
        annotations[ANNOTATION_SHAPE] = shape
        return {
            "apiVersion": resource_at(self.machines, shape).api_version,
            "kind": "Machine",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": labels,
                "annotations": annotations,
                "finalizers": [MACHINE_FINALIZER],
                "ownerReferences": [new_controller_ref(ms, "MachineSet", shape)],
            },
            "spec": spec,
        }

    def _delete(self, key: Key, machines: Sequence[Mapping[str, Any]]) -> None:
        expect = self._expect(key)
        for machine in machines:
            if is_deleting(machine):
                continue
            try:
                self.client.delete(self.machines, name_of(machine), namespace_of(machine))
            except NotFound:
                continue
            expect.deleted.add(key_of(machine))

    # -- expectations ----------------------------------------------------------------------------

    def _expect(self, key: Key) -> _Expectations:
        expect = self._expectations.setdefault(key, _Expectations())
        expect.deadline = self.clock.monotonic() + EXPECTATION_TIMEOUT
        return expect

    def _wait_for_cache(self, key: Key, machines: Sequence[Mapping[str, Any]]) -> Result | None:
        expect = self._expectations.get(key)
        if expect is None:
            return None
        store = self.caches.store(self.machines, MANAGEMENT)
        expect.created = {k for k in expect.created if store.get(k) is None}
        expect.deleted = {
            k for k in expect.deleted if (m := store.get(k)) is not None and not is_deleting(m)
        }
        if not expect.created and not expect.deleted:
            del self._expectations[key]
            return None
        if self.clock.monotonic() >= expect.deadline:
            _log.warning(
                "MachineSet %s: writes not seen in the cache after %gs; acting anyway",
                key,
                EXPECTATION_TIMEOUT,
            )
            del self._expectations[key]
            return None
        return Result(requeue_after=1.0)

    # -- status ----------------------------------------------------------------------------------

    def _write_status(
        self, ms: JsonObject, shape: str, selector: JsonObject, machines: Sequence[JsonObject]
    ) -> None:
        replicas = len(machines)
        up_to_date = replicas if self._template_current(ms) else 0
        desired = replica_status(
            shape,
            replicas=replicas,
            ready=sum(1 for m in machines if is_ready(m)),
            available=sum(1 for m in machines if is_available(m)),
            up_to_date=up_to_date,
            selector=selector_to_string(selector),
            generation=metadata(ms).get("generation"),
            legacy={"fullyLabeledReplicas": replicas},
        )
        patch = merge_diff(ms.get("status"), desired)
        if patch:
            try:
                self.client.patch(
                    self.primary,
                    name_of(ms),
                    {"status": patch},
                    namespace_of(ms),
                    subresource="status",
                )
            except NotFound:
                return

    def _template_current(self, ms: JsonObject) -> bool:
        """Whether the set's Machines match its deployment's template (a standalone set's
        always do)."""
        owner = controller_key(ms, "MachineDeployment")
        if owner is None:
            return True
        md = self.caches.store(self.deployments, MANAGEMENT).get(owner)
        if md is None:
            return True
        return labels_of(ms).get(LABEL_TEMPLATE_HASH) == template_hash(md)
