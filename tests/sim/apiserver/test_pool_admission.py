"""The webhooks on pools: CAPI's MachinePool, MachineDeployment and MachineSet defaulting and
validating webhooks and CAPZ's AzureMachinePool webhook (cluster-api
core/webhooks/admission/machinepool.go, machinedeployment.go, machineset.go: ``Default``,
``validate``, ``calculate*Replicas``, ``validateRolloutStrategy``;
cluster-api-provider-azure internal/exp/webhooks/azuremachinepool_webhook.go:
``validateOrchestrationMode``). Each rule: an object the plugins write passes, a wrong one is
refused with upstream's message; each default is shown on the stored object."""

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


def denied(kind: str, webhook: str = "validation") -> str:
    """How kube-apiserver prefixes a CAPI webhook's denial."""
    return f'admission webhook "{webhook}.{kind}.cluster.x-k8s.io" denied the request: '


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
        f"{denied('machinepool')}"
        'MachinePool.cluster.x-k8s.io "wrong" is invalid: spec.clusterName: Invalid value: '
        '"prod": spec.clusterName and spec.template.spec.clusterName must be set to the same '
        "value"
    )
    no_bootstrap = machine_pool("nb")
    no_bootstrap["spec"]["template"]["spec"]["bootstrap"] = {}
    with pytest.raises(Invalid, match=r"expected either spec\.template\.spec\.bootstrap"):
        capi.create(MACHINE_POOLS, no_bootstrap, "default")
    # Default prepends the v that validate would otherwise ask for.
    nov = capi.create(MACHINE_POOLS, machine_pool("nov", version="1.31.0"), "default")
    assert nov["spec"]["template"]["spec"]["version"] == "v1.31.0"
    with pytest.raises(
        Invalid, match=r"version: Invalid value: \"v1\.31\": must be a valid semantic"
    ):
        capi.create(MACHINE_POOLS, machine_pool("short", version="v1.31"), "default")
    ok = capi.create(MACHINE_POOLS, machine_pool("ok"), "default")
    # MachinePool.Default: the cluster-name label and machine.go's node deletion timeout.
    assert ok["metadata"]["labels"] == {"cluster.x-k8s.io/cluster-name": "prod"}
    assert ok["spec"]["template"]["spec"]["deletion"] == {"nodeDeletionTimeoutSeconds": 10}
    with pytest.raises(Invalid, match=r"spec\.clusterName: Forbidden: field is immutable"):
        capi.patch(
            MACHINE_POOLS,
            "ok",
            {"spec": {"clusterName": "b", "template": {"spec": {"clusterName": "b"}}}},
            "default",
        )


def _deployment(
    kind: str, cluster: str = "demo", version: str = "v1.31.0", name: str = "workers"
) -> Any:
    labels = {"pool": "workers"}
    return {
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": kind,
        "metadata": {"name": name},
        "spec": {
            "clusterName": "demo",
            "replicas": 0,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "clusterName": cluster,
                    "version": version,
                    "bootstrap": {"dataSecretName": "workers-bootstrap"},
                },
            },
        },
    }


