"""Run a fleet scenario: one management cluster, many workload clusters, one fleet controller.

Fleet mode (``core.fleet``) serves every workload cluster of a Cluster API fleet from one
process; a single-cluster scenario cannot show whether it does so fairly, or whether one
unreachable cluster holds up the others. A fleet scenario (``fleet:`` in the file, see
``schema.FleetSpec``) builds that world in memory on one ``FakeClock``: the management API
server with the Cluster API emulation's resources, one ``Cluster``, its catalog of
MachineDeployments (or MachinePools) and its ``<name>-kubeconfig`` Secret per workload cluster,
and one in-memory API server per workload cluster holding its NodePool, NodeClass, Deployments,
pods and Nodes. The real ``Fleet`` discovers the Clusters, reads their Secrets and connects
through ``connect``, which maps each kubeconfig's server URL to its in-memory server behind a
``FaultyClient``: during a scenario's outage that client refuses every request, as an API
server that is down or cut off would. The cluster around each member (Cluster API making
Machines and Nodes, Deployments making pods, the scheduler stand-in) is added to the member's
manager in ``on_member``; it shares the member's caches, so it is cut off with it: during an
outage nothing happens in that cluster but the users' own changes (the timeline's, written to
its store directly: changes queued by their CD pipeline), which take effect once it is back.

Everything runs under one ``SteppedFleet``, so two runs of a scenario match. The outcome
(``sim.scenario.fleet_result``) is per cluster and for the fleet, and for each outage what
every cluster had pending when it ended.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import yaml

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.api.crds import generate_crds
from karpenter_capi.core.clock import Clock, FakeClock, parse_timestamp
from karpenter_capi.core.fleet import (
    CLUSTER_NAME_LABEL,
    Fleet,
    FleetOptions,
    Kubeconfig,
    ScopedClient,
    SteppedFleet,
    secret_name,
)
from karpenter_capi.core.kube.client import JsonObject, KubeClient
from karpenter_capi.core.kube.errors import ApiError, NotFound, ServiceUnavailable
from karpenter_capi.core.kube.resources import DEPLOYMENTS, NAMESPACES, PODS, SECRETS
from karpenter_capi.core.operator import Operator, OperatorOptions
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.apiserver.faulty_client import FaultyClient, unreachable
from karpenter_capi.sim.apiserver.kubeconfig import kubeconfig_document
from karpenter_capi.sim.apiserver.version import SIMULATED_CONTROL_PLANE
from karpenter_capi.sim.capi import add_capi_emulation
from karpenter_capi.sim.scenario.catalog import POOL_LABEL, generate_catalog
from karpenter_capi.sim.scenario.fleet_result import ClusterResult, FleetResult, OutageResult
from karpenter_capi.sim.scenario.observer import Observer, percentile
from karpenter_capi.sim.scenario.process import DEFAULT_PLUGINS
from karpenter_capi.sim.scenario.runner import ReconcileErrors, capture_errors, deployment
from karpenter_capi.sim.scenario.schema import (
    Catalog,
    FleetGroup,
    FleetOutage,
    Scenario,
    TimelineAction,
)
from karpenter_capi.sim.scheduler import SimScheduler
from karpenter_capi.sim.workloads import add_workload_emulation

__all__ = ["STRANDED_AFTER", "FleetWorld", "run_fleet"]

STRANDED_AFTER = 120.0
"""Seconds a pod may wait for a node before the outcome calls it stranded (not just arrived)."""

_WORKLOAD_KINDS = frozenset({"NodePool", "ClusterAPINodeClass"})
_MACHINE_POOL_MACHINES = "sim.karpenter.cluster.x-k8s.io/machine-pool-machines"
_DOMAIN = "fleet.sim"


def server_url(cluster: str) -> str:
    """The workload API server a cluster's kubeconfig names."""
    return f"https://{cluster}.{_DOMAIN}"


