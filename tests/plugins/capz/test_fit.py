"""Sizes that cannot run the template's VMs are not offered by ``CAPZMachinePool``: CAPZ's
terminal checks (cluster-api-provider-azure azure/services/scalesets/scalesets.go:
``validateVMCapabilities``), premium disks, and the Marketplace image's Hyper-V generation and
CPU architecture."""

from __future__ import annotations

from typing import Any

import pytest

from karpenter_capi.plugins.capz.fit import unfit
from karpenter_capi.plugins.capz.skus import parse_sku
from karpenter_capi.sim.azure.eastus import vm_sku
from tests.plugins.capz.pools_env import NAMESPACE, new_env
from tests.plugins.capz.test_pools_launch import AZURE_MACHINE_TEMPLATES


class _Sku:
    """A Resource SKU as the SDK's model reads (attributes)."""

    def __init__(self, raw: dict[str, Any]) -> None:
        self.resource_type = raw["resourceType"]
        self.name = raw["name"]
        self.locations = raw["locations"]
        self.location_info = [
            type("Info", (), {"location": i["location"], "zones": i["zones"]})()
            for i in raw["locationInfo"]
        ]
        self.capabilities = [
            type("Cap", (), {"name": c["name"], "value": c["value"]})() for c in raw["capabilities"]
        ]
        self.restrictions: list[Any] = []


def sku(name: str = "Standard_D4s_v5", *, drop: str = "", set_: dict[str, str] | None = None,
        **kwargs: Any) -> Any:  # fmt: skip
    raw = vm_sku(name, vcpus=kwargs.pop("vcpus", "4"), memory_gb=kwargs.pop("memory_gb", "16"),
                 **kwargs)  # fmt: skip
    raw["capabilities"] = [c for c in raw["capabilities"] if c["name"] != drop]
    for key, value in (set_ or {}).items():
        raw["capabilities"] = [c for c in raw["capabilities"] if c["name"] != key]
        raw["capabilities"].append({"name": key, "value": value})
    parsed = parse_sku(_Sku(raw), "eastus")
    assert parsed is not None
    return parsed


@pytest.mark.parametrize(
    ("size", "vm", "why"),
    [
        (sku(vcpus="1"), {}, "vm size should be bigger or equal to at least 2 vCPUs"),
        (sku(memory_gb="1"), {}, "vm memory should be bigger or equal to at least 2Gi"),
        (
            sku(),
            {"osDisk": {"diffDiskSettings": {"option": "Local"}}},
            "vm size Standard_D4s_v5 does not support ephemeral os",
        ),
        (
            sku(),
            {"securityProfile": {"encryptionAtHost": True}},
            "encryption at host is not supported for VM type Standard_D4s_v5",
        ),
        (
            sku(set_={"PremiumIO": "False"}),
            {"osDisk": {"managedDisk": {"storageAccountType": "Premium_LRS"}}},
            "Standard_D4s_v5 does not support premium storage (Premium_LRS)",
        ),
        (
            sku(set_={"HyperVGenerations": "V1"}),
            {"image": {"marketplace": {"publisher": "cncf-upstream", "offer": "capi",
                                       "sku": "ubuntu-2204-gen2", "version": "1.31.1"}}},
            "Standard_D4s_v5 does not run Hyper-V generation V2 images",
        ),
        (
            sku(),
            {"image": {"marketplace": {"sku": "ubuntu-2204-gen2-arm64"}}},
            "Standard_D4s_v5 is amd64, the image arm64",
        ),
    ],
)  # fmt: skip
def test_a_size_that_cannot_run_the_template_says_why(size: Any, vm: Any, why: str) -> None:
    assert unfit(size, vm) == why


def test_sizes_that_can_run_the_template_fit() -> None:
    assert unfit(sku(), {}) is None
    premium = {"osDisk": {"managedDisk": {"storageAccountType": "Premium_LRS"}}}
    assert unfit(sku(), premium) is None
    ephemeral = {"osDisk": {"diffDiskSettings": {"option": "Local"}}}
    assert unfit(sku(set_={"EphemeralOSDiskSupported": "True"}), ephemeral) is None
    gen1 = {"image": {"marketplace": {"sku": "ubuntu-2204-gen1"}}}
    assert unfit(sku(), gen1) is None
    # A gallery image says nothing of its architecture: nothing is filtered.
    gallery = {"image": {"computeGallery": {"gallery": "g", "name": "n", "version": "1"}}}
    assert unfit(sku(arch="Arm64"), gallery) is None


def test_an_arm_image_offers_only_arm_sizes() -> None:
    env = new_env()
    env.api.patch(
        AZURE_MACHINE_TEMPLATES,
        "workers",
        {"spec": {"template": {"spec": {"image": {"marketplace": {
            "publisher": "cncf-upstream", "offer": "capi", "sku": "ubuntu-2204-gen2-arm64",
            "version": "1.31.1"}}}}}},
        NAMESPACE,
    )  # fmt: skip
    nodeclass, nodepool = env.models()
    names = {t.name for t in env.plugins.instance_types(nodeclass, nodepool)}
    assert names == {"Standard_D2ps_v5"}
