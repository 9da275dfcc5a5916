"""EC2 prices of one region: on-demand from the Pricing API, spot from the spot price history.

On-demand: ``pricing:GetProducts`` on service ``AmazonEC2`` with the filters that select the
plain hourly Linux price of a shared-tenancy instance (regionCode, operatingSystem Linux,
preInstalledSw NA, capacitystatus Used, marketoption OnDemand, tenancy Shared), paginated; each
product's price is ``terms.OnDemand.*.priceDimensions.*.pricePerUnit.USD``. The Pricing API is
served from a few regions only; ``pricing_region`` picks the one AWS documents for the
cluster's region.

Spot: ``ec2:DescribeSpotPriceHistory`` for ``Linux/UNIX`` from now, keeping the latest price of
each (instance type, zone). The two are fetched apart (``RegionPrices``): a spot failure keeps
the new on-demand prices and the previous spot prices.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any, Final

from karpenter_capi.plugin_api import Clock
from karpenter_capi.plugins._cloud.metrics import CloudMetrics, timed
from karpenter_capi.plugins._cloud.pricebook import PriceSnapshot
from karpenter_capi.plugins.capa.clients import AwsClients

log = logging.getLogger(__name__)

SPOT_PRODUCT: Final = "Linux/UNIX"
_ON_DEMAND_FILTERS: Final = (
    ("operatingSystem", "Linux"),
    ("preInstalledSw", "NA"),
    ("capacitystatus", "Used"),
    ("marketoption", "OnDemand"),
    ("tenancy", "Shared"),
)


def pricing_region(region: str) -> str:
    """The region of the Pricing API endpoint that serves ``region``'s prices.

    AWS serves the Pricing API from us-east-1, eu-central-1 and ap-south-1 (and cn-northwest-1
    for the China partition); the nearest one answers for every commercial region.
    """
    if region.startswith("cn-"):
        return "cn-northwest-1"
    if region.startswith("ap-"):
        return "ap-south-1"
    if region.startswith(("eu-", "me-", "af-", "il-")):
        return "eu-central-1"
    return "us-east-1"


def on_demand_price(product: Mapping[str, Any]) -> float | None:
    """The hourly USD price in one ``GetProducts`` product, or ``None`` if it has none."""
    for term in ((product.get("terms") or {}).get("OnDemand") or {}).values():
        for dimension in (term.get("priceDimensions") or {}).values():
            raw: Any = (dimension.get("pricePerUnit") or {}).get("USD")
            try:
                price = float(raw)
            except (TypeError, ValueError):
                continue
            # A zero price is the reserved-capacity placeholder some products carry.
            if price > 0 and math.isfinite(price):
                return price
    return None


def parse_products(price_list: Iterable[str | Mapping[str, Any]]) -> dict[str, float]:
    """Instance type -> hourly on-demand price, from ``GetProducts``' ``PriceList`` items."""
    prices: dict[str, float] = {}
    for item in price_list:
        product = json.loads(item) if isinstance(item, str) else item
        instance_type = ((product.get("product") or {}).get("attributes") or {}).get("instanceType")
        price = on_demand_price(product)
        if instance_type and price is not None:
            # Several SKUs can remain after filtering (e.g. licence variants); the cheapest is
            # the plain Linux one.
            previous = prices.get(instance_type)
            prices[instance_type] = price if previous is None else min(previous, price)
    return prices


def fetch_on_demand(pricing: Any, region: str, metrics: CloudMetrics | None) -> dict[str, float]:
    """Every on-demand Linux price of ``region`` (``pricing``: a client of ``pricing_region``)."""
    filters = [{"Type": "TERM_MATCH", "Field": "regionCode", "Value": region}]
    filters += [{"Type": "TERM_MATCH", "Field": f, "Value": v} for f, v in _ON_DEMAND_FILTERS]
    prices: dict[str, float] = {}
    with timed(metrics, "GetProducts"):
        paginator = pricing.get_paginator("get_products")
        for page in paginator.paginate(
            ServiceCode="AmazonEC2", Filters=filters, FormatVersion="aws_v1"
        ):
            for name, price in parse_products(page.get("PriceList") or []).items():
                prices[name] = min(price, prices.get(name, price))
    if not prices:
        # An empty answer is a wrong filter or region, not "everything is free".
        raise ValueError(f"the Pricing API returned no on-demand EC2 prices for {region}")
    return prices


def fetch_spot(
    ec2: Any, now: datetime, metrics: CloudMetrics | None
) -> dict[tuple[str, str], float]:
    """The current spot price of every (instance type, zone) of the client's region."""
    latest: dict[tuple[str, str], tuple[datetime, float]] = {}
    with timed(metrics, "DescribeSpotPriceHistory"):
        paginator = ec2.get_paginator("describe_spot_price_history")
        for page in paginator.paginate(ProductDescriptions=[SPOT_PRODUCT], StartTime=now):
            for entry in page.get("SpotPriceHistory") or []:
                try:
                    price = float(entry["SpotPrice"])
                except (KeyError, TypeError, ValueError):
                    continue
                key = (str(entry["InstanceType"]), str(entry["AvailabilityZone"]))
                stamp: datetime = entry["Timestamp"]
                if key not in latest or stamp > latest[key][0]:
                    latest[key] = (stamp, price)
    return {key: price for key, (_, price) in latest.items()}


class RegionPrices:
    """The ``fetch`` of one region's ``PriceBook``: on-demand and spot prices, fetched apart.

    On-demand prices price every template, so a failure of ``GetProducts`` fails the refresh
    and the book keeps its last good snapshot. Spot prices come from another API (another IAM
    action, another throttle): when only ``DescribeSpotPriceHistory`` fails, the new on-demand
    prices are kept with the spot prices of ``previous()`` (the book's current snapshot; none on
    a first fetch), and the failure is logged once, until spot prices come back. Called under
    the book's refresh lock, one call at a time.
    """

    def __init__(
        self,
        clients: AwsClients,
        region: str,
        clock: Clock,
        metrics: CloudMetrics | None,
        previous: Callable[[], PriceSnapshot | None],
    ) -> None:
        self._clients = clients
        self._region = region
        self._clock = clock
        self._metrics = metrics
        self._previous = previous
        self._spot_failing = False

    def __call__(self) -> PriceSnapshot:
        now = self._clock.now()
        region = self._region
        on_demand = fetch_on_demand(
            self._clients.pricing(pricing_region(region)), region, self._metrics
        )
        spot: Mapping[tuple[str, str], float]
        try:
            spot = fetch_spot(self._clients.ec2(region), now, self._metrics)
        except Exception as exc:  # any SDK error: the on-demand prices are still good
            spot = self._spot_failed(exc)
        else:
            if self._spot_failing:
                log.info("AWS spot prices for %s fetched again after failures", region)
            self._spot_failing = False
        log.info(
            "AWS prices for %s: %d on-demand, %d spot (type, zone) prices",
            region,
            len(on_demand),
            len(spot),
        )
        return PriceSnapshot(on_demand=on_demand, spot=spot, fetched_at=now)

    def _spot_failed(self, exc: Exception) -> Mapping[tuple[str, str], float]:
        previous = self._previous()
        kept = previous.spot if previous is not None else {}
        if not self._spot_failing:
            log.warning(
                "cannot fetch AWS spot prices for %s (%s: %s); %s, retrying at each refresh",
                self._region,
                type(exc).__name__,
                exc,
                f"keeping {len(kept)} previous spot prices" if kept else "no spot prices yet",
            )
        else:
            log.debug("AWS spot prices for %s failed again: %s", self._region, exc)
        self._spot_failing = True
        return kept
