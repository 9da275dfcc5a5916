"""CapzProvider.describe: an AzureMachineTemplate and its owner in, shape, zones, prices out."""

from __future__ import annotations

from typing import Any

import pytest

from karpenter_capi.core.errors import NodeClassNotReadyError
from karpenter_capi.core.kube.resources import CONFIGMAPS
from karpenter_capi.core.values.resources import ResourceList
from karpenter_capi.plugins._cloud.pricebook import SNAPSHOT_KEY, PriceSnapshot
from karpenter_capi.plugins.capz.provider import CapzSettings
from karpenter_capi.plugins.capz.template import TemplateSpecError, parse_template
from karpenter_capi.sim.apiserver.capi_crds import crd
from karpenter_capi.sim.azure.transport import SUBSCRIPTION
from tests.plugins.capz.env import (
    CapzWorld,
    azure_machine_template,
    cluster_objects,
    machine_deployment,
)

ZONES_1_TO_3 = ("eastus-1", "eastus-2", "eastus-3")


def _describe(
    world: CapzWorld,
    template: dict[str, Any],
    owner: dict[str, Any] | None = None,
    settings: CapzSettings | None = None,
) -> Any:
    return world.provider(settings).describe(template, owner or machine_deployment("md", "t"))


def test_standard_d4s_v5_on_demand(world: CapzWorld) -> None:
    found = _describe(world, azure_machine_template("t", "Standard_D4s_v5"))
    assert found.source == "Azure"
    assert found.instance_type == "Standard_D4s_v5"
    assert found.capacity == ResourceList.parse(
        {"cpu": "4", "memory": "16Gi", "pods": "110", "ephemeral-storage": "128Gi"}
    )
    assert found.capacity_type == "on-demand"
    assert dict(found.zones) == dict.fromkeys(ZONES_1_TO_3, 0.192)
    assert found.labels["kubernetes.io/arch"] == "amd64"
    assert found.labels["kubernetes.io/os"] == "linux"
    assert found.labels["topology.kubernetes.io/region"] == "eastus"
    assert found.unavailable_reason is None


def test_its_spot_twin_has_the_spot_price(world: CapzWorld) -> None:
    found = _describe(world, azure_machine_template("t", "Standard_D4s_v5", spot={}))
    assert found.capacity_type == "spot"
    assert dict(found.zones) == dict.fromkeys(ZONES_1_TO_3, 0.0384)


def test_the_failure_domain_narrows_the_zones(world: CapzWorld) -> None:
    owner = machine_deployment("md", "t", failure_domain="2")
    found = _describe(world, azure_machine_template("t", "Standard_D4s_v5"), owner)
    assert dict(found.zones) == {"eastus-2": 0.192}
    # The node's zone label, which generic_capi takes as the offering's zone:
    assert found.labels["topology.kubernetes.io/zone"] == "eastus-2"
    unpinned = _describe(world, azure_machine_template("t", "Standard_D4s_v5"))
    assert "topology.kubernetes.io/zone" not in unpinned.labels


def test_a_failure_domain_the_size_lacks_is_unavailable(world: CapzWorld) -> None:
    owner = machine_deployment("md", "t", failure_domain="2")
    found = _describe(world, azure_machine_template("t", "Standard_NC6s_v3"), owner)
    assert found.zones == {}
    assert found.unavailable_reason == (
        "VM size Standard_NC6s_v3 in eastus is not offered in zone(s) 2; offered in 1, 3"
    )
    assert found.capacity["nvidia.com/gpu"] == ResourceList.parse({"x": "1"})["x"]


def test_a_zone_restricted_for_the_subscription_is_left_out(world: CapzWorld) -> None:
    found = _describe(world, azure_machine_template("t", "Standard_E4s_v5"))
    assert dict(found.zones) == {"eastus-1": 0.252, "eastus-3": 0.252}
    owner = machine_deployment("md", "t", failure_domain="2")
    pinned = _describe(world, azure_machine_template("t", "Standard_E4s_v5"), owner)
    assert pinned.zones == {}
    assert "(NotAvailableForSubscription)" in pinned.unavailable_reason


