"""Canned Azure answers for the simulator: a slice of eastus's Resource SKUs and retail prices.

Real shapes and real list prices (USD, Linux, pay-as-you-go, as the Retail Prices API returned
them), in the JSON ARM and the Retail Prices API send, paged as they page, so the ``capz``
plugin parses them as it parses Azure's. The slice covers what a scenario or a test needs:
general purpose, Arm, GPU and burstable sizes, a size restricted for the subscription, one
restricted in a zone, a Windows meter and a secondary-region duplicate that must be ignored,
and a disk SKU that is not a VM.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from azure.core.rest import HttpRequest

from karpenter_capi.sim.azure.transport import PRICES_PATH, SKUS_PATH, Handler, query


def vm_sku(
    name: str,
    *,
    vcpus: str,
    memory_gb: str,
    location: str = "eastus",
    zones: tuple[str, ...] = ("1", "2", "3"),
    arch: str = "x64",
    gpus: str | None = None,
    low_priority: bool = True,
    restrictions: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """One ``virtualMachines`` Resource SKU as ARM returns it."""
    capabilities = [
        {"name": "MaxResourceVolumeMB", "value": "0"},
        {"name": "OSVhdSizeMB", "value": "1047552"},
        {"name": "vCPUs", "value": vcpus},
        {"name": "MemoryPreservingMaintenanceSupported", "value": "True"},
        {"name": "HyperVGenerations", "value": "V1,V2"},
        {"name": "MemoryGB", "value": memory_gb},
        {"name": "MaxDataDiskCount", "value": "8"},
        {"name": "CpuArchitectureType", "value": arch},
        {"name": "LowPriorityCapable", "value": "True" if low_priority else "False"},
        {"name": "PremiumIO", "value": "True"},
        {"name": "vCPUsAvailable", "value": vcpus},
        {"name": "AcceleratedNetworkingEnabled", "value": "True"},
    ]
    if gpus is not None:
        capabilities.append({"name": "GPUs", "value": gpus})
    return {
        "resourceType": "virtualMachines",
        "name": name,
        "tier": "Standard",
        "size": name.removeprefix("Standard_"),
        "family": "standardDSv5Family",
        "locations": [location],
        "locationInfo": [
            {"location": location, "zones": list(zones), "zoneDetails": []},
        ],
        "capabilities": capabilities,
        "restrictions": list(restrictions or []),
    }


def restriction(kind: str, *, location: str = "eastus", zones: tuple[str, ...] = ()) -> Any:
    info: dict[str, Any] = {"locations": [location]}
    if zones:
        info["zones"] = list(zones)
    return {
        "type": kind,
        "values": [location],
        "restrictionInfo": info,
        "reasonCode": "NotAvailableForSubscription",
    }


def eastus_skus() -> list[dict[str, Any]]:
    """A small, realistic slice of eastus: general purpose, Arm, GPU, restricted sizes, and a
    disk SKU that must be ignored."""
    return [
        vm_sku("Standard_D4s_v5", vcpus="4", memory_gb="16"),
        vm_sku("Standard_D2ps_v5", vcpus="2", memory_gb="8", arch="Arm64"),
        vm_sku("Standard_NC6s_v3", vcpus="6", memory_gb="112", gpus="1", zones=("1", "3")),
        vm_sku("Standard_B2s", vcpus="2", memory_gb="4", low_priority=False),
        vm_sku(
            "Standard_M416ms_v2",
            vcpus="416",
            memory_gb="11400",
            restrictions=[restriction("Location")],
        ),
        vm_sku(
            "Standard_E4s_v5",
            vcpus="4",
            memory_gb="32",
            restrictions=[restriction("Zone", zones=("2",))],
        ),
        {
            "resourceType": "disks",
            "name": "Premium_LRS",
            "locations": ["eastus"],
            "locationInfo": [{"location": "eastus", "zones": ["1", "2", "3"]}],
            "capabilities": [{"name": "MaxSizeGiB", "value": "4"}],
            "restrictions": [],
        },
    ]


def skus_handler(skus: list[dict[str, Any]], *, page_size: int = 3) -> Handler:
    """Resource SKUs in pages of ``page_size``, linked by ``nextLink`` (as ARM pages them)."""

    def handle(request: HttpRequest) -> tuple[int, Any]:
        params = query(request)
        start = int(params.get("page", ["0"])[0])
        page = skus[start : start + page_size]
        body: dict[str, Any] = {"value": page}
        if start + page_size < len(skus):
            body["nextLink"] = (
                f"https://management.azure.com{SKUS_PATH}?api-version=2021-07-01"
                f"&page={start + page_size}"
            )
        return 200, body

    return handle


# --- canned Retail Prices -----------------------------------------------------------------------


def meter(
    arm_sku: str,
    sku_name: str,
    price: float,
    *,
    product: str = "Virtual Machines Dsv5 Series",
    location: str = "eastus",
    primary: bool = True,
) -> dict[str, Any]:
    """One Retail Prices item, with every field the API returns."""
    return {
        "currencyCode": "USD",
        "tierMinimumUnits": 0.0,
        "retailPrice": price,
        "unitPrice": price,
        "armRegionName": location,
        "location": "US East",
        "effectiveStartDate": "2022-03-01T00:00:00Z",
        "meterId": f"meter-{arm_sku}-{sku_name}-{product}".replace(" ", "-"),
        "meterName": sku_name,
        "productId": "DZH318Z0BQ4L",
        "skuId": "DZH318Z0BQ4L/00TG",
        "productName": product,
        "skuName": sku_name,
        "serviceName": "Virtual Machines",
        "serviceId": "DZH313Z7MMC8",
        "serviceFamily": "Compute",
        "unitOfMeasure": "1 Hour",
        "type": "Consumption",
        "isPrimaryMeterRegion": primary,
        "armSkuName": arm_sku,
    }


def eastus_meters() -> list[dict[str, Any]]:
    windows = "Virtual Machines Dsv5 Series Windows"
    return [
        meter("Standard_D4s_v5", "D4s v5", 0.192),
        meter("Standard_D4s_v5", "D4s v5 Spot", 0.0384),
        meter("Standard_D4s_v5", "D4s v5 Low Priority", 0.0384 / 2),
        meter("Standard_D4s_v5", "D4s v5", 0.376, product=windows),
        meter("Standard_D4s_v5", "D4s v5 Spot", 0.0752, product=windows),
        meter("Standard_D2ps_v5", "D2ps v5", 0.077, product="Virtual Machines Dpsv5 Series"),
        meter(
            "Standard_D2ps_v5", "D2ps v5 Spot", 0.0154, product="Virtual Machines Dpsv5 Series"
        ),
        meter("Standard_NC6s_v3", "NC6s v3", 3.06, product="Virtual Machines NCSv3 Series"),
        meter("Standard_NC6s_v3", "NC6s v3 Spot", 0.306, product="Virtual Machines NCSv3 Series"),
        meter("Standard_E4s_v5", "E4s v5", 0.252, product="Virtual Machines Esv5 Series"),
        # A secondary-region duplicate at another price: the primary meter wins.
        meter("Standard_E4s_v5", "E4s v5", 0.999, product="Virtual Machines Esv5 Series",
              primary=False),
        meter("Standard_B2s", "B2s", 0.0416, product="Virtual Machines BS Series"),
    ]  # fmt: skip


class PricesEndpoint:
    """The Retail Prices API in two (or more) pages; ``fail`` makes it answer 503."""

    def __init__(self, meters: list[dict[str, Any]], *, page_size: int = 6) -> None:
        self.meters = meters
        self.page_size = page_size
        self.fail = False
        self.calls = 0

    def pages(self) -> Iterator[list[dict[str, Any]]]:
        for start in range(0, len(self.meters), self.page_size):
            yield self.meters[start : start + self.page_size]

    def __call__(self, request: HttpRequest) -> tuple[int, Any]:
        self.calls += 1
        if self.fail:
            return 503, {"Error": {"Code": "ServiceUnavailable", "Message": "try later"}}
        params = query(request)
        skip = int(params.get("$skip", ["0"])[0])
        items = self.meters[skip : skip + self.page_size]
        following = skip + self.page_size
        next_link = None
        if following < len(self.meters):
            filter_text = params["$filter"][0].replace(" ", "%20").replace("'", "%27")
            next_link = (
                f"https://prices.azure.com{PRICES_PATH}?currencyCode=%27USD%27"
                f"&$filter={filter_text}&$skip={following}"
            )
        return 200, {
            "BillingCurrency": "USD",
            "CustomerEntityId": "Default",
            "CustomerEntityType": "Retail",
            "Items": items,
            "NextPageLink": next_link,
            "Count": len(items),
        }