def _machine_pool(md: JsonObject) -> JsonObject:
    """The catalog's MachineDeployment as a MachinePool of the same shape (with MachinePool
    Machines, as CAPA's and CAPZ's pools have)."""
    pool = copy.deepcopy(md)
    pool["kind"] = "MachinePool"
    pool["metadata"]["annotations"][_MACHINE_POOL_MACHINES] = "true"
    spec = pool["spec"]
    spec.pop("rollout", None)
    spec.pop("selector", None)
    template = spec["template"]["spec"]
    template["bootstrap"]["configRef"]["kind"] = "KubeadmConfig"
    template["infrastructureRef"] = {
        "apiGroup": "infrastructure.cluster.x-k8s.io",
        "kind": "DockerMachinePool",
        "name": pool["metadata"]["name"],
    }
    return pool


def _existing(md: JsonObject, replicas: int) -> JsonObject:
    """A MachineDeployment of ``md``'s shape that Karpenter does not manage, ``replicas`` up."""
    existing = copy.deepcopy(md)
    name = f"existing-{md['metadata']['name']}"
    labels = existing["metadata"]["labels"]
    labels.pop(wellknown.LABEL_KARPENTER_MEMBER, None)
    labels.pop(POOL_LABEL, None)
    existing["metadata"]["name"] = name
    existing["spec"]["replicas"] = replicas
    existing["spec"]["selector"] = {"matchLabels": {"cluster.x-k8s.io/deployment-name": name}}
    existing["spec"]["template"]["metadata"]["labels"]["cluster.x-k8s.io/deployment-name"] = name
    return existing


@dataclass
class _Cluster:
    """One workload cluster of the world, and what the run watches of it."""

    name: str
    group: FleetGroup
    index: int
    server: InMemoryAPIServer
    outages: list[FleetOutage]
    observer: Observer
    errors: ReconcileErrors = field(default_factory=ReconcileErrors)
    refused: int = 0
    clients: list[FaultyClient] = field(default_factory=list)
    storm: Callable[[], ApiError | None] | None = None
    """Another fault of the controller's requests (``benchmarks/fleet.py``'s 429 storm)."""

    @property
    def namespace(self) -> str:
        return self.name

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class _OutageErrors(ReconcileErrors):
    """Reconcile failures, less those the cluster's injected outage caused (counted apart)."""

    def __init__(self, cluster: _Cluster) -> None:
        super().__init__()
        self.cluster = cluster

    def on_reconcile(self, controller: str, seconds: float, error: BaseException | None) -> None:
        if isinstance(error, ServiceUnavailable) and self.cluster.outages:
            self.cluster.refused += 1
            return
        super().on_reconcile(controller, seconds, error)