def test_a_restricted_sku_is_unavailable(world: CapzWorld) -> None:
    found = _describe(world, azure_machine_template("t", "Standard_M416ms_v2"))
    assert found.zones == {}
    assert found.unavailable_reason == (
        "VM size Standard_M416ms_v2 in eastus is restricted for the subscription "
        "(NotAvailableForSubscription)"
    )


def test_spot_only_where_low_priority_capable(world: CapzWorld) -> None:
    found = _describe(world, azure_machine_template("t", "Standard_B2s", spot={}))
    assert found.zones == {}
    assert "cannot run as Spot" in found.unavailable_reason
    on_demand = _describe(world, azure_machine_template("t", "Standard_B2s"))
    assert dict(on_demand.zones) == dict.fromkeys(ZONES_1_TO_3, 0.0416)


def test_a_spot_max_price_below_the_spot_price_is_unavailable(world: CapzWorld) -> None:
    capped = azure_machine_template("t", "Standard_D4s_v5", spot={"maxPrice": "0.02"})
    found = _describe(world, capped)
    assert found.zones == {}
    assert "above spotVMOptions.maxPrice 0.02" in found.unavailable_reason
    uncapped = azure_machine_template("t", "Standard_D4s_v5", spot={"maxPrice": -1})
    assert dict(_describe(world, uncapped).zones) == dict.fromkeys(ZONES_1_TO_3, 0.0384)


def test_a_spot_max_price_is_a_quantity_as_a_go_client_writes_it_back(world: CapzWorld) -> None:
    # CAPZ's maxPrice is a resource.Quantity: "0.05" comes back from a Go round-trip as "50m".
    above = azure_machine_template("t", "Standard_D4s_v5", spot={"maxPrice": "50m"})
    assert dict(_describe(world, above).zones) == dict.fromkeys(ZONES_1_TO_3, 0.0384)
    below = azure_machine_template("t", "Standard_D4s_v5", spot={"maxPrice": "20m"})
    found = _describe(world, below)
    assert found.zones == {}
    assert "above spotVMOptions.maxPrice 0.02" in found.unavailable_reason


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("50m", 0.05),
        ("0.05", 0.05),
        ("1e-2", 0.01),
        (0.5, 0.5),
        ("-1", None),
        (-1, None),
        ("", None),
    ],
)
def test_spot_max_price_spellings(raw: object, expected: float | None) -> None:
    template = azure_machine_template("t", "Standard_D4s_v5", spot={"maxPrice": raw})
    spec = parse_template(template, machine_deployment("md", "t"))
    assert spec is not None
    assert spec.max_price == expected


def test_a_malformed_spot_max_price_is_named() -> None:
    template = azure_machine_template("t", "Standard_D4s_v5", spot={"maxPrice": "cheap"})
    with pytest.raises(TemplateSpecError, match="maxPrice 'cheap' is not a number"):
        parse_template(template, machine_deployment("md", "t"))


def test_arm_sizes_and_windows_templates(world: CapzWorld) -> None:
    arm = _describe(world, azure_machine_template("t", "Standard_D2ps_v5"))
    assert arm.labels["kubernetes.io/arch"] == "arm64"
    windows = _describe(world, azure_machine_template("t", "Standard_D4s_v5", os_type="Windows"))
    assert windows.labels["kubernetes.io/os"] == "windows"
    # Only Linux prices are kept: a Windows node's price is left to annotations or estimates.
    assert dict(windows.zones) == dict.fromkeys(ZONES_1_TO_3, None)


def test_max_pods_option_and_the_size_name_in_another_case(world: CapzWorld) -> None:
    found = _describe(
        world,
        azure_machine_template("t", "standard_d4s_v5", disk_gib=None),
        settings=CapzSettings(max_pods=30),
    )
    assert found.instance_type == "Standard_D4s_v5"
    assert found.capacity == ResourceList.parse({"cpu": "4", "memory": "16Gi", "pods": "30"})


def test_other_kinds_are_not_capz_s(world: CapzWorld) -> None:
    docker = {
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
        "kind": "DockerMachineTemplate",
        "metadata": {"name": "t", "namespace": "default"},
        "spec": {"template": {"spec": {}}},
    }
    assert _describe(world, docker) is None
    assert world.transport.requests == []


