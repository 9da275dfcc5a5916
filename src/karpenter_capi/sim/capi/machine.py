"""The Machine controller of the emulation, standing in for CAPI's and an infrastructure
provider's: a Machine gets its providerID after a delay, follows its Node, and goes away after
another delay once deleted.

The autoprovisioner binds Machines to NodeClaims by providerID and waits for Nodes, so what it
needs from CAPI is the Machine lifecycle, on a clock it can fast-forward:

``Provisioning`` (bootstrap ready, no infrastructure yet)
  until ``creationTimestamp + provision delay``; then ``spec.providerID`` becomes
  ``sim://<namespace>/<machine>`` and the Machine is
``Provisioned`` (infrastructure ready)
  until a Node with that providerID exists in the workload cluster; then ``status.nodeRef``
  points at it and the Machine is
``Running``, with ``Ready``/``Available`` conditions following the Node's ``Ready``.
``Deleting``
  from its ``deletionTimestamp``: after the delete delay its Node is deleted and the
  ``machine.cluster.x-k8s.io`` finalizer removed, so the API server lets it go.
``Failed``
  when the resource is out of capacity: after the provision delay the Machine gets
  ``failureReason: InsufficientResources`` (v1beta1; ``status.deprecated.v1beta1`` in v1beta2)
  and a False ``InfrastructureReady`` condition, and never a providerID.

Delays and failures come from annotations on the Machine or its MachineSet, MachineDeployment
or MachinePool, else from ``EmulationSettings`` (see ``settings``). A Machine that already has a
providerID (a MachinePool Machine, one written by hand) skips provisioning.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Final

from karpenter_capi.core.clock import Clock, format_timestamp
from karpenter_capi.core.kube.client import JsonObject, KubeClient
from karpenter_capi.core.kube.errors import NotFound
from karpenter_capi.core.kube.indexes import BY_PROVIDER_ID
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
from karpenter_capi.sim.capi.objects import (
    MACHINE_FINALIZER,
    created_at,
    deleted_at,
    finalizers_of,
    is_deleting,
    is_paused,
    key_of,
    merge_diff,
    metadata,
    name_of,
    namespace_of,
    nested,
    release_finalizer,
)
from karpenter_capi.sim.capi.owners import Owners
from karpenter_capi.sim.capi.settings import (
    ANNOTATION_DELETE_DELAY,
    ANNOTATION_NEVER_PROVISION,
    ANNOTATION_OUT_OF_CAPACITY,
    ANNOTATION_PROVISION_DELAY,
    PROVIDER_ID_SCHEME,
    V1BETA2,
    EmulationSettings,
    delay_from,
    flag_from,
    handled_by_capa,
)
from karpenter_capi.sim.capi.shapes import (
    Condition,
    failure_of,
    merge_conditions,
    node_ref,
    shape_of,
)

FAILURE_REASON: Final = "InsufficientResources"
"""``capierrors.InsufficientResourcesMachineError``: what out-of-capacity Machines report."""


def provider_id_for(machine: Mapping[str, Any]) -> str:
    """``sim://<namespace>/<name>``: unique per Machine, never reused while it exists."""
    return f"{PROVIDER_ID_SCHEME}{namespace_of(machine)}/{name_of(machine)}"


def node_is_ready(node: Mapping[str, Any] | None) -> bool:
    if node is None:
        return False
    conditions = nested(node, "status", "conditions")
    if not isinstance(conditions, list):
        return False
    return any(
        isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") == "True"
        for c in conditions
    )


def _seconds_until(moment: datetime, now: datetime) -> float:
    return max((moment - now).total_seconds(), 0.0)


