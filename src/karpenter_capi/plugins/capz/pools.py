"""The MachinePools the ``CAPZMachinePool`` launch mode creates: names, objects, state.

Stock CAPZ cannot let Azure choose among VM sizes (its VMSS PUT always writes one
``sku.name``), so the plugin makes the choice and keeps one Flexible-orchestration pool per
offering it may launch: per (NodeClass, VM size, priority, zone). Each pool is three objects
created together at zero replicas, from the NodeClass's templates:

* a ``KubeadmConfig`` (the ``KubeadmConfigTemplate``'s ``spec.template.spec``, plus Karpenter's
  ``karpenter.sh/unregistered`` registration taint), written at the version the template was
  read at (the spec's shape is that version's), which CAPZ turns into the scale set's
  customData;
* an ``AzureMachinePool`` (``orchestrationMode: Flexible``), whose ``spec.template`` is the
  ``AzureMachineTemplate``'s VM spec (image, OS disk, SSH key, ...) with ``vmSize`` replaced,
  ``spotVMOptions`` only for Spot (eviction policy ``Delete`` unless the template sets one),
  and the Cluster's location;
* a ``MachinePool`` referencing both, with ``failureDomains: [zone]`` and the Kubernetes version
  of the Cluster, created before the ``AzureMachinePool`` (CAPZ's webhook refuses a Flexible
  AzureMachinePool whose MachinePool does not exist yet), so a pool is whole once its
  ``AzureMachinePool`` exists; a launch that finds the MachinePool without it creates what is
  missing.

Names are derived from the offering (``pool_name``), so every process and every restart finds
the same pool, and creation is idempotent (``AlreadyExists`` is success). Pools are treated as
immutable: CAPZ rolls every VM of a scale set when its model changes, so a pool is never edited.
A hash of the templates is part of every name instead: changed templates make new pools, the
nodes of the old ones are drifted (Karpenter replaces them), and the old pools, once empty, are
swept. Every object carries the
labels ``karpenter.cluster.x-k8s.io/launch=CAPZMachinePool`` and
``karpenter.cluster.x-k8s.io/nodeclass=<name>`` (which pools are ours) and the MachinePool the
scale-from-zero capacity annotations of its size, which cluster-autoscaler, ``kubectl`` readers
and the simulator read.

A pool has *failed* when Cluster API reports it so: CAPI copies the infrastructure pool's
failure into the MachinePool's ``status.failureReason`` (v1beta2:
``status.deprecated.v1beta1.failureReason``) and phase ``Failed``; CAPZ reports there a scale
set that cannot be created or scaled (``SkuNotAvailable``, ``ZonalAllocationFailed``...).
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from karpenter_capi.plugin_api import KubeClient, Resource, ResourceList
from karpenter_capi.plugin_api.karpenter import wellknown
from karpenter_capi.plugin_api.kube import (
    CAPI_INFRASTRUCTURE_GROUP,
    AlreadyExists,
    CapiResources,
    JsonObject,
    NotFound,
)

LAUNCH_MODE: Final = "CAPZMachinePool"
LABEL_LAUNCH: Final = "karpenter.cluster.x-k8s.io/launch"
LABEL_NODECLASS: Final = "karpenter.cluster.x-k8s.io/nodeclass"
ANNOTATION_EMPTY_SINCE: Final = "karpenter.cluster.x-k8s.io/empty-since"
"""On a pool of ours: when it was first seen with no replica, no Machine and no NodeClaim
waiting on it (RFC 3339); the sweep deletes it a grace period later."""
BOOTSTRAP_GROUP: Final = "bootstrap.cluster.x-k8s.io"
AZURE_MACHINE_POOL: Final = "AzureMachinePool"
KUBEADM_CONFIG: Final = "KubeadmConfig"
AZURE_MACHINE_POOLS: Final = Resource(
    CAPI_INFRASTRUCTURE_GROUP, "v1beta1", "azuremachinepools", AZURE_MACHINE_POOL, True
)
AZURE_MACHINE_POOL_MACHINES: Final = Resource(
    CAPI_INFRASTRUCTURE_GROUP,
    "v1beta1",
    "azuremachinepoolmachines",
    "AzureMachinePoolMachine",
    True,
)
KUBEADM_CONFIGS: Final = Resource(
    BOOTSTRAP_GROUP, "v1beta1", "kubeadmconfigs", KUBEADM_CONFIG, True
)
"""At v1beta1, served by every CAPI release; a pool's own is written at its template's version
(``kubeadm_configs``)."""


def kubeadm_configs(version: str) -> Resource:
    """``KubeadmConfig`` at ``version`` (a bootstrap template's; v1beta1 when unknown)."""
    return Resource(BOOTSTRAP_GROUP, version or "v1beta1", "kubeadmconfigs", KUBEADM_CONFIG, True)


def _version_of(obj: Mapping[str, Any]) -> str:
    group, slash, version = str(obj.get("apiVersion") or "").rpartition("/")
    return version if slash and group == BOOTSTRAP_GROUP else "v1beta1"


# The AzureMachineTemplate VM fields an AzureMachinePool's template also has (CAPZ
# ``AzureMachinePoolMachineTemplate``); the others (failureDomain, providerID, identity...) are
# per-VM or live at the pool's top level.
_TEMPLATE_FIELDS: Final = (
    "image",
    "osDisk",
    "sshPublicKey",
    "dataDisks",
    "securityProfile",
    "networkInterfaces",
    "diagnostics",
    "vmExtensions",
)
_POOL_FIELDS: Final = ("additionalTags", "identity", "userAssignedIdentities")
_MAX_NAME: Final = 52
SPOT_EVICTION_POLICY: Final = "Delete"
"""A Spot pool's ``spotVMOptions.evictionPolicy`` unless the AzureMachineTemplate sets one."""


@dataclass(frozen=True)
class PoolOffering:
    """What one pool makes: a VM size at a priority in one Azure zone (``""``: no zones)."""

    vm_size: str
    capacity_type: str
    zone: str

    @property
    def spot(self) -> bool:
        return self.capacity_type == wellknown.CAPACITY_TYPE_SPOT


@dataclass(frozen=True)
class LaunchTemplates:
    """Everything a pool is stamped from, for one NodeClass (see ``target``)."""

    nodeclass: str
    cluster: str
    namespace: str
    location: str
    version: str
    infrastructure: Mapping[str, Any]
    """The AzureMachineTemplate as read."""
    bootstrap: Mapping[str, Any]
    """The KubeadmConfigTemplate as read."""

    @property
    def digest(self) -> str:
        """A hash of everything a pool is stamped from: part of every pool's name, so changed
        templates make new pools (and the nodes of the old ones drifted)."""
        stamped = {
            "infrastructure": (self.infrastructure.get("spec") or {}).get("template"),
            "bootstrap": (self.bootstrap.get("spec") or {}).get("template"),
            "version": self.version,
            "location": self.location,
            "cluster": self.cluster,
        }
        text = json.dumps(stamped, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:10]


def _slug(text: str, limit: int) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return slug[:limit].strip("-") or "x"


def pool_name(nodeclass: str, offering: PoolOffering, digest: str) -> str:
    """The deterministic name of the pool of ``offering`` for ``nodeclass`` stamped from
    templates of ``digest``: readable parts (truncated) and a hash of the whole identity, within
    the 63 characters of a label value and the length Azure allows a scale set name."""
    identity = "/".join(
        (nodeclass, offering.vm_size, offering.capacity_type, offering.zone, digest)
    )
    digest = hashlib.sha256(identity.encode()).hexdigest()[:6]
    size = _slug(offering.vm_size.removeprefix("Standard_").removeprefix("standard_"), 16)
    priority = "spot" if offering.spot else "od"
    zone = f"-z{_slug(offering.zone, 3)}" if offering.zone else ""
    head = _slug(nodeclass, _MAX_NAME - len(size) - len(priority) - len(zone) - 10)
    return f"{head}-{size}-{priority}{zone}-{digest}"


def _ref(capi_version: str, group: str, version: str, kind: str, name: str) -> JsonObject:
    """An object reference in the layout of the CAPI version served (v1beta2: apiGroup)."""
    if capi_version == "v1beta1":
        return {"apiVersion": f"{group}/{version}", "kind": kind, "name": name}
    return {"apiGroup": group, "kind": kind, "name": name}


def _labels(templates: LaunchTemplates, offering: PoolOffering, zone_label: str) -> JsonObject:
    labels = {
        LABEL_LAUNCH: LAUNCH_MODE,
        LABEL_NODECLASS: templates.nodeclass,
        wellknown.LABEL_CAPI_CLUSTER_NAME: templates.cluster,
        wellknown.LABEL_INSTANCE_TYPE: offering.vm_size,
        wellknown.LABEL_CAPACITY_TYPE: offering.capacity_type,
    }
    if zone_label:
        labels[wellknown.LABEL_TOPOLOGY_ZONE] = zone_label
    return labels


def capacity_annotations(capacity: ResourceList, node_labels: Mapping[str, str]) -> dict[str, str]:
    """The scale-from-zero annotations of a pool whose nodes have ``capacity`` and carry
    ``node_labels``."""
    annotations = {
        wellknown.ANNOTATION_CAPACITY_LABELS: ",".join(
            f"{key}={value}" for key, value in sorted(node_labels.items())
        )
    }
    names = {
        "cpu": wellknown.ANNOTATION_CAPACITY_CPU,
        "memory": wellknown.ANNOTATION_CAPACITY_MEMORY,
        "pods": wellknown.ANNOTATION_CAPACITY_MAX_PODS,
        "ephemeral-storage": wellknown.ANNOTATION_CAPACITY_EPHEMERAL_DISK,
    }
    raw = capacity.to_dict()
    for resource, annotation in names.items():
        if resource in raw:
            annotations[annotation] = str(raw[resource])
    gpus = {k: v for k, v in raw.items() if k.endswith("/gpu")}
    for resource, count in gpus.items():
        annotations[wellknown.ANNOTATION_CAPACITY_GPU_COUNT] = str(count)
        annotations[wellknown.ANNOTATION_CAPACITY_GPU_TYPE] = resource
    return annotations


def with_unregistered_taint(spec: Mapping[str, Any]) -> JsonObject:
    """A copy of a KubeadmConfig spec whose nodes register with Karpenter's
    ``karpenter.sh/unregistered:NoExecute`` taint (``joinConfiguration.nodeRegistration.taints``),
    which Karpenter removes once it has synced the NodeClaim's labels and taints, so no pod
    lands on the node before. kubeadm then registers exactly the listed taints, so the list
    keeps the template's own."""
    copied: JsonObject = copy.deepcopy(dict(spec))
    join = copied.setdefault("joinConfiguration", {})
    registration = join.setdefault("nodeRegistration", {})
    taints = list(registration.get("taints") or [])
    if not any(t.get("key") == wellknown.TAINT_UNREGISTERED_KEY for t in taints):
        taints.append(
            {"key": wellknown.TAINT_UNREGISTERED_KEY, "effect": wellknown.TAINT_UNREGISTERED_EFFECT}
        )
    registration["taints"] = taints
    return copied


def pool_objects(
    templates: LaunchTemplates,
    offering: PoolOffering,
    capi: CapiResources,
    *,
    zone_label: str,
    annotations: Mapping[str, str],
) -> tuple[JsonObject, JsonObject, JsonObject]:
    """(KubeadmConfig, AzureMachinePool, MachinePool) of ``offering``'s pool, in the order
    they are created."""
    name = pool_name(templates.nodeclass, offering, templates.digest)
    labels = _labels(templates, offering, zone_label)
    namespace = templates.namespace
    bootstrap_spec = ((templates.bootstrap.get("spec") or {}).get("template") or {}).get("spec")
    # The spec is copied as read, so it is written at the version it was read at (v1beta1 and
    # v1beta2 differ in shape: kubeletExtraArgs is a map in one, a list in the other).
    bootstrap_version = _version_of(templates.bootstrap)
    kubeadm: JsonObject = {
        "apiVersion": kubeadm_configs(bootstrap_version).api_version,
        "kind": KUBEADM_CONFIG,
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": with_unregistered_taint(bootstrap_spec or {}),
    }
    infra_spec = (templates.infrastructure.get("spec") or {}).get("template") or {}
    vm = infra_spec.get("spec") or {}
    template: JsonObject = {k: copy.deepcopy(vm[k]) for k in _TEMPLATE_FIELDS if k in vm}
    template["vmSize"] = offering.vm_size
    if offering.spot:
        spot = copy.deepcopy(dict(vm.get("spotVMOptions") or {}))
        # Azure's default, Deallocate, keeps an evicted VM (and its replica, so its Machine)
        # in the scale set; Delete frees both, so the NodeClaim is replaced.
        spot.setdefault("evictionPolicy", SPOT_EVICTION_POLICY)
        template["spotVMOptions"] = spot
    pool_spec: JsonObject = {
        "location": templates.location,
        "orchestrationMode": "Flexible",
        "template": template,
    }
    pool_spec.update({k: copy.deepcopy(vm[k]) for k in _POOL_FIELDS if k in vm})
    azure_pool: JsonObject = {
        "apiVersion": AZURE_MACHINE_POOLS.api_version,
        "kind": AZURE_MACHINE_POOL,
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": pool_spec,
    }
    machine_spec: JsonObject = {
        "clusterName": templates.cluster,
        "version": templates.version,
        "bootstrap": {
            "configRef": _ref(
                capi.version, BOOTSTRAP_GROUP, bootstrap_version, KUBEADM_CONFIG, name
            )
        },
        "infrastructureRef": _ref(
            capi.version, CAPI_INFRASTRUCTURE_GROUP, "v1beta1", AZURE_MACHINE_POOL, name
        ),
    }
    machine_pool: JsonObject = {
        "apiVersion": capi.api_version,
        "kind": "MachinePool",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": dict(labels),
            "annotations": dict(annotations),
        },
        "spec": {
            "clusterName": templates.cluster,
            "replicas": 0,
            "template": {"metadata": {}, "spec": machine_spec},
        },
    }
    if offering.zone:
        machine_pool["spec"]["failureDomains"] = [offering.zone]
    return kubeadm, azure_pool, machine_pool


