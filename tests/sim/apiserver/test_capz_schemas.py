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


POOL_MACHINES = Resource(
    "infrastructure.cluster.x-k8s.io",
    "v1beta1",
    "azuremachinepoolmachines",
    "AzureMachinePoolMachine",
    True,
)
PROVIDER_ID = (
    "azure:///subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/virtualMachines/v"
)


def pool_machine(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": POOL_MACHINES.api_version,
        "kind": "AzureMachinePoolMachine",
        "metadata": {"name": "vm", "namespace": "default"},
        "spec": {"providerID": PROVIDER_ID, **spec},
    }


def test_a_pool_machine_and_the_failed_vm_status_capz_writes(capi: InMemoryAPIServer) -> None:
    """infrastructure.cluster.x-k8s.io_azuremachinepoolmachines.yaml: what CAPZ writes for a
    VM Azure could not provision is kept; an unknown status field is pruned."""
    capi.create(POOL_MACHINES, pool_machine(instanceID="3"), "default")
    status = {
        "provisioningState": "Failed",
        "ready": False,
        "bogus": 1,
        "conditions": [
            {
                "type": "VMRunning",
                "status": "False",
                "reason": "Failed",
                "severity": "Error",
                "message": "scalesetvms failed to create or update. err: OSProvisioningTimedOut",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ],
    }
    stored = capi.patch(POOL_MACHINES, "vm", {"status": status}, "default", subresource="status")
    assert stored["status"]["provisioningState"] == "Failed"
    assert stored["status"]["conditions"][0]["severity"] == "Error"
    assert "bogus" not in stored["status"]


def test_a_pool_machine_without_provider_id_is_refused(capi: InMemoryAPIServer) -> None:
    body = pool_machine()
    del body["spec"]["providerID"]
    with pytest.raises(Invalid) as refused:
        capi.create(POOL_MACHINES, body, "default")
    assert str(refused.value) == (
        'AzureMachinePoolMachine.infrastructure.cluster.x-k8s.io "vm" is invalid: '
        "spec.providerID: Required value"
    )


def test_a_condition_without_its_transition_time_is_refused(capi: InMemoryAPIServer) -> None:
    capi.create(POOL_MACHINES, pool_machine(), "default")
    condition = {"type": "VMRunning", "status": "False", "reason": "Failed"}
    with pytest.raises(Invalid) as refused:
        capi.patch(
            POOL_MACHINES,
            "vm",
            {"status": {"conditions": [condition]}},
            "default",
            subresource="status",
        )
    assert "status.conditions[0].lastTransitionTime: Required value" in str(refused.value)


MACHINE_TEMPLATES = Resource(
    "infrastructure.cluster.x-k8s.io",
    "v1beta1",
    "azuremachinetemplates",
    "AzureMachineTemplate",
    True,
)


def machine_template(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": MACHINE_TEMPLATES.api_version,
        "kind": "AzureMachineTemplate",
        "metadata": {"name": "workers", "namespace": "default"},
        "spec": {"template": {"spec": {"osDisk": {"osType": "Linux"}, **spec}}},
    }


def test_a_machine_template_keeps_its_fields_and_prunes_others(capi: InMemoryAPIServer) -> None:
    """..._azuremachinetemplates.yaml: ``AzureMachineSpec`` under ``spec.template.spec``."""
    body = machine_template(
        vmSize="Standard_D4s_v5",
        sshPublicKey="c3NoLXJzYQ==",
        spotVMOptions={"evictionPolicy": "Delete"},
        bogus=1,
    )
    stored = capi.create(MACHINE_TEMPLATES, body, "default")
    spec = stored["spec"]["template"]["spec"]
    assert spec["spotVMOptions"] == {"evictionPolicy": "Delete"}
    assert spec["sshPublicKey"] == "c3NoLXJzYQ=="
    assert "bogus" not in spec


def test_a_machine_template_without_vm_size_is_refused(capi: InMemoryAPIServer) -> None:
    with pytest.raises(Invalid) as refused:
        capi.create(MACHINE_TEMPLATES, machine_template(), "default")
    assert str(refused.value) == (
        'AzureMachineTemplate.infrastructure.cluster.x-k8s.io "workers" is invalid: '
        "spec.template.spec.vmSize: Required value"
    )
    body = machine_template(vmSize="Standard_D4s_v5", spotVMOptions={"evictionPolicy": "Stop"})
    with pytest.raises(Invalid, match=r"spotVMOptions\.evictionPolicy: Unsupported value"):
        capi.create(MACHINE_TEMPLATES, body, "default")