class MachineController:
    """Drives every Machine through its lifecycle; see the module docstring."""

    name = "sim.capi.machine"
    primary_cluster = MANAGEMENT

    def __init__(
        self,
        management: KubeClient,
        workload: KubeClient,
        caches: Caches,
        clock: Clock,
        settings: EmulationSettings | None = None,
    ) -> None:
        self.client = management
        self.workload = workload
        self.caches = caches
        self.clock = clock
        self.settings = settings or EmulationSettings()
        self.owners = Owners(caches, self.settings.version)
        self.primary = self.owners.machines

    def watches(self) -> Sequence[Watch]:
        return [
            Watch(NODES, to_keys=self._node_to_machines, cluster=WORKLOAD),
            *self.owners.watches(only_sim_annotations=True),
        ]

    def reads(self) -> Sequence[tuple[Any, str]]:
        return []

    def _node_to_machines(self, node: JsonObject) -> Iterable[Key]:
        provider_id = nested(node, "spec", "providerID")
        if not isinstance(provider_id, str) or not provider_id:
            return []
        store = self.caches.store(self.primary, MANAGEMENT)
        return [key_of(m) for m in store.by_index(BY_PROVIDER_ID, provider_id)]

    def _node_of(self, provider_id: str) -> JsonObject | None:
        nodes = self.caches.store(NODES, WORKLOAD).by_index(BY_PROVIDER_ID, provider_id)
        return nodes[0] if nodes else None

    # -- reconcile -------------------------------------------------------------------------------

    def reconcile(self, key: Key) -> Result:
        machine = self.caches.store(self.primary, MANAGEMENT).get(key)
        if machine is None or is_paused(machine) or self._not_mine(machine):
            return DONE
        shape = shape_of(machine, self.settings.default_shape)
        sources = [machine, *self.owners.of(machine)]
        now = self.clock.now()
        if is_deleting(machine):
            return self._reconcile_delete(machine, shape, sources, now)
        if MACHINE_FINALIZER not in finalizers_of(machine):
            # Upstream adds it first, so no Machine can go without its infrastructure going.
            finalizers = [*finalizers_of(machine), MACHINE_FINALIZER]
            patch = {
                "metadata": {
                    "finalizers": finalizers,
                    "resourceVersion": metadata(machine).get("resourceVersion"),
                }
            }
            self.client.patch(self.primary, name_of(machine), patch, namespace_of(machine))
            return DONE
        failure = failure_of(machine)
        if failure is not None:
            self._write_status(machine, shape, "Failed", failure=failure)
            return DONE

        provider_id = nested(machine, "spec", "providerID")
        if not isinstance(provider_id, str) or not provider_id:
            return self._provision(machine, shape, sources, now)
        node = self._node_of(provider_id)
        self._write_status(machine, shape, "Running" if node else "Provisioned", node=node)
        return DONE

    def _not_mine(self, machine: Mapping[str, Any]) -> bool:
        """Machines with an AWSMachine belong to the CAPA emulation when it is on."""
        return handled_by_capa(self.settings, machine)

    def _provision(
        self, machine: JsonObject, shape: str, sources: list[JsonObject], now: datetime
    ) -> Result:
        self._write_status(machine, shape, "Provisioning")
        if flag_from(sources, ANNOTATION_NEVER_PROVISION, default=False):
            return DONE  # the annotation's removal wakes the Machine (owner watches)
        delay = delay_from(sources, ANNOTATION_PROVISION_DELAY, self.settings.provision_delay)
        ready_at = (created_at(machine) or now) + timedelta(seconds=delay)
        if now < ready_at:
            return Result(requeue_after=_seconds_until(ready_at, now))
        if flag_from(sources, ANNOTATION_OUT_OF_CAPACITY, default=False):
            failure = (
                FAILURE_REASON,
                f"simulated infrastructure is out of capacity for Machine {name_of(machine)}",
            )
            self._write_status(machine, shape, "Failed", failure=failure)
            return DONE
        patch = {"spec": {"providerID": provider_id_for(machine)}}
        self.client.patch(self.primary, name_of(machine), patch, namespace_of(machine))
        return DONE

    def _reconcile_delete(
        self, machine: JsonObject, shape: str, sources: list[JsonObject], now: datetime
    ) -> Result:
        machine = self._write_status(machine, shape, "Deleting")
        if MACHINE_FINALIZER not in finalizers_of(machine):
            return DONE
        delay = delay_from(sources, ANNOTATION_DELETE_DELAY, self.settings.delete_delay)
        done_at = (deleted_at(machine) or now) + timedelta(seconds=delay)
        if now < done_at:
            return Result(requeue_after=_seconds_until(done_at, now))
        self._delete_node(machine)
        release_finalizer(self.client, self.primary, machine, MACHINE_FINALIZER)
        return DONE

    def _delete_node(self, machine: JsonObject) -> None:
        """Upstream deletes the Node of a deleted Machine once its infrastructure is gone."""
        names: set[str] = set()
        ref = nested(machine, "status", "nodeRef", "name")
        if isinstance(ref, str) and ref:
            names.add(ref)
        provider_id = nested(machine, "spec", "providerID")
        if isinstance(provider_id, str) and provider_id:
            node = self._node_of(provider_id)
            if node is not None:
                names.add(name_of(node))
        for name in sorted(names):
            try:
                self.workload.delete(NODES, name)
            except NotFound:
                continue

    # -- status ----------------------------------------------------------------------------------

    def _write_status(
        self,
        machine: JsonObject,
        shape: str,
        phase: str,
        *,
        node: JsonObject | None = None,
        failure: tuple[str, str] | None = None,
    ) -> JsonObject:
        """Write the Machine's status in its layout; return the Machine as now stored."""
        status = machine_status(
            machine,
            shape,
            phase,
            node=node,
            failure=failure,
            now=format_timestamp(self.clock.now()),
        )
        patch = merge_diff(machine.get("status"), status)
        if not patch:
            return machine
        try:
            return self.client.patch(
                self.primary,
                name_of(machine),
                {"status": patch},
                namespace_of(machine),
                subresource="status",
            )
        except NotFound:
            return machine


