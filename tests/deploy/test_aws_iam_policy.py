"""The AWS IAM policies the capa plugin documents allow every call it makes, and only those.

The policies are ``deploy/iam/capa-prices.json`` (the catalog and prices, any capa install) and
``deploy/iam/capa-fleet.json`` (what the ``CAPAFleet`` launch mode adds); docs/aws.md shows
them and must show the same. The calls are collected from botocore itself: a
``provide-client-params`` handler on every client the plugin is given (moto's EC2, the Stubber
clients of spot and list prices) sees each operation before it is served, and keeps those made
from the plugin's own code (the test harness uses the same clients to set up moto's VPC and
look at instances). The flow is ``rbac_native.drive_capa_fleet``: inventory and prices, a
launch with its launch template, a capacity error and retry, a restart, ``get``, delete, and
garbage collection of orphans.

What a policy grants beyond the calls is an authorization AWS checks on the caller for a call
it made, each listed in ``IMPLIED`` with the call and the reason.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from .rbac_native import drive_capa_fleet, fleet_world

REPO = Path(__file__).resolve().parents[2]
PRICES_POLICY = REPO / "deploy" / "iam" / "capa-prices.json"
FLEET_POLICY = REPO / "deploy" / "iam" / "capa-fleet.json"
AWS_DOC = REPO / "docs" / "aws.md"
PLUGIN_PACKAGE = "karpenter_capi.plugins."

IMPLIED: dict[str, str] = {
    "ec2:RunInstances": "CreateFleet of type instant launches with the caller's own rights "
    "(no service-linked role), authorized as RunInstances",
    "ec2:CreateTags": "the TagSpecifications of CreateFleet (instance, fleet), of the launch "
    "template's data (volume, network-interface) and of CreateLaunchTemplate: tag-on-create is "
    "authorized as CreateTags",
    "secretsmanager:TagResource": "CreateSecret with Tags (the cluster's, as CAPA tags its "
    "bootstrap secrets) is authorized as TagResource too",
    "iam:PassRole": "the launch template names the AWSMachineTemplate's instance profile, so "
    "launching from it passes the nodes' role to EC2",
    "iam:CreateServiceLinkedRole": "the first Spot launch of an account creates "
    "AWSServiceRoleForEC2Spot for the caller",
}
"""Actions granted for a call the plugin makes, not called themselves: why."""


def _actions(policy: dict[str, Any]) -> set[str]:
    found: set[str] = set()
    for statement in policy["Statement"]:
        assert statement["Effect"] == "Allow"
        action = statement["Action"]
        found.update([action] if isinstance(action, str) else action)
    return found


def _from_plugin_code() -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        if str(frame.f_globals.get("__name__", "")).startswith(PLUGIN_PACKAGE):
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


@pytest.fixture(scope="module")
def called() -> set[str]:
    """Every AWS operation the capa plugin called in the CAPAFleet flow, as IAM actions."""
    found: set[str] = set()

    def record(model: Any, **_: Any) -> None:
        if _from_plugin_code():
            found.add(f"{model.service_model.signing_name}:{model.name}")

    with pytest.MonkeyPatch.context() as monkeypatch, fleet_world(monkeypatch) as world:
        aws = world.aws
        for client in (aws.catalog, aws.spot_client, aws.pricing_client, aws.secrets_client):
            client.meta.events.register("provide-client-params", record)
        drive_capa_fleet(world, world.new_plugins)
    return found


def test_the_policies_allow_every_call_the_plugin_makes(called: set[str]) -> None:
    granted = _actions(json.loads(PRICES_POLICY.read_text()))
    granted |= _actions(json.loads(FLEET_POLICY.read_text()))
    assert sorted(called - granted) == []


def test_the_policies_grant_nothing_beyond_the_calls_and_what_they_imply(
    called: set[str],
) -> None:
    granted = _actions(json.loads(PRICES_POLICY.read_text()))
    granted |= _actions(json.loads(FLEET_POLICY.read_text()))
    assert sorted(granted - called) == sorted(IMPLIED)
    # Nothing implied is also a call (it would need no reason).
    assert not set(IMPLIED) & called


def test_the_price_policy_is_the_catalog_and_price_calls(called: set[str]) -> None:
    """Every capa install needs these four; the fleet policy holds only what launches add."""
    prices = _actions(json.loads(PRICES_POLICY.read_text()))
    assert prices <= called
    assert all(":Describe" in a or a.startswith("pricing:") for a in prices)
    assert not prices & _actions(json.loads(FLEET_POLICY.read_text()))


def _json_after(text: str, heading: str) -> Any:
    """The first JSON code block after ``heading`` in a Markdown document."""
    start = text.index(heading)
    match = re.search(r"```json\n(.*?)```", text[start:], re.DOTALL)
    assert match, f"no JSON block after {heading!r}"
    return json.loads(match.group(1))


def test_docs_show_the_same_policies() -> None:
    doc = AWS_DOC.read_text()
    assert _json_after(doc, "## Credentials and IAM") == json.loads(PRICES_POLICY.read_text())
    assert _json_after(doc, "### IAM for `CAPAFleet`") == json.loads(FLEET_POLICY.read_text())
