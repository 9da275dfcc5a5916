"""The MachinePool controller of the emulation, standing in for CAPI's and an infrastructure
provider's (an AWS Auto Scaling group, an Azure scale set): ``spec.replicas`` becomes instances
listed in ``spec.providerIDList``.

A MachinePool hands instance management to the cloud; CAPI only reports what exists. So here a
replica change requests instances, each of which appears in ``spec.providerIDList`` as
``sim://<namespace>/<pool>-<random>`` after the provision delay (never, with
``never-provision``; not at all while the pool is ``out-of-capacity``, which is reported as a
failure on the pool). A scale-down removes instances not yet provisioned first, then the newest
ones; Nodes whose providerID left the list are deleted, as CAPI's ``deleteRetiredNodes`` does.
Status: ``replicas`` (listed instances), ``readyReplicas``/``availableReplicas`` (their Nodes
that are Ready), ``nodeRefs`` and ``phase``, in the pool's layout.

**MachinePool Machines** (``EmulationSettings.machine_pool_machines``, or the pool annotation
``sim.karpenter.cluster.x-k8s.io/machine-pool-machines: "true"``): each instance also gets a
Machine named after it, labelled ``cluster.x-k8s.io/pool-name``, controlled by the pool and
carrying its providerID. A scale-down then deletes Machines by the MachineSet priorities (so
``cluster.x-k8s.io/delete-machine`` picks the instance), and deleting such a Machine terminates
its instance: it leaves the list at once, and the Machine controller deletes its Node and lets
the Machine go after the delete delay.

A pool backed by an ``AzureMachinePool`` behaves as stock CAPZ makes it (``azure``): Machines
always, an ``AzureMachinePoolMachine`` per VM, CAPZ's provider IDs, and no capacity for the
VM sizes ``EmulationSettings.azure_unavailable_sizes`` names.

Requested instances live in memory until provisioned: a restarted emulation requests them anew.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from karpenter_capi.core.clock import Clock, format_timestamp
from karpenter_capi.core.kube.client import JsonObject, KubeClient
from karpenter_capi.core.kube.errors import AlreadyExists, NotFound
from karpenter_capi.core.kube.indexes import BY_PROVIDER_ID, BY_PROVIDER_ID_LIST
from karpenter_capi.core.kube.resources import NODES
from karpenter_capi.core.runtime.controller import (
    DONE,
    MANAGEMENT,
    WORKLOAD,
    Caches,
    Key,
    Result,
    Watch,
)
from karpenter_capi.sim.capi import azure
from karpenter_capi.sim.capi.machine import FAILURE_REASON, node_is_ready
from karpenter_capi.sim.capi.machineset import machines_to_delete
from karpenter_capi.sim.capi.objects import (
    LABEL_CLUSTER_NAME,
    LABEL_POOL_NAME,
    MACHINE_FINALIZER,
    MACHINE_POOL_FINALIZER,
    capi_resources,
    controlled_by,
    controller_key,
    deleted_at,
    desired_replicas,
    finalizers_of,
    is_deleting,
    is_paused,
    key_of,
    label_value,
    merge_diff,
    metadata,
    name_of,
    namespace_of,
    nested,
    new_controller_ref,
    random_suffix,
    release_finalizer,
    resource_at,
)
from karpenter_capi.sim.capi.settings import (
    ANNOTATION_DELETE_DELAY,
    ANNOTATION_MACHINE_POOL_MACHINES,
    ANNOTATION_NEVER_PROVISION,
    ANNOTATION_OUT_OF_CAPACITY,
    ANNOTATION_PROVISION_DELAY,
    ANNOTATION_SHAPE,
    PROVIDER_ID_SCHEME,
    V1BETA2,
    EmulationSettings,
    delay_from,
    flag_from,
)
from karpenter_capi.sim.capi.shapes import (
    Condition,
    clone_ref,
    merge_conditions,
    node_object_ref,
    shape_of,
)

_log = logging.getLogger(__name__)


@dataclass
class _Requested:
    """An instance asked of the simulated cloud, listed once ``ready_at`` has passed."""

    provider_id: str
    ready_at: datetime | None  # None: never (never-provision)


class MachinePoolController:
    """Reconciles MachinePools into provider IDs (and optionally Machines)."""

    name = "sim.capi.machinepool"
    primary_cluster = MANAGEMENT

    def __init__(
        self,
        management: KubeClient,
        workload: KubeClient,
        caches: Caches,
        clock: Clock,
        settings: EmulationSettings | None = None,
        *,
        rand: random.Random | None = None,
    ) -> None:
        self.client = management
        self.workload = workload
        self.caches = caches
        self.clock = clock
        self.settings = settings or EmulationSettings()
        self.rand = rand or random.Random(self.settings.seed)
        _, _, self.machines, self.primary = capi_resources(self.settings.version)
        self._requested: dict[Key, list[_Requested]] = {}

    def watches(self) -> Sequence[Watch]:
        return [
            Watch(NODES, to_keys=self._node_to_pools, cluster=WORKLOAD),
            Watch(self.machines, to_keys=self._machine_to_pool, cluster=MANAGEMENT),
        ]

    def reads(self) -> Sequence[tuple[Any, str]]:
        return []

    def _node_to_pools(self, node: JsonObject) -> Iterable[Key]:
        provider_id = nested(node, "spec", "providerID")
        if not isinstance(provider_id, str) or not provider_id:
            return []
        store = self.caches.store(self.primary, MANAGEMENT)
        return [key_of(mp) for mp in store.by_index(BY_PROVIDER_ID_LIST, provider_id)]

    def _machine_to_pool(self, machine: JsonObject) -> Iterable[Key]:
        owner = controller_key(machine, "MachinePool")
        return [owner] if owner is not None else []

    # -- reconcile -------------------------------------------------------------------------------

    def reconcile(self, key: Key) -> Result:
        pool = self.caches.store(self.primary, MANAGEMENT).get(key)
        if pool is None:
            self._requested.pop(key, None)
            return DONE
        if is_paused(pool):
            return DONE
        now = self.clock.now()
        if is_deleting(pool):
            return self._reconcile_delete(key, pool, now)
        if MACHINE_POOL_FINALIZER not in finalizers_of(pool):
            patch = {
                "metadata": {
                    "finalizers": [*finalizers_of(pool), MACHINE_POOL_FINALIZER],
                    "resourceVersion": metadata(pool).get("resourceVersion"),
                }
            }
            self.client.patch(self.primary, name_of(pool), patch, namespace_of(pool))
            return DONE
        shape = shape_of(pool, self.settings.default_shape)
        on_azure = azure.is_azure_pool(pool)
        with_machines = flag_from(
            [pool],
            ANNOTATION_MACHINE_POOL_MACHINES,
            self.settings.machine_pool_machines or on_azure,
        )
        listed = _provider_ids(pool)
        machines = controlled_by(self.caches.store(self.machines, MANAGEMENT), pool)
        if with_machines:
            # Deleting a pool Machine terminates its instance.
            terminating = {nested(m, "spec", "providerID") for m in machines if is_deleting(m)}
            listed = [p for p in listed if p not in terminating]
        requested = self._requested.setdefault(key, [])
        flagged = flag_from([pool], ANNOTATION_OUT_OF_CAPACITY, default=False)
        # CAPZ reports Azure's refusal on the AzureMachinePool, not as a MachinePool failure.
        refused = on_azure and azure.report_scale_set(
            self.client, pool, self.settings.azure_unavailable_sizes, format_timestamp(now)
        )
        out_of_capacity = flagged or refused
        if out_of_capacity:
            requested.clear()  # the cloud gave up on what it had not delivered yet

        listed = self._resize(
            pool,
            listed,
            requested,
            machines,
            with_machines=with_machines,
            out_of_capacity=out_of_capacity,
            now=now,
        )

        ready = [r for r in requested if r.ready_at is not None and r.ready_at <= now]
        listed = listed + [r.provider_id for r in ready]
        retired = [p for p in _provider_ids(pool) if p not in listed]
        pool = self._write_list(pool, listed)  # a conflict raises: ``requested`` stays as it was
        requested[:] = [r for r in requested if r not in ready]
        if with_machines:
            self._ensure_machines(pool, shape, listed, machines)
        else:
            self._delete_nodes(retired)
        self._write_status(pool, shape, listed, flagged)
        waits = [r.ready_at for r in requested if r.ready_at is not None]
        if waits:
            return Result(requeue_after=max((min(waits) - now).total_seconds(), 0.0))
        return DONE

    def _resize(
        self,
        pool: JsonObject,
        listed: list[str],
        requested: list[_Requested],
        machines: list[JsonObject],
        *,
        with_machines: bool,
        out_of_capacity: bool,
        now: datetime,
    ) -> list[str]:
        """The pool's instances after meeting its replicas: an excess drops requests not yet
        delivered, then instances; a shortfall requests more, unless out of capacity."""
        excess = len(listed) + len(requested) - desired_replicas(pool)
        if excess > 0:
            while excess > 0 and requested:
                requested.pop()
                excess -= 1
            if excess > 0:
                listed = self._scale_down(listed, machines, excess, with_machines, now)
        elif excess < 0 and not out_of_capacity:
            self._request(pool, requested, -excess, now)
        return listed

    def _request(
        self, pool: JsonObject, requested: list[_Requested], count: int, now: datetime
    ) -> None:
        never = flag_from([pool], ANNOTATION_NEVER_PROVISION, default=False)
        delay = delay_from([pool], ANNOTATION_PROVISION_DELAY, self.settings.provision_delay)
        taken = set(_provider_ids(pool)) | {r.provider_id for r in requested}
        for _ in range(count):
            provider_id = self._new_provider_id(pool, taken)
            taken.add(provider_id)
            ready_at = None if never else now + timedelta(seconds=delay)
            requested.append(_Requested(provider_id, ready_at))

    def _new_provider_id(self, pool: JsonObject, taken: set[str]) -> str:
        while True:
            instance = f"{name_of(pool)}-{random_suffix(self.rand)}"
            provider_id = (
                azure.provider_id(pool, instance)
                if azure.is_azure_pool(pool)
                else f"{PROVIDER_ID_SCHEME}{namespace_of(pool)}/{instance}"
            )
            if provider_id not in taken:
                return provider_id

    def _scale_down(
        self,
        listed: list[str],
        machines: Sequence[JsonObject],
        count: int,
        with_machines: bool,
        now: datetime,
    ) -> list[str]:
        if not with_machines:
            # The newest instances go first (the end of the list).
            return listed[: max(0, len(listed) - count)]
        live = [m for m in machines if nested(m, "spec", "providerID") in listed]
        for machine in machines_to_delete(live, count, "Newest", now):
            try:
                self.client.delete(self.machines, name_of(machine), namespace_of(machine))
            except NotFound:
                continue
        # The instances leave the list once their Machines show as deleting.
        return listed

    def _write_list(self, pool: JsonObject, listed: list[str]) -> JsonObject:
        if listed == _provider_ids(pool):
            return pool
        # The whole list is replaced: the resourceVersion keeps a concurrent write from being lost.
        patch = {
            "metadata": {"resourceVersion": metadata(pool).get("resourceVersion")},
            "spec": {"providerIDList": listed},
        }
        return self.client.patch(self.primary, name_of(pool), patch, namespace_of(pool))

    def _ensure_machines(
        self, pool: JsonObject, shape: str, listed: Sequence[str], machines: Sequence[JsonObject]
    ) -> None:
        have = {nested(m, "spec", "providerID") for m in machines}
        store = self.caches.store(self.machines, MANAGEMENT)
        for provider_id in listed:
            if provider_id in have or store.by_index(BY_PROVIDER_ID, provider_id):
                continue
            body = self._new_machine(pool, shape, provider_id)
            try:
                created = self.client.create(
                    resource_at(self.machines, shape), body, namespace_of(pool)
                )
            except AlreadyExists:
                continue
            if azure.is_azure_pool(pool):
                azure.ensure_pool_machine(
                    self.client, pool, created, format_timestamp(self.clock.now())
                )

    def _new_machine(self, pool: JsonObject, shape: str, provider_id: str) -> JsonObject:
        name = provider_id.rpartition("/")[2]
        namespace = namespace_of(pool)
        template = nested(pool, "spec", "template") or {}
        labels = {str(k): str(v) for k, v in (nested(template, "metadata", "labels") or {}).items()}
        labels[LABEL_POOL_NAME] = label_value(name_of(pool))
        spec: JsonObject = {"providerID": provider_id}
        cluster = nested(pool, "spec", "clusterName")
        if cluster:
            spec["clusterName"] = cluster
            labels[LABEL_CLUSTER_NAME] = label_value(str(cluster))
        for field in ("version", "failureDomain"):
            value = nested(template, "spec", field)
            if value:
                spec[field] = value
        infra = clone_ref(nested(template, "spec", "infrastructureRef"), name, namespace, shape)
        if infra is not None:
            infra["kind"] = (
                f"{infra['kind']}Machine"  # e.g. AWSMachinePool -> AWSMachinePoolMachine
            )
            spec["infrastructureRef"] = infra
        return {
            "apiVersion": resource_at(self.machines, shape).api_version,
            "kind": "Machine",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": labels,
                "annotations": {ANNOTATION_SHAPE: shape},
                "finalizers": [MACHINE_FINALIZER],
                "ownerReferences": [new_controller_ref(pool, "MachinePool", shape)],
            },
            "spec": spec,
        }

    def _delete_nodes(self, provider_ids: Iterable[str]) -> None:
        nodes = self.caches.store(NODES, WORKLOAD)
        for provider_id in provider_ids:
            for node in nodes.by_index(BY_PROVIDER_ID, provider_id):
                try:
                    self.workload.delete(NODES, name_of(node))
                except NotFound:
                    continue

    def _reconcile_delete(self, key: Key, pool: JsonObject, now: datetime) -> Result:
        self._requested.pop(key, None)
        if MACHINE_POOL_FINALIZER not in finalizers_of(pool):
            return DONE
        self._delete_nodes(_provider_ids(pool))
        delay = delay_from([pool], ANNOTATION_DELETE_DELAY, self.settings.delete_delay)
        done_at = (deleted_at(pool) or now) + timedelta(seconds=delay)
        if now < done_at:
            return Result(requeue_after=(done_at - now).total_seconds())
        release_finalizer(self.client, self.primary, pool, MACHINE_POOL_FINALIZER)
        return DONE

    # -- status ----------------------------------------------------------------------------------

    def _write_status(
        self,
        pool: JsonObject,
        shape: str,
        listed: Sequence[str],
        out_of_capacity: bool,
    ) -> None:
        """Report what the cloud lists (requested instances are not CAPI's to see)."""
        nodes_store = self.caches.store(NODES, WORKLOAD)
        nodes = [n for p in listed for n in nodes_store.by_index(BY_PROVIDER_ID, p)[:1]]
        ready = sum(1 for n in nodes if node_is_ready(n))
        desired = desired_replicas(pool)
        replicas = len(listed)
        if out_of_capacity and replicas < desired:
            phase = "Failed"
        elif replicas > desired:
            phase = "ScalingDown"
        elif replicas < desired:
            phase = "ScalingUp" if replicas else "Provisioning"
        elif ready == desired:
            phase = "Running"
        else:
            phase = "Provisioned"
        failure = (
            (
                FAILURE_REASON,
                f"simulated infrastructure is out of capacity: {replicas} of {desired} "
                "instances exist",
            )
            if out_of_capacity and replicas < desired
            else None
        )
        now = format_timestamp(self.clock.now())
        infra = (
            Condition("InfrastructureReady", "False", failure[0], failure[1], "Error")
            if failure
            else Condition("InfrastructureReady", "True", "Ready")
        )
        current = pool.get("status") if isinstance(pool.get("status"), Mapping) else {}
        status: JsonObject = {
            "replicas": replicas,
            "readyReplicas": ready,
            "availableReplicas": ready,
            "nodeRefs": [node_object_ref(n) for n in nodes] or None,
            "phase": phase,
        }
        generation = metadata(pool).get("generation")
        if isinstance(generation, int):
            status["observedGeneration"] = generation
        deprecated: JsonObject
        if shape == V1BETA2:
            status["upToDateReplicas"] = replicas
            status["initialization"] = {
                "bootstrapDataSecretCreated": True,
                "infrastructureProvisioned": failure is None,
            }
            status["conditions"] = merge_conditions(
                nested(current, "conditions"), [infra], now, v1beta1=False
            )
            deprecated = {
                "readyReplicas": ready,
                "availableReplicas": ready,
                "unavailableReplicas": max(desired - ready, 0),
                "failureReason": failure[0] if failure else None,
                "failureMessage": failure[1] if failure else None,
                # CAPI keeps the v1beta1 conditions up to date too: a v1beta1 reader sees them.
                "conditions": merge_conditions(
                    nested(current, "deprecated", "v1beta1", "conditions"),
                    [infra],
                    now,
                    v1beta1=True,
                ),
            }
            status["deprecated"] = {"v1beta1": deprecated}
        else:
            status["unavailableReplicas"] = max(desired - ready, 0)
            status["bootstrapReady"] = True
            status["infrastructureReady"] = failure is None
            status["failureReason"] = failure[0] if failure else None
            status["failureMessage"] = failure[1] if failure else None
            status["conditions"] = merge_conditions(
                nested(current, "conditions"), [infra], now, v1beta1=True
            )
            status["v1beta2"] = {
                "readyReplicas": ready,
                "availableReplicas": ready,
                "upToDateReplicas": replicas,
                "conditions": merge_conditions(
                    nested(current, "v1beta2", "conditions"), [infra], now, v1beta1=False
                ),
            }
        patch = merge_diff(current, status)
        if patch:
            try:
                self.client.patch(
                    self.primary,
                    name_of(pool),
                    {"status": patch},
                    namespace_of(pool),
                    subresource="status",
                )
            except NotFound:
                return


def _provider_ids(pool: Mapping[str, Any]) -> list[str]:
    ids = nested(pool, "spec", "providerIDList")
    if not isinstance(ids, list):
        return []
    return [p for p in ids if isinstance(p, str) and p]