def test_an_azure_machine_pool(world: CapzWorld) -> None:
    pool = {
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
        "kind": "AzureMachinePool",
        "metadata": {"name": "pool", "namespace": "default"},
        "spec": {"location": "eastus", "template": {"vmSize": "Standard_D4s_v5"}},
    }
    owner = machine_deployment("mp", "pool")
    owner["kind"] = "MachinePool"
    owner["spec"]["failureDomains"] = ["1", "3"]
    found = _describe(world, pool, owner)
    assert dict(found.zones) == {"eastus-1": 0.192, "eastus-3": 0.192}


def test_an_unknown_size_and_a_missing_size_are_not_ready(world: CapzWorld) -> None:
    with pytest.raises(NodeClassNotReadyError, match="Standard_Z9_v9 is not offered in location"):
        _describe(world, azure_machine_template("t", "Standard_Z9_v9"))
    template = azure_machine_template("t", "Standard_D4s_v5")
    del template["spec"]["template"]["spec"]["vmSize"]
    with pytest.raises(NodeClassNotReadyError, match=r"spec\.template\.spec\.vmSize is not set"):
        _describe(world, template)


def test_subscription_and_location_fall_back_to_options_and_env() -> None:
    world = CapzWorld.new(objects=cluster_objects(location=None, subscription=None))
    template = azure_machine_template("t", "Standard_D4s_v5")
    with pytest.raises(NodeClassNotReadyError, match=r"no Azure location.*capz\.location"):
        _describe(world, template)
    settings = CapzSettings(location="EastUS")
    with pytest.raises(NodeClassNotReadyError, match="AZURE_SUBSCRIPTION_ID"):
        world.provider(settings).describe(template, machine_deployment("md", "t"))
    provider = world.provider(settings, env={"AZURE_SUBSCRIPTION_ID": SUBSCRIPTION})
    found = provider.describe(template, machine_deployment("md", "t"))
    assert found is not None
    assert found.labels["topology.kubernetes.io/region"] == "eastus"


def test_a_v1beta1_cluster_reference() -> None:
    [cluster, azure_cluster] = cluster_objects()
    cluster["apiVersion"] = "cluster.x-k8s.io/v1beta1"
    cluster["spec"]["infrastructureRef"] = {
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
        "kind": "AzureCluster",
        "name": "prod",
        "namespace": "default",
    }
    world = CapzWorld.new(objects=[cluster, azure_cluster])
    found = _describe(world, azure_machine_template("t", "Standard_D4s_v5"))
    assert found.labels["topology.kubernetes.io/region"] == "eastus"


def test_an_aks_cluster_reads_its_managed_control_plane() -> None:
    infra = "infrastructure.cluster.x-k8s.io"
    objects: list[dict[str, Any]] = [
        crd(infra, "AzureManagedCluster", "azuremanagedclusters", ("v1beta1",)),
        crd(infra, "AzureManagedControlPlane", "azuremanagedcontrolplanes", ("v1beta1",)),
        {
            "apiVersion": "cluster.x-k8s.io/v1beta1",
            "kind": "Cluster",
            "metadata": {"name": "prod", "namespace": "default"},
            "spec": {
                "controlPlaneRef": {
                    "apiVersion": f"{infra}/v1beta1",
                    "kind": "AzureManagedControlPlane",
                    "name": "prod-cp",
                },
                "infrastructureRef": {
                    "apiVersion": f"{infra}/v1beta1",
                    "kind": "AzureManagedCluster",
                    "name": "prod",
                },
            },
        },
        {
            "apiVersion": f"{infra}/v1beta1",
            "kind": "AzureManagedCluster",
            "metadata": {"name": "prod", "namespace": "default"},
            "spec": {},
        },
        {
            "apiVersion": f"{infra}/v1beta1",
            "kind": "AzureManagedControlPlane",
            "metadata": {"name": "prod-cp", "namespace": "default"},
            "spec": {"location": "eastus", "subscriptionID": SUBSCRIPTION, "version": "v1.31.0"},
        },
    ]
    world = CapzWorld.new(objects=objects)
    found = _describe(world, azure_machine_template("t", "Standard_D4s_v5"))
    assert found.labels["topology.kubernetes.io/region"] == "eastus"
    assert dict(found.zones)["eastus-1"] == 0.192


