"""Scalable resources become instance types with offerings; bad ones are left out, with a reason."""

from __future__ import annotations

from typing import Any

import pytest

from karpenter_capi.core.api import ClusterAPINodeClass
from karpenter_capi.core.instancetype import Offering
from karpenter_capi.core.values.taints import Taint
from karpenter_capi.plugins.generic_capi.inventory import (
    Inventory,
    UnavailableOfferings,
    build_inventory,
    collect_inventory,
)
from karpenter_capi.plugins.generic_capi.selection import resource_key, select
from tests.plugins.generic_capi.inventory_builders import (
    PRICE,
    P,
    add,
    new_env,
    nodeclass,
    scalable,
    sized,
)

MAX = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size"
LABELS = P + "labels"
M5 = "node.kubernetes.io/instance-type=m5.large"


def _inventory(*objects: dict[str, Any], **kwargs: Any) -> Inventory:
    server, _, _, capi = new_env()
    add(server, capi, *objects)
    selection = select(server, capi, {})
    return build_inventory(selection.selected, problems=selection.problems, **kwargs)


def _offerings(inventory: Inventory, name: str) -> list[Offering]:
    [instance_type] = [it for it in inventory.instance_types if it.name == name]
    return list(instance_type.offerings)


def test_zonal_deployments_of_one_instance_type_are_one_type_with_several_offerings() -> None:
    inventory = _inventory(
        scalable(
            "MachineDeployment",
            "m5-a",
            failure_domain="zone-a",
            annotations=sized(**{LABELS: M5, PRICE: "0.096"}),
        ),
        scalable(
            "MachineDeployment",
            "m5-b",
            failure_domain="zone-b",
            annotations=sized(**{LABELS: M5, PRICE: "0.094"}),
        ),
        scalable(
            "MachineDeployment",
            "m5-b-spot",
            failure_domain="zone-b",
            annotations=sized(**{LABELS: f"{M5},karpenter.sh/capacity-type=spot", PRICE: "0.035"}),
        ),
        scalable(
            "MachinePool",
            "c5-pool",
            spec={"failureDomains": ["zone-c"]},
            annotations=sized("4", "8Gi", **{LABELS: "node.kubernetes.io/instance-type=c5.xlarge"}),
        ),
    )
    assert inventory.problems == []
    assert [it.name for it in inventory.instance_types] == ["c5.xlarge", "m5.large"]
    assert _offerings(inventory, "m5.large") == [
        Offering("zone-a", "on-demand", 0.096),
        Offering("zone-b", "on-demand", 0.094),
        Offering("zone-b", "spot", 0.035),
    ]
    assert [r.name for r in inventory.resources_for("m5.large", "zone-b")] == [
        "m5-b-spot",
        "m5-b",
    ]
    assert [r.key for r in inventory.resources_for("m5.large", "zone-b", "spot")] == [
        "MachineDeployment/default/m5-b-spot"
    ]
    assert _offerings(inventory, "c5.xlarge") == [Offering("zone-c", "on-demand", 0.16034)]


def test_two_resources_in_one_zone_make_one_offering_at_the_cheaper_available_price() -> None:
    inventory = _inventory(
        scalable(
            "MachineDeployment",
            "full",
            replicas=3,
            failure_domain="zone-a",
            annotations=sized(**{LABELS: M5, PRICE: "0.05", MAX: "3"}),
        ),
        scalable(
            "MachineSet",
            "spare",
            failure_domain="zone-a",
            annotations=sized(**{LABELS: M5, PRICE: "0.09"}),
        ),
    )
    assert _offerings(inventory, "m5.large") == [Offering("zone-a", "on-demand", 0.09)]
    assert [r.name for r in inventory.resources_for("m5.large")] == ["spare", "full"]


def test_a_resource_at_its_max_size_makes_an_unavailable_offering() -> None:
    inventory = _inventory(
        scalable(
            "MachineDeployment",
            "full",
            replicas=5,
            failure_domain="zone-a",
            annotations=sized(**{LABELS: M5, MAX: "5"}),
        ),
        scalable(
            "MachineDeployment",
            "room",
            replicas=4,
            failure_domain="zone-b",
            annotations=sized(**{LABELS: M5, MAX: "5"}),
        ),
        scalable(
            "MachineDeployment",
            "unbounded",
            replicas=50,
            failure_domain="zone-c",
            annotations=sized(**{LABELS: M5}),
        ),
    )
    assert [(o.zone, o.available) for o in _offerings(inventory, "m5.large")] == [
        ("zone-a", False),
        ("zone-b", True),
        ("zone-c", True),
    ]
    [full] = inventory.resources_for("m5.large", "zone-a")
    assert full.unavailable_reason == "at its maximum size (5 of 5 replicas)"