class FleetWorld:
    """The management server, the workload servers and the fleet controller over them."""

    def __init__(
        self,
        scenario: Scenario,
        *,
        seed: int = 0,
        plugins: tuple[str, ...] = DEFAULT_PLUGINS,
        clock: Clock | None = None,
        server_class: type[InMemoryAPIServer] = InMemoryAPIServer,
        options: FleetOptions | None = None,
        operator_options: OperatorOptions | None = None,
    ) -> None:
        """``clock``: a ``FakeClock`` (made when not given) to step the world, or the system
        clock to run it on threads (``benchmarks/fleet.py``, with ``server_class`` timing the
        writes it wants); ``options`` and ``operator_options`` those of ``fleet``, the first
        replica (``new_fleet`` makes more)."""
        if scenario.fleet is None or scenario.infrastructure.catalog is None:
            raise ValueError(f"scenario {scenario.name} is not a fleet scenario")
        self.scenario = scenario
        self.spec = scenario.fleet
        self.clock: Clock = clock or FakeClock()
        self.start = self.clock.monotonic()
        self.seed = seed
        self._server_class = server_class
        self.plugins = plugins
        self.emulation: dict[str, Any] = {}
        """``EmulationSettings`` fields for every cluster's Cluster API emulation."""
        self.operator_options = operator_options or OperatorOptions(
            leader_elect=False, metrics_port=None
        )
        self.management = self._server(seed)
        self.clusters: dict[str, _Cluster] = {}
        base = scenario.infrastructure.catalog
        for number, (name, group, index) in enumerate(self.spec.clusters(), start=1):
            server = self._server(seed + number)
            outages = [o for o in self.spec.outages if o.cluster == name]
            cluster = _Cluster(
                name, group, index, server, outages, Observer(server, self.clock, None)
            )
            cluster.errors = _OutageErrors(cluster)
            self.clusters[server_url(name)] = cluster
            self._load(cluster, base)
        self.fleet = self.new_fleet(
            options or FleetOptions(shards=False, identity="simulated-fleet", plugins=plugins)
        )

    def new_fleet(self, options: FleetOptions, dead: Callable[[], bool] | None = None) -> Fleet:
        """A fleet controller (a replica) over this world. Once ``dead()`` is true, every
        request of it and of the clusters' emulation it runs fails, as if its process were
        killed (its threads may spin on; nothing they do lands)."""
        management: KubeClient = self.management
        if dead is not None:
            management = FaultyClient(self.management, _killed(dead), "management")

        def on_member(key: str, operator: Operator) -> None:
            self._add_emulation(key, operator, management, dead)

        return Fleet(
            management,
            clock=self.clock,
            connect=lambda kubeconfig: self.connect(kubeconfig, dead),
            options=options,
            operator_options=self.operator_options,
            on_member=on_member,
        )

    def stepped(self) -> SteppedFleet:
        """``fleet``'s stepped driver, told by the world which clusters have news (``_Changes``),
        so a quiet cluster's watches are not polled at every other cluster's timer."""
        driver = self.fleet.stepped()
        driver.changes = _Changes(self)
        return driver

    def cluster(self, name: str) -> _Cluster:
        return self.clusters[server_url(name)]

    def _server(self, seed: int) -> InMemoryAPIServer:
        server = self._server_class(clock=self.clock, random_seed=seed)
        server.version_info = dict(SIMULATED_CONTROL_PLANE)
        server.apply_manifests(generate_crds())
        server.register_cluster_api()
        return server

    def _load(self, cluster: _Cluster, base: Catalog) -> None:
        """The Cluster, its catalog and Secret in the management cluster; the NodePool, the
        NodeClass and the workloads that exist from the start in the workload cluster."""
        group = cluster.group
        catalog = Catalog.model_validate(
            {
                **base.model_dump(by_alias=True),
                **group.catalog,
                "clusterName": cluster.name,
                "namespace": cluster.namespace,
            }
        )
        self.management.create(
            NAMESPACES,
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": cluster.namespace}},
        )
        capi: list[JsonObject] = []
        first_md: JsonObject | None = None
        for obj in generate_catalog(catalog):
            if obj["kind"] in _WORKLOAD_KINDS:
                cluster.server.apply_manifests([obj])
                continue
            if obj["kind"] == "MachineDeployment":
                # Cluster API's defaulting webhook labels every MachineDeployment with its Cluster.
                obj["metadata"]["labels"][CLUSTER_NAME_LABEL] = cluster.name
                first_md = first_md or obj
                if group.machine_pools:
                    obj = _machine_pool(obj)
            capi.append(obj)
        if group.existing_nodes and first_md is not None:
            capi.append(_existing(first_md, group.existing_nodes))
        self.management.apply_manifests(capi)
        document = kubeconfig_document(server_url(cluster.name), cluster.name)
        value = base64.b64encode(yaml.safe_dump(document).encode()).decode()
        self.management.create(
            SECRETS,
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {
                    "name": secret_name(cluster.name),
                    "namespace": cluster.namespace,
                    "labels": {CLUSTER_NAME_LABEL: cluster.name},
                },
                "type": "cluster.x-k8s.io/secret",
                "data": {"value": value},
            },
        )
        deferred = {a.target for a in group.timeline if a.action == "deploy"}
        cluster.server.apply_manifests(
            [deployment(w) for w in group.workloads if w.name not in deferred]
        )

    # -- what the fleet controller sees ------------------------------------------------------

    def _fault(
        self, cluster: _Cluster, dead: Callable[[], bool] | None = None
    ) -> Callable[[], ApiError | None]:
        def fault() -> ApiError | None:
            if (dead is not None and dead()) or self.down(cluster):
                return unreachable(server_url(cluster.name))
            return cluster.storm() if cluster.storm is not None else None

        return fault

    def down(self, cluster: _Cluster) -> bool:
        """Whether one of ``cluster``'s outages is under way."""
        now = self.clock.monotonic() - self.start
        return any(o.at <= now < o.until for o in cluster.outages)

    def connect(self, kubeconfig: Kubeconfig, dead: Callable[[], bool] | None = None) -> KubeClient:
        """The controller's client of a workload cluster: its server, through its outages."""
        cluster = self.clusters.get(kubeconfig.server)
        if cluster is None:
            raise ServiceUnavailable(f"dial tcp {kubeconfig.server}: no such host")
        client = FaultyClient(cluster.server, self._fault(cluster, dead), cluster.name)
        cluster.clients.append(client)
        return client

    def _add_emulation(
        self,
        key: str,
        operator: Operator,
        management: KubeClient,
        dead: Callable[[], bool] | None,
    ) -> None:
        """The cluster around the member's controllers; and the run's instruments on them."""
        cluster = next(c for c in self.clusters.values() if c.key == key)
        manager = operator.manager
        # The cluster's own controllers share the member's caches, which an outage stalls;
        # their writes are cut off too, or they would act on a stale view (a ReplicaSet
        # making its pods again, unseen): the whole workload API server is away.
        workload = FaultyClient(cluster.server, self._fault(cluster, dead), cluster.name)
        manager.client = workload
        manager.management = ScopedClient(management, cluster.namespace, cluster.name)
        add_capi_emulation(manager, **{"nodes": True, **self.emulation})
        add_workload_emulation(manager)
        manager.add(SimScheduler(workload, manager, self.clock, seed=self.seed))
        manager.add_observer(cluster.errors)
        cluster.observer.plugins = operator.context.plugins

    # -- the timeline ----------------------------------------------------------------------------

    def actions(self, until: float) -> list[tuple[float, _Cluster, TimelineAction]]:
        """Every cluster's workload actions up to ``until``, its stagger applied, in time order
        (clusters in the scenario's order at one instant)."""
        timed = []
        for order, cluster in enumerate(self.clusters.values()):
            shift = cluster.index * cluster.group.stagger
            for action in cluster.group.timeline:
                for one in action.occurrences(until):
                    if one.at + shift <= until:
                        timed.append((one.at + shift, order, cluster, one))
        timed.sort(key=lambda item: (item[0], item[1]))
        return [(at, cluster, action) for at, _, cluster, action in timed]

    @staticmethod
    def apply(cluster: _Cluster, action: TimelineAction) -> None:
        workload = next(w for w in cluster.group.workloads if w.name == action.target)
        server = cluster.server
        if action.action == "deploy":
            server.apply_manifests([deployment(workload, action.count)])
        elif action.action == "scale":
            server.patch(
                DEPLOYMENTS, workload.name, {"spec": {"replicas": action.count}}, workload.namespace
            )
        else:
            with contextlib.suppress(NotFound):
                server.delete(DEPLOYMENTS, workload.name, workload.namespace)