def create_pool(
    client: KubeClient, capi: CapiResources, objects: tuple[JsonObject, JsonObject, JsonObject]
) -> JsonObject:
    """Create the three objects (each one that exists already is left as it is) and return the
    MachinePool as the API has it.

    The MachinePool goes before the AzureMachinePool: CAPZ's webhook admits a Flexible
    AzureMachinePool only once the MachinePool naming it exists (``validateOrchestrationMode``),
    and CAPI's admits a MachinePool whose AzureMachinePool does not exist yet."""
    kubeadm, azure_pool, machine_pool = objects
    namespace = str(machine_pool["metadata"]["namespace"])
    created: JsonObject | None = None
    for resource, body in (
        (kubeadm_configs(_version_of(kubeadm)), kubeadm),
        (capi.machine_pools, machine_pool),
        (AZURE_MACHINE_POOLS, azure_pool),
    ):
        try:
            written = client.create(resource, body, namespace)
        except AlreadyExists:
            continue
        if resource is capi.machine_pools:
            created = written
    if created is not None:
        return created
    return client.get(capi.machine_pools, str(machine_pool["metadata"]["name"]), namespace)


def failure_of(pool: Mapping[str, Any]) -> str | None:
    """Why Cluster API reports the pool failed, or ``None``."""
    status = pool.get("status")
    if not isinstance(status, Mapping):
        return None
    deprecated = status.get("deprecated")
    v1beta1 = deprecated.get("v1beta1") if isinstance(deprecated, Mapping) else None
    if not isinstance(v1beta1, Mapping):
        v1beta1 = {}
    reason = status.get("failureReason") or v1beta1.get("failureReason")
    message = status.get("failureMessage") or v1beta1.get("failureMessage")
    if reason or message:
        return f"{reason or 'Failed'}: {message}" if message else str(reason)
    if status.get("phase") == "Failed":
        return "phase Failed"
    return None


