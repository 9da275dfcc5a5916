"""AWS test doubles for the ``capa`` plugin: moto's EC2 catalog, Stubber-served prices.

moto knows EC2's real instance types and their zones, so ``DescribeInstanceTypes`` and
``DescribeInstanceTypeOfferings`` come from it; its spot prices are a constant and it has no
Pricing API, so ``GetProducts`` and ``DescribeSpotPriceHistory`` are botocore ``Stubber``
responses with realistic us-east-1 prices, built the way AWS answers (a ``PriceList`` of JSON
strings, pages joined by ``NextToken``). Use only inside ``moto.mock_aws()`` with fake
credentials in the environment (``fake_credentials``): nothing reaches the network.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.stub import ANY, Stubber
from moto import mock_aws

from karpenter_capi.sim.scenario.aws import price_list_entry, serve_catalog_from_memory

REGION = "us-east-1"
# On-demand Linux, shared tenancy, us-east-1 (USD per hour, as the Pricing API lists them).
ON_DEMAND: Mapping[str, float] = {
    "m5.large": 0.096,
    "m5.xlarge": 0.192,
    "m6i.large": 0.096,
    "c5.large": 0.085,
    "c5.xlarge": 0.17,
    "m6g.large": 0.077,
}
# Spot prices per (type, zone), as DescribeSpotPriceHistory returned them one day.
SPOT: Mapping[tuple[str, str], float] = {
    ("m5.large", "us-east-1a"): 0.0365,
    ("m5.large", "us-east-1b"): 0.0412,
    ("m5.large", "us-east-1c"): 0.0388,
    ("c5.xlarge", "us-east-1a"): 0.0671,
    ("m6i.large", "us-east-1a"): 0.0391,
}
EXPECTED_FILTERS = [
    {"Type": "TERM_MATCH", "Field": "regionCode", "Value": REGION},
    {"Type": "TERM_MATCH", "Field": "operatingSystem", "Value": "Linux"},
    {"Type": "TERM_MATCH", "Field": "preInstalledSw", "Value": "NA"},
    {"Type": "TERM_MATCH", "Field": "capacitystatus", "Value": "Used"},
    {"Type": "TERM_MATCH", "Field": "marketoption", "Value": "OnDemand"},
    {"Type": "TERM_MATCH", "Field": "tenancy", "Value": "Shared"},
]


def fake_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """Credentials that can sign nothing real, and no shared config to read."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SECURITY_TOKEN": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_CONFIG_FILE": "/dev/null",
        "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    }.items():
        monkeypatch.setenv(name, value)


def product(instance_type: str, price: float, region: str = REGION) -> str:
    """One GetProducts ``PriceList`` entry, shaped like AWS's (the simulator's own)."""
    return price_list_entry(instance_type, price, region)


class _SplitEc2:
    """One EC2 client as the plugin sees it: moto's catalog, the Stubber's spot history."""

    def __init__(self, catalog: Any, spot: Any) -> None:
        self._catalog = catalog
        self._spot = spot

    def get_paginator(self, name: str) -> Any:
        target = self._spot if name == "describe_spot_price_history" else self._catalog
        return target.get_paginator(name)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._spot if name == "describe_spot_price_history" else self._catalog, name)


class StubbedAws:
    """``AwsClients`` for tests: create inside ``mock_aws()``; queue prices per refresh."""

    def __init__(self, region: str = REGION) -> None:
        self.region = region
        self.catalog = serve_catalog_from_memory(boto3.client("ec2", region_name=region))
        self.spot_client = boto3.client("ec2", region_name=region)
        self.pricing_client = boto3.client("pricing", region_name="us-east-1")
        self.secrets_client = boto3.client("secretsmanager", region_name=region)
        self.spot_stub = Stubber(self.spot_client)
        self.pricing_stub = Stubber(self.pricing_client)
        self.spot_stub.activate()
        self.pricing_stub.activate()
        self.pricing_regions: list[str] = []

    def ec2(self, region: str) -> Any:
        return _SplitEc2(self.catalog, self.spot_client)

    def pricing(self, region: str) -> Any:
        self.pricing_regions.append(region)
        return self.pricing_client

    def sqs(self, region: str) -> Any:
        """moto's SQS (the interruption queue)."""
        return boto3.client("sqs", region_name=region)

    def secretsmanager(self, region: str) -> Any:
        return self.secrets_client

    def queue_prices(
        self,
        on_demand: Mapping[str, float] = ON_DEMAND,
        spot: Mapping[tuple[str, str], float] = SPOT,
        *,
        page_size: int = 2,
    ) -> None:
        """The answers of one successful refresh: GetProducts pages, then the spot history."""
        self.queue_on_demand(on_demand, page_size=page_size)
        self.queue_spot(spot)

    def queue_on_demand(
        self, on_demand: Mapping[str, float] = ON_DEMAND, *, page_size: int = 2
    ) -> None:
        """GetProducts pages of one refresh, ``page_size`` products a page."""
        items = [product(name, price, self.region) for name, price in on_demand.items()]
        pages = [items[i : i + page_size] for i in range(0, len(items), page_size)] or [[]]
        for index, page in enumerate(pages):
            expected: dict[str, Any] = {
                "ServiceCode": "AmazonEC2",
                "Filters": EXPECTED_FILTERS,
                "FormatVersion": "aws_v1",
            }
            if index:
                expected["NextToken"] = f"page-{index}"
            response: dict[str, Any] = {"FormatVersion": "aws_v1", "PriceList": page}
            if index + 1 < len(pages):
                response["NextToken"] = f"page-{index + 1}"
            self.pricing_stub.add_response("get_products", response, expected)

    def queue_spot(self, spot: Mapping[tuple[str, str], float] = SPOT) -> None:
        """The DescribeSpotPriceHistory answer of one refresh."""
        stamp = datetime(2025, 12, 31, 23, 0, tzinfo=UTC)
        history = [
            {
                "AvailabilityZone": zone,
                "InstanceType": instance_type,
                "ProductDescription": "Linux/UNIX",
                "SpotPrice": f"{price:.6f}",
                "Timestamp": stamp,
            }
            for (instance_type, zone), price in spot.items()
        ]
        # An older price of the same type and zone, which the newest must beat.
        history.append(
            {
                "AvailabilityZone": "us-east-1a",
                "InstanceType": "m5.large",
                "ProductDescription": "Linux/UNIX",
                "SpotPrice": "0.0999",
                "Timestamp": datetime(2025, 12, 31, 20, 0, tzinfo=UTC),
            }
        )
        self.spot_stub.add_response(
            "describe_spot_price_history",
            {"SpotPriceHistory": history, "NextToken": ""},
            {"ProductDescriptions": ["Linux/UNIX"], "StartTime": ANY},
        )

    def queue_spot_failure(self) -> None:
        """DescribeSpotPriceHistory fails once (say, the IAM policy lacks the action)."""
        self.spot_stub.add_client_error(
            "describe_spot_price_history",
            service_error_code="UnauthorizedOperation",
            service_message="You are not authorized to perform this operation.",
            http_status_code=403,
        )

    def queue_pricing_failure(self) -> None:
        """The Pricing API fails once (the refresh fails before asking for spot prices)."""
        self.pricing_stub.add_client_error(
            "get_products",
            service_error_code="InternalErrorException",
            service_message="internal error",
            http_status_code=500,
        )


@contextmanager
def stubbed_aws(region: str = REGION) -> Iterator[StubbedAws]:
    """moto's EC2 plus Stubber prices, for the duration of the block."""
    with mock_aws():
        yield StubbedAws(region)
