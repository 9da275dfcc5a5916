"""Whether a VM size can run the VMs an ``AzureMachineTemplate`` describes.

The ``CAPZMachinePool`` mode offers every size of the location with the template's VM spec
(image, disks, security profile), but not every size can run every spec: CAPZ refuses some
combinations before calling Azure, as terminal errors (cluster-api-provider-azure
azure/services/scalesets/scalesets.go: ``validateVMCapabilities``: at least 2 vCPUs and 2 GiB,
an ephemeral OS disk needs ``EphemeralOSDiskSupported``, a security profile needs
``EncryptionAtHostSupported``), and Azure refuses others (a premium disk on a size without
``PremiumIO``, an image of a Hyper-V generation or CPU architecture the size does not run).
Offering such a size would make a pool that fails, every time, after a launch waited for it;
so it is not offered. The image's generation and architecture are known only for a
Marketplace image whose SKU says so (``ubuntu-2204-gen2``, ``...-arm64``: the naming of the
``cncf-upstream/capi`` images and most others); a Compute Gallery or resource-ID image, and
CAPZ's default image (which CAPZ picks per size), filter nothing, and a NodePool
``kubernetes.io/arch`` requirement remains the way to keep such images off the other
architecture.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from karpenter_capi.plugins.capz.skus import VmSku

_MIN_VCPUS: Final = 2
_MIN_MEMORY_MIB: Final = 2 * 1024


def _true(sku: VmSku, capability: str) -> bool:
    return sku.capabilities.get(capability, "").lower() == "true"


def _premium_disks(vm: Mapping[str, Any]) -> list[str]:
    disks = [vm.get("osDisk") or {}, *(vm.get("dataDisks") or [])]
    found = []
    for disk in disks:
        managed = disk.get("managedDisk") if isinstance(disk, Mapping) else None
        kind = str((managed or {}).get("storageAccountType") or "")
        if kind.startswith("Premium"):
            found.append(kind)
    return found


def _image_sku(vm: Mapping[str, Any]) -> str:
    marketplace = (vm.get("image") or {}).get("marketplace") or {}
    return str(marketplace.get("sku") or "").lower() if isinstance(marketplace, Mapping) else ""


def image_generation(vm: Mapping[str, Any]) -> str | None:
    """``V1`` or ``V2`` when the template's Marketplace image SKU names its generation."""
    sku = _image_sku(vm)
    if "gen2" in sku:
        return "V2"
    if "gen1" in sku:
        return "V1"
    return None


def image_architecture(vm: Mapping[str, Any]) -> str | None:
    """``arm64`` or ``amd64`` for a Marketplace image (an Arm image says so in its SKU)."""
    sku = _image_sku(vm)
    if not sku:
        return None
    return "arm64" if "arm64" in sku else "amd64"


def unfit(sku: VmSku, vm: Mapping[str, Any]) -> str | None:
    """Why size ``sku`` cannot run VMs of spec ``vm`` (an AzureMachineTemplate's
    ``spec.template.spec``), or ``None``."""
    if sku.vcpus < _MIN_VCPUS:
        return "vm size should be bigger or equal to at least 2 vCPUs"
    if sku.memory_mib < _MIN_MEMORY_MIB:
        return "vm memory should be bigger or equal to at least 2Gi"
    if (vm.get("osDisk") or {}).get("diffDiskSettings") and not _true(
        sku, "EphemeralOSDiskSupported"
    ):
        return f"vm size {sku.name} does not support ephemeral os"
    if vm.get("securityProfile") and not _true(sku, "EncryptionAtHostSupported"):
        return f"encryption at host is not supported for VM type {sku.name}"
    premium = _premium_disks(vm)
    if premium and not _true(sku, "PremiumIO"):
        return f"{sku.name} does not support premium storage ({premium[0]})"
    generation = image_generation(vm)
    offered = sku.capabilities.get("HyperVGenerations", "")
    generations = [g.strip().upper() for g in offered.split(",")]
    if generation and offered and generation not in generations:
        return f"{sku.name} does not run Hyper-V generation {generation} images"
    architecture = image_architecture(vm)
    if architecture and architecture != sku.architecture:
        return f"{sku.name} is {sku.architecture}, the image {architecture}"
    return None
