"""The Retail Prices client against a fake two-page endpoint."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from azure.core.exceptions import HttpResponseError

from karpenter_capi.plugins.capz import retail
from karpenter_capi.plugins.capz.retail import (
    ANY_ZONE,
    RetailPricesClient,
    RetailPricesError,
    parse_items,
    spot_price,
)
from karpenter_capi.sim.azure.eastus import PricesEndpoint, eastus_meters, meter
from karpenter_capi.sim.azure.transport import PRICES_PATH, FakeAzureTransport, query

NOW = datetime(2026, 11, 23, 12, tzinfo=UTC)


def _client(endpoint: PricesEndpoint) -> tuple[RetailPricesClient, FakeAzureTransport]:
    transport = FakeAzureTransport({PRICES_PATH: endpoint})
    return RetailPricesClient(transport=transport), transport


def test_on_demand_and_spot_prices_over_two_pages() -> None:
    endpoint = PricesEndpoint(eastus_meters(), page_size=6)
    client, transport = _client(endpoint)
    snapshot = client.snapshot("eastus", lambda: NOW)
    assert len(transport.requests) == 2  # 12 meters in pages of 6: NextPageLink followed once
    assert snapshot.on_demand["Standard_D4s_v5"] == 0.192
    assert spot_price(snapshot, "Standard_D4s_v5") == 0.0384
    assert snapshot.spot[("Standard_D4s_v5", ANY_ZONE)] == 0.0384
    # From the second page:
    assert snapshot.on_demand["Standard_B2s"] == 0.0416
    assert snapshot.fetched_at == NOW


def test_the_filter_and_currency_are_sent() -> None:
    client, transport = _client(PricesEndpoint(eastus_meters(), page_size=100))
    client.items("EastUS")
    params = query(transport.requests[0])
    assert params["$filter"] == [
        "priceType eq 'Consumption' and serviceName eq 'Virtual Machines' "
        "and armRegionName eq 'eastus'"
    ]
    assert params["currencyCode"] == ["'USD'"]
    assert "Authorization" not in transport.requests[0].headers  # a public API: no credential


def test_windows_and_low_priority_meters_are_ignored() -> None:
    on_demand, spot = parse_items(eastus_meters())
    assert on_demand["Standard_D4s_v5"] == 0.192  # not 0.376 (Windows)
    assert spot["Standard_D4s_v5"] == 0.0384  # not 0.0192 (Low Priority) nor 0.0752 (Windows)


def test_the_primary_meter_wins_over_a_secondary_duplicate() -> None:
    on_demand, _ = parse_items(eastus_meters())
    assert on_demand["Standard_E4s_v5"] == 0.252


def test_a_size_without_a_spot_meter_has_no_spot_price() -> None:
    on_demand, spot = parse_items(eastus_meters())
    assert "Standard_B2s" in on_demand
    assert "Standard_B2s" not in spot


def test_meters_in_other_units_or_malformed_are_skipped() -> None:
    monthly = {**meter("Standard_D4s_v5", "D4s v5", 140.0), "unitOfMeasure": "1/Month"}
    broken = {**meter("Standard_D2s_v5", "D2s v5", 0.0), "retailPrice": "n/a"}
    on_demand, _ = parse_items([monthly, broken])
    assert on_demand == {}


def test_a_failing_endpoint_raises_after_the_sdk_retries() -> None:
    endpoint = PricesEndpoint(eastus_meters())
    endpoint.fail = True
    client, _ = _client(endpoint)
    with pytest.raises(HttpResponseError):
        client.snapshot("eastus", lambda: NOW)
    assert endpoint.calls == 4  # azure-core's RetryPolicy, retry_total=3, no real sleeping


def test_an_empty_location_is_an_error() -> None:
    client, _ = _client(PricesEndpoint([]))
    with pytest.raises(RetailPricesError, match="no Virtual Machines prices"):
        client.snapshot("nowhere", lambda: NOW)


def test_a_big_location_is_read_past_two_hundred_pages() -> None:
    meters = [meter(f"Standard_X{i}", f"X{i}", 0.01 + i / 10000) for i in range(250)]
    client, transport = _client(PricesEndpoint(meters, page_size=1))
    snapshot = client.snapshot("eastus", lambda: NOW)
    assert len(transport.requests) == 250
    assert len(snapshot.on_demand) == 250


def test_a_next_page_link_that_never_ends_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(retail, "MAX_PAGES", 3)
    client, transport = _client(PricesEndpoint(eastus_meters(), page_size=2))
    with pytest.raises(RetailPricesError, match=r"after 3 pages \(6 meters\).*incomplete"):
        client.snapshot("eastus", lambda: NOW)
    assert len(transport.requests) == 3