class _Changes:
    """The ``ChangeFeed`` of the world's stepped fleet: a member's cluster changed when its
    workload server or its namespace of the management server was written to (by anyone: its
    controllers, the emulation, the timeline), or when an outage of it began or ended. Only
    for ``run_fleet``'s fleet, which no ``dead`` cuts off; a 429 storm (random per request)
    counts as a change at every pass."""

    def __init__(self, world: FleetWorld) -> None:
        self._world = world
        self._clusters = {c.key: c for c in world.clusters.values()}
        self._seen: dict[str, tuple[str, int, bool]] = {}

    def changed(self, key: str) -> bool:
        cluster = self._clusters.get(key)
        if cluster is None or cluster.storm is not None:
            return True
        management = self._world.management
        state = (
            cluster.server.resource_version,
            max(management.written_at(cluster.namespace), management.written_at("")),
            self._world.down(cluster),
        )
        if self._seen.get(key) == state:
            return False
        self._seen[key] = state
        return True


def _killed(dead: Callable[[], bool]) -> Callable[[], ApiError | None]:
    def fault() -> ApiError | None:
        return unreachable("the management cluster") if dead() else None

    return fault


def _outage_view(world: FleetWorld, outage: FleetOutage) -> OutageResult:
    """What every cluster had pending just before ``outage`` ended."""
    pending = {}
    for cluster in world.clusters.values():
        before = [s for s in cluster.observer.samples if s.at <= outage.until]
        pending[cluster.name] = before[-1].pods_pending if before else 0
    return OutageResult(
        cluster=outage.cluster, at=outage.at, until=outage.until, pending_at_end=pending
    )


