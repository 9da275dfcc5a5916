"""Runs that record every request the controller makes, for the least-privilege RBAC test.

Each run gives the controller an ``AuditingClient`` (``sim.apiserver.audit``) per cluster and
lets the emulated cluster around it (kubelet, scheduler, Cluster API) call the in-memory API
server directly, so what is recorded is what the controller's ServiceAccount would be
authorized for, nothing the simulation needs for itself.

The runs, together, reach every controller and code path that talks to a cluster:

* shipped scenarios through the scenario runner (one cluster that is its own management
  cluster): provisioning and consolidation (scale-from-zero), drift replacement with eviction
  (drift), static NodePools scaled through their scale subresource (static-pool), MachinePools
  with MachinePool Machines (machinepool);
* expiration and MachineSets as scalable resources, which no shipped scenario has: the drift
  catalog with ``expireAfter: 3m`` on its NodePool, and the kubeadm-reserved scenario with its
  MachineDeployments turned into MachineSets;
* capa's AWS prices over two clusters (AWSCluster and AWSMachineTemplate reads, the price
  ConfigMap created, and replaced when stale), over moto and botocore Stubbers as in
  ``tests/sim/scenario``;
* an Event repeated within its window (its count patched), through ``EventRecorder``;
* two clusters: the drift catalog with the Cluster API objects in a management API server of
  their own, the Nodes, pods and Karpenter objects in the workload one;
* leader election: two replicas on one Lease, taking it, renewing it, handing it over.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

from karpenter_capi.core.api.crds import generate_crds
from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube.events import EventRecorder
from karpenter_capi.core.kube.indexes import BY_OWNER_UID, by_owner_uid
from karpenter_capi.core.kube.resources import (
    CONFIGMAPS,
    DEPLOYMENTS,
    EVENTS,
    MACHINE_DEPLOYMENTS,
    NODES,
    PODS,
)
from karpenter_capi.core.operator import Operator, OperatorOptions
from karpenter_capi.core.plugin_host import PluginEnvironment, Plugins
from karpenter_capi.core.runtime.controller import MANAGEMENT, WORKLOAD
from karpenter_capi.core.runtime.leader import LeaderElector
from karpenter_capi.core.runtime.stepped import SteppedDriver
from karpenter_capi.plugins._cloud.pricebook import SNAPSHOT_KEY, PriceSnapshot
from karpenter_capi.plugins.capa.plugin import CapaPlugin
from karpenter_capi.plugins.generic_capi.plugin import GenericCapiPlugin
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.apiserver.audit import (
    MANAGEMENT_CLUSTER,
    WORKLOAD_CLUSTER,
    AuditingClient,
    AuditLog,
)
from karpenter_capi.sim.capi.emulation import capi_controllers
from karpenter_capi.sim.capi.objects import capi_resources
from karpenter_capi.sim.capi.settings import EmulationSettings
from karpenter_capi.sim.scenario import runner
from karpenter_capi.sim.scenario.catalog import generate_catalog
from karpenter_capi.sim.scenario.schema import (
    Infrastructure,
    Scenario,
    Workload,
    load_scenario,
    parse_scenario_text,
)
from karpenter_capi.sim.scheduler import SimScheduler
from karpenter_capi.sim.workloads.emulation import workload_controllers
from tests.support.aws import StubbedAws, fake_credentials, stubbed_aws

ONE_CLUSTER = "one cluster"
"""The label of requests to a cluster that is its own management cluster: one client serves
both, so the request cannot say which role it needs."""

LEASE_NAMESPACE = "karpenter-capi"
"""Where the chart's Deployment keeps its Lease (the release namespace)."""

PRICE_NAMESPACE = "karpenter-capi"
"""Where capa keeps its price ConfigMap: ``$POD_NAMESPACE``, the release namespace."""

_LONG_AGO = datetime(2020, 1, 1, tzinfo=UTC)

MIN_SIZE = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size"

MANAGEMENT_GROUPS = (
    "cluster.x-k8s.io",
    "infrastructure.cluster.x-k8s.io",
    "bootstrap.cluster.x-k8s.io",
)
"""API groups whose objects live in the management cluster when it is a cluster of its own."""


def _audited(log: AuditLog) -> Any:
    return lambda server: AuditingClient(server, log, ONE_CLUSTER)


def _run(log: AuditLog, scenario: Scenario, until: float, **options: Any) -> runner.ScenarioResult:
    result = runner.run(scenario, until=until, controller_client=_audited(log), **options)
    # A run that failed would prove nothing about the requests a working controller makes.
    assert result.errors == [], result.errors
    assert result.pods_bound == result.pods_total > 0
    return result


