"""What EC2 sells in a region: instance type shapes (``DescribeInstanceTypes``) and the zones
that offer them (``DescribeInstanceTypeOfferings``), as node capacity and labels.

Loaded per (region, instance type) and cached (``plugins._cloud.catalog.CatalogCache``): a
cluster's templates name a handful of types, so two small calls per type and TTL cost less than
paging through the region's whole catalog (some 800 types in 6 zones).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

from karpenter_capi.plugin_api import ResourceList
from karpenter_capi.plugin_api.karpenter import wellknown
from karpenter_capi.plugins._cloud.metrics import CloudMetrics, timed

NVIDIA_GPU: Final = "nvidia.com/gpu"
AMD_GPU: Final = "amd.com/gpu"
HABANA_GAUDI: Final = "habana.ai/gaudi"
NEURON: Final = "aws.amazon.com/neuron"
_GPU_RESOURCES: Final = {"nvidia": NVIDIA_GPU, "amd": AMD_GPU, "habana": HABANA_GAUDI}
# EC2 architecture names -> kubernetes.io/arch. Mac instances (x86_64_mac, arm64_mac) run macOS,
# never a kubelet, so they have no entry and are left out of the catalog.
_ARCHITECTURES: Final = {"arm64": wellknown.ARCH_ARM64, "x86_64": wellknown.ARCH_AMD64}


@dataclass(frozen=True)
class InstanceTypeInfo:
    """One EC2 instance type as a node: what ``DescribeInstanceTypes`` says about it."""

    name: str
    vcpus: int
    memory_mib: int
    arch: str
    accelerators: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    max_enis: int = 0
    ipv4_per_eni: int = 0

    def max_pods(self) -> int:
        """Pods the AWS VPC CNI can address: ENIs x (IPv4 addresses per ENI - 1) + 2, where
        ENIs are those of the default network card (``max_enis``, see ``_max_enis``)."""
        if self.max_enis <= 0 or self.ipv4_per_eni <= 1:
            return 110  # no network data: the kubelet's default
        return self.max_enis * (self.ipv4_per_eni - 1) + 2

    def capacity(self, max_pods: int | None = None) -> ResourceList:
        """cpu, memory, pods and accelerators (``max_pods`` overrides the VPC CNI formula)."""
        quantities = {
            "cpu": str(self.vcpus),
            "memory": f"{self.memory_mib}Mi",
            "pods": str(max_pods if max_pods is not None else self.max_pods()),
        }
        quantities.update({name: str(count) for name, count in self.accelerators.items()})
        return ResourceList.parse(quantities)


@dataclass(frozen=True)
class CatalogEntry:
    """One instance type in one region: its shape (``None``: not sold there, or cannot be a
    node) and the availability zones that offer it."""

    region: str
    instance_type: str
    info: InstanceTypeInfo | None
    zones: frozenset[str] = frozenset()


def _accelerators(raw: Mapping[str, Any]) -> dict[str, int]:
    result: dict[str, int] = {}
    for gpu in (raw.get("GpuInfo") or {}).get("Gpus") or []:
        resource = _GPU_RESOURCES.get(str(gpu.get("Manufacturer", "")).lower())
        if resource is not None:
            result[resource] = result.get(resource, 0) + int(gpu.get("Count") or 0)
    neuron = sum(
        int(device.get("Count") or 0)
        for device in (raw.get("NeuronInfo") or {}).get("NeuronDevices") or []
    )
    if not neuron:  # Inferentia 1 (inf1) is described only as an inference accelerator
        neuron = sum(
            int(accelerator.get("Count") or 0)
            for accelerator in (raw.get("InferenceAcceleratorInfo") or {}).get("Accelerators") or []
            if str(accelerator.get("Manufacturer", "")).upper() == "AWS"
        )
    if neuron:
        result[NEURON] = neuron
    return {name: count for name, count in result.items() if count > 0}


def _max_enis(network: Mapping[str, Any]) -> int:
    """The ENIs the VPC CNI can attach: those of the default network card.

    Types with several network cards (p4d.24xlarge: 4 cards of 15 ENIs, 60 in all) report the
    total in ``MaximumNetworkInterfaces``, but the CNI attaches ENIs to the default card only,
    so AWS's eni-max-pods list gives p4d.24xlarge 15 x 49 + 2 = 737 pods, not 60 x 49 + 2.
    Without per-card data the total is all there is (it is the default card's on one-card types).
    """
    default_index = network.get("DefaultNetworkCardIndex") or 0
    for card in network.get("NetworkCards") or []:
        if card.get("NetworkCardIndex", 0) == default_index and card.get(
            "MaximumNetworkInterfaces"
        ):
            return int(card["MaximumNetworkInterfaces"])
    return int(network.get("MaximumNetworkInterfaces") or 0)


def instance_type_info(raw: Mapping[str, Any]) -> InstanceTypeInfo | None:
    """One ``DescribeInstanceTypes`` entry as an ``InstanceTypeInfo``; ``None`` for types that
    cannot be Kubernetes nodes (Mac instances) or lack a CPU or memory size."""
    architectures = (raw.get("ProcessorInfo") or {}).get("SupportedArchitectures") or []
    arch = next((_ARCHITECTURES[a] for a in architectures if a in _ARCHITECTURES), None)
    vcpus = int((raw.get("VCpuInfo") or {}).get("DefaultVCpus") or 0)
    memory = int((raw.get("MemoryInfo") or {}).get("SizeInMiB") or 0)
    if arch is None or vcpus <= 0 or memory <= 0:
        return None
    network = raw.get("NetworkInfo") or {}
    return InstanceTypeInfo(
        name=str(raw["InstanceType"]),
        vcpus=vcpus,
        memory_mib=memory,
        arch=arch,
        accelerators=MappingProxyType(_accelerators(raw)),
        max_enis=_max_enis(network),
        ipv4_per_eni=int(network.get("Ipv4AddressesPerInterface") or 0),
    )


def _is_unknown_type(error: Exception) -> bool:
    code = getattr(error, "response", {}).get("Error", {}).get("Code", "")
    return str(code) in ("InvalidInstanceType", "InvalidParameterValue")


def load_instance_type(
    ec2: Any, region: str, instance_type: str, metrics: CloudMetrics | None
) -> CatalogEntry:
    """``instance_type``'s shape and zones in ``region`` (``info`` ``None`` when EC2 does not
    sell it there); other API errors propagate, for the cache to retry."""
    try:
        with timed(metrics, "DescribeInstanceTypes"):
            found = ec2.describe_instance_types(InstanceTypes=[instance_type])
    except Exception as exc:
        if _is_unknown_type(exc):
            return CatalogEntry(region, instance_type, None)
        raise
    described = [raw for raw in found.get("InstanceTypes") or [] if raw]
    info = instance_type_info(described[0]) if described else None
    if info is None:
        return CatalogEntry(region, instance_type, None)
    zones: set[str] = set()
    with timed(metrics, "DescribeInstanceTypeOfferings"):
        paginator = ec2.get_paginator("describe_instance_type_offerings")
        for page in paginator.paginate(
            LocationType="availability-zone",
            Filters=[{"Name": "instance-type", "Values": [instance_type]}],
        ):
            zones.update(str(o["Location"]) for o in page.get("InstanceTypeOfferings") or [])
    return CatalogEntry(region, instance_type, info, frozenset(zones))


def image_architecture(ec2: Any, image_id: str) -> str | None:
    """The ``kubernetes.io/arch`` of AMI ``image_id`` (``DescribeImages``), ``None`` when EC2
    does not know the image or its architecture runs no kubelet."""
    images = ec2.describe_images(ImageIds=[image_id]).get("Images") or []
    return _ARCHITECTURES.get(str(images[0].get("Architecture") or "")) if images else None