def _stranded(server: InMemoryAPIServer, clock: Clock) -> int:
    """Pods without a node that have waited ``STRANDED_AFTER`` or longer."""
    now = clock.now()
    count = 0
    for pod in server.list(PODS).items:
        metadata = pod["metadata"]
        if metadata.get("deletionTimestamp") or (pod.get("spec") or {}).get("nodeName"):
            continue
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        waited = (now - parse_timestamp(metadata["creationTimestamp"])).total_seconds()
        count += waited >= STRANDED_AFTER
    return count


def _cluster_result(cluster: _Cluster) -> ClusterResult:
    observer = cluster.observer
    final = observer.samples[-1]
    seconds = list(observer.bound_seconds.values())
    return ClusterResult(
        name=cluster.name,
        group=cluster.group.name,
        pods_bound=final.pods_bound,
        pods_pending=final.pods_pending,
        pods_stranded=_stranded(cluster.server, observer.clock),
        nodes=final.nodes,
        nodeclaims=final.nodeclaims,
        cost_per_hour=final.cost_per_hour,
        cost_per_hour_peak=max(s.cost_per_hour for s in observer.samples),
        pod_bound_p50=round(percentile(seconds, 0.5), 3) if seconds else None,
        pod_bound_max=round(max(seconds), 3) if seconds else None,
        unreachable_seconds=sum(o.until - o.at for o in cluster.outages),
        refused=sum(c.refused for c in cluster.clients),
        errors=cluster.errors.messages(),
    )


def run_fleet(
    scenario: Scenario,
    *,
    until: float,
    seed: int = 0,
    sample_every: float = 15.0,
    plugins: tuple[str, ...] = DEFAULT_PLUGINS,
    on_world: Callable[[FleetWorld], None] | None = None,
) -> FleetResult:
    """Run fleet ``scenario`` for ``until`` virtual seconds and return its outcome.

    ``on_world`` is handed the built world (its servers and fleet) before anything runs, for
    a test that looks at the clusters afterwards.
    """
    if until <= 0 or sample_every <= 0:
        raise ValueError("until and sample_every must be positive")
    random.seed(seed)
    wall_start = time.perf_counter()
    world = FleetWorld(scenario, seed=seed, plugins=plugins)
    if on_world is not None:
        on_world(world)
    with capture_errors() as records:
        driver = world.stepped()
        driver.run_until_quiet()
        events: list[tuple[float, int, Any]] = [
            (at, 0, (c, a)) for at, c, a in world.actions(until)
        ]
        sample_at = [0.0]
        while sample_at[-1] + sample_every < until:
            sample_at.append(sample_at[-1] + sample_every)
        # A look just before each outage ends: what was pending while it lasted.
        sample_at += [o.until - 1.0 for o in world.spec.outages if o.until - 1.0 < until]
        events += [(t, 1, None) for t in [*sample_at, until]]
        events.sort(key=lambda e: (e[0], e[1]))
        now = 0.0
        for at, _, what in events:
            if at > now:
                driver.advance(at - now)
                now = at
            if what is not None:
                world.apply(*what)
                driver.run_until_quiet()
            else:
                for cluster in world.clusters.values():
                    cluster.observer.sample()
    clusters = [_cluster_result(c) for c in world.clusters.values()]
    return FleetResult(
        scenario=scenario.name,
        clusters=clusters,
        outages=[_outage_view(world, o) for o in world.spec.outages],
        virtual_seconds=now,
        wall_seconds=time.perf_counter() - wall_start,
        errors=records.messages,
    )