def scale_set_failure(azure_pool: Mapping[str, Any]) -> str | None:
    """Why CAPZ reports the pool's scale set failed, or ``None``.

    CAPZ sets ``failureReason`` only for errors it deems terminal (a size the SKU cache says is
    not available); a scale set PUT Azure refuses (allocation, quota) is retried and shows only
    as the ``BootstrapSucceeded`` condition false with reason ``Failed``, severity ``Error``
    (azure/scope/machinepool.go: ``UpdatePutStatus``), and a scale set in provisioning state
    ``Failed`` as ``ScaleSetRunning`` false, reason ``ScaleSetProvisionFailed``
    (``setProvisioningStateAndConditions``)."""
    status = azure_pool.get("status")
    if not isinstance(status, Mapping):
        return None
    reason, message = status.get("failureReason"), status.get("failureMessage")
    if reason or message:
        return f"{reason or 'Failed'}: {message}" if message else str(reason)
    conditions = [c for c in status.get("conditions") or [] if isinstance(c, Mapping)]
    for condition in conditions:
        if (
            condition.get("type") == "BootstrapSucceeded"
            and condition.get("status") == "False"
            and condition.get("reason") == "Failed"
            and condition.get("severity") == "Error"
        ):
            return str(condition.get("message") or "scale set failed to create or update")
    if status.get("provisioningState") == "Failed":
        return "scale set provisioning state Failed"
    return None


