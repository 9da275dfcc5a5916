"""Hourly VM prices of one Azure location, from the public Azure Retail Prices API.

``GET https://prices.azure.com/api/retail/prices`` needs no credentials and answers pages of
"meters" (``Items``) with an absolute ``NextPageLink`` until it is ``null``. One location's
consumption prices for Virtual Machines are thousands of meters in pages of 100 (tens of
pages, some hundreds in the biggest locations); the filter keeps out reservations and Dev/Test
prices. Of the meters, per ``armSkuName``:

* a ``skuName`` ending in `` Spot`` is the Spot price, any other the pay-as-you-go price;
* ``Windows`` products (``productName`` contains ``Windows``) include the licence and are
  dropped, as are the retired `` Low Priority`` meters: nodes run Linux;
* when a size still has several meters of one kind (a region's secondary meter, a price that
  changed), the primary-region meter with the latest ``effectiveStartDate`` wins.

Azure prices Spot per location, not per zone, so the ``PriceSnapshot`` keys spot prices by
``(size, "")``: ``ANY_ZONE``, meaning "every zone of the location" (``spot_price`` reads it).
The call goes through an azure-core ``PipelineClient``, so it gets the SDK's retries and
proxy handling, and tests inject an azure-core transport instead of touching the network.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final
from urllib.parse import quote, urlencode

from azure.core import PipelineClient
from azure.core.pipeline.policies import (
    HeadersPolicy,
    NetworkTraceLoggingPolicy,
    ProxyPolicy,
    RetryPolicy,
    UserAgentPolicy,
)
from azure.core.rest import HttpRequest

from karpenter_capi.plugins._cloud.pricebook import PriceSnapshot

RETAIL_PRICES_URL: Final = "https://prices.azure.com/api/retail/prices"
ANY_ZONE: Final = ""
"""The zone under which Azure's per-location Spot prices are kept in a ``PriceSnapshot``."""
MAX_PAGES: Final = 2000
"""A bound on pages followed, against a NextPageLink that never ends. Pages hold 100 meters and
a big location has some tens of thousands (thousands of sizes, each with Linux, Windows, Spot and
Low Priority meters, and older meters kept alongside new ones), so the bound is far above that."""

_SPOT_SUFFIX: Final = " Spot"
_LOW_PRIORITY_SUFFIX: Final = " Low Priority"


class RetailPricesError(Exception):
    """The Retail Prices API answered something other than a page of prices."""


@dataclass(frozen=True)
class _Meter:
    price: float
    primary: bool
    effective: str

    def beats(self, other: _Meter) -> bool:
        return (self.primary, self.effective, -self.price) > (
            other.primary,
            other.effective,
            -other.price,
        )


def price_filter(location: str) -> str:
    """The OData ``$filter`` for one location's pay-as-you-go VM prices."""
    return (
        "priceType eq 'Consumption' and serviceName eq 'Virtual Machines' "
        f"and armRegionName eq '{location.lower()}'"
    )


def _keep(best: dict[str, _Meter], size: str, meter: _Meter) -> None:
    current = best.get(size)
    if current is None or meter.beats(current):
        best[size] = meter


def parse_items(items: Iterable[Mapping[str, Any]]) -> tuple[dict[str, float], dict[str, float]]:
    """(on-demand price by size, spot price by size) from Retail Prices ``Items``."""
    on_demand: dict[str, _Meter] = {}
    spot: dict[str, _Meter] = {}
    for item in items:
        size = str(item.get("armSkuName") or "")
        sku_name = str(item.get("skuName") or "")
        product = str(item.get("productName") or "")
        if not size or "Windows" in product or sku_name.endswith(_LOW_PRIORITY_SUFFIX):
            continue
        if str(item.get("type") or "Consumption") != "Consumption":
            continue
        unit = str(item.get("unitOfMeasure") or "1 Hour")
        if unit != "1 Hour":
            continue
        try:
            price = float(item.get("retailPrice", item.get("unitPrice")))
        except (TypeError, ValueError):
            continue
        if price < 0:
            continue
        meter = _Meter(
            price=price,
            primary=bool(item.get("isPrimaryMeterRegion", True)),
            effective=str(item.get("effectiveStartDate") or ""),
        )
        _keep(spot if sku_name.endswith(_SPOT_SUFFIX) else on_demand, size, meter)
    return (
        {size: meter.price for size, meter in on_demand.items()},
        {size: meter.price for size, meter in spot.items()},
    )


def spot_price(snapshot: PriceSnapshot, size: str) -> float | None:
    """The Spot price of ``size`` in the snapshot's location (any zone)."""
    return snapshot.spot.get((size, ANY_ZONE))


class RetailPricesClient:
    """Fetches one location's VM prices; ``transport`` is an azure-core ``HttpTransport``
    (``None``: azure-core's default, requests). ``currency`` is an ISO code; prices are USD by
    default so they compare with every other price in the project."""

    def __init__(
        self,
        *,
        transport: Any = None,
        base_url: str = RETAIL_PRICES_URL,
        currency: str = "USD",
        retry_total: int = 3,
    ) -> None:
        self._url = base_url
        self._currency = currency
        policies: list[Any] = [
            HeadersPolicy(),
            UserAgentPolicy(base_user_agent="karpenter-capi"),
            ProxyPolicy(),
            RetryPolicy(retry_total=retry_total),
            NetworkTraceLoggingPolicy(),
        ]
        kwargs: dict[str, Any] = {"policies": policies}
        if transport is not None:
            kwargs["transport"] = transport
        self._client: PipelineClient[Any, Any] = PipelineClient(base_url, **kwargs)

    def items(self, location: str) -> list[Mapping[str, Any]]:
        """Every meter of ``location``'s VM consumption prices, following ``NextPageLink``."""
        query = urlencode(
            {"currencyCode": f"'{self._currency}'", "$filter": price_filter(location)},
            quote_via=quote,
            safe="'$",
        )
        request = HttpRequest("GET", f"{self._url}?{query}")
        items: list[Mapping[str, Any]] = []
        seen: set[str] = set()
        for _ in range(MAX_PAGES):
            response = self._client.send_request(request)
            response.raise_for_status()
            try:
                page = response.json()
            except ValueError as exc:
                raise RetailPricesError(f"{request.url}: not JSON: {exc}") from None
            if not isinstance(page, dict) or not isinstance(page.get("Items"), list):
                raise RetailPricesError(f"{request.url}: no Items in the answer")
            items.extend(item for item in page["Items"] if isinstance(item, dict))
            next_link = page.get("NextPageLink")
            if not next_link:
                return items
            if next_link in seen:
                raise RetailPricesError(f"NextPageLink loops back to {next_link}")
            seen.add(str(next_link))
            request = HttpRequest("GET", str(next_link))
        raise RetailPricesError(
            f"gave up on the Retail Prices API for {location} after {MAX_PAGES} pages "
            f"({len(items)} meters) without the last page: NextPageLink never ended; the "
            "prices are incomplete and were not used"
        )

    def snapshot(self, location: str, now: Callable[[], datetime]) -> PriceSnapshot:
        """A ``PriceSnapshot`` of ``location``, stamped with ``now()`` (the injected clock)."""
        on_demand, spot = parse_items(self.items(location))
        if not on_demand and not spot:
            raise RetailPricesError(f"no Virtual Machines prices for location {location!r}")
        return PriceSnapshot(
            on_demand=on_demand,
            spot={(size, ANY_ZONE): price for size, price in spot.items()},
            fetched_at=now(),
        )

    def close(self) -> None:
        self._client.close()
