"""A CAPZ cluster in the in-memory API, and a capz provider whose Azure is the simulator's.

``CapzWorld`` holds the in-memory management cluster (a Cluster, its AzureCluster in eastus),
a ``FakeClock``, and one ``SimulatedAzure`` (``karpenter_capi.sim.azure``) serving both
Resource SKUs and Retail Prices.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.hookspecs import PluginContext
from karpenter_capi.plugins.capz.provider import CapzProvider, CapzSettings
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.azure.eastus import PricesEndpoint
from karpenter_capi.sim.azure.transport import SUBSCRIPTION, FakeAzureTransport, FakeCredential
from karpenter_capi.sim.azure.world import SimulatedAzure
from karpenter_capi.sim.cluster import new_cluster

INFRA = "infrastructure.cluster.x-k8s.io"


def cluster_objects(
    *, location: str | None = "eastus", subscription: str | None = SUBSCRIPTION
) -> list[dict[str, Any]]:
    """A v1beta2 Cluster ``prod`` whose infrastructure is the AzureCluster ``prod``."""
    azure_spec: dict[str, Any] = {"resourceGroup": "prod-rg", "networkSpec": {}}
    if location is not None:
        azure_spec["location"] = location
    if subscription is not None:
        azure_spec["subscriptionID"] = subscription
    return [
        {
            "apiVersion": "cluster.x-k8s.io/v1beta2",
            "kind": "Cluster",
            "metadata": {"name": "prod", "namespace": "default"},
            "spec": {
                "infrastructureRef": {"apiGroup": INFRA, "kind": "AzureCluster", "name": "prod"},
            },
        },
        {
            "apiVersion": f"{INFRA}/v1beta1",
            "kind": "AzureCluster",
            "metadata": {"name": "prod", "namespace": "default"},
            "spec": azure_spec,
        },
    ]


def azure_machine_template(
    name: str,
    vm_size: str,
    *,
    spot: Mapping[str, Any] | None = None,
    os_type: str = "Linux",
    disk_gib: int | None = 128,
) -> dict[str, Any]:
    """An AzureMachineTemplate as CAPZ's quick start writes one."""
    os_disk: dict[str, Any] = {"osType": os_type, "managedDisk": {"storageAccountType": "P_LRS"}}
    if disk_gib is not None:
        os_disk["diskSizeGB"] = disk_gib
    vm: dict[str, Any] = {"vmSize": vm_size, "osDisk": os_disk, "sshPublicKey": ""}
    if spot is not None:
        vm["spotVMOptions"] = dict(spot)
    return {
        "apiVersion": f"{INFRA}/v1beta1",
        "kind": "AzureMachineTemplate",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"template": {"spec": vm}},
    }


def machine_deployment(
    name: str,
    template: str,
    *,
    failure_domain: str | None = None,
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    machine: dict[str, Any] = {
        "clusterName": "prod",
        "version": "v1.31.0",
        "bootstrap": {"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io",
                                    "kind": "KubeadmConfigTemplate", "name": name}},
        "infrastructureRef": {"apiGroup": INFRA, "kind": "AzureMachineTemplate", "name": template},
    }  # fmt: skip
    if failure_domain is not None:
        machine["failureDomain"] = failure_domain
    return {
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "MachineDeployment",
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": dict(labels or {}),
            "annotations": dict(annotations or {}),
        },
        "spec": {
            "clusterName": "prod",
            "replicas": 0,
            "selector": {"matchLabels": {}},
            "template": {"metadata": {}, "spec": machine},
        },
    }


@dataclass
class CapzWorld:
    server: InMemoryAPIServer
    clock: FakeClock
    azure: SimulatedAzure

    @classmethod
    def new(cls, *, objects: list[dict[str, Any]] | None = None) -> CapzWorld:
        clock = FakeClock()
        server = new_cluster(clock=clock)
        server.apply_manifests(cluster_objects() if objects is None else objects)
        return cls(server, clock, SimulatedAzure.eastus())

    @property
    def transport(self) -> FakeAzureTransport:
        return self.azure.transport

    @property
    def prices(self) -> PricesEndpoint:
        return self.azure.prices

    @property
    def credential(self) -> FakeCredential:
        return self.azure.credential

    def provider(
        self, settings: CapzSettings | None = None, *, env: Mapping[str, str] | None = None
    ) -> CapzProvider:
        return CapzProvider(
            self.server,
            self.clock,
            settings=settings or CapzSettings(),
            **{**self.azure.provider_options(), "env": dict(env or {})},
        )

    def provider_options(self) -> dict[str, Any]:
        """What ``CapzPlugin(**...)`` needs to reach this simulated Azure."""
        return self.azure.provider_options()

    def context(self, options: Mapping[str, str] | None = None) -> PluginContext:
        return PluginContext(
            plugin_name="capz",
            workload=self.server,
            management=self.server,
            clock=self.clock,
            logger=logging.getLogger("test.capz"),
            options=dict(options or {}),
        )

    def sku_requests(self) -> int:
        return self.azure.sku_requests()
