"""capz: AzureMachineTemplates Azure cannot describe, Resource SKU and Retail Prices errors and
throttling from the simulator's Azure transport, and a corrupted price ConfigMap; each next to a
good MachineDeployment that carries its own shape and price.

Resource SKUs are one list per subscription, so an ARM failure leaves every Azure template
undescribed: the bad MachineDeployment (nothing but Azure describes it) is left out, naming its
template and Azure's error, while the good one (its annotations describe it) is kept with a
note and still gets its NodeClaim in the same round. The SDK's retries run (the transport does
not sleep), so a throttle that ends within them is not an error at all.
"""

from __future__ import annotations

from typing import Any

import pytest

from .cloud import PRICES_NAMESPACE, CapzWorld
from .test_capa import CORRUPTED

pytest.importorskip("azure.core")

MD = "MachineDeployment default/bad"
TEMPLATE = "AzureMachineTemplate default/bad"
GOOD_TYPE = "Standard_D2s_v5"
SKUS = "/providers/Microsoft.Compute/skus"


def _error(code: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": f"{code} (injected)"}}


ARM_ERRORS = [
    ("throttled", 429, _error("TooManyRequests"), "TooManyRequests"),
    ("forbidden", 403, _error("AuthorizationFailed"), "AuthorizationFailed"),
    ("internal-error", 500, _error("InternalServerError"), "InternalServerError"),
    ("unavailable", 503, _error("ServiceUnavailable"), "ServiceUnavailable"),
    ("subscription-not-found", 404, _error("SubscriptionNotFound"), "SubscriptionNotFound"),
]


@pytest.mark.parametrize(
    ("status", "body", "code"),
    [pytest.param(status, body, code, id=case) for case, status, body, code in ARM_ERRORS],
)
def test_a_resource_skus_error_names_the_template_and_the_annotated_resource_launches(
    status: int, body: dict[str, Any], code: str
) -> None:
    world = CapzWorld()
    world.fail_azure(SKUS, status, body)
    world.add_bad("Standard_D4s_v5")
    world.pending_pod()

    report = world.provisioning_round()

    ready = world.nodeclass_ready()
    assert ready["status"] == "True", ready
    line = next(x for x in ready["message"].splitlines() if MD in x)
    assert TEMPLATE in line
    assert code in line or str(status) in line, line
    event = world.event_about(MD, TEMPLATE)
    assert event["type"] == "Warning"
    world.assert_good_launched(report, GOOD_TYPE)


def test_a_throttle_that_ends_within_the_sdks_retries_is_not_an_error() -> None:
    world = CapzWorld()
    world.fail_azure(SKUS, 429, _error("TooManyRequests"), times=2)
    world.add_bad("Standard_D4s_v5", disk_gib=None)
    world.pending_pod(cpu="3")  # only the bad resource's 4 vCPUs hold it

    report = world.provisioning_round()

    assert MD not in world.nodeclass_ready()["message"].split("left out:")[-1].split("notes:")[0]
    world.assert_good_launched(report, "Standard_D4s_v5")


def test_resource_skus_that_are_not_a_list_are_named() -> None:
    world = CapzWorld()
    world.fail_azure(SKUS, 200, {"value": "all of them"})
    world.add_bad("Standard_D4s_v5")
    world.pending_pod()

    report = world.provisioning_round()

    line = next(x for x in world.nodeclass_ready()["message"].splitlines() if MD in x)
    assert TEMPLATE in line
    world.event_about(MD, TEMPLATE)
    world.assert_good_launched(report, GOOD_TYPE)


TEMPLATES = [
    ("size-unknown", "Standard_Z9_v9", {}, ("Standard_Z9_v9 is not offered in location eastus",)),
    ("size-empty", "", {}, ("vmSize",)),
    ("size-garbage", "not a size!", {}, ("not a size! is not offered",)),
    # (A maxPrice that is not a quantity, "cheap", never gets here: CAPZ's CRD refuses it.)
    (
        "spot-max-price-negative",
        "Standard_D4s_v5",
        {"spot": {"maxPrice": "-5"}},
        ("maxPrice '-5' is negative",),
    ),
]


@pytest.mark.parametrize(
    ("vm_size", "template", "words"),
    [pytest.param(v, t, w, id=case) for case, v, t, w in TEMPLATES],
)
def test_a_template_azure_cannot_describe_is_named_and_the_others_launch(
    vm_size: str, template: dict[str, Any], words: tuple[str, ...]
) -> None:
    world = CapzWorld()
    world.add_bad(vm_size, **template)
    world.pending_pod()

    report = world.provisioning_round()

    ready = world.nodeclass_ready()
    lines = [x for x in ready["message"].splitlines() if MD in x]
    assert any(all(word in line for word in words) for line in lines), lines
    event = world.event_about(MD, *words)
    assert event["type"] == "Warning"
    world.assert_good_launched(report, GOOD_TYPE)


def test_retail_prices_down_estimate_the_price_and_still_launch() -> None:
    world = CapzWorld({"price-store": "none"})
    world.azure.prices.fail = True
    world.add_bad("Standard_D4s_v5")
    world.pending_pod()

    report = world.provisioning_round()

    ready = world.nodeclass_ready()
    assert f"{MD}: Azure has no price for it yet" in ready["message"]
    event = world.event_about(MD, "price estimated from the shape")
    assert event["reason"] == "PriceEstimated"
    world.assert_good_launched(report, GOOD_TYPE)


@pytest.mark.parametrize(
    ("text", "problem"), [pytest.param(t, p, id=case) for case, t, p in CORRUPTED[:6]]
)
def test_a_corrupted_azure_price_configmap_is_named_and_ignored(text: str, problem: str) -> None:
    world = CapzWorld()
    world.azure.prices.fail = True
    world.corrupt_prices(text)
    world.add_bad("Standard_D4s_v5")
    world.pending_pod()

    report = world.provisioning_round()

    where = f"ConfigMap {PRICES_NAMESPACE}/{world.prices_configmap}"
    event = world.event_about(where, problem)
    assert (event["type"], event["reason"]) == ("Warning", "InvalidPriceSnapshot")
    assert f"{MD}: Azure has no price for it yet" in world.nodeclass_ready()["message"]
    world.assert_good_launched(report, GOOD_TYPE)
