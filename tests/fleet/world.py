"""A Cluster API fleet in memory: one management API server, several workload API servers, and
the ``Fleet`` serving them, stepped on one virtual clock.

Each workload cluster ``name`` has, in the management server, a namespace ``team-<name>``
holding its ``Cluster``, its MachineDeployments (labelled with their Cluster as Cluster API's
webhook labels them) and its ``<name>-kubeconfig`` Secret, whose kubeconfig points at
``https://<name>.fleet.test``; ``connect`` maps that URL to the workload server. The workload
server holds the NodePool and the ClusterAPINodeClass. Each member's emulated cluster (Cluster
API making Machines and Nodes, Deployments making pods, the scheduler) is added to the member's
manager through ``on_member`` and talks to the servers directly.

(Module name unique on purpose: test directories share one module namespace.)
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import yaml

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.fleet import (
    CLUSTER_NAME_LABEL,
    Fleet,
    FleetOptions,
    Kubeconfig,
    ScopedClient,
    SteppedFleet,
    secret_name,
)
from karpenter_capi.core.kube import (
    CLUSTERS,
    DEPLOYMENTS,
    EVENTS,
    MACHINE_DEPLOYMENTS,
    NAMESPACES,
    NODECLAIMS,
    PODS,
    SECRETS,
    JsonObject,
    KubeClient,
)
from karpenter_capi.core.kube.errors import ServiceUnavailable
from karpenter_capi.core.operator import Operator, OperatorOptions
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.apiserver.kubeconfig import kubeconfig_document
from karpenter_capi.sim.capi import add_capi_emulation
from karpenter_capi.sim.scenario.catalog import generate_catalog
from karpenter_capi.sim.scenario.runner import deployment
from karpenter_capi.sim.scenario.schema import Workload
from karpenter_capi.sim.scheduler import SimScheduler
from karpenter_capi.sim.workloads import add_workload_emulation
from tests.reliability.two_clusters.env import CATALOG, new_server

WORKLOAD_NAMESPACE = "default"
_WORKLOAD_KINDS = frozenset({"NodePool", "ClusterAPINodeClass"})


def server_url(name: str) -> str:
    return f"https://{name}.fleet.test"


def kubeconfig_secret(
    namespace: str, cluster: str, url: str, *, value: str | None = None
) -> JsonObject:
    """The Secret Cluster API writes for ``cluster``: its kubeconfig under ``value``."""
    if value is None:
        document = kubeconfig_document(url, cluster)
        value = base64.b64encode(yaml.safe_dump(document).encode()).decode()
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": secret_name(cluster),
            "namespace": namespace,
            "labels": {CLUSTER_NAME_LABEL: cluster},
        },
        "type": "cluster.x-k8s.io/secret",
        "data": {"value": value},
    }


@dataclass
class FleetWorld:
    """The servers and (after ``start``) the fleet and its stepped driver."""

    clock: FakeClock = field(default_factory=FakeClock)
    management: InMemoryAPIServer = field(init=False)
    workloads: dict[str, InMemoryAPIServer] = field(default_factory=dict)
    unreachable: set[str] = field(default_factory=set)
    """Workload clusters whose API server ``connect`` cannot reach."""
    fleet: Fleet | None = None
    driver: SteppedFleet | None = None
    connects: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.management = new_server(self.clock, seed=100)

    # -- the fleet's clusters ----------------------------------------------------------------

    def add_cluster(
        self, name: str, *, secret: bool = True, labels: dict[str, str] | None = None
    ) -> InMemoryAPIServer:
        """A workload cluster ``name``: its server, and its Cluster API objects in the
        management cluster (namespace ``team-<name>``)."""
        namespace = self.namespace(name)
        server = new_server(self.clock, seed=len(self.workloads) + 1)
        self.workloads[name] = server
        self.management.create(
            NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        )
        catalog = CATALOG.model_copy(update={"cluster_name": name, "namespace": namespace})
        capi: list[JsonObject] = []
        for obj in generate_catalog(catalog):
            if obj["kind"] in _WORKLOAD_KINDS:
                server.apply_manifests([obj])
                continue
            if obj["kind"] == "MachineDeployment":
                # Cluster API's defaulting webhook labels every MachineDeployment with its Cluster.
                obj["metadata"].setdefault("labels", {})[CLUSTER_NAME_LABEL] = name
            if obj["kind"] == "Cluster" and labels:
                obj["metadata"]["labels"] = dict(labels)
            capi.append(obj)
        self.management.apply_manifests(capi)
        if secret:
            self.management.create(SECRETS, kubeconfig_secret(namespace, name, server_url(name)))
        return server

    @staticmethod
    def namespace(name: str) -> str:
        return f"team-{name}"

    def key(self, name: str) -> str:
        return f"{self.namespace(name)}/{name}"

    def connect(self, kubeconfig: Kubeconfig) -> KubeClient:
        self.connects.append(kubeconfig.server)
        name = kubeconfig.server.removeprefix("https://").removesuffix(".fleet.test")
        if name in self.unreachable or name not in self.workloads:
            raise ServiceUnavailable(f"dial tcp {kubeconfig.server}: connection refused")
        return self.workloads[name]

    def add_emulation(self, key: str, operator: Operator) -> None:
        """The cluster around the controller: Cluster API, Deployments, the scheduler."""
        namespace, name = key.split("/")
        workload = self.workloads[name]
        manager = operator.manager
        manager.client = workload
        manager.management = ScopedClient(self.management, namespace, name)
        add_capi_emulation(manager, nodes=True)
        add_workload_emulation(manager)
        manager.add(SimScheduler(workload, manager, self.clock))

    def start(self, options: FleetOptions | None = None, **fleet: Any) -> SteppedFleet:
        self.fleet = Fleet(
            self.management,
            clock=self.clock,
            connect=self.connect,
            options=options or FleetOptions(shards=False, identity="test-replica"),
            operator_options=OperatorOptions(leader_elect=False, metrics_port=None),
            on_member=self.add_emulation,
            **fleet,
        )
        self.driver = self.fleet.stepped()
        self.driver.run_until_quiet()
        if self.fleet.options.shards:
            # A replica joins the shard membership first and takes clusters a step later.
            self.driver.advance(2 * self.fleet.options.retry_period)
        return self.driver

    # -- what users do -------------------------------------------------------------------------

    def deploy(self, cluster: str, name: str, replicas: int, cpu: str = "500m") -> None:
        workload = Workload(name=name, replicas=replicas, cpu=cpu, memory="512Mi")
        self.workloads[cluster].create(DEPLOYMENTS, deployment(workload), WORKLOAD_NAMESPACE)

    def patch_cluster(self, name: str, patch: JsonObject) -> None:
        self.management.patch(CLUSTERS, name, patch, self.namespace(name))

    def advance(self, seconds: float) -> None:
        assert self.driver is not None, "start() first"
        self.driver.advance(seconds)

    # -- reads ---------------------------------------------------------------------------------

    def pending(self, cluster: str) -> list[str]:
        pods = self.workloads[cluster].list(PODS, WORKLOAD_NAMESPACE).items
        return sorted(
            p["metadata"]["name"] for p in pods if not (p.get("spec") or {}).get("nodeName")
        )

    def bound(self, cluster: str) -> int:
        pods = self.workloads[cluster].list(PODS, WORKLOAD_NAMESPACE).items
        return sum(1 for p in pods if (p.get("spec") or {}).get("nodeName"))

    def nodeclaims(self, cluster: str) -> list[JsonObject]:
        return self.workloads[cluster].list(NODECLAIMS).items

    def replicas(self, cluster: str) -> int:
        mds = self.management.list(MACHINE_DEPLOYMENTS, self.namespace(cluster)).items
        return sum(int((md.get("spec") or {}).get("replicas") or 0) for md in mds)

    def cluster_events(self, cluster: str) -> list[tuple[str, str, str]]:
        """``(type, reason, message)`` of the Events on Cluster ``cluster``, oldest first."""
        events = sorted(
            self.management.list(EVENTS, self.namespace(cluster)).items,
            key=lambda e: int(e["metadata"]["resourceVersion"]),
        )
        return [
            (e["type"], e["reason"], e["message"])
            for e in events
            if (e.get("involvedObject") or {}).get("kind") == "Cluster"
            and e["involvedObject"].get("name") == cluster
        ]

    def served(self) -> list[str]:
        assert self.fleet is not None
        return sorted(self.fleet.members)


def until(
    world: FleetWorld, done: Callable[[], bool], *, seconds: float = 120, step: float = 5
) -> bool:
    """Advance virtual time in ``step``s until ``done()`` or ``seconds`` have passed."""
    waited = 0.0
    while not done() and waited < seconds:
        world.advance(step)
        waited += step
    return done()
