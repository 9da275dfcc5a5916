"""Choosing the Cluster API version from what the management cluster actually serves."""

from __future__ import annotations

from typing import Any, cast

import pytest

from karpenter_capi.core.kube.client import KubeClient
from karpenter_capi.core.kube.discovery import CapiNotServedError, CapiResources, capi_resources
from karpenter_capi.core.kube.resources import CUSTOM_RESOURCE_DEFINITIONS
from karpenter_capi.sim.apiserver import InMemoryAPIServer

CAPI_KINDS = [
    ("clusters", "Cluster"),
    ("machines", "Machine"),
    ("machinesets", "MachineSet"),
    ("machinedeployments", "MachineDeployment"),
    ("machinepools", "MachinePool"),
]


def install_crds(server: InMemoryAPIServer, group: str, versions: list[str]) -> None:
    """Install the CAPI CRDs serving ``versions`` (the first one is the storage version)."""
    for plural, kind in CAPI_KINDS:
        crd: dict[str, Any] = {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{group}"},
            "spec": {
                "group": group,
                "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
                "scope": "Namespaced",
                "versions": [
                    {
                        "name": version,
                        "served": True,
                        "storage": index == 0,
                        "schema": {"openAPIV3Schema": {"type": "object"}},
                        "subresources": {"status": {}},
                    }
                    for index, version in enumerate(versions)
                ],
            },
        }
        server.create(CUSTOM_RESOURCE_DEFINITIONS, crd)


def test_v1beta2_is_preferred_when_both_are_served(apiserver: InMemoryAPIServer) -> None:
    install_crds(apiserver, "cluster.x-k8s.io", ["v1beta1", "v1beta2"])
    found = capi_resources(cast(KubeClient, apiserver), {})
    assert found.version == "v1beta2"
    assert found.api_version == "cluster.x-k8s.io/v1beta2"
    assert found.machine_deployments.path("capi") == (
        "/apis/cluster.x-k8s.io/v1beta2/namespaces/capi/machinedeployments"
    )


def test_v1beta1_only_is_accepted_and_usable(apiserver: InMemoryAPIServer) -> None:
    install_crds(apiserver, "cluster.x-k8s.io", ["v1beta1"])
    found = capi_resources(cast(KubeClient, apiserver), {})
    assert found.version == "v1beta1"
    resources = [
        found.clusters,
        found.machines,
        found.machine_sets,
        found.machine_deployments,
        found.machine_pools,
    ]
    assert {(r.group, r.version) for r in resources} == {("cluster.x-k8s.io", "v1beta1")}
    assert [r.kind for r in resources] == [kind for _, kind in CAPI_KINDS]
    # The descriptors really address the served resources.
    apiserver.create(
        found.machines,
        {
            "apiVersion": found.api_version,
            "kind": "Machine",
            "metadata": {"name": "m1", "namespace": "default"},
            "spec": {"clusterName": "c1"},
        },
    )
    assert [m["metadata"]["name"] for m in apiserver.list(found.machines, "default").items] == [
        "m1"
    ]


def test_nothing_served_is_a_clear_error(apiserver: InMemoryAPIServer) -> None:
    with pytest.raises(CapiNotServedError) as raised:
        capi_resources(cast(KubeClient, apiserver), {})
    message = str(raised.value)
    assert "cluster.x-k8s.io" in message
    assert "not served at all" in message
    assert raised.value.served == []


def test_only_unsupported_versions_served_names_what_is_there(
    apiserver: InMemoryAPIServer,
) -> None:
    install_crds(apiserver, "cluster.x-k8s.io", ["v1alpha4"])
    with pytest.raises(CapiNotServedError, match=r"v1beta2, v1beta1.*serves v1alpha4"):
        capi_resources(cast(KubeClient, apiserver), {})


def test_capi_group_override_retargets_every_resource(apiserver: InMemoryAPIServer) -> None:
    install_crds(apiserver, "cluster.x-k8s.io", ["v1beta2"])
    install_crds(apiserver, "cluster.example.com", ["v1beta1"])
    found = capi_resources(cast(KubeClient, apiserver), {"CAPI_GROUP": "cluster.example.com"})
    assert found == CapiResources.at("cluster.example.com", "v1beta1")
    assert found.machines.api_version == "cluster.example.com/v1beta1"
    # An empty override means the default, as in cluster-autoscaler.
    assert capi_resources(cast(KubeClient, apiserver), {"CAPI_GROUP": ""}).group == (
        "cluster.x-k8s.io"
    )


def test_capi_version_override_pins_a_served_version(apiserver: InMemoryAPIServer) -> None:
    install_crds(apiserver, "cluster.x-k8s.io", ["v1beta1", "v1beta2"])
    found = capi_resources(cast(KubeClient, apiserver), {"CAPI_VERSION": "v1beta1"})
    assert found.version == "v1beta1"
    with pytest.raises(CapiNotServedError, match="CAPI_VERSION"):
        capi_resources(cast(KubeClient, apiserver), {"CAPI_VERSION": "v1beta3"})
