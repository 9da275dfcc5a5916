"""What stock CAPZ adds to a MachinePool backed by an ``AzureMachinePool`` (a VM scale set).

The MachinePool controller (``machinepool.py``) emulates CAPI and the cloud together; for a
pool whose ``infrastructureRef`` is an ``AzureMachinePool`` it asks this module for CAPZ's
differences:

* **MachinePool Machines are always on** (CAPZ sets ``infrastructureMachineKind`` to
  ``AzureMachinePoolMachine``): every VM gets a Machine labelled ``cluster.x-k8s.io/pool-name``
  and an ``AzureMachinePoolMachine`` carrying the VM's provider ID (owned by the Machine, so it
  goes with it). A scale-down deletes Machines marked ``cluster.x-k8s.io/delete-machine`` first,
  then the newest (CAPZ's ``machinepool_deployment_strategy``), and deleting a Machine deletes
  its VM, as ``scalesetvms`` does for Flexible scale sets.
* **Provider IDs** are CAPZ's: ``azure:///subscriptions/<sub>/resourceGroups/<rg>/providers/
  Microsoft.Compute/virtualMachines/<vm>`` (subscription ``sim``, resource group the namespace).
* **No capacity**: a VM size listed in ``EmulationSettings.azure_unavailable_sizes`` (``size``
  anywhere, or ``size@zone`` for one Azure zone) cannot be allocated: the pool's scale set stays
  without VMs and, as CAPZ reports a scale set PUT Azure refuses (it retries it; only errors it
  deems terminal become ``failureReason``), the ``AzureMachinePool`` says so and the MachinePool
  does not: provisioning state ``Failed``, condition ``BootstrapSucceeded`` false with reason
  ``Failed``, severity ``Error`` and message ``scalesets failed to create or update. err:
  ...ZonalAllocationFailed...`` (cluster-api-provider-azure azure/scope/machinepool.go:
  ``UpdatePutStatus``), and ``ScaleSetRunning`` false with reason ``ScaleSetProvisionFailed``
  (``setProvisioningStateAndConditions``). Once it can allocate again, both turn true and the
  provisioning state ``Succeeded``.
* **A failed VM**: a pool annotated ``sim.karpenter.cluster.x-k8s.io/vm-failure: <error>``
  makes VMs whose ``AzureMachinePoolMachine`` reports ``provisioningState: Failed`` and a
  ``VMRunning`` condition false with the error (severity ``Error``), as CAPZ reports a scale set
  VM Azure could not provision; its Machine still gets the VM's provider ID.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Mapping
from typing import Any, Final

from karpenter_capi.core.kube.client import JsonObject, KubeClient
from karpenter_capi.core.kube.errors import AlreadyExists, NotFound
from karpenter_capi.core.kube.resources import Resource
from karpenter_capi.sim.capi.objects import (
    LABEL_CLUSTER_NAME,
    LABEL_POOL_NAME,
    annotations_of,
    label_value,
    merge_diff,
    name_of,
    namespace_of,
    nested,
)
from karpenter_capi.sim.capi.settings import ANNOTATION_VM_FAILURE
from karpenter_capi.sim.capi.shapes import Condition, merge_conditions

AZURE_MACHINE_POOL: Final = "AzureMachinePool"
AZURE_PROVIDER_ID_PREFIX: Final = "azure:///subscriptions/sim/resourceGroups/"
_INFRA_GROUP: Final = "infrastructure.cluster.x-k8s.io"
AZURE_MACHINE_POOLS: Final = Resource(
    _INFRA_GROUP, "v1beta1", "azuremachinepools", AZURE_MACHINE_POOL, True
)
AZURE_MACHINE_POOL_MACHINES: Final = Resource(
    _INFRA_GROUP, "v1beta1", "azuremachinepoolmachines", "AzureMachinePoolMachine", True
)


def is_azure_pool(pool: Mapping[str, Any]) -> bool:
    """Whether the MachinePool's infrastructure is an ``AzureMachinePool``."""
    kind = nested(pool, "spec", "template", "spec", "infrastructureRef", "kind")
    return bool(kind == AZURE_MACHINE_POOL)


def provider_id(pool: Mapping[str, Any], vm: str) -> str:
    """The provider ID CAPZ gives VM ``vm`` of the pool."""
    return (
        f"{AZURE_PROVIDER_ID_PREFIX}{namespace_of(pool)}/providers/Microsoft.Compute/"
        f"virtualMachines/{vm}"
    )


def _infra(client: KubeClient, pool: Mapping[str, Any]) -> Mapping[str, Any] | None:
    name = nested(pool, "spec", "template", "spec", "infrastructureRef", "name")
    if not name:
        return None
    try:
        return client.get(AZURE_MACHINE_POOLS, str(name), namespace_of(pool))
    except NotFound:
        return None