def _with_expiry(name: str, expire_after: str) -> Scenario:
    """A catalog scenario whose NodePool's NodeClaims expire after ``expire_after``, on
    MachineDeployments whose minimum size is 1: an expired Machine on one that is at its
    minimum is deleted, not scaled away (``generic_capi.delete``'s replacement path)."""
    scenario = load_scenario(name)
    assert scenario.infrastructure.catalog is not None
    manifests = generate_catalog(scenario.infrastructure.catalog)
    for obj in manifests:
        if obj["kind"] == "NodePool":
            obj["spec"]["template"]["spec"]["expireAfter"] = expire_after
        if obj["kind"] == "MachineDeployment":
            obj["metadata"]["annotations"][MIN_SIZE] = "1"
    return scenario.model_copy(
        update={"infrastructure": Infrastructure(manifests=manifests), "timeline": []}
    )


def _with_machine_sets(name: str) -> Scenario:
    """A manifests scenario whose MachineDeployments are MachineSets (their own selector)."""
    scenario = load_scenario(name)
    manifests = copy.deepcopy(scenario.infrastructure.manifests or [])
    for obj in manifests:
        if obj["kind"] == "MachineDeployment":
            obj["kind"] = "MachineSet"
            selector = {"sim.karpenter-capi.io/set": obj["metadata"]["name"]}
            obj["spec"]["selector"] = {"matchLabels": selector}
            template_meta = obj["spec"]["template"].setdefault("metadata", {})
            labels = template_meta.setdefault("labels", {})
            # The scenario's Machines say which MachineDeployment they belong to; these do not.
            labels.pop("cluster.x-k8s.io/deployment-name", None)
            labels.update(selector)
    return scenario.model_copy(update={"infrastructure": Infrastructure(manifests=manifests)})


def _before_v1_35(server: InMemoryAPIServer) -> None:
    server.version_info = {"major": "1", "minor": "34", "gitVersion": "v1.34.2"}


def record_scenarios(log: AuditLog) -> None:
    """The shipped scenarios and their variants, one cluster that manages itself."""
    # scale-from-zero on a v1.34 control plane: the requests of a controller that does not
    # nominate; the consolidation scenario (v1.35) scales down and consolidates.
    _run(log, load_scenario("scale-from-zero"), until=300, on_cluster=_before_v1_35)
    consolidated = _run(log, load_scenario("consolidation"), until=600)
    assert consolidated.disruptions, "consolidation did not happen"
    drift = _run(log, load_scenario("drift"), until=240)
    assert drift.nodeclaims > 0
    _run(log, load_scenario("static-pool"), until=300)
    _run(log, load_scenario("machinepool"), until=30)
    expired = _run(log, _with_expiry("drift", "3m"), until=300)
    assert expired.disruptions.get("Expired"), expired.disruptions
    _run(log, _with_machine_sets("kubeadm-reserved"), until=30)


_AWS_SCENARIO = """\
name: aws-rbac
description: One AWS MachineDeployment without a price annotation; capa prices it.
infrastructure:
  manifests:
  - apiVersion: cluster.x-k8s.io/v1beta2
    kind: Cluster
    metadata: {name: aws, namespace: default}
    spec:
      infrastructureRef: {apiGroup: infrastructure.cluster.x-k8s.io, kind: AWSCluster, name: aws}
  - apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
    kind: AWSCluster
    metadata: {name: aws, namespace: default}
    spec: {region: us-east-1}
  - apiVersion: cluster.x-k8s.io/v1beta2
    kind: MachineDeployment
    metadata:
      name: compute
      namespace: default
      labels: {node.cluster.x-k8s.io/karpenter-member: '', pool: aws}
      annotations:
        capacity.cluster-autoscaler.kubernetes.io/cpu: '2'
        capacity.cluster-autoscaler.kubernetes.io/memory: 4Gi
        cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size: '10'
    spec:
      clusterName: aws
      replicas: 0
      template:
        spec:
          clusterName: aws
          version: v1.31.0
          failureDomain: us-east-1a
          bootstrap:
            configRef: {apiGroup: bootstrap.cluster.x-k8s.io, kind: KubeadmConfig, name: w}
          infrastructureRef:
            apiGroup: infrastructure.cluster.x-k8s.io
            kind: AWSMachineTemplate
            name: compute
  - apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
    kind: AWSMachineTemplate
    metadata: {name: compute, namespace: default}
    spec:
      template:
        spec: {instanceType: c5.large, iamInstanceProfile: nodes}
  - apiVersion: karpenter.cluster.x-k8s.io/v1alpha1
    kind: ClusterAPINodeClass
    metadata: {name: aws}
    spec:
      scalableResourceSelector:
        matchLabels: {pool: aws}
  - apiVersion: karpenter.sh/v1
    kind: NodePool
    metadata: {name: aws}
    spec:
      template:
        spec:
          nodeClassRef: {group: karpenter.cluster.x-k8s.io, kind: ClusterAPINodeClass, name: aws}
          requirements:
          - {key: kubernetes.io/arch, operator: In, values: [amd64]}
          expireAfter: Never
      disruption: {consolidationPolicy: WhenEmpty, consolidateAfter: Never}
workloads:
- {name: web, replicas: 2, cpu: 500m, memory: 1Gi}
"""


