"""capa's pods per node, and which offerings it rules out: spot markets, maxPrice, marks.

EC2's catalog comes from moto (real network cards of p4d and p5), prices from Stubbers.
"""

from __future__ import annotations

import logging

import pytest

from karpenter_capi.plugins.capa.catalog import instance_type_info, load_instance_type
from karpenter_capi.plugins.capa.plugin import CapaHooks
from tests.plugins.capa.builders import Stack, aws_template, cluster, machine_deployment, only
from tests.support.aws import ON_DEMAND, REGION, StubbedAws

PRICING_LOGGER = "karpenter_capi.plugins.capa.pricing"


# -- max pods: the default network card's ENIs ----------------------------------------------------


@pytest.mark.parametrize(
    ("instance_type", "pods"),
    # AWS's eni-max-pods.txt: p4d.24xlarge 737 (15 x 49 + 2, not 60 x 49 + 2 over its four
    # cards), p5.48xlarge 100 (2 x 49 + 2, not 64 x 49 + 2 over 32 cards), m5.large 29.
    [("p4d.24xlarge", 737), ("p5.48xlarge", 100), ("m5.large", 29)],
)
def test_max_pods_counts_the_enis_of_the_default_network_card(
    aws: StubbedAws, instance_type: str, pods: int
) -> None:
    entry = load_instance_type(aws.catalog, REGION, instance_type, None)
    assert entry.info is not None
    assert entry.info.max_pods() == pods


def test_max_pods_uses_the_default_card_index_and_falls_back_to_the_total() -> None:
    base = {
        "InstanceType": "x.large",
        "VCpuInfo": {"DefaultVCpus": 2},
        "MemoryInfo": {"SizeInMiB": 8192},
        "ProcessorInfo": {"SupportedArchitectures": ["x86_64"]},
    }
    cards = {
        "MaximumNetworkInterfaces": 12,
        "Ipv4AddressesPerInterface": 10,
        "DefaultNetworkCardIndex": 1,
        "NetworkCards": [
            {"NetworkCardIndex": 0, "MaximumNetworkInterfaces": 8},
            {"NetworkCardIndex": 1, "MaximumNetworkInterfaces": 4},
        ],
    }
    info = instance_type_info({**base, "NetworkInfo": cards})
    assert info is not None
    assert info.max_pods() == 4 * 9 + 2
    total_only = {"MaximumNetworkInterfaces": 3, "Ipv4AddressesPerInterface": 10}
    info = instance_type_info({**base, "NetworkInfo": total_only})
    assert info is not None
    assert info.max_pods() == 29


# -- spot prices fail apart from on-demand prices -------------------------------------------------


def test_a_spot_failure_keeps_new_on_demand_and_previous_spot_prices_and_logs_once(
    aws: StubbedAws, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=PRICING_LOGGER)
    aws.queue_prices()
    stack = Stack(aws, options={"capa": {"price-refresh-interval": "3600"}})
    stack.add(
        *cluster(),
        aws_template("od", "m5.large"),
        aws_template("spot", "m5.large", spot=True),
        machine_deployment("od", "od"),
        machine_deployment("spot", "spot"),
    )
    prices = {
        o.capacity_type: o.price
        for o in only(stack.inventory().instance_types, "m5.large").offerings
    }
    assert prices == {"on-demand": 0.096, "spot": 0.0365}
    for new_price in (0.1, 0.11):
        aws.queue_on_demand({**ON_DEMAND, "m5.large": new_price})
        aws.queue_spot_failure()
        stack.clock.advance(3600)
        offerings = only(stack.inventory().instance_types, "m5.large").offerings
        prices = {o.capacity_type: o.price for o in offerings}
        assert prices == {"on-demand": new_price, "spot": 0.0365}
        assert all(o.available and o.price_source == "AWS" for o in offerings)
    aws.pricing_stub.assert_no_pending_responses()
    aws.spot_stub.assert_no_pending_responses()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "cannot fetch AWS spot prices for us-east-1" in warnings[0]
    assert "keeping 5 previous spot prices" in warnings[0]
    # Spot prices come back: said once, and used.
    aws.queue_prices(spot={("m5.large", "us-east-1a"): 0.03})
    stack.clock.advance(3600)
    prices = {
        o.capacity_type: o.price
        for o in only(stack.inventory().instance_types, "m5.large").offerings
    }
    assert prices == {"on-demand": 0.096, "spot": 0.03}
    assert any("fetched again" in r.getMessage() for r in caplog.records)