def _allocation_error(size: str, zones: Collection[str]) -> str:
    """The error Azure answers a scale set PUT it has no capacity for, as CAPZ words it."""
    code = "ZonalAllocationFailed" if zones else "AllocationFailed"
    where = f" in zone '{', '.join(zones)}'" if zones else ""
    return (
        "scalesets failed to create or update. err: RESPONSE 409: 409 Conflict, ERROR CODE: "
        f"{code}: Allocation failed. We do not have sufficient capacity for the requested VM "
        f"size {size}{where}. Please try another VM size or deploy to a different location or "
        "zone."
    )


def report_scale_set(
    client: KubeClient, pool: Mapping[str, Any], sizes: Collection[str], now: str
) -> bool:
    """Write CAPZ's report of the pool's scale set on its AzureMachinePool; whether no VM can
    be made: Azure refuses to allocate its size, or the AzureMachinePool does not exist yet
    (CAPI's MachinePool controller waits for its infrastructure)."""
    infra = _infra(client, pool)
    if infra is None:
        return True
    size = str(nested(infra, "spec", "template", "vmSize") or "")
    zones = [str(z) for z in nested(pool, "spec", "failureDomains") or []]
    refused = bool(size) and (size in sizes or any(f"{size}@{z}" in sizes for z in zones))
    current = infra.get("status") if isinstance(infra.get("status"), Mapping) else {}
    if refused:
        state = "Failed"
        wanted = [
            Condition(
                "BootstrapSucceeded", "False", "Failed", _allocation_error(size, zones), "Error"
            ),
            Condition("ScaleSetRunning", "False", "ScaleSetProvisionFailed", "", "Info"),
        ]
    else:
        state = "Succeeded"
        wanted = [Condition("BootstrapSucceeded", "True"), Condition("ScaleSetRunning", "True")]
    status: JsonObject = {
        "provisioningState": state,
        "ready": not refused,
        "conditions": merge_conditions(nested(current, "conditions"), wanted, now, v1beta1=True),
    }
    patch = merge_diff(current, status)
    if patch:
        with contextlib.suppress(NotFound):  # it went meanwhile: nothing to report on
            client.patch(
                AZURE_MACHINE_POOLS,
                name_of(infra),
                {"status": patch},
                namespace_of(infra),
                subresource="status",
            )
    return refused


def ensure_pool_machine(
    client: KubeClient, pool: Mapping[str, Any], machine: Mapping[str, Any], now: str
) -> None:
    """The ``AzureMachinePoolMachine`` of a pool Machine (created once, owned by it)."""
    name = name_of(machine)
    meta = machine.get("metadata") or {}
    labels = {LABEL_POOL_NAME: label_value(name_of(pool))}
    cluster = (meta.get("labels") or {}).get(LABEL_CLUSTER_NAME)
    if cluster:
        labels[LABEL_CLUSTER_NAME] = str(cluster)
    body: JsonObject = {
        "apiVersion": AZURE_MACHINE_POOL_MACHINES.api_version,
        "kind": AZURE_MACHINE_POOL_MACHINES.kind,
        "metadata": {
            "name": name,
            "namespace": namespace_of(pool),
            "labels": labels,
            "ownerReferences": [
                {
                    "apiVersion": str(machine.get("apiVersion") or ""),
                    "kind": "Machine",
                    "name": name,
                    "uid": str(meta.get("uid") or ""),
                }
            ],
        },
        "spec": {"providerID": nested(machine, "spec", "providerID")},
        "status": {"ready": True, "provisioningState": "Succeeded"},
    }
    failure = annotations_of(pool).get(ANNOTATION_VM_FAILURE)
    if failure:
        # CAPZ copies the VM's state; the service that failed reports it as a condition
        # (azure/scope/machinepoolmachine.go: ``UpdatePutStatus``).
        body["status"] = {
            "ready": False,
            "provisioningState": "Failed",
            "conditions": [
                {
                    "type": "VMRunning",
                    "status": "False",
                    "reason": "Failed",
                    "severity": "Error",
                    "message": f"scalesetvms failed to create or update. err: {failure}",
                    "lastTransitionTime": now,
                }
            ],
        }
    status = body.pop("status")
    try:
        client.create(AZURE_MACHINE_POOL_MACHINES, body, namespace_of(pool))
    except AlreadyExists:
        return
    # The server ignores status on create (the status subresource): CAPZ writes it after.
    with contextlib.suppress(NotFound):
        client.patch(
            AZURE_MACHINE_POOL_MACHINES,
            name,
            {"status": status},
            namespace_of(pool),
            subresource="status",
        )
