"""Recorded runs of the native launch modes (``CAPAFleet``, ``CAPZMachinePool``) for the
least-privilege RBAC test, kept apart from ``rbac_recording`` because their rules are optional
(the chart's ``nativeLaunch.capa`` and ``nativeLaunch.capz``): the test checks them as a
separate set of requests. The same runs give the cloud calls the AWS policy and the Azure role
are checked against (``test_aws_iam_policy``, ``test_azure_role``).

* ``CAPAFleet`` at the plugin level, as ``tests/plugins/capa/fleet_env.py`` drives it over moto's
  EC2: a launch that waits for bootstrap data, a Fleet refused for capacity and retried, a restarted
  controller's repeated create, ``get``, delete through the Machine, garbage collection of an
  instance no NodeClaim claims and of a Machine whose instance is gone. The plugins get an
  ``AuditingClient`` per role over one in-memory server: each request is recorded under the
  client the plugin chose (``ONE_CLUSTER`` for both in the one-cluster layout), so a request
  sent to the wrong cluster shows up as a request that cluster's roles must allow.
* ``CAPZMachinePool`` through the whole controller (the scenario runner, and the two-cluster
  wiring of ``rbac_recording``) over the fake Azure of ``tests/plugins/capz``, with stock CAPZ
  emulated: pools created, a pool without capacity falling back to another, consolidation
  deleting a node through ``delete-machine`` and the pool's scale, and, after the grace period,
  the empty pools scaled to zero and deleted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from moto import mock_aws

from karpenter_capi.core.errors import InstanceNotFoundError, InsufficientCapacityError
from karpenter_capi.core.kube.resources import DEPLOYMENTS, MACHINE_POOLS, NODECLAIMS, Resource
from karpenter_capi.core.lifecycle.garbagecollection import orphan_nodeclaim
from karpenter_capi.core.plugin_host import PluginEnvironment, Plugins
from karpenter_capi.plugins.capz.plugin import CapzPlugin
from karpenter_capi.plugins.generic_capi.plugin import GenericCapiPlugin
from karpenter_capi.sim.apiserver.audit import (
    MANAGEMENT_CLUSTER,
    WORKLOAD_CLUSTER,
    AuditingClient,
    AuditLog,
)
from karpenter_capi.sim.capi.settings import EmulationSettings
from karpenter_capi.sim.scenario.schema import parse_scenario_text
from tests.plugins.capa.fleet_env import INFRA, NAMESPACE, FleetAws, FleetWorld
from tests.plugins.capz.env import CapzWorld
from tests.support.aws import fake_credentials

from .rbac_recording import ONE_CLUSTER, PRICE_NAMESPACE, _all_bound, _run, two_clusters

__all__ = [
    "CapzWorld",
    "drive_capa_fleet",
    "fleet_world",
    "record_capa_fleet",
    "record_capz_pools_one_cluster",
    "record_capz_pools_two_clusters",
]

LAYOUTS = {
    "one cluster": (ONE_CLUSTER, ONE_CLUSTER),
    "two clusters": (WORKLOAD_CLUSTER, MANAGEMENT_CLUSTER),
}
"""How the plugins' two clients are labelled in each layout: (workload, management)."""


# ------------------------------------------------------------------------------ CAPAFleet


@contextmanager
def fleet_world(monkeypatch: pytest.MonkeyPatch) -> Iterator[FleetWorld]:
    """moto's EC2 with a VPC and prices, and the in-memory cluster of ``fleet_env``."""
    fake_credentials(monkeypatch)
    with mock_aws():
        aws = FleetAws()
        aws.queue_prices()
        yield FleetWorld(aws)


def _audited_plugins(world: FleetWorld, log: AuditLog, layout: str) -> Plugins:
    """A restarted controller whose plugins' requests are recorded, labelled by ``layout``."""
    workload, management = LAYOUTS[layout]
    return Plugins.from_objects(
        [("generic_capi", GenericCapiPlugin), ("capa", world.capa)],
        PluginEnvironment(
            workload=AuditingClient(world.server, log, workload),
            management=AuditingClient(world.server, log, management),
            clock=world.clock,
            logger=logging.getLogger("karpenter_capi.plugins"),
            options={},
        ),
    )


def _fleet_launch(world: FleetWorld, plugins: Plugins, name: str) -> Any:
    """Create until the bootstrap data is needed, let CABPK provide it, create again."""
    world.nodeclaim(name)
    waiting = world.create(name, plugins)
    assert waiting.provider_id is None
    world.bootstrap_ready(name)
    return world.create(name, plugins)


def record_capa_fleet(log: AuditLog, monkeypatch: pytest.MonkeyPatch, layout: str) -> None:
    """A CAPAFleet NodeClass's whole life at the plugin level, in ``layout``."""
    with fleet_world(monkeypatch) as world:
        drive_capa_fleet(world, lambda: _audited_plugins(world, log, layout))


