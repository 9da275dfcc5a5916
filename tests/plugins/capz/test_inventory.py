"""End to end: generic_capi's inventory of MachineDeployments backed by AzureMachineTemplates.

``generic_capi`` and ``capz`` are enabled together (``Plugins.from_objects``); the in-memory API
holds the Cluster, its AzureCluster, the templates and the MachineDeployments, and Azure is the
fake transport. No MachineDeployment carries a capacity or price annotation: the shapes, zones
and prices are Azure's.
"""

from __future__ import annotations

import logging
from typing import Any

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.kube.discovery import capi_resources
from karpenter_capi.core.plugin_host import PluginEnvironment, Plugins
from karpenter_capi.core.values.resources import ResourceList
from karpenter_capi.plugins.capz.plugin import CapzPlugin
from karpenter_capi.plugins.generic_capi.inventory import Inventory, collect_inventory
from karpenter_capi.plugins.generic_capi.plugin import GenericCapiPlugin
from tests.plugins.capz.env import CapzWorld, azure_machine_template, machine_deployment

MEMBER = {wellknown.LABEL_KARPENTER_MEMBER: ""}
PRICE = "karpenter.cluster.x-k8s.io/price"


def _nodeclass() -> dict[str, Any]:
    return {
        "apiVersion": wellknown.NODECLASS_API_VERSION,
        "kind": wellknown.NODECLASS_KIND,
        "metadata": {"name": "azure", "annotations": {}},
        "spec": {"scalableResourceSelector": {}},
    }


def _inventory(world: CapzWorld) -> Inventory:
    environment = PluginEnvironment(
        workload=world.server,
        management=world.server,
        clock=world.clock,
        logger=logging.getLogger("test.capz"),
    )
    plugins = Plugins.from_objects(
        [("generic_capi", GenericCapiPlugin), ("capz", CapzPlugin(**world.provider_options()))],
        environment,
    )
    ctx = plugins.context("generic_capi")
    return collect_inventory(ctx, _nodeclass(), capi_resources(world.server, {}))


def _world(*objects: dict[str, Any]) -> CapzWorld:
    world = CapzWorld.new()
    world.server.apply_manifests(list(objects))
    return world


def test_d4s_v5_on_demand_and_spot_in_zone_2_from_azure() -> None:
    world = _world(
        azure_machine_template("d4s", "Standard_D4s_v5"),
        azure_machine_template("d4s-spot", "Standard_D4s_v5", spot={}),
        machine_deployment("d4s-z2", "d4s", failure_domain="2", labels=MEMBER),
        machine_deployment("d4s-spot-z2", "d4s-spot", failure_domain="2", labels=MEMBER),
    )
    inventory = _inventory(world)
    assert inventory.problems == []
    assert [n.reason for n in inventory.notices] == []
    by_name = {r.name: r for r in inventory.resources}
    on_demand, spot = by_name["d4s-z2"], by_name["d4s-spot-z2"]
    assert (on_demand.instance_type, on_demand.zone, on_demand.capacity_type) == (
        "Standard_D4s_v5",
        "eastus-2",
        "on-demand",
    )
    assert (on_demand.price, on_demand.price_source) == (0.192, "Azure")
    assert (spot.zone, spot.capacity_type, spot.price) == ("eastus-2", "spot", 0.0384)
    assert on_demand.shape.capacity == ResourceList.parse(
        {"cpu": "4", "memory": "16Gi", "pods": "110", "ephemeral-storage": "128Gi"}
    )
    [instance_type] = inventory.instance_types
    assert instance_type.name == "Standard_D4s_v5"
    offerings = {(o.zone, o.capacity_type): o.price for o in instance_type.offerings}
    assert offerings == {("eastus-2", "on-demand"): 0.192, ("eastus-2", "spot"): 0.0384}
    assert instance_type.requirements["kubernetes.io/arch"] == frozenset({"amd64"})


def test_annotations_win_over_azure() -> None:
    world = _world(
        azure_machine_template("d4s", "Standard_D4s_v5"),
        machine_deployment(
            "negotiated",
            "d4s",
            failure_domain="1",
            labels=MEMBER,
            annotations={PRICE: "0.15", f"{wellknown.CAPACITY_ANNOTATION_PREFIX}maxPods": "30"},
        ),
    )
    [resource] = _inventory(world).resources
    assert (resource.price, resource.price_source) == (0.15, "annotation")
    assert resource.shape.capacity["pods"] == ResourceList.parse({"pods": "30"})["pods"]
    assert resource.shape.capacity["cpu"] == ResourceList.parse({"cpu": "4"})["cpu"]


def test_a_restricted_size_is_an_unavailable_offering() -> None:
    world = _world(
        azure_machine_template("m416", "Standard_M416ms_v2"),
        machine_deployment("big", "m416", failure_domain="1", labels=MEMBER),
    )
    inventory = _inventory(world)
    [resource] = inventory.resources
    assert not resource.available
    assert "NotAvailableForSubscription" in str(resource.unavailable_reason)
    [instance_type] = inventory.instance_types
    assert [o.available for o in instance_type.offerings] == [False]


def test_an_unknown_size_is_reported_on_the_resource() -> None:
    world = _world(
        azure_machine_template("nope", "Standard_Z9_v9"),
        machine_deployment("nope", "nope", labels=MEMBER),
    )
    inventory = _inventory(world)
    assert inventory.resources == []
    [problem] = inventory.problems
    assert "Standard_Z9_v9 is not offered in location eastus" in problem.message
