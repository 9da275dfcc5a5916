"""What a CAPZ template asks Azure for: VM size, Spot or not, OS, disk, failure domain.

Two kinds name a VM size: an ``AzureMachineTemplate`` (MachineDeployments and MachineSets;
the size at ``spec.template.spec.vmSize``) and an ``AzureMachinePool`` (MachinePools, a VM
scale set; ``spec.template.vmSize``). Both ask for Spot with ``spotVMOptions`` (present, even
empty, means Spot; ``maxPrice`` caps what Azure may charge) and state the OS in
``osDisk.osType``. The zone is not the template's: CAPI puts the failure domain on the owner
(``spec.template.spec.failureDomain``, a MachinePool's ``spec.failureDomains``), and CAPZ's
failure domains are Azure's zone numbers, ``"1"`` to ``"3"``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from karpenter_capi.plugin_api import parse_quantity
from karpenter_capi.plugin_api.karpenter import QuantityError
from karpenter_capi.plugin_api.kube import CAPI_INFRASTRUCTURE_GROUP

AZURE_MACHINE_TEMPLATE: Final = "AzureMachineTemplate"
AZURE_MACHINE_POOL: Final = "AzureMachinePool"
KINDS: Final = (AZURE_MACHINE_TEMPLATE, AZURE_MACHINE_POOL)


class TemplateSpecError(Exception):
    """A CAPZ template lacks what describes its VMs (no ``vmSize``, a malformed max price)."""


@dataclass(frozen=True)
class AzureNodeSpec:
    """The VMs a CAPZ template makes. ``max_price`` is the Spot cap (``None``: up to the
    on-demand price, Azure's ``-1``); ``os_disk_gib`` the OS disk, which is the node's
    ephemeral storage; ``failure_domains`` the owner's (empty: Azure picks)."""

    kind: str
    name: str
    namespace: str
    vm_size: str
    spot: bool
    max_price: float | None = None
    os_type: str = "linux"
    os_disk_gib: int | None = None
    failure_domains: tuple[str, ...] = ()

    @property
    def display(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


def _group(template: Mapping[str, Any]) -> str:
    return str(template.get("apiVersion") or "").rpartition("/")[0]


def _failure_domains(owner: Mapping[str, Any]) -> tuple[str, ...]:
    spec = owner.get("spec") or {}
    single = ((spec.get("template") or {}).get("spec") or {}).get("failureDomain")
    if single:
        return (str(single),)
    many = spec.get("failureDomains") or ()
    return tuple(str(x) for x in many if x)


def _max_price(spot_options: Mapping[str, Any], display: str) -> float | None:
    """``spotVMOptions.maxPrice``, a ``resource.Quantity`` in CAPZ's API: written ``"0.05"``, it
    may come back from a Go client as ``"50m"``, so it is parsed as a quantity, exactly."""
    raw = spot_options.get("maxPrice")
    if raw is None or raw == "":
        return None
    try:
        price = parse_quantity(raw)
    except QuantityError:
        raise TemplateSpecError(
            f"{display}: spotVMOptions.maxPrice {raw!r} is not a number (a quantity)"
        ) from None
    if price.nanos == -1_000_000_000:
        return None  # -1: pay up to the on-demand price, no cap
    if price.nanos < 0:
        # Azure refuses any other negative price, so every launch from it would fail.
        raise TemplateSpecError(
            f"{display}: spotVMOptions.maxPrice {raw!r} is negative; only -1 (no cap) may be"
        )
    return float(price.as_fraction())


def parse_template(template: Mapping[str, Any], owner: Mapping[str, Any]) -> AzureNodeSpec | None:
    """The node spec of a CAPZ template, or ``None`` for any other kind.

    Raises ``TemplateSpecError`` when it is a CAPZ template that names no VM size.
    """
    kind = str(template.get("kind") or "")
    if kind not in KINDS or _group(template) not in ("", CAPI_INFRASTRUCTURE_GROUP):
        return None
    metadata = template.get("metadata") or {}
    name = str(metadata.get("name") or "")
    namespace = str(metadata.get("namespace") or "default")
    display = f"{kind} {namespace}/{name}"
    outer = (template.get("spec") or {}).get("template") or {}
    vm = (outer.get("spec") or {}) if kind == AZURE_MACHINE_TEMPLATE else outer
    vm_size = str(vm.get("vmSize") or "")
    if not vm_size:
        field_path = "spec.template.spec" if kind == AZURE_MACHINE_TEMPLATE else "spec.template"
        raise TemplateSpecError(f"{display}: {field_path}.vmSize is not set")
    spot_options = vm.get("spotVMOptions")
    os_disk = vm.get("osDisk") or {}
    disk = os_disk.get("diskSizeGB")
    try:
        disk_gib = int(disk) if disk is not None else None
    except (TypeError, ValueError):
        raise TemplateSpecError(f"{display}: osDisk.diskSizeGB {disk!r} is not a number") from None
    return AzureNodeSpec(
        kind=kind,
        name=name,
        namespace=namespace,
        vm_size=vm_size,
        spot=spot_options is not None,
        max_price=_max_price(spot_options, display) if isinstance(spot_options, dict) else None,
        os_type=str(os_disk.get("osType") or "Linux").lower(),
        os_disk_gib=disk_gib if disk_gib and disk_gib > 0 else None,
        failure_domains=_failure_domains(owner),
    )
