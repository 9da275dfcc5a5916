"""Azure VM sizes as the Resource SKUs API describes them, in one location.

``ComputeManagementClient.resource_skus.list(filter="location eq 'eastus'")`` is the one Azure
call that says, for the caller's subscription, what every VM size is (vCPUs, memory, CPU
architecture, GPUs), in which availability zones it is offered, whether it can run as Spot
(``LowPriorityCapable``) and whether the subscription may use it at all (``restrictions``: a
size can be offered in a region yet ``NotAvailableForSubscription`` there or in some zones).
Reading it needs only ``Microsoft.Compute/skus/read``.

The SDK's models are read by attribute with defaults, so the parsing works with every
azure-mgmt-compute the ``azure`` extra allows (their model classes differ between releases).
Azure's ``MemoryGB`` is in GiB (a ``Standard_D4s_v5`` has 16 GiB).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any, Final

VIRTUAL_MACHINES: Final = "virtualMachines"
RESTRICTION_LOCATION: Final = "Location"
RESTRICTION_ZONE: Final = "Zone"

_ARCHITECTURES: Final = {"x64": "amd64", "arm64": "arm64"}

# GPU sizes whose accelerators are AMD's (the NVv4 "as_v4" sizes, the V710 and MI300X sizes);
# every other size with GPUs carries NVIDIA ones.
_AMD_GPU_SIZE: Final = re.compile(r"(^Standard_NV\d+as_v4$)|(_V710_)|(MI300X)", re.IGNORECASE)


class SkuError(Exception):
    """A Resource SKU lacks what a node shape needs (vCPUs, memory)."""


@dataclass(frozen=True)
class VmSku:
    """One VM size in one location, for one subscription.

    ``zones`` are Azure's zone numbers (``"1"``, ``"2"``, ``"3"``) where the size is offered and
    not restricted; empty in a location without availability zones (or when every zone is
    restricted: then ``restricted`` says so). ``restricted`` is why the subscription cannot use
    the size at all in the location, or ``None``. ``zone_restrictions`` maps a restricted zone
    to its reason code.
    """

    name: str
    location: str
    vcpus: int
    memory_mib: int
    architecture: str = "amd64"
    gpus: int = 0
    gpu_resource: str = "nvidia.com/gpu"
    spot_capable: bool = False
    zones: tuple[str, ...] = ()
    zonal_location: bool = False
    restricted: str | None = None
    zone_restrictions: Mapping[str, str] = field(default_factory=dict)
    capabilities: Mapping[str, str] = field(default_factory=dict)


def _text(value: object) -> str:
    """An SDK enum or string as plain text (enums subclass ``str`` in some releases only)."""
    if value is None:
        return ""
    enum_value = getattr(value, "value", None)
    return str(enum_value if isinstance(enum_value, str) else value)


def _number(capabilities: Mapping[str, str], name: str) -> Decimal | None:
    raw = capabilities.get(name)
    if raw is None or raw == "":
        return None
    try:
        number = Decimal(raw)
    except InvalidOperation:
        return None
    return number if number.is_finite() else None


def _capabilities(sku: Any) -> dict[str, str]:
    found: dict[str, str] = {}
    for capability in getattr(sku, "capabilities", None) or ():
        name = getattr(capability, "name", None)
        if name:
            found[str(name)] = str(getattr(capability, "value", "") or "")
    return found


def _location_zones(sku: Any, location: str) -> tuple[bool, tuple[str, ...]]:
    """Whether ``location`` appears in the SKU's location info, and the zones listed there."""
    for info in getattr(sku, "location_info", None) or ():
        if str(getattr(info, "location", "") or "").lower() == location:
            zones = sorted(str(z) for z in (getattr(info, "zones", None) or ()))
            return True, tuple(zones)
    return False, ()


def _restrictions(sku: Any, location: str) -> tuple[str | None, dict[str, str]]:
    """(why the whole SKU is restricted in ``location`` or None, restricted zone -> reason)."""
    whole: str | None = None
    zones: dict[str, str] = {}
    for restriction in getattr(sku, "restrictions", None) or ():
        kind = _text(getattr(restriction, "type", None))
        reason = _text(getattr(restriction, "reason_code", None)) or "Restricted"
        info = getattr(restriction, "restriction_info", None)
        locations = [str(x).lower() for x in (getattr(info, "locations", None) or ())]
        if locations and location not in locations:
            continue
        if kind.lower() == RESTRICTION_LOCATION.lower():
            whole = reason
        elif kind.lower() == RESTRICTION_ZONE.lower():
            for zone in getattr(info, "zones", None) or ():
                zones[str(zone)] = reason
    return whole, zones


def gpu_resource_for(size: str) -> str:
    """The extended resource a size's GPUs appear as on its nodes."""
    return "amd.com/gpu" if _AMD_GPU_SIZE.search(size) else "nvidia.com/gpu"


def parse_sku(sku: Any, location: str) -> VmSku | None:
    """The ``VmSku`` of one Resource SKU in ``location``, or ``None`` when it is not a VM size
    offered there. Raises ``SkuError`` for a VM size without vCPUs or memory."""
    location = location.lower()
    if _text(getattr(sku, "resource_type", None)) != VIRTUAL_MACHINES:
        return None
    name = str(getattr(sku, "name", "") or "")
    locations = [str(x).lower() for x in (getattr(sku, "locations", None) or ())]
    listed, offered_zones = _location_zones(sku, location)
    if not name or (location not in locations and not listed):
        return None
    capabilities = _capabilities(sku)
    vcpus = _number(capabilities, "vCPUs")
    memory_gib = _number(capabilities, "MemoryGB")
    if vcpus is None or memory_gib is None or vcpus <= 0 or memory_gib <= 0:
        raise SkuError(f"VM size {name} in {location} has no vCPUs/MemoryGB capability")
    architecture_name = capabilities.get("CpuArchitectureType", "x64").lower()
    architecture = _ARCHITECTURES.get(architecture_name, architecture_name)
    gpus = _number(capabilities, "GPUs") or Decimal(0)
    whole, zone_restrictions = _restrictions(sku, location)
    zones = tuple(z for z in offered_zones if z not in zone_restrictions)
    if whole is None and offered_zones and not zones:
        whole = f"every zone restricted ({', '.join(sorted(set(zone_restrictions.values())))})"
    return VmSku(
        name=name,
        location=location,
        vcpus=int(vcpus),
        memory_mib=int(memory_gib * 1024),
        architecture=architecture,
        gpus=int(gpus),
        gpu_resource=gpu_resource_for(name),
        spot_capable=capabilities.get("LowPriorityCapable", "").lower() == "true",
        zones=zones,
        zonal_location=bool(offered_zones),
        restricted=whole,
        zone_restrictions=zone_restrictions,
        capabilities=capabilities,
    )


def parse_skus(skus: Iterable[Any], location: str) -> dict[str, VmSku]:
    """Every VM size offered in ``location``, by name. A malformed SKU is skipped (one bad
    entry in Azure's list of thousands must not hide the others)."""
    found: dict[str, VmSku] = {}
    for sku in skus:
        try:
            parsed = parse_sku(sku, location)
        except SkuError:
            continue
        if parsed is not None:
            found[parsed.name] = parsed
    return found


def list_vm_skus(compute: Any, location: str) -> dict[str, VmSku]:
    """Call Resource SKUs for ``location`` through an azure-mgmt-compute client (the SDK pages
    through ``nextLink`` itself) and parse the VM sizes."""
    location = location.lower()
    return parse_skus(compute.resource_skus.list(filter=f"location eq '{location}'"), location)
