"""Resource SKUs through the real azure-mgmt-compute client and a fake transport."""

from __future__ import annotations

from azure.mgmt.compute import ComputeManagementClient

from karpenter_capi.plugins.capz.skus import VmSku, gpu_resource_for, list_vm_skus
from karpenter_capi.sim.azure.eastus import eastus_skus, restriction, skus_handler, vm_sku
from karpenter_capi.sim.azure.transport import (
    SKUS_PATH,
    SUBSCRIPTION,
    FakeAzureTransport,
    FakeCredential,
    query,
)


def _list(
    skus: list[dict[str, object]], **handler: int
) -> tuple[dict[str, VmSku], FakeAzureTransport]:
    transport = FakeAzureTransport({SKUS_PATH: skus_handler(skus, **handler)})  # type: ignore[arg-type]
    compute = ComputeManagementClient(FakeCredential(), SUBSCRIPTION, transport=transport)
    return list_vm_skus(compute, "eastus"), transport


def test_d4s_v5_is_4_vcpus_16_gib_amd64_in_zones_1_to_3() -> None:
    found, _ = _list(eastus_skus())
    d4s = found["Standard_D4s_v5"]
    assert (d4s.vcpus, d4s.memory_mib, d4s.architecture) == (4, 16 * 1024, "amd64")
    assert d4s.zones == ("1", "2", "3")
    assert d4s.zonal_location
    assert d4s.spot_capable
    assert d4s.restricted is None
    assert d4s.gpus == 0


def test_the_location_filter_is_sent_and_every_page_is_followed() -> None:
    found, transport = _list(eastus_skus(), page_size=2)
    # 7 SKUs in pages of 2: four requests, the later ones by nextLink.
    assert len(transport.requests) == 4
    first = query(transport.requests[0])
    assert first["$filter"] == ["location eq 'eastus'"]
    assert "page" in query(transport.requests[-1])
    # The disk SKU is not a VM size; every VM size of every page is there.
    assert sorted(found) == [
        "Standard_B2s",
        "Standard_D2ps_v5",
        "Standard_D4s_v5",
        "Standard_E4s_v5",
        "Standard_M416ms_v2",
        "Standard_NC6s_v3",
    ]


def test_the_request_carries_the_credential_token_for_arm() -> None:
    credential = FakeCredential()
    transport = FakeAzureTransport({SKUS_PATH: skus_handler(eastus_skus())})
    compute = ComputeManagementClient(credential, SUBSCRIPTION, transport=transport)
    list_vm_skus(compute, "EastUS")
    assert transport.requests[0].headers["Authorization"] == "Bearer fake-token"
    assert credential.scopes == [("https://management.azure.com/.default",)]


def test_arm_gpu_and_spot_capabilities() -> None:
    found, _ = _list(eastus_skus())
    assert found["Standard_D2ps_v5"].architecture == "arm64"
    nc6 = found["Standard_NC6s_v3"]
    assert (nc6.gpus, nc6.gpu_resource, nc6.zones) == (1, "nvidia.com/gpu", ("1", "3"))
    assert not found["Standard_B2s"].spot_capable


def test_restricted_skus_whole_and_per_zone() -> None:
    found, _ = _list(eastus_skus())
    assert found["Standard_M416ms_v2"].restricted == "NotAvailableForSubscription"
    e4s = found["Standard_E4s_v5"]
    assert e4s.restricted is None
    assert e4s.zones == ("1", "3")
    assert e4s.zone_restrictions == {"2": "NotAvailableForSubscription"}


def test_every_zone_restricted_makes_the_sku_unavailable() -> None:
    found, _ = _list(
        [
            vm_sku(
                "Standard_D8s_v5",
                vcpus="8",
                memory_gb="32",
                restrictions=[restriction("Zone", zones=("1", "2", "3"))],
            )
        ]
    )
    assert found["Standard_D8s_v5"].zones == ()
    assert (
        found["Standard_D8s_v5"].restricted == "every zone restricted (NotAvailableForSubscription)"
    )


def test_a_restriction_for_another_location_does_not_count() -> None:
    found, _ = _list(
        [
            vm_sku(
                "Standard_D8s_v5",
                vcpus="8",
                memory_gb="32",
                restrictions=[restriction("Location", location="westus")],
            )
        ]
    )
    assert found["Standard_D8s_v5"].restricted is None


def test_a_location_without_zones_and_a_malformed_sku() -> None:
    found, _ = _list(
        [
            vm_sku("Standard_D4s_v5", vcpus="4", memory_gb="16", zones=()),
            vm_sku("Standard_Broken", vcpus="", memory_gb="16"),
            vm_sku("Standard_A0", vcpus="1", memory_gb="0.75"),
        ]
    )
    assert found["Standard_D4s_v5"].zones == ()
    assert not found["Standard_D4s_v5"].zonal_location
    assert found["Standard_A0"].memory_mib == 768
    assert "Standard_Broken" not in found


def test_amd_gpu_sizes() -> None:
    assert gpu_resource_for("Standard_NV16as_v4") == "amd.com/gpu"
    assert gpu_resource_for("Standard_ND96isr_MI300X_v5") == "amd.com/gpu"
    assert gpu_resource_for("Standard_NC24ads_A100_v4") == "nvidia.com/gpu"
