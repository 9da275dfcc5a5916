"""The validating webhooks on pools: CAPI's MachinePool webhook and CAPZ's AzureMachinePool
webhook (cluster-api core/webhooks/admission/machinepool.go: ``MachinePool.validate``;
cluster-api-provider-azure internal/exp/webhooks/azuremachinepool_webhook.go:
``validateOrchestrationMode``). Each rule: an object the plugins write passes, a wrong one is
refused with upstream's message."""

from __future__ import annotations

from typing import Any

import pytest

from karpenter_capi.core.kube.errors import Forbidden, Invalid
from karpenter_capi.core.kube.resources import (
    MACHINE_DEPLOYMENTS,
    MACHINE_POOLS,
    MACHINE_SETS,
    Resource,
)
from karpenter_capi.sim.apiserver import InMemoryAPIServer

AZURE_MACHINE_POOLS = Resource(
    "infrastructure.cluster.x-k8s.io", "v1beta1", "azuremachinepools", "AzureMachinePool", True
)
DENIED = (
    'admission webhook "validation.azuremachinepool.infrastructure.cluster.x-k8s.io" denied '
    "the request: "
)


@pytest.fixture
def capi(apiserver: InMemoryAPIServer) -> InMemoryAPIServer:
    apiserver.register_cluster_api()
    return apiserver


def machine_pool(name: str, *, infra: str | None = None, version: str = "v1.31.0") -> Any:
    return {
        "apiVersion": MACHINE_POOLS.api_version,
        "kind": "MachinePool",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "clusterName": "prod",
            "replicas": 0,
            "template": {
                "spec": {
                    "clusterName": "prod",
                    "version": version,
                    "bootstrap": {"dataSecretName": "boot"},
                    "infrastructureRef": {
                        "apiGroup": "infrastructure.cluster.x-k8s.io",
                        "kind": "AzureMachinePool",
                        "name": infra or name,
                    },
                }
            },
        },
    }


def azure_pool(name: str, mode: str = "Flexible") -> Any:
    return {
        "apiVersion": AZURE_MACHINE_POOLS.api_version,
        "kind": "AzureMachinePool",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "location": "eastus",
            "orchestrationMode": mode,
            "template": {"vmSize": "x", "osDisk": {"osType": "Linux"}},
        },
    }


def test_flexible_azure_machine_pool_needs_its_machine_pool_first(
    capi: InMemoryAPIServer,
) -> None:
    with pytest.raises(Forbidden) as refused:
        capi.create(AZURE_MACHINE_POOLS, azure_pool("pool"), "default")
    assert str(refused.value) == (
        f"{DENIED}failed to find parent MachinePool: failed to find parent MachinePool: "
        "failed to get MachinePool for pool"
    )
    # The MachinePool may name an AzureMachinePool that does not exist yet.
    capi.create(MACHINE_POOLS, machine_pool("pool"), "default")
    capi.create(AZURE_MACHINE_POOLS, azure_pool("pool"), "default")
    # The parent is found by its infrastructureRef, not its name.
    capi.create(MACHINE_POOLS, machine_pool("other", infra="renamed"), "default")
    capi.create(AZURE_MACHINE_POOLS, azure_pool("renamed"), "default")
    # Uniform orchestration is not checked.
    capi.create(AZURE_MACHINE_POOLS, azure_pool("uniform", "Uniform"), "default")


def test_flexible_azure_machine_pool_needs_kubernetes_1_26(capi: InMemoryAPIServer) -> None:
    capi.create(MACHINE_POOLS, machine_pool("old", version="v1.25.4"), "default")
    with pytest.raises(Forbidden) as refused:
        capi.create(AZURE_MACHINE_POOLS, azure_pool("old"), "default")
    assert str(refused.value) == (
        f"{DENIED}specified Kubernetes version 1.25.4 must be >= 1.26.0 for Flexible "
        "orchestration mode"
    )
    capi.create(MACHINE_POOLS, machine_pool("none", version=""), "default")
    with pytest.raises(Forbidden, match="could not find Kubernetes version in MachinePool"):
        capi.create(AZURE_MACHINE_POOLS, azure_pool("none"), "default")


def test_machine_pool_webhook_rules(capi: InMemoryAPIServer) -> None:
    wrong = machine_pool("wrong")
    wrong["spec"]["template"]["spec"]["clusterName"] = "other"
    with pytest.raises(Invalid) as refused:
        capi.create(MACHINE_POOLS, wrong, "default")
    assert str(refused.value) == (
        'MachinePool.cluster.x-k8s.io "wrong" is invalid: spec.clusterName: Invalid value: '
        '"prod": spec.clusterName and spec.template.spec.clusterName must be set to the same '
        "value"
    )
    no_bootstrap = machine_pool("nb")
    no_bootstrap["spec"]["template"]["spec"]["bootstrap"] = {}
    with pytest.raises(Invalid, match=r"expected either spec\.template\.spec\.bootstrap"):
        capi.create(MACHINE_POOLS, no_bootstrap, "default")
    with pytest.raises(Invalid, match="must start with v"):
        capi.create(MACHINE_POOLS, machine_pool("nov", version="1.31.0"), "default")
    capi.create(MACHINE_POOLS, machine_pool("ok"), "default")
    with pytest.raises(Invalid, match=r"spec\.clusterName: Forbidden: field is immutable"):
        capi.patch(
            MACHINE_POOLS,
            "ok",
            {"spec": {"clusterName": "b", "template": {"spec": {"clusterName": "b"}}}},
            "default",
        )


def _deployment(kind: str, cluster: str = "demo", version: str = "v1.31.0") -> Any:
    labels = {"pool": "workers"}
    return {
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": kind,
        "metadata": {"name": "workers"},
        "spec": {
            "clusterName": "demo",
            "replicas": 0,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"clusterName": cluster, "version": version},
            },
        },
    }


@pytest.mark.parametrize("resource", [MACHINE_DEPLOYMENTS, MACHINE_SETS])
def test_deployment_and_set_webhook_rules(capi: InMemoryAPIServer, resource: Resource) -> None:
    """cluster-api core/webhooks/admission/machinedeployment.go, machineset.go: ``validate``."""
    with pytest.raises(Invalid) as refused:
        capi.create(resource, _deployment(resource.kind, cluster="other"), "default")
    assert str(refused.value) == (
        f'{resource.kind}.cluster.x-k8s.io "workers" is invalid: spec.clusterName: Invalid '
        'value: "demo": spec.clusterName and spec.template.spec.clusterName must be set to the '
        "same value"
    )
    with pytest.raises(Invalid, match="must be a valid semantic version"):
        capi.create(resource, _deployment(resource.kind, version="v1.31"), "default")
    capi.create(resource, _deployment(resource.kind), "default")
    # What the plugins write is admitted: replicas through scale, annotations on the object.
    scale = capi.get(resource, "workers", "default", subresource="scale")
    patch = {"metadata": {"resourceVersion": scale["metadata"]["resourceVersion"]}}
    capi.patch(
        resource, "workers", {**patch, "spec": {"replicas": 3}}, "default", subresource="scale"
    )
    capi.patch(resource, "workers", {"metadata": {"annotations": {"a": "b"}}}, "default")
    with pytest.raises(Invalid, match=r"spec\.clusterName: Forbidden: field is immutable"):
        capi.patch(
            resource,
            "workers",
            {"spec": {"clusterName": "b", "template": {"spec": {"clusterName": "b"}}}},
            "default",
        )