def drive_capa_fleet(world: FleetWorld, restart: Callable[[], Plugins]) -> None:
    """Every CAPAFleet code path that talks to Kubernetes or AWS, through plugins ``restart``
    makes (a controller started, then restarted)."""
    plugins = restart()
    first = _fleet_launch(world, plugins, "general-a1")
    assert first.provider_id
    # Capacity refused for every offering: cached, InsufficientCapacityError, then retried.
    world.nodeclaim("general-a2")
    world.create("general-a2", plugins)
    world.bootstrap_ready("general-a2")
    world.aws.refuse_next_fleet(
        [
            (instance_type, subnet, "InsufficientInstanceCapacity")
            for instance_type in ("m5.large", "c5.large", "m6i.large")
            for subnet in world.aws.subnets.values()
        ]
    )
    with pytest.raises(InsufficientCapacityError):
        world.create("general-a2", plugins)
    world.clock.advance(181)
    second = world.create("general-a2", plugins)
    assert second.provider_id
    # A restarted controller asked again answers from the work done.
    restarted = restart()
    assert world.create("general-a1", restarted).provider_id == first.provider_id
    assert restarted.get(first.provider_id) is not None
    # Delete through the Machine, then the instance.
    claim = world.claim("general-a1")
    restarted.delete(claim)
    restarted.delete(claim)
    with pytest.raises(InstanceNotFoundError):
        restarted.delete(claim)
    # GC: an instance tagged for a NodeClaim that is gone, and a Machine whose instance is.
    world.server.delete(NODECLAIMS, "general-a1")
    world.aws.catalog.terminate_instances(InstanceIds=[str(second.provider_id).rsplit("/", 1)[1]])
    listed = restarted.list_instances()
    assert {i.nodeclaim_name for i in listed} == {"general-a2"}
    # The NodeClass drifts (IMDSv2 from now on): the next launch writes a template version.
    world.server.patch(
        Resource(INFRA, "v1beta2", "awsmachinetemplates", "AWSMachineTemplate", True),
        "nodes",
        {"spec": {"template": {"spec": {"instanceMetadataOptions": {"httpTokens": "required"}}}}},
        NAMESPACE,
    )
    _fleet_orphan(world, restarted)
    restarted.delete(world.claim("general-a2"))
    with pytest.raises(InstanceNotFoundError):
        restarted.delete(world.claim("general-a2"))


def _fleet_orphan(world: FleetWorld, plugins: Plugins) -> None:
    """A NodeClaim created, launched, then removed without its delete: an orphan instance the
    garbage collector terminates through ``delete`` of a stand-in NodeClaim."""
    _fleet_launch(world, plugins, "general-a3")
    raw = world.server.get(NODECLAIMS, "general-a3")
    world.server.patch(NODECLAIMS, "general-a3", {"metadata": {"finalizers": None}})
    if not raw["metadata"].get("deletionTimestamp"):
        world.server.delete(NODECLAIMS, "general-a3")
    [orphan] = [i for i in plugins.list_instances() if i.nodeclaim_name == "general-a3"]
    stand_in = orphan_nodeclaim(orphan)
    plugins.delete(stand_in)
    plugins.delete(stand_in)
    assert world.aws.instances("general-a3") == []


# ------------------------------------------------------------------------ CAPZMachinePool

_AZURE_SCENARIO = """\
name: azure-rbac
description: CAPZMachinePool launches, a size without capacity, consolidation, pool cleanup.
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

_NO_CAPACITY = frozenset({"Standard_B2s@1"})
"""The cheapest size has no capacity in zone 1: its pool fails and the launch falls back."""

_SWEPT_BY = 300 + 600 + 600
"""The batch pods go at 5m; consolidation, then the 10-minute pool grace, with room."""


def _capz_plugins(world: CapzWorld) -> list[tuple[str, object]]:
    # The price ConfigMap goes to the pod's namespace, which the chart sets.
    options = {**world.provider_options(), "env": {"POD_NAMESPACE": PRICE_NAMESPACE}}
    return [("generic_capi", GenericCapiPlugin), ("capz", CapzPlugin(**options))]


def _swept(pools: list[dict[str, Any]]) -> None:
    """Some pool was emptied and deleted: only the ones still serving a node are left."""
    assert pools, "no pool survived"
    assert all(p["spec"].get("replicas") for p in pools), [p["metadata"]["name"] for p in pools]


def record_capz_pools_one_cluster(log: AuditLog, azure: CapzWorld | None = None) -> None:
    """The whole controller with capz's CAPZMachinePool, one cluster that manages itself,
    over the fake Azure of ``azure`` (its transport keeps every Azure request)."""
    servers: list[Any] = []
    result = _run(
        log,
        parse_scenario_text(_AZURE_SCENARIO, "azure-rbac.yaml"),
        until=_SWEPT_BY,
        plugin_objects=_capz_plugins(azure or CapzWorld.new()),
        on_cluster=servers.append,
        emulation={"azure_unavailable_sizes": _NO_CAPACITY},
    )
    assert result.disruptions.get("Underutilized", 0) >= 1, result.disruptions
    [server] = servers
    _swept(server.list(MACHINE_POOLS, "default").items)


def record_capz_pools_two_clusters(log: AuditLog) -> None:
    """The same with the Cluster API objects in a management cluster of their own."""
    scenario = parse_scenario_text(_AZURE_SCENARIO, "azure-rbac.yaml")
    clusters = two_clusters(
        log,
        [dict(obj) for obj in scenario.infrastructure.manifests or []],
        list(scenario.workloads),
        _capz_plugins(CapzWorld.new()),
        settings=EmulationSettings(nodes=True, azure_unavailable_sizes=_NO_CAPACITY),
    )
    clusters.driver.run_until_quiet()
    clusters.driver.advance(120)
    _all_bound(clusters)
    clusters.workload.delete(DEPLOYMENTS, "batch", "default")
    clusters.driver.run_until_quiet()
    clusters.driver.advance(_SWEPT_BY - 120)
    _swept(clusters.management.list(MACHINE_POOLS, "default").items)