# An AzureMachinePoolMachine's ``status.provisioningState`` (the VM's, azure/scope/
# machinepoolmachine.go: ``UpdateInstanceStatus``) while Azure is still making the VM.
VM_IN_PROGRESS: Final = frozenset({"Creating", "Updating", "Migrating"})


def vm_failure(pool_machine: Mapping[str, Any]) -> str | None:
    """Why the scale set VM behind an ``AzureMachinePoolMachine`` failed, or ``None``.

    CAPZ copies the VM's provisioning state; ``Failed`` is terminal (it only records a
    ``FailedVMState`` Warning Event, exp/controllers/azuremachinepoolmachine_controller.go:
    ``reconcileNormal``), so the VM never joins. The error is in ``failureMessage`` when CAPZ
    deemed it terminal, else in the condition a service marked false with severity ``Error``
    (``UpdatePutStatus``)."""
    status = pool_machine.get("status")
    if not isinstance(status, Mapping) or status.get("provisioningState") != "Failed":
        return None
    if status.get("failureMessage"):
        return str(status["failureMessage"])
    for condition in status.get("conditions") or []:
        if (
            isinstance(condition, Mapping)
            and condition.get("status") == "False"
            and condition.get("severity") == "Error"
            and condition.get("message")
        ):
            return str(condition["message"])
    return "Azure scale set VM is in failed state"


def delete_pool_parts(client: KubeClient, namespace: str, name: str) -> None:
    """Delete a pool's KubeadmConfig and AzureMachinePool (CAPI also does, once it has taken
    them over; either may be gone already)."""
    for resource in (AZURE_MACHINE_POOLS, KUBEADM_CONFIGS):
        try:
            client.delete(resource, name, namespace)
        except NotFound:
            continue