@contextmanager
def _aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[StubbedAws]:
    fake_credentials(monkeypatch)
    monkeypatch.setenv("POD_NAMESPACE", PRICE_NAMESPACE)
    with stubbed_aws() as doubles:
        yield doubles


@dataclass
class TwoClusters:
    """The controller over a workload and a management API server, and what drives it."""

    workload: InMemoryAPIServer
    management: InMemoryAPIServer
    driver: SteppedDriver


def two_clusters(
    log: AuditLog,
    manifests: list[dict[str, Any]],
    workloads: list[Workload],
    plugin_objects: list[tuple[str, object]] | None = None,
    *,
    management_objects: list[dict[str, Any]] | None = None,
    settings: EmulationSettings | None = None,
) -> TwoClusters:
    """The controller, its plugins and the emulated clusters over two API servers.

    The scenario runner knows one cluster, so this wires what it wires (the real Operator, the
    emulated Cluster API, workloads and scheduler); the Cluster API objects go to the
    management server (with ``management_objects``), everything else to the workload one. The
    price namespace exists in both, as the release namespace would. ``settings`` replaces the
    emulation's (the simulated Azure's sizes without capacity).
    """
    clock = FakeClock()
    workload = InMemoryAPIServer(clock=clock, random_seed=0)
    management = InMemoryAPIServer(clock=clock, random_seed=1)
    workload.apply_manifests(generate_crds())
    management.register_cluster_api()
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": PRICE_NAMESPACE}}
    for server in (workload, management):
        server.apply_manifests([namespace])
    for obj in manifests:
        group = str(obj["apiVersion"]).rpartition("/")[0]
        (management if group in MANAGEMENT_GROUPS else workload).apply_manifests([obj])
    management.apply_manifests(management_objects or [])
    workload.apply_manifests([runner.deployment(w) for w in workloads])
    environment = PluginEnvironment(
        workload=AuditingClient(workload, log, WORKLOAD_CLUSTER),
        management=AuditingClient(management, log, MANAGEMENT_CLUSTER),
        clock=clock,
        logger=logging.getLogger("karpenter_capi.plugins"),
    )
    plugins = (
        Plugins.load(["generic_capi"], environment)
        if plugin_objects is None
        else Plugins.from_objects(plugin_objects, environment)
    )
    operator = Operator(
        environment.workload,
        environment.management,
        plugins,
        clock,
        # As ``karpenter-capi run``: bursts by ReplicaSet (list and watch ReplicaSets).
        OperatorOptions(leader_elect=False, metrics_port=None, batch_complete_idle=0.2),
    )
    manager = operator.manager
    # As in the runner: from here on it is the emulated clusters, not the controller.
    manager.client, manager.management = workload, management
    settings = settings or EmulationSettings(nodes=True)
    manager.add(*capi_controllers(management, workload, manager, clock, settings))
    _, machine_sets, _, _ = capi_resources(settings.version)
    manager.add_indexer(machine_sets, BY_OWNER_UID, by_owner_uid, MANAGEMENT)
    manager.add(*workload_controllers(workload, manager, clock))
    manager.add_indexer(PODS, BY_OWNER_UID, by_owner_uid, WORKLOAD)
    manager.add(SimScheduler(workload, manager, clock, seed=0))
    return TwoClusters(workload, management, operator.stepped())


def _all_bound(clusters: TwoClusters) -> None:
    pods = clusters.workload.list(PODS).items
    pending = [p["metadata"]["name"] for p in pods if not p["spec"].get("nodeName")]
    assert pods
    assert not pending, f"pods never bound across two clusters: {pending}"