def machine_status(
    machine: Mapping[str, Any],
    shape: str,
    phase: str,
    *,
    node: Mapping[str, Any] | None,
    failure: tuple[str, str] | None,
    now: str,
) -> JsonObject:
    """The status fields the emulation owns, where a client of ``shape`` reads them."""
    infra_ready = phase in ("Provisioned", "Running") or (
        phase == "Deleting" and bool(nested(machine, "spec", "providerID"))
    )
    ready = node_is_ready(node) and phase == "Running"
    node_status = "True" if node_is_ready(node) else ("False" if node is not None else "Unknown")

    if failure is not None:
        infra = Condition("InfrastructureReady", "False", failure[0], failure[1], "Error")
    elif infra_ready:
        infra = Condition("InfrastructureReady", "True", "Ready")
    else:
        infra = Condition("InfrastructureReady", "False", "NotReady", "", "Info")
    if node is None:
        node_ready = Condition("NodeReady", "Unknown", "NodeDoesNotExist")
        node_healthy = Condition("NodeHealthy", "False", "NodeProvisioning", "", "Info")
    else:
        reason = "NodeReady" if node_status == "True" else "NodeNotReady"
        node_ready = Condition("NodeReady", node_status, reason)
        node_healthy = Condition(
            "NodeHealthy", node_status, "" if ready else "NodeConditionsFailed", "", "Warning"
        )
    summary = "True" if ready else "False"
    summary_reason = "" if ready else ("Deleting" if phase == "Deleting" else "NotReady")
    new_style = [
        Condition("Available", summary, summary_reason or "Available"),
        Condition("Ready", summary, summary_reason or "Ready"),
        Condition("BootstrapConfigReady", "True", "DataSecretAvailable"),
        infra,
        node_ready,
        Condition(node_healthy.type, node_healthy.status, node_healthy.reason or "NodeHealthy"),
    ]
    old_style = [
        Condition("Ready", summary, summary_reason, "", "Info"),
        Condition("BootstrapReady", "True"),
        infra,
        node_healthy,
    ]
    status: JsonObject = {"phase": phase}
    generation = metadata(machine).get("generation")
    if isinstance(generation, int):
        status["observedGeneration"] = generation
    status["nodeRef"] = node_ref(node, shape) if node is not None else None
    node_info = nested(node, "status", "nodeInfo") if node is not None else None
    if isinstance(node_info, Mapping):
        status["nodeInfo"] = dict(node_info)
    current = machine.get("status") if isinstance(machine.get("status"), Mapping) else {}
    if shape == V1BETA2:
        status["initialization"] = {
            "bootstrapDataSecretCreated": True,
            "infrastructureProvisioned": infra_ready,
        }
        status["conditions"] = merge_conditions(
            nested(current, "conditions"), new_style, now, v1beta1=False
        )
        deprecated: JsonObject = {
            "conditions": merge_conditions(
                nested(current, "deprecated", "v1beta1", "conditions"), old_style, now, v1beta1=True
            )
        }
        if failure is not None:
            deprecated["failureReason"], deprecated["failureMessage"] = failure
        status["deprecated"] = {"v1beta1": deprecated}
    else:
        status["bootstrapReady"] = True
        status["infrastructureReady"] = infra_ready
        status["conditions"] = merge_conditions(
            nested(current, "conditions"), old_style, now, v1beta1=True
        )
        status["v1beta2"] = {
            "conditions": merge_conditions(
                nested(current, "v1beta2", "conditions"), new_style, now, v1beta1=False
            )
        }
        if failure is not None:
            status["failureReason"], status["failureMessage"] = failure
    return status
