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
  without VMs and the MachinePool reports the failure (phase ``Failed``, ``failureReason``), as
  CAPZ reports ``SkuNotAvailable`` or ``ZonalAllocationFailed``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, Final

from karpenter_capi.core.kube.client import JsonObject, KubeClient
from karpenter_capi.core.kube.errors import AlreadyExists, NotFound
from karpenter_capi.core.kube.resources import Resource
from karpenter_capi.sim.capi.objects import (
    LABEL_CLUSTER_NAME,
    LABEL_POOL_NAME,
    label_value,
    name_of,
    namespace_of,
    nested,
)

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


def no_capacity(client: KubeClient, pool: Mapping[str, Any], sizes: Collection[str]) -> bool:
    """Whether Azure cannot allocate the pool's VM size (in its zone)."""
    if not sizes:
        return False
    infra = _infra(client, pool)
    size = str(nested(infra, "spec", "template", "vmSize") or "") if infra else ""
    if not size:
        return False
    zones = nested(pool, "spec", "failureDomains") or []
    return size in sizes or any(f"{size}@{zone}" in sizes for zone in zones)


def ensure_pool_machine(
    client: KubeClient, pool: Mapping[str, Any], machine: Mapping[str, Any]
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
    try:
        client.create(AZURE_MACHINE_POOL_MACHINES, body, namespace_of(pool))
    except AlreadyExists:
        return
