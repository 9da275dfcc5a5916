"""The CAPA and Cluster API versions ``CAPAFleet`` needs (CAPA v2.0: the first release serving
``infrastructure.cluster.x-k8s.io/v1beta2``; Cluster API v1.0: ``cluster.x-k8s.io/v1beta1``),
read at start from clusterctl's ``Provider`` objects and said on the NodeClass."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from moto import mock_aws

from karpenter_capi.core.kube import CLUSTER_API_NODE_CLASSES, EVENTS, Resource
from karpenter_capi.core.kube.resources import CUSTOM_RESOURCE_DEFINITIONS, NAMESPACES
from karpenter_capi.sim.apiserver.capi_crds import crd
from tests.plugins.capa.fleet_env import FleetAws, FleetWorld
from tests.support.aws import fake_credentials

PROVIDERS = Resource("clusterctl.cluster.x-k8s.io", "v1alpha3", "providers", "Provider", True)


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> Iterator[FleetWorld]:
    fake_credentials(monkeypatch)
    with mock_aws():
        aws = FleetAws()
        aws.queue_prices()
        yield FleetWorld(aws)


def _install(world: FleetWorld, *, capa: str, capi: str) -> None:
    world.server.create(
        CUSTOM_RESOURCE_DEFINITIONS,
        crd("clusterctl.cluster.x-k8s.io", "Provider", "providers", ("v1alpha3",), status=False),
    )
    for namespace, name, kind, provider, version in (
        ("capa-system", "infrastructure-aws", "InfrastructureProvider", "aws", capa),
        ("capi-system", "cluster-api", "CoreProvider", "cluster-api", capi),
    ):
        world.server.create(NAMESPACES, {"metadata": {"name": namespace}})
        world.server.create(
            PROVIDERS,
            {
                "apiVersion": "clusterctl.cluster.x-k8s.io/v1alpha3",
                "kind": "Provider",
                "metadata": {"name": name, "namespace": namespace},
                "type": kind,
                "providerName": provider,
                "version": version,
            },
            namespace,
        )


def _conditions(world: FleetWorld) -> dict[str, dict[str, str]]:
    nodeclass = world.server.get(CLUSTER_API_NODE_CLASSES, "fleet")
    return {
        c["type"]: c
        for c in (nodeclass.get("status") or {}).get("conditions") or []
        if c["type"] in ("ProviderVersionSupported", "ClusterAPIVersionSupported")
    }


def _warnings(world: FleetWorld) -> list[tuple[str, str]]:
    return sorted(
        (e["reason"], e["involvedObject"]["name"])
        for e in world.server.list(EVENTS).items
        if e["reason"] in ("ProviderTooOld", "ClusterAPITooOld")
    )


def test_an_older_capa_and_cluster_api_are_said_on_the_nodeclass(world: FleetWorld) -> None:
    _install(world, capa="v1.5.2", capi="v0.4.7")
    assert world.inventory()  # launches are not refused
    conditions = _conditions(world)
    capa = conditions["ProviderVersionSupported"]
    assert (capa["status"], capa["reason"]) == ("False", "ProviderTooOld")
    assert capa["message"] == (
        "spec.launch.mode CAPAFleet needs CAPA v2.0.0 or later, the first release serving "
        "infrastructure.cluster.x-k8s.io/v1beta2, the AWSMachine API it writes and is tested "
        "at; clusterctl Provider capa-system/infrastructure-aws is v1.5.2: upgrade CAPA "
        "(clusterctl upgrade apply)"
    )
    core = conditions["ClusterAPIVersionSupported"]
    assert (core["status"], core["reason"]) == ("False", "ClusterAPITooOld")
    assert core["message"].startswith(
        "spec.launch.mode CAPAFleet needs Cluster API v1.0.0 or later"
    )
    assert _warnings(world) == [("ClusterAPITooOld", "fleet"), ("ProviderTooOld", "fleet")]
    # Checked once per process.
    world.inventory()
    assert len(_warnings(world)) == 2


def test_a_recent_capa_and_cluster_api_are_supported(world: FleetWorld) -> None:
    _install(world, capa="v2.10.0", capi="v1.11.2")
    world.inventory()
    conditions = _conditions(world)
    assert conditions["ProviderVersionSupported"]["status"] == "True"
    assert conditions["ProviderVersionSupported"]["message"] == (
        "CAPA v2.10.0 (clusterctl Provider capa-system/infrastructure-aws) is at least v2.0.0"
    )
    assert conditions["ClusterAPIVersionSupported"]["reason"] == "ClusterAPISupported"
    assert _warnings(world) == []


def test_without_clusterctl_providers_nothing_is_said(world: FleetWorld) -> None:
    world.inventory()
    assert _conditions(world) == {}
