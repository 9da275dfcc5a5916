"""CAPZ's AzureMachinePool schema as the simulated server serves it (cluster-api-provider-azure
config/crd/bases/infrastructure.cluster.x-k8s.io_azuremachinepools.yaml): what the capz plugin
writes is kept, an unknown field is pruned, a default applied, a wrong value refused with the
API server's message."""

from __future__ import annotations

from typing import Any

import pytest

from karpenter_capi.core.kube.errors import Invalid
from karpenter_capi.core.kube.resources import Resource
from karpenter_capi.sim.apiserver import InMemoryAPIServer

AZURE_MACHINE_POOLS = Resource(
    "infrastructure.cluster.x-k8s.io", "v1beta1", "azuremachinepools", "AzureMachinePool", True
)
KIND = 'AzureMachinePool.infrastructure.cluster.x-k8s.io "pool" is invalid: '


@pytest.fixture
def capi(apiserver: InMemoryAPIServer) -> InMemoryAPIServer:
    apiserver.register_cluster_api()
    return apiserver


def pool(**template: Any) -> dict[str, Any]:
    return {
        "apiVersion": AZURE_MACHINE_POOLS.api_version,
        "kind": "AzureMachinePool",
        "metadata": {"name": "pool", "namespace": "default"},
        "spec": {
            "location": "eastus",
            "additionalTags": {"team": "a"},
            "template": {
                "vmSize": "Standard_D4s_v5",
                "osDisk": {"osType": "Linux", "diskSizeGB": 128},
                "image": {"marketplace": {"sku": "ubuntu-2204-gen2"}},
                **template,
            },
        },
    }


def test_what_the_plugin_writes_is_kept_and_defaulted(capi: InMemoryAPIServer) -> None:
    body = pool(spotVMOptions={"evictionPolicy": "Delete", "maxPrice": "0.5"})
    body["spec"]["bogus"] = 1
    body["spec"]["template"]["failureDomain"] = "1"  # an AzureMachine field, not a pool's
    created = capi.create(AZURE_MACHINE_POOLS, body, "default")
    spec = created["spec"]
    assert "bogus" not in spec
    assert "failureDomain" not in spec["template"]
    assert spec["orchestrationMode"] == "Uniform"
    assert spec["additionalTags"] == {"team": "a"}
    assert spec["template"]["osDisk"] == {"osType": "Linux", "diskSizeGB": 128}
    assert spec["template"]["spotVMOptions"] == {"evictionPolicy": "Delete", "maxPrice": "0.5"}


def test_a_template_without_os_disk_is_refused(capi: InMemoryAPIServer) -> None:
    body = pool()
    del body["spec"]["template"]["osDisk"]
    with pytest.raises(Invalid) as refused:
        capi.create(AZURE_MACHINE_POOLS, body, "default")
    assert str(refused.value) == f"{KIND}spec.template.osDisk: Required value"


def test_an_unknown_eviction_policy_is_refused(capi: InMemoryAPIServer) -> None:
    with pytest.raises(Invalid) as refused:
        capi.create(
            AZURE_MACHINE_POOLS, pool(spotVMOptions={"evictionPolicy": "delete"}), "default"
        )
    assert str(refused.value) == (
        f'{KIND}spec.template.spotVMOptions.evictionPolicy: Unsupported value: "delete": '
        'supported values: "Deallocate", "Delete"'
    )