@pytest.mark.parametrize("resource", [MACHINE_DEPLOYMENTS, MACHINE_SETS])
def test_deployment_and_set_webhook_rules(capi: InMemoryAPIServer, resource: Resource) -> None:
    """cluster-api core/webhooks/admission/machinedeployment.go, machineset.go: ``validate``."""
    with pytest.raises(Invalid) as refused:
        capi.create(resource, _deployment(resource.kind, cluster="other"), "default")
    assert str(refused.value) == (
        f"{denied(resource.kind.lower())}"
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


@pytest.mark.parametrize("resource", [MACHINE_DEPLOYMENTS, MACHINE_SETS])
def test_deployment_and_set_need_a_bootstrap(capi: InMemoryAPIServer, resource: Resource) -> None:
    body = _deployment(resource.kind)
    del body["spec"]["template"]["spec"]["bootstrap"]
    with pytest.raises(Invalid) as refused:
        capi.create(resource, body, "default")
    assert str(refused.value) == (
        f'{denied(resource.kind.lower())}{resource.kind}.cluster.x-k8s.io "workers" is invalid: '
        "spec.template.spec.bootstrap: Required value: expected either "
        "spec.template.spec.bootstrap.dataSecretName or spec.template.spec.bootstrap.configRef "
        "to be populated"
    )
    body["spec"]["template"]["spec"]["bootstrap"] = {
        "configRef": {
            "apiGroup": "bootstrap.cluster.x-k8s.io",
            "kind": "KubeadmConfigTemplate",
            "name": "workers",
        }
    }
    capi.create(resource, body, "default")


def test_the_selector_must_match_the_template_labels(capi: InMemoryAPIServer) -> None:
    for resource in (MACHINE_DEPLOYMENTS, MACHINE_SETS):
        body = _deployment(resource.kind)
        body["spec"]["template"]["metadata"]["labels"] = {"pool": "other"}
        with pytest.raises(Invalid) as refused:
            capi.create(resource, body, "default")
        if resource is MACHINE_DEPLOYMENTS:
            # Defaulting adds the cluster-name label to both before validation runs.
            assert str(refused.value).endswith(
                "spec.template.metadata.labels: Forbidden: must match spec.selector "
                '"cluster.x-k8s.io/cluster-name=demo,pool=workers"'
            )
        else:
            assert str(refused.value).endswith(
                'spec.template.metadata.labels: Invalid value: map[string]string{"pool":"other"}: '
                'must match spec.selector "pool=workers"'
            )


@pytest.mark.parametrize(
    ("rolling", "cause"),
    [
        (
            {"maxSurge": 0, "maxUnavailable": 0},
            'spec.rollout.strategy.rollingUpdate: Invalid value: "0": maxUnavailable and '
            "maxSurge cannot both be 0",
        ),
        (
            {"maxSurge": "2"},
            'spec.rollout.strategy.rollingUpdate.maxSurge: Invalid value: "2": must be either an '
            "int or a percentage: invalid value for IntOrString: invalid type: string is not a "
            "percentage",
        ),
        (
            {"maxUnavailable": "x%"},
            'spec.rollout.strategy.rollingUpdate.maxUnavailable: Invalid value: "x%": must be '
            'either an int or a percentage: invalid value for IntOrString: invalid value "x%": '
            'strconv.Atoi: parsing "x": invalid syntax',
        ),
    ],
)
def test_rollout_strategy_rules(
    capi: InMemoryAPIServer, rolling: dict[str, Any], cause: str
) -> None:
    body = _deployment("MachineDeployment")
    body["spec"]["rollout"] = {"strategy": {"type": "RollingUpdate", "rollingUpdate": rolling}}
    with pytest.raises(Invalid) as refused:
        capi.create(MACHINE_DEPLOYMENTS, body, "default")
    assert str(refused.value) == (
        f'{denied("machinedeployment")}MachineDeployment.cluster.x-k8s.io "workers" is invalid: '
        f"{cause}"
    )


def test_a_deployment_name_must_be_a_label_value(capi: InMemoryAPIServer) -> None:
    name = "w" * 64
    with pytest.raises(Invalid) as refused:
        capi.create(MACHINE_DEPLOYMENTS, _deployment("MachineDeployment", name=name), "default")
    assert str(refused.value).endswith(
        f'metadata.name: Invalid value: "{name}": must be a valid label value: must be no more '
        "than 63 characters"
    )
    # A MachineSet is not held to it (its name label is hashed when too long).
    capi.create(MACHINE_SETS, _deployment("MachineSet", name=name), "default")


def test_deployment_defaults(capi: InMemoryAPIServer) -> None:
    """``MachineDeployment.Default``: labels, selector, rollout strategy, version, replicas."""
    body = _deployment("MachineDeployment", version="1.31.0")
    del body["spec"]["replicas"]
    body["spec"]["selector"] = {}
    body["spec"]["template"]["metadata"] = {}
    md = capi.create(MACHINE_DEPLOYMENTS, body, "default")
    names = {
        "cluster.x-k8s.io/cluster-name": "demo",
        "cluster.x-k8s.io/deployment-name": "workers",
    }
    assert md["metadata"]["labels"] == {"cluster.x-k8s.io/cluster-name": "demo"}
    assert md["spec"]["selector"] == {"matchLabels": names}
    assert md["spec"]["template"]["metadata"]["labels"] == names
    assert md["spec"]["rollout"] == {
        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    }
    assert md["spec"]["template"]["spec"]["version"] == "v1.31.0"
    assert md["spec"]["replicas"] == 1  # no autoscaler annotations


def test_set_defaults_its_selector_to_its_name(capi: InMemoryAPIServer) -> None:
    body = _deployment("MachineSet")
    body["spec"]["selector"] = {}
    body["spec"]["template"]["metadata"] = {}
    ms = capi.create(MACHINE_SETS, body, "default")
    assert ms["spec"]["selector"] == {"matchLabels": {"cluster.x-k8s.io/set-name": "workers"}}
    assert ms["spec"]["template"]["metadata"]["labels"] == {"cluster.x-k8s.io/set-name": "workers"}
    assert ms["metadata"]["labels"] == {"cluster.x-k8s.io/cluster-name": "demo"}


MIN = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size"
MAX = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size"


@pytest.mark.parametrize("resource", [MACHINE_DEPLOYMENTS, MACHINE_SETS, MACHINE_POOLS])
def test_replicas_default_from_the_autoscaler_annotations(
    capi: InMemoryAPIServer, resource: Resource
) -> None:
    """``calculate<Kind>Replicas``: min size for a new object; an old value clamped into
    [min, max] when replicas is unset on update."""
    body = machine_pool("workers") if resource is MACHINE_POOLS else _deployment(resource.kind)
    body["metadata"]["annotations"] = {MIN: "2", MAX: "5"}
    del body["spec"]["replicas"]
    assert capi.create(resource, body, "default")["spec"]["replicas"] == 2

    def handed_over(replicas: int) -> int:
        capi.patch(resource, "workers", {"spec": {"replicas": replicas}}, "default")
        stored = capi.get(resource, "workers", "default")
        stored["spec"].pop("replicas")
        return int(capi.update(resource, stored)["spec"]["replicas"])

    assert handed_over(4) == 4
    assert handed_over(9) == 5
    assert handed_over(1) == 2


def test_an_unparsable_size_annotation_is_denied_by_the_defaulting_webhook(
    capi: InMemoryAPIServer,
) -> None:
    body = _deployment("MachineDeployment")
    body["metadata"]["annotations"] = {MIN: "two", MAX: "5"}
    del body["spec"]["replicas"]
    with pytest.raises(Forbidden) as refused:
        capi.create(MACHINE_DEPLOYMENTS, body, "default")
    assert str(refused.value) == (
        f"{denied('machinedeployment', 'default')}failed to caculate MachineDeployment replicas "
        f'value: could not parse the value of the "{MIN}" annotation: strconv.ParseInt: parsing '
        '"two": invalid syntax'
    )
