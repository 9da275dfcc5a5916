"""The Azure role the capz plugin documents is every Azure permission it uses, and it writes
nothing to Azure, also in the ``CAPZMachinePool`` launch mode (CAPZ makes the scale-set calls
with its own identity).

The requests are those the plugin sent through the fake Azure transport while the whole
controller ran ``rbac_native``'s CAPZMachinePool scenario (pools created, a size without
capacity falling back, consolidation through ``delete-machine``, empty pools removed). An ARM
request needs the action ``<provider namespace>/<resource type>/<read|write|delete|action>``;
the retail price API is public and sent without a token.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import urlparse

import pytest

from karpenter_capi.sim.apiserver.audit import AuditLog

from .rbac_native import CapzWorld, record_capz_pools_one_cluster

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "deploy" / "iam" / "capz-role.json"
AZURE_DOC = REPO / "docs" / "azure.md"
ARM = "management.azure.com"
RETAIL_PRICES = "prices.azure.com"
_VERB_ACTION = {
    "GET": "read",
    "PUT": "write",
    "PATCH": "write",
    "DELETE": "delete",
    "POST": "action",
}


def _arm_action(method: str, path: str) -> str:
    """The RBAC action of an ARM request: ``.../providers/<Namespace>/<type>[/<name>...]``."""
    provider = path.split("/providers/", 1)[1].split("/")
    namespace, kinds = provider[0], provider[1::2]
    return "/".join([namespace, *kinds, _VERB_ACTION[method]])


@pytest.fixture(scope="module")
def azure() -> CapzWorld:
    world = CapzWorld.new()
    record_capz_pools_one_cluster(AuditLog(), world)
    return world


def test_the_plugin_only_reads_azure(azure: CapzWorld) -> None:
    requests = azure.transport.requests
    assert requests
    assert {r.method for r in requests} == {"GET"}
    assert {urlparse(r.url).hostname for r in requests} == {ARM, RETAIL_PRICES}


def test_the_role_is_the_actions_of_the_arm_requests(azure: CapzWorld) -> None:
    arm = [r for r in azure.transport.requests if urlparse(r.url).hostname == ARM]
    used = {_arm_action(r.method, urlparse(r.url).path) for r in arm}
    role = json.loads(ROLE.read_text())
    assert set(role["Actions"]) == used == {"Microsoft.Compute/skus/read"}
    assert role["NotActions"] == []


def test_retail_prices_go_without_a_token(azure: CapzWorld) -> None:
    prices = [r for r in azure.transport.requests if urlparse(r.url).hostname == RETAIL_PRICES]
    assert prices
    assert all("Authorization" not in r.headers for r in prices)


def test_docs_show_the_same_role() -> None:
    doc = AZURE_DOC.read_text()
    start = doc.index("## Credentials and the Azure role")
    match = re.search(r"```json\n(.*?)```", doc[start:], re.DOTALL)
    assert match
    assert json.loads(match.group(1)) == json.loads(ROLE.read_text())