def test_a_first_fetch_whose_spot_prices_fail_still_has_on_demand_prices(
    aws: StubbedAws, caplog: pytest.LogCaptureFixture
) -> None:
    aws.queue_on_demand()
    aws.queue_spot_failure()
    stack = Stack(aws, options={"capa": {"price-store": "none"}})
    stack.add(
        *cluster(),
        aws_template("od", "m5.large"),
        aws_template("spot", "m5.large", spot=True),
        machine_deployment("od", "od"),
        machine_deployment("spot", "spot"),
    )
    offerings = {
        o.capacity_type: o for o in only(stack.inventory().instance_types, "m5.large").offerings
    }
    assert (offerings["on-demand"].price, offerings["on-demand"].price_source) == (0.096, "AWS")
    # No spot prices at all: estimated, not ruled out.
    assert offerings["spot"].available
    assert offerings["spot"].price_source == "estimate"
    assert any("no spot prices yet" in r.getMessage() for r in caplog.records)


# -- spot offerings: markets, maxPrice, unavailable marks ------------------------------------------


def test_a_type_without_a_spot_price_in_its_zone_has_no_spot_market(aws: StubbedAws) -> None:
    aws.queue_prices()  # spot prices for m5.large, c5.xlarge, m6i.large; none for m5.xlarge
    stack = Stack(aws)
    stack.add(
        *cluster(),
        aws_template("spot", "m5.xlarge", spot=True),
        machine_deployment("spot", "spot"),
    )
    inventory = stack.inventory()
    [offering] = only(inventory.instance_types, "m5.xlarge").offerings
    assert not offering.available
    [notice] = [n for n in inventory.notices if n.reason == "OfferingNotAvailable"]
    assert "m5.xlarge has no spot price (no spot market) in us-east-1a" in notice.message


def test_spot_max_price_caps_the_spot_price(aws: StubbedAws) -> None:
    aws.queue_prices()  # m5.large spot in us-east-1a: 0.0365
    stack = Stack(aws)
    cheap = aws_template("cheap", "m5.large", spot=True)
    cheap["spec"]["template"]["spec"]["spotMarketOptions"] = {"maxPrice": "0.03"}
    enough = aws_template("enough", "m5.large", spot=True)
    enough["spec"]["template"]["spec"]["spotMarketOptions"] = {"maxPrice": "0.04"}
    stack.add(
        *cluster(),
        cheap,
        enough,
        machine_deployment("cheap", "cheap"),
        machine_deployment("enough", "enough"),
    )
    inventory = stack.inventory()
    by_resource = {r.name: r for r in inventory.resources}
    assert by_resource["enough"].unavailable_reason is None
    assert by_resource["cheap"].unavailable_reason is not None
    [notice] = [
        n for n in inventory.notices if n.name == "cheap" and n.reason == "OfferingNotAvailable"
    ]
    assert "0.0365/h, is above spotMarketOptions.maxPrice 0.03" in notice.message


def test_a_malformed_spot_max_price_is_named(aws: StubbedAws) -> None:
    aws.queue_prices()
    stack = Stack(aws)
    template = aws_template("spot", "m5.large", spot=True)
    template["spec"]["template"]["spec"]["spotMarketOptions"] = {"maxPrice": "cheap"}
    stack.add(*cluster(), template, machine_deployment("spot", "spot"))
    [problem] = stack.inventory().problems
    assert "spotMarketOptions.maxPrice 'cheap' is not a positive number" in problem.message


def test_an_offering_a_launcher_marked_unavailable_is_left_out_for_a_while(
    aws: StubbedAws,
) -> None:
    aws.queue_prices()
    stack = Stack(aws)
    stack.add(
        *cluster(),
        aws_template("m5-large", "m5.large"),
        machine_deployment("a", "m5-large", zone="us-east-1a"),
        machine_deployment("b", "m5-large", zone="us-east-1b"),
    )
    hooks = stack.plugins.plugin("capa")
    assert isinstance(hooks, CapaHooks)
    marks = hooks.unavailable_offerings()
    marks.mark("m5.large", "us-east-1a", "on-demand", "InsufficientInstanceCapacity")
    inventory = stack.inventory()
    available = {o.zone: o.available for o in only(inventory.instance_types, "m5.large").offerings}
    assert available == {"us-east-1a": False, "us-east-1b": True}
    [notice] = [n for n in inventory.notices if n.reason == "OfferingNotAvailable"]
    assert "recently found unavailable (InsufficientInstanceCapacity)" in notice.message
    stack.clock.advance(181)
    available = {
        o.zone: o.available for o in only(stack.inventory().instance_types, "m5.large").offerings
    }
    assert available == {"us-east-1a": True, "us-east-1b": True}
