"""Scenario ``azure-vmss``: the simulator with the capz plugin's ``CAPZMachinePool`` launch mode
over the fake Azure (catalog and retail prices of eastus), stock CAPZ emulated.

Pods are bound on nodes of real VM sizes, priced from Azure's retail prices; the cheapest size
has no capacity in the simulated Azure, so its pool fails and the launch falls back; after a
scale-down, consolidation removes nodes through the pool path (``delete-machine`` and a lower
replica count).
"""

from __future__ import annotations

import pytest
from capz_env import CapzWorld

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.kube import MACHINE_POOLS, MACHINES, NODECLAIMS, NODES
from karpenter_capi.plugins.capz.plugin import CapzPlugin
from karpenter_capi.plugins.generic_capi import plugin as generic_capi
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.scenario.runner import run
from karpenter_capi.sim.scenario.schema import parse_scenario_text

SCENARIO = """\
name: azure-vmss
description: Native launch through CAPZ Flexible MachinePools, with a capacity failure.
infrastructure:
  manifests:
  - apiVersion: cluster.x-k8s.io/v1beta2
    kind: Cluster
    metadata: {name: prod, namespace: default}
    spec:
      infrastructureRef: {apiGroup: infrastructure.cluster.x-k8s.io, kind: AzureCluster, name: prod}
      topology: {version: v1.31.0}
  - apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
    kind: AzureCluster
    metadata: {name: prod, namespace: default}
    spec: {location: eastus, subscriptionID: 00000000-0000-0000-0000-000000000001}
  - apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
    kind: AzureMachineTemplate
    metadata: {name: workers, namespace: default}
    spec:
      template:
        spec:
          vmSize: Standard_D4s_v5
          osDisk: {osType: Linux, diskSizeGB: 128}
  - apiVersion: bootstrap.cluster.x-k8s.io/v1beta2
    kind: KubeadmConfigTemplate
    metadata: {name: workers, namespace: default}
    spec: {template: {spec: {}}}
  - apiVersion: karpenter.cluster.x-k8s.io/v1alpha1
    kind: ClusterAPINodeClass
    metadata: {name: azure}
    spec:
      launch:
        mode: CAPZMachinePool
        clusterName: prod
        namespace: default
        infrastructureTemplateRef: {kind: AzureMachineTemplate, name: workers}
        bootstrapConfigTemplateRef: {kind: KubeadmConfigTemplate, name: workers}
  - apiVersion: karpenter.sh/v1
    kind: NodePool
    metadata: {name: azure}
    spec:
      template:
        spec:
          nodeClassRef: {group: karpenter.cluster.x-k8s.io, kind: ClusterAPINodeClass, name: azure}
          requirements:
          - {key: kubernetes.io/arch, operator: In, values: [amd64]}
          - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
          - {key: topology.kubernetes.io/zone, operator: In, values: [eastus-1, eastus-2]}
          expireAfter: Never
      disruption: {consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 30s}
workloads:
- {name: batch, replicas: 2, cpu: 3, memory: 4Gi}
- {name: web, replicas: 2, cpu: 500m, memory: 1Gi}
timeline:
- {at: 5m, action: scale, target: batch, replicas: 0}
"""


def test_azure_vmss_scenario() -> None:
    world = CapzWorld.new()
    servers: list[InMemoryAPIServer] = []
    result = run(
        parse_scenario_text(SCENARIO, "azure-vmss.yaml"),
        until=900,
        plugin_objects=[
            ("generic_capi", generic_capi),
            ("capz", CapzPlugin(**world.provider_options())),
        ],
        on_cluster=servers.append,
        emulation={"azure_unavailable_sizes": frozenset({"Standard_B2s@1"})},
    )
    [server] = servers
    assert result.errors == []
    assert result.pods_bound == result.pods_total == 2
    # Two 3-CPU batch pods needed two D4s_v5 (4 vCPU) at eastus's retail 0.192 USD/h each.
    assert result.cost_per_hour_peak == pytest.approx(2 * 0.192)
    pools = {p["metadata"]["name"]: p for p in server.list(MACHINE_POOLS, "default").items}
    replicas = {name.rsplit("-", 1)[0]: p["spec"]["replicas"] for name, p in pools.items()}
    # The B2s pool of zone 1 had no capacity: its replica was given back and zone 2 served.
    assert replicas == {"azure-b2s-od-z1": 0, "azure-b2s-od-z2": 1, "azure-d4s-v5-od-z1": 0}
    # Consolidation replaced the D4s_v5 nodes, through delete-machine and the pool's scale.
    assert result.disruptions.get("Underutilized", 0) >= 1
    assert result.api_requests["patch/scale"] >= 4
    assert [(row.instance_type, row.price_per_hour) for row in result.capacity] == [
        ("Standard_B2s", pytest.approx(0.0416))
    ]
    assert result.cost_per_hour == pytest.approx(0.0416)
    [node] = server.list(NODES).items
    [claim] = server.list(NODECLAIMS).items
    labels = node["metadata"]["labels"]
    assert labels[wellknown.LABEL_INSTANCE_TYPE] == "Standard_B2s"
    assert labels[wellknown.LABEL_TOPOLOGY_ZONE] == "eastus-2"
    assert claim["metadata"]["labels"][wellknown.LABEL_TOPOLOGY_ZONE] == "eastus-2"
    assert node["spec"]["providerID"].startswith("azure:///subscriptions/")
    [machine] = [
        m
        for m in server.list(MACHINES, "default").items
        if not m["metadata"].get("deletionTimestamp")
    ]
    assert machine["spec"]["providerID"] == node["spec"]["providerID"]
    assert machine["metadata"]["labels"]["cluster.x-k8s.io/pool-name"].startswith("azure-b2s-od-z2")
