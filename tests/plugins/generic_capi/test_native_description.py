"""generic_capi merges a native plugin's template description (ctx.describe_machine_template).

The description here is a plain function, so these tests pin the precedence and the failure
handling without any cloud SDK (tests/plugins/capa covers the AWS plugin end to end).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from karpenter_capi.core.api import ClusterAPINodeClass
from karpenter_capi.core.errors import NodeClassNotReadyError
from karpenter_capi.core.hookspecs import MachineTemplateDescription, PluginContext
from karpenter_capi.core.kube.resources import CLUSTER_API_NODE_CLASSES, EVENTS
from karpenter_capi.core.values.resources import ResourceList
from karpenter_capi.plugins.generic_capi.inventory import Inventory, collect_inventory
from karpenter_capi.plugins.generic_capi.nodeclass_status import update_nodeclass_status
from tests.plugins.generic_capi.inventory_builders import (
    PRICE,
    P,
    add,
    machine_template,
    new_env,
    nodeclass,
    scalable,
    sized,
)

KIND = "AWSMachineTemplate"


def described(
    *,
    capacity_type: str = "on-demand",
    zones: Mapping[str, float | None] | None = None,
    unavailable_reason: str | None = None,
) -> MachineTemplateDescription:
    return MachineTemplateDescription(
        source="AWS",
        instance_type="m5.large",
        capacity=ResourceList.parse({"cpu": "2", "memory": "8Gi", "pods": "29"}),
        capacity_type=capacity_type,
        zones=zones if zones is not None else {"zone-a": 0.096, "zone-b": 0.1},
        labels={"kubernetes.io/arch": "amd64", "node.kubernetes.io/instance-type": "m5.large"},
        unavailable_reason=unavailable_reason,
    )


def with_description(ctx: PluginContext, answer: Any) -> PluginContext:
    def describe(template: Mapping[str, Any], owner: Mapping[str, Any]) -> Any:
        assert template["kind"] == KIND
        assert owner["kind"] == "MachineDeployment"
        if isinstance(answer, Exception):
            raise answer
        return answer

    return dataclasses.replace(ctx, describe_machine_template=describe)


def inventory(answer: Any, *objects: dict[str, Any]) -> Inventory:
    server, _, ctx, capi = new_env()
    add(
        server,
        capi,
        machine_template(
            "m5", kind=KIND, version="v1beta2", capacity={"cpu": "4", "memory": "1Gi"}
        ),
        *objects,
    )
    return collect_inventory(with_description(ctx, answer), nodeclass(), capi)


def md(name: str, zone: str | None = "zone-a", **annotations: str) -> dict[str, Any]:
    return scalable(
        "MachineDeployment",
        name,
        template="m5",
        template_kind=KIND,
        failure_domain=zone,
        annotations=annotations,
    )


def test_the_description_wins_over_the_template_status_and_prices_the_zone() -> None:
    result = inventory(described(), md("a"), md("b", zone="zone-b"))
    [it] = result.instance_types
    assert it.name == "m5.large"
    assert it.capacity.to_dict() == {"cpu": "2", "memory": "8Gi", "pods": "29"}
    assert it.source == "AWS"
    assert [(o.zone, o.price, o.price_source) for o in it.offerings] == [
        ("zone-a", 0.096, "AWS"),
        ("zone-b", 0.1, "AWS"),
    ]
    assert result.notices == []


def test_spot_comes_from_the_description_unless_a_label_says_otherwise() -> None:
    spot = described(capacity_type="spot", zones={"zone-a": 0.0365})
    [it] = inventory(spot, md("a")).instance_types
    assert [(o.capacity_type, o.price) for o in it.offerings] == [("spot", 0.0365)]
    labelled = md(
        "a",
        **{f"{P}labels": "karpenter.sh/capacity-type=on-demand"},
    )
    [it] = inventory(spot, labelled).instance_types
    assert it.offerings[0].capacity_type == "on-demand"


def test_annotations_win_and_the_source_says_so() -> None:
    result = inventory(described(), md("a", **sized(cpu="3"), **{PRICE: "0.05"}))
    [it] = result.instance_types
    assert it.capacity.to_dict() == {"cpu": "3", "memory": "8Gi", "pods": "29"}
    assert it.source == "annotation+AWS"
    assert (it.offerings[0].price, it.offerings[0].price_source) == (0.05, "annotation")


def test_without_a_zone_the_dearest_known_price_counts() -> None:
    [it] = inventory(described(), md("a", zone=None)).instance_types
    assert (it.offerings[0].zone, it.offerings[0].price) == ("", 0.1)


def test_a_zone_the_cloud_does_not_sell_in_is_an_unavailable_offering() -> None:
    result = inventory(described(), md("c", zone="zone-c"))
    [offering] = result.instance_types[0].offerings
    assert not offering.available
    [notice] = [n for n in result.notices if n.reason == "OfferingNotAvailable"]
    assert "not offered as on-demand in zone zone-c (offered in zone-a, zone-b)" in notice.message
    whole = inventory(described(unavailable_reason="restricted SKU"), md("a"))
    assert not whole.instance_types[0].offerings[0].available
    assert whole.resources[0].unavailable_reason == "AWS: restricted SKU"


def test_an_unknown_price_falls_back_to_the_estimate_with_a_note() -> None:
    result = inventory(described(zones={"zone-a": None}), md("a"))
    offering = result.instance_types[0].offerings[0]
    assert offering.price_source == "estimate"
    [notice] = result.notices
    assert notice.reason == "PriceEstimated"
    assert notice.message.startswith("AWS has no price for it yet")


def test_a_failing_description_is_a_note_or_a_problem_never_an_error() -> None:
    # The template status gives a shape: usable, with a note.
    result = inventory(RuntimeError("boom"), md("a"))
    assert [it.source for it in result.instance_types] == ["template status"]
    [notice] = [n for n in result.notices if n.reason == "MachineTemplateNotDescribed"]
    assert "boom" in notice.message
    # A NodeClassNotReadyError's reason is quoted as is.
    server, _, ctx, capi = new_env()
    add(server, capi, machine_template("m5", kind=KIND, version="v1beta2"), md("a"))
    failing = with_description(
        ctx, NodeClassNotReadyError("AWSMachineTemplate default/m5", "no region")
    )
    empty = collect_inventory(failing, nodeclass(), capi)
    [problem] = empty.problems
    assert problem.reason == "MachineTemplateNotDescribed"
    assert problem.message.endswith("AWSMachineTemplate default/m5: no region")


def test_description_notices_are_warning_events() -> None:
    server, _, ctx, capi = new_env()
    add(
        server,
        capi,
        nodeclass(),
        machine_template(
            "m5", kind=KIND, version="v1beta2", capacity={"cpu": "2", "memory": "8Gi"}
        ),
        md("c", zone="zone-c", **{PRICE: "0.1"}),
    )
    ctx = with_description(ctx, described())
    live = ClusterAPINodeClass.model_validate(server.get(CLUSTER_API_NODE_CLASSES, "default"))
    assert update_nodeclass_status(ctx, live, collect_inventory(ctx, live, capi))
    events = {(e["type"], e["reason"]) for e in server.list(EVENTS).items}
    assert ("Warning", "OfferingNotAvailable") in events
