"""capa: AWSMachineTemplates EC2 cannot describe, EC2 and Pricing API errors and throttling,
and a corrupted price ConfigMap; each next to a good m5.large MachineDeployment.

EC2's catalog is moto's; the errors are what EC2 answers (``RequestLimitExceeded`` when
throttled, ``UnauthorizedOperation`` when the IAM policy lacks an action, 5xx), injected before
the call; prices are Stubber answers or errors. One provisioning round must name the template
or ConfigMap and the problem, and still create the good MachineDeployment's NodeClaim.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.aws import StubbedAws, fake_credentials, stubbed_aws

from .cloud import PRICES_NAMESPACE, CapaWorld

pytest.importorskip("moto")

TEMPLATE = "AWSMachineTemplate default/bad"
MD = "MachineDeployment default/bad"


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[StubbedAws]:
    fake_credentials(monkeypatch)
    with stubbed_aws() as doubles:
        yield doubles


# (id, EC2 operation, error code, HTTP status)
EC2_ERRORS = [
    ("throttled", "DescribeInstanceTypes", "RequestLimitExceeded", 503),
    ("unauthorized", "DescribeInstanceTypes", "UnauthorizedOperation", 403),
    ("internal-error", "DescribeInstanceTypes", "InternalError", 500),
    ("unavailable", "DescribeInstanceTypes", "Unavailable", 503),
    ("offerings-throttled", "DescribeInstanceTypeOfferings", "RequestLimitExceeded", 503),
    ("offerings-unauthorized", "DescribeInstanceTypeOfferings", "UnauthorizedOperation", 403),
]


@pytest.mark.parametrize(
    ("operation", "code", "status"),
    [pytest.param(op, code, status, id=case) for case, op, code, status in EC2_ERRORS],
)
def test_an_ec2_error_describing_one_template_names_it_and_the_others_launch(
    aws: StubbedAws, operation: str, code: str, status: int
) -> None:
    aws.queue_prices()
    world = CapaWorld(aws)
    world.fail_ec2(operation, code, status, only="c5.xlarge")
    world.add_bad("c5.xlarge")
    world.pending_pod()

    report = world.provisioning_round()

    ready = world.nodeclass_ready()
    assert ready["status"] == "True", ready
    line = next(x for x in ready["message"].splitlines() if MD in x)
    assert TEMPLATE in line
    assert "cannot read the EC2 catalog" in line
    assert code in line
    event = world.event_about(MD, TEMPLATE, code)
    assert (event["type"], event["reason"]) == ("Warning", "MachineTemplateNotDescribed")
    world.assert_good_launched(report, "m5.large")


# (id, template instance type, spot?, MachineDeployment extras, words)
TEMPLATES = [
    ("type-unknown", "m5.enormous", False, {}, ("m5.enormous is not sold in us-east-1",)),
    # (A template with no instanceType never gets here: CAPA's v1beta2 CRD requires it.)
    ("type-garbage", "not a type!", False, {}, ("not a type! is not sold in us-east-1",)),
    (
        "zone-not-sold",
        "m5.large",
        False,
        {"zone": "us-east-1e", "annotations": {"karpenter.cluster.x-k8s.io/price": "1"}},
        ("not offered as on-demand in zone us-east-1e",),
    ),
]


@pytest.mark.parametrize(
    ("instance_type", "spot", "extras", "words"),
    [pytest.param(t, s, e, w, id=case) for case, t, s, e, w in TEMPLATES],
)
def test_a_template_ec2_cannot_describe_is_named_and_the_others_launch(
    aws: StubbedAws,
    instance_type: str | None,
    spot: bool,
    extras: dict[str, object],
    words: tuple[str, ...],
) -> None:
    aws.queue_prices()
    world = CapaWorld(aws)
    world.add_bad(instance_type, spot=spot, **extras)  # type: ignore[arg-type]
    world.pending_pod()

    report = world.provisioning_round()

    ready = world.nodeclass_ready()
    line = next(x for x in ready["message"].splitlines() if MD in x)
    assert all(word in line for word in words), line
    event = world.event_about(MD, *words)
    assert event["type"] == "Warning"
    world.assert_good_launched(report, "m5.large")


@pytest.mark.parametrize(
    ("code", "status"),
    [
        pytest.param("ThrottlingException", 400, id="throttled"),
        pytest.param("InternalErrorException", 500, id="internal-error"),
        pytest.param("AccessDeniedException", 403, id="access-denied"),
    ],
)
def test_a_pricing_api_error_estimates_the_price_says_so_and_still_launches(
    aws: StubbedAws, code: str, status: int
) -> None:
    aws.pricing_stub.add_client_error(
        "get_products", service_error_code=code, service_message="no", http_status_code=status
    )
    world = CapaWorld(aws, {"price-store": "none"})
    world.pending_pod()

    report = world.provisioning_round()

    ready = world.nodeclass_ready()
    assert "MachineDeployment default/good: AWS has no price for it yet" in ready["message"]
    event = world.event_about("MachineDeployment default/good", "price estimated from the shape")
    assert event["reason"] == "PriceEstimated"
    world.assert_good_launched(report, "m5.large")


def test_spot_prices_refused_leave_spot_unpriced_and_on_demand_launching(
    aws: StubbedAws,
) -> None:
    aws.queue_on_demand()
    aws.queue_spot_failure()
    world = CapaWorld(aws, {"price-store": "none"})
    world.add_bad("m5.large", spot=True)
    world.pending_pod()

    report = world.provisioning_round()

    ready = world.nodeclass_ready()
    assert f"{MD}: AWS has no price for it yet" in ready["message"]
    world.event_about(MD, "price estimated from the shape")
    world.assert_good_launched(report, "m5.large")


# (id, prices.json, what the Event says is wrong); shared with the capz cases.
CORRUPTED = [
    ("not-json", "{{{ prices", "malformed price snapshot"),
    ("empty-object", "{}", "not a version-1 price snapshot"),
    ("other-version", '{"version": 2, "onDemand": {}}', "not a version-1 price snapshot"),
    ("a-list", "[1, 2]", "not a version-1 price snapshot"),
    (
        "negative-price",
        '{"version":1,"fetchedAt":"2025-12-31T00:00:00Z","onDemand":{"m5.large":-1},"spot":{}}',
        "is not a finite number >= 0",
    ),
    (
        "price-word",
        '{"version":1,"fetchedAt":"2025-12-31T00:00:00Z","onDemand":{"m5.large":"cheap"}}',
        "could not convert",
    ),
    (
        "spot-key",
        '{"version":1,"fetchedAt":"2025-12-31T00:00:00Z","onDemand":{},"spot":{"m5.large":0.03}}',
        "spot key 'm5.large' is not type|zone",
    ),
    (
        "no-timestamp",
        '{"version":1,"onDemand":{"m5.large":0.096},"spot":{}}',
        "malformed price snapshot",
    ),
    (
        "timestamp-garbage",
        '{"version":1,"fetchedAt":"yesterday","onDemand":{"m5.large":0.096},"spot":{}}',
        "yesterday",
    ),
    (
        "on-demand-a-list",
        '{"version":1,"fetchedAt":"2025-12-31T00:00:00Z","onDemand":[["m5.large",1]]}',
        "onDemand is not an object of prices",
    ),
]


@pytest.mark.parametrize(
    ("text", "problem"), [pytest.param(t, p, id=case) for case, t, p in CORRUPTED]
)
def test_a_corrupted_price_configmap_is_named_and_ignored_while_the_cloud_is_down(
    aws: StubbedAws, text: str, problem: str
) -> None:
    aws.queue_pricing_failure()
    world = CapaWorld(aws)
    world.corrupt_prices(text)
    world.pending_pod()

    report = world.provisioning_round()

    where = f"ConfigMap {PRICES_NAMESPACE}/{world.prices_configmap}"
    event = world.event_about(where, problem)
    assert (event["type"], event["reason"]) == ("Warning", "InvalidPriceSnapshot")
    assert event["involvedObject"]["name"] == world.prices_configmap
    assert "AWS has no price for it yet" in world.nodeclass_ready()["message"]
    world.assert_good_launched(report, "m5.large")
    assert world.prices_text() == text  # nothing better to write yet


def test_a_corrupted_price_configmap_is_replaced_by_the_next_good_fetch(aws: StubbedAws) -> None:
    aws.queue_prices()
    world = CapaWorld(aws)
    world.corrupt_prices("{{{ prices")
    world.pending_pod()

    report = world.provisioning_round()

    world.event_about(f"ConfigMap {PRICES_NAMESPACE}/{world.prices_configmap}", "malformed")
    assert [d.price for d in report.launched] == [0.096]
    assert '"m5.large":0.096' in world.prices_text()
    world.assert_good_launched(report, "m5.large")