def test_a_recent_launch_failure_makes_the_offering_unavailable_for_three_minutes() -> None:
    server, clock, ctx, capi = new_env()
    add(
        server,
        capi,
        scalable("MachineDeployment", "md-a", failure_domain="a", annotations=sized()),
        scalable("MachineDeployment", "md-b", failure_domain="b", annotations=sized()),
    )
    cache = UnavailableOfferings.shared(ctx)
    assert UnavailableOfferings.shared(ctx) is cache  # launch code and inventory agree

    def availability() -> list[tuple[str, bool]]:
        inventory = build_inventory(select(server, capi, {}).selected, unavailable=cache)
        return [(o.zone, o.available) for it in inventory.instance_types for o in it.offerings]

    key = resource_key("MachineDeployment", "default", "md-a")
    cache.mark(key, "MachineSet could not create a Machine: quota exceeded")
    assert availability() == [("a", False), ("b", True)]
    assert cache.reason(key) == "MachineSet could not create a Machine: quota exceeded"
    clock.advance(179)
    assert cache.is_unavailable(key)
    clock.advance(1)
    assert not cache.is_unavailable(key)
    assert availability() == [("a", True), ("b", True)]
    cache.mark(key, "again")
    cache.clear(key)
    assert availability() == [("a", True), ("b", True)]


def test_malformed_resources_are_left_out_one_by_one_and_the_rest_still_work() -> None:
    inventory = _inventory(
        scalable("MachineDeployment", "good", annotations=sized(**{PRICE: "0.1"})),
        scalable("MachineDeployment", "bad-cpu", annotations=sized("lots")),
        scalable("MachineDeployment", "bad-max", annotations=sized(**{MAX: "ten"})),
        scalable("MachineDeployment", "bad-price", annotations=sized(**{PRICE: "-1"})),
        scalable(
            "MachineDeployment",
            "bad-capacity-type",
            annotations=sized(**{LABELS: "karpenter.sh/capacity-type=cheap"}),
        ),
        scalable("MachineSet", "no-shape"),
        scalable("MachinePool", "bad-taint", annotations=sized(**{P + "taints": "a:Never"})),
    )
    assert [r.name for r in inventory.resources] == ["good"]
    assert len(inventory.instance_types) == 1
    assert inventory.selected == 7
    problems = {p.name: (p.reason, p.message) for p in inventory.problems}
    assert problems == {
        "bad-cpu": (
            "InvalidShape",
            "annotation capacity.cluster-autoscaler.kubernetes.io/cpu='lots': "
            "'lots': not a valid Kubernetes quantity",
        ),
        "bad-max": (
            "InvalidShape",
            f"annotation {MAX}='ten': not an integer",
        ),
        "bad-price": (
            "InvalidShape",
            f"annotation {PRICE}='-1': must be a finite price >= 0",
        ),
        "bad-capacity-type": (
            "InvalidShape",
            "label karpenter.sh/capacity-type='cheap' is not one of on-demand, spot, reserved",
        ),
        "no-shape": (
            "NoShape",
            "no cpu capacity: annotation capacity.cluster-autoscaler.kubernetes.io/cpu is required",
        ),
        "bad-taint": (
            "InvalidShape",
            "annotation capacity.cluster-autoscaler.kubernetes.io/taints: taint a: effect 'Never' "
            "is not one of NoSchedule, PreferNoSchedule, NoExecute",
        ),
    }


def test_one_instance_type_name_described_two_ways_keeps_the_first_by_key() -> None:
    inventory = _inventory(
        scalable("MachineDeployment", "a", annotations=sized(**{LABELS: M5})),
        scalable("MachineDeployment", "b", annotations=sized("4", **{LABELS: M5})),
    )
    assert [r.name for r in inventory.resources] == ["a"]
    [problem] = inventory.problems
    assert (problem.name, problem.reason) == ("b", "ShapeMismatch")
    assert "described differently" in problem.message
    assert "MachineDeployment default/a" in problem.message