def test_a_missing_cluster_says_so() -> None:
    world = CapzWorld.new(objects=[])
    with pytest.raises(NodeClassNotReadyError, match="Cluster default/prod not found"):
        _describe(world, azure_machine_template("t", "Standard_D4s_v5"))


def test_catalog_and_cluster_are_cached_between_rounds(world: CapzWorld) -> None:
    provider = world.provider()
    template = azure_machine_template("t", "Standard_D4s_v5")
    for _ in range(5):
        provider.describe(template, machine_deployment("md", "t"))
    assert world.sku_requests() == 3  # one listing, three pages
    assert world.prices.calls == 2  # one snapshot, two pages


def test_azure_unreachable_before_any_catalog_is_not_ready(world: CapzWorld) -> None:
    world.transport.routes.clear()  # every Azure call is now a 404
    with pytest.raises(NodeClassNotReadyError, match="cannot list Azure VM sizes in eastus"):
        _describe(world, azure_machine_template("t", "Standard_D4s_v5"))


def test_a_failing_prices_api_keeps_the_last_good_prices(world: CapzWorld) -> None:
    provider = world.provider(CapzSettings(price_refresh_seconds=3600))
    template = azure_machine_template("t", "Standard_D4s_v5")
    owner = machine_deployment("md", "t")
    assert dict(provider.describe(template, owner).zones)["eastus-1"] == 0.192  # type: ignore[union-attr]
    world.prices.fail = True
    world.clock.advance(3601)
    again = provider.describe(template, owner)
    assert world.prices.calls > 2  # the refresh was tried, and failed
    assert again is not None
    assert dict(again.zones)["eastus-1"] == 0.192
    assert provider.price_book("eastus").last_error is not None


def test_prices_survive_a_restart_through_the_configmap(world: CapzWorld) -> None:
    template = azure_machine_template("t", "Standard_D4s_v5", spot={})
    owner = machine_deployment("md", "t")
    world.provider().describe(template, owner)
    stored = world.server.get(CONFIGMAPS, "karpenter-capi-prices-azure-eastus", "kube-system")
    snapshot = PriceSnapshot.from_json(stored["data"][SNAPSHOT_KEY])
    assert snapshot.on_demand["Standard_D4s_v5"] == 0.192

    # A new process, and the prices API unreachable: the stored prices serve.
    world.prices.fail = True
    calls = world.prices.calls
    restarted = world.provider().describe(template, owner)
    assert restarted is not None
    assert dict(restarted.zones) == dict.fromkeys(ZONES_1_TO_3, 0.0384)
    assert world.prices.calls == calls  # fresh enough: not even asked


def test_dry_run_reads_stored_prices_but_writes_none(world: CapzWorld) -> None:
    world.provider(CapzSettings(dry_run=True)).describe(
        azure_machine_template("t", "Standard_D4s_v5"), machine_deployment("md", "t")
    )
    names = [
        item["metadata"]["name"] for item in world.server.list(CONFIGMAPS, "kube-system").items
    ]
    assert "karpenter-capi-prices-azure-eastus" not in names


def test_offerings_a_launcher_found_unavailable_are_left_out(world: CapzWorld) -> None:
    provider = world.provider()
    provider.unavailable.mark("Standard_D4s_v5", "eastus-1", "on-demand", "ZonalAllocationFailed")
    found = provider.describe(
        azure_machine_template("t", "Standard_D4s_v5"), machine_deployment("md", "t")
    )
    assert found is not None
    assert sorted(found.zones) == ["eastus-2", "eastus-3"]
    world.clock.advance(181)
    again = provider.describe(
        azure_machine_template("t", "Standard_D4s_v5"), machine_deployment("md", "t")
    )
    assert again is not None
    assert sorted(again.zones) == list(ZONES_1_TO_3)
