"""Cluster API objects of an AWS cluster, and a generic_capi + capa plugin stack over them."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.instancetype import InstanceType
from karpenter_capi.core.kube.discovery import CapiResources, capi_resources
from karpenter_capi.core.kube.resources import CLUSTER_API_NODE_CLASSES
from karpenter_capi.core.observability.metrics import Metrics
from karpenter_capi.core.plugin_host import PluginEnvironment, Plugins
from karpenter_capi.plugins.capa.plugin import CapaPlugin
from karpenter_capi.plugins.generic_capi.inventory import Inventory, collect_inventory
from karpenter_capi.plugins.generic_capi.plugin import GenericCapiPlugin
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.cluster import new_cluster
from tests.support.aws import REGION, StubbedAws

INFRA = "infrastructure.cluster.x-k8s.io"
P = wellknown.CAPACITY_ANNOTATION_PREFIX
PRICE = "karpenter.cluster.x-k8s.io/price"


def cluster(name: str = "prod", region: str | None = REGION) -> list[dict[str, Any]]:
    aws_cluster: dict[str, Any] = {
        "apiVersion": f"{INFRA}/v1beta2",
        "kind": "AWSCluster",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"region": region} if region else {},
    }
    return [
        {
            "apiVersion": "cluster.x-k8s.io/v1beta2",
            "kind": "Cluster",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"infrastructureRef": {"apiGroup": INFRA, "kind": "AWSCluster", "name": name}},
        },
        aws_cluster,
    ]


def aws_template(name: str, instance_type: str | None, *, spot: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"iamInstanceProfile": "nodes.cluster-api-provider-aws.sigs.k8s.io"}
    if instance_type is not None:
        spec["instanceType"] = instance_type
    if spot:
        spec["spotMarketOptions"] = {}
    return {
        "apiVersion": f"{INFRA}/v1beta2",
        "kind": "AWSMachineTemplate",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"template": {"spec": spec}},
    }


def machine_deployment(
    name: str,
    template: str,
    *,
    zone: str | None = "us-east-1a",
    annotations: Mapping[str, str] | None = None,
    cluster_name: str = "prod",
) -> dict[str, Any]:
    machine: dict[str, Any] = {
        "clusterName": cluster_name,
        "version": "v1.31.0",
        "infrastructureRef": {"apiGroup": INFRA, "kind": "AWSMachineTemplate", "name": template},
        # CAPI's MachineDeployment webhook requires a bootstrap.
        "bootstrap": {"dataSecretName": f"{name}-bootstrap"},
    }
    if zone:
        machine["failureDomain"] = zone
    return {
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "MachineDeployment",
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": {wellknown.LABEL_KARPENTER_MEMBER: ""},
            "annotations": dict(annotations or {}),
        },
        "spec": {
            "clusterName": cluster_name,
            "replicas": 0,
            "template": {"metadata": {}, "spec": machine},
        },
    }


def nodeclass(name: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": wellknown.NODECLASS_API_VERSION,
        "kind": wellknown.NODECLASS_KIND,
        "metadata": {"name": name},
        "spec": {"scalableResourceSelector": {}},
    }


class Stack:
    """An in-memory management cluster with generic_capi and capa enabled, in that order."""

    def __init__(
        self,
        aws: StubbedAws,
        *,
        options: Mapping[str, Mapping[str, str]] | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.clock = FakeClock()
        self.server: InMemoryAPIServer = new_cluster(clock=self.clock)
        self.aws = aws
        self.capa = CapaPlugin(aws, background_refresh=False)
        self.plugins = Plugins.from_objects(
            [("generic_capi", GenericCapiPlugin), ("capa", self.capa)],
            PluginEnvironment(
                workload=self.server,
                management=self.server,
                clock=self.clock,
                logger=logging.getLogger("test.capa"),
                options=dict(options or {}),
                metrics=metrics,
            ),
        )
        self.capi: CapiResources = capi_resources(self.server, {})

    def add(self, *objects: dict[str, Any]) -> None:
        for obj in objects:
            if obj["kind"] == "MachineDeployment":
                self.server.create(self.capi.machine_deployments, obj)
            elif obj["kind"] == wellknown.NODECLASS_KIND:
                self.server.create(CLUSTER_API_NODE_CLASSES, obj)
            else:
                self.server.apply_manifests([obj])

    def inventory(self) -> Inventory:
        return collect_inventory(self.plugins.context("generic_capi"), nodeclass(), self.capi)


def only(instance_types: list[InstanceType], name: str) -> InstanceType:
    """The one instance type of that name (the test fails if there are none or several)."""
    [found] = [it for it in instance_types if it.name == name]
    return found