def test_an_unpriced_resource_gets_an_estimate_by_size_not_zero() -> None:
    inventory = _inventory(
        scalable("MachineDeployment", "small", annotations=sized("2", "8Gi")),
        scalable("MachineDeployment", "large", annotations=sized("16", "64Gi")),
        scalable("MachineDeployment", "priced", annotations=sized("4", "16Gi", **{PRICE: "0.2"})),
    )
    prices = {it.name: it.offerings[0].price for it in inventory.instance_types}
    assert prices == {
        "capi-2cpu-8gib-amd64": pytest.approx(0.097118),
        "capi-16cpu-64gib-amd64": pytest.approx(0.776944),
        "capi-4cpu-16gib-amd64": 0.2,
    }
    estimated = {r.name for r in inventory.resources if r.price_estimated}
    assert estimated == {"small", "large"}
    notices = {n.name: (n.reason, n.message) for n in inventory.notices}
    assert notices["small"] == (
        "PriceEstimated",
        f"no {PRICE} annotation; price estimated from the shape as 0.097118 per hour",
    )


def test_name_zone_labels_and_taints_come_from_the_machine_template_too() -> None:
    inventory = _inventory(
        scalable(
            "MachineDeployment",
            "workers",
            failure_domain="fd-1",
            template_labels={
                "node.kubernetes.io/instance-type": "n2-standard-2",
                "node-role.kubernetes.io/worker": "",
                "example.com/not-propagated": "x",
            },
            taints=[{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}],
            annotations=sized(**{LABELS: "topology.kubernetes.io/zone=eu-west-1a"}),
        )
    )
    [instance_type] = inventory.instance_types
    assert instance_type.name == "n2-standard-2"
    # The labels annotation states the node label itself, so it beats the failure domain.
    assert [o.zone for o in instance_type.offerings] == ["eu-west-1a"]
    assert dict(instance_type.requirements) == {
        "node-role.kubernetes.io/worker": frozenset({""}),
        "kubernetes.io/arch": frozenset({"amd64"}),
        "kubernetes.io/os": frozenset({"linux"}),
        "node.kubernetes.io/instance-type": frozenset({"n2-standard-2"}),
    }
    assert instance_type.taints == (Taint("dedicated", "NoSchedule", "infra"),)


@pytest.mark.parametrize(
    ("kind", "failure_domain", "spec", "zone"),
    [
        ("MachineDeployment", "fd-1", {}, "fd-1"),
        ("MachinePool", None, {"failureDomains": ["fd-2"]}, "fd-2"),
        # Spread over several failure domains: the zone of a new node is not known.
        ("MachinePool", None, {"failureDomains": ["fd-1", "fd-2"]}, ""),
        ("MachineSet", None, {}, ""),
    ],
)
def test_zone_from_failure_domains(
    kind: str, failure_domain: str | None, spec: dict[str, Any], zone: str
) -> None:
    inventory = _inventory(
        scalable(kind, "r", failure_domain=failure_domain, spec=spec, annotations=sized())
    )
    assert [o.zone for o in inventory.instance_types[0].offerings] == [zone]


def test_collect_inventory_applies_nodeclass_settings_and_reports_bad_ones() -> None:
    server, _, ctx, capi = new_env({"system_reserved": "cpu=100m"})
    add(server, capi, scalable("MachineDeployment", "md", annotations=sized("4", "16Gi")))
    model = ClusterAPINodeClass.model_validate(
        nodeclass(annotations={"karpenter.cluster.x-k8s.io/kube-reserved": "cpu=1"})
    )
    inventory = collect_inventory(ctx, model, capi)
    [instance_type] = inventory.instance_types
    assert instance_type.allocatable.milli("cpu") == 4000 - 1000 - 100

    broken = nodeclass(annotations={"karpenter.cluster.x-k8s.io/kube-reserved": "cpu=?"})
    inventory = collect_inventory(ctx, broken, capi)
    assert inventory.instance_types == []
    assert inventory.error is not None
    assert "annotation karpenter.cluster.x-k8s.io/kube-reserved: 'cpu=?'" in inventory.error

    bad_selector = nodeclass(selector={"matchExpressions": [{"key": "a", "operator": "Is"}]})
    inventory = collect_inventory(ctx, bad_selector, capi)
    assert inventory.error == (
        "spec.scalableResourceSelector: matchExpressions[0]: operator 'Is' is not one of In, "
        "NotIn, Exists, DoesNotExist"
    )