def _clusterless(manifests: list[dict[str, Any]]) -> dict[str, Any]:
    """A copy of the catalog's first MachineDeployment naming a Cluster that does not exist:
    left out, with a Warning Event on it in the management cluster (events create)."""
    good = next(o for o in manifests if o["kind"] == "MachineDeployment")
    broken = copy.deepcopy(good)
    broken["metadata"] = {
        **{k: v for k, v in good["metadata"].items() if k in ("namespace", "labels")},
        "name": "clusterless",
        "annotations": dict(good["metadata"].get("annotations") or {}),
    }
    broken.pop("status", None)
    broken["spec"]["clusterName"] = "ghost"
    broken["spec"]["template"]["spec"]["clusterName"] = "ghost"
    return broken


def record_two_clusters(log: AuditLog) -> None:
    """The drift catalog with a management cluster of its own: provision, drift, shrink."""
    scenario = load_scenario("drift")
    assert scenario.infrastructure.catalog is not None
    manifests = generate_catalog(scenario.infrastructure.catalog)
    clusters = two_clusters(
        log, manifests, list(scenario.workloads), management_objects=[_clusterless(manifests)]
    )
    clusters.driver.run_until_quiet()
    clusters.driver.advance(60)
    _all_bound(clusters)
    management = clusters.management
    for md in management.list(MACHINE_DEPLOYMENTS).items:
        patch = {"spec": {"template": {"spec": {"version": "v1.32.0"}}}}
        management.patch(MACHINE_DEPLOYMENTS, md["metadata"]["name"], patch, "default")
    clusters.driver.run_until_quiet()
    clusters.driver.advance(120)
    for workload in scenario.workloads:
        clusters.workload.delete(DEPLOYMENTS, workload.name, workload.namespace)
    clusters.driver.run_until_quiet()
    clusters.driver.advance(120)


def record_capa(log: AuditLog, monkeypatch: pytest.MonkeyPatch) -> None:
    """capa prices a MachineDeployment from AWS and keeps the prices in its ConfigMap, in the
    management cluster: once when the ConfigMap is missing (created), once when it holds
    prices too old to use (read, then replaced)."""
    scenario = parse_scenario_text(_AWS_SCENARIO, "aws-rbac.yaml")
    manifests = [dict(obj) for obj in scenario.infrastructure.manifests or []]
    stale = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "karpenter-capi-prices-aws-us-east-1", "namespace": PRICE_NAMESPACE},
        "data": {SNAPSHOT_KEY: PriceSnapshot({"c5.large": 1.0}, {}, _LONG_AGO).to_json()},
    }
    for extra in ([], [stale]):
        with _aws(monkeypatch) as aws:
            aws.queue_prices()
            plugin = CapaPlugin(aws, background_refresh=False)
            clusters = two_clusters(
                log,
                manifests,
                list(scenario.workloads),
                [("generic_capi", GenericCapiPlugin), ("capa", plugin)],
                management_objects=extra,
            )
            clusters.driver.run_until_quiet()
            clusters.driver.advance(60)
            _all_bound(clusters)
            aws.pricing_stub.assert_no_pending_responses()
            [stored] = clusters.management.list(CONFIGMAPS, PRICE_NAMESPACE).items
            assert PriceSnapshot.from_json(stored["data"][SNAPSHOT_KEY]).fetched_at > _LONG_AGO


def record_event_repeats(log: AuditLog) -> None:
    """The same Event twice within its repeat window: created, then its count patched.

    Every controller records through ``EventRecorder``; the scenarios above never repeat an
    Event within the window, so the recorder is driven here directly.
    """
    clock = FakeClock()
    server = InMemoryAPIServer(clock=clock)
    recorder = EventRecorder(AuditingClient(server, log, WORKLOAD_CLUSTER), clock)
    node = server.create(NODES, {"metadata": {"name": "node-a"}})
    for _ in range(2):
        recorder.record(node, "Normal", "DisruptionBlocked", "a pod is not evictable")
        clock.advance(1)
    [event] = server.list(EVENTS).items
    assert event["count"] == 2


def record_leader_election(log: AuditLog) -> None:
    """Two replicas on one Lease: one takes it and renews it, releases it, the other takes it."""
    clock = FakeClock()
    server = InMemoryAPIServer(clock=clock)
    server.apply_manifests(
        [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": LEASE_NAMESPACE}}]
    )
    client = AuditingClient(server, log, WORKLOAD_CLUSTER)
    electors = [
        LeaderElector(
            client,
            clock,
            name="karpenter-leader-election",
            namespace=LEASE_NAMESPACE,
            identity=identity,
        )
        for identity in ("replica-a", "replica-b")
    ]
    first, second = electors
    first.step()
    second.step()
    assert first.is_leader
    assert not second.is_leader
    clock.advance(5)
    first.step()  # renews
    first.shutdown()  # releases
    clock.advance(3)
    second.step()
    assert second.is_leader
