"""Two in-memory API servers, a management cluster and a workload cluster, and the controller
between them, stepped on one virtual clock.

Cluster API's objects (the Cluster, the MachineDeployments and their templates) live only in
the management server; the NodePool, the ClusterAPINodeClass, Deployments, pods and Nodes only
in the workload server. The controller (the real ``Operator`` with the ``generic_capi``
plugin) gets whatever clients a test hands it: the servers themselves (in process) or
``OfficialClient``s over two HTTP fronts, built from flags, environment variables and
kubeconfig files as ``karpenter-capi run`` builds them.

What the clusters do on their own (Cluster API making Machines and Nodes, Deployments making
pods, the scheduler binding them) runs under the same stepped driver but talks to the servers
directly: cutting the controller off from the management cluster's HTTP front leaves the
emulated Cluster API running, as a network partition between the controller and the
management cluster would.

(Module name unique on purpose: test directories share one module namespace.)
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from karpenter_capi.core.api.crds import generate_crds
from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube import (
    DEPLOYMENTS,
    MACHINE_DEPLOYMENTS,
    MACHINES,
    NODECLAIMS,
    NODES,
    PODS,
    JsonObject,
    KubeClient,
)
from karpenter_capi.core.kube.config import (
    add_cluster_arguments,
    cluster_config_from_args,
    connect_clusters,
)
from karpenter_capi.core.kube.official import OfficialClient
from karpenter_capi.core.operator import Operator, OperatorOptions
from karpenter_capi.core.plugin_host import PluginEnvironment, Plugins
from karpenter_capi.core.runtime.stepped import SteppedDriver
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.apiserver.http import HttpFront
from karpenter_capi.sim.apiserver.kubeconfig import kubeconfig_document
from karpenter_capi.sim.capi import add_capi_emulation
from karpenter_capi.sim.scenario.catalog import generate_catalog
from karpenter_capi.sim.scenario.runner import deployment
from karpenter_capi.sim.scenario.schema import Catalog, Workload
from karpenter_capi.sim.scheduler import SimScheduler
from karpenter_capi.sim.workloads import add_workload_emulation

NAMESPACE = "default"
# Kinds that belong to the Karpenter side of the split; everything else the catalog makes is
# Cluster API's.
_WORKLOAD_KINDS = frozenset({"NodePool", "ClusterAPINodeClass"})

CATALOG = Catalog(
    cpus=[2, 4],
    families={"c": 2},
    zones=["zone-a"],
    consolidation_policy="WhenEmpty",
    consolidate_after="Never",
)


def new_server(clock: FakeClock, seed: int) -> InMemoryAPIServer:
    """An API server with the project's CRDs and Cluster API's, as each real cluster would have
    (the management cluster needs only Cluster API's, but extra CRDs change nothing)."""
    server = InMemoryAPIServer(clock=clock, random_seed=seed)
    server.apply_manifests(generate_crds())
    server.register_cluster_api()
    return server


def split_catalog(catalog: Catalog = CATALOG) -> tuple[list[JsonObject], list[JsonObject]]:
    """``(management objects, workload objects)`` of a generated catalog."""
    management: list[JsonObject] = []
    workload: list[JsonObject] = []
    for obj in generate_catalog(catalog):
        (workload if obj["kind"] in _WORKLOAD_KINDS else management).append(obj)
    return management, workload


@dataclass
class TwoClusters:
    """The two servers, the clock, and (after ``start``) the operator and its driver."""

    clock: FakeClock = field(default_factory=FakeClock)
    workload: InMemoryAPIServer = field(init=False)
    management: InMemoryAPIServer = field(init=False)
    operator: Operator | None = None
    driver: SteppedDriver | None = None
    plugins: Plugins | None = None

    def __post_init__(self) -> None:
        # Different seeds: the two clusters must not hand out the same uids.
        self.workload = new_server(self.clock, seed=1)
        self.management = new_server(self.clock, seed=2)
        capi, karpenter = split_catalog()
        self.management.apply_manifests(capi)
        self.workload.apply_manifests(karpenter)

    def start(
        self,
        workload_client: KubeClient | None = None,
        management_client: KubeClient | None = None,
        *,
        plugins: Callable[[PluginEnvironment], Plugins] | None = None,
    ) -> SteppedDriver:
        """Build the operator over the given clients (default: the servers themselves), then
        the clusters' own controllers over the servers, all under one stepped driver."""
        controller_workload = workload_client or self.workload
        controller_management = management_client or self.management
        environment = PluginEnvironment(
            workload=controller_workload,
            management=controller_management,
            clock=self.clock,
            logger=logging.getLogger("karpenter_capi.plugins"),
        )
        loaded = (
            plugins(environment)
            if plugins is not None
            else Plugins.load(["generic_capi"], environment)
        )
        operator = Operator(
            controller_workload,
            controller_management,
            loaded,
            self.clock,
            OperatorOptions(leader_elect=False, metrics_port=None),
        )
        # The controller's caches exist now; what is added below is the clusters themselves,
        # which reach their own API servers directly.
        manager = operator.manager
        manager.client, manager.management = self.workload, self.management
        add_capi_emulation(manager, nodes=True)
        add_workload_emulation(manager)
        manager.add(SimScheduler(self.workload, manager, self.clock))
        self.operator = operator
        self.plugins = loaded
        self.driver = operator.stepped()
        self.driver.run_until_quiet()
        return self.driver

    # -- what a user does ----------------------------------------------------------------------

    def deploy(self, name: str, replicas: int, cpu: str = "500m", memory: str = "512Mi") -> None:
        workload = Workload(name=name, replicas=replicas, cpu=cpu, memory=memory)
        self.workload.create(DEPLOYMENTS, deployment(workload), NAMESPACE)

    def scale(self, name: str, replicas: int) -> None:
        self.workload.patch(DEPLOYMENTS, name, {"spec": {"replicas": replicas}}, NAMESPACE)

    # -- time -----------------------------------------------------------------------------------

    def advance(self, seconds: float) -> None:
        assert self.driver is not None, "start() first"
        self.driver.advance(seconds)

    # -- reads ------------------------------------------------------------------------------------

    def pods(self) -> list[JsonObject]:
        return self.workload.list(PODS, NAMESPACE).items

    def pending(self) -> list[str]:
        return sorted(
            p["metadata"]["name"] for p in self.pods() if not (p.get("spec") or {}).get("nodeName")
        )

    def nodeclaims(self) -> list[JsonObject]:
        return self.workload.list(NODECLAIMS).items

    def nodes(self) -> list[JsonObject]:
        return self.workload.list(NODES).items

    def machines(self) -> list[JsonObject]:
        return self.management.list(MACHINES, NAMESPACE).items

    def replicas(self) -> dict[str, int]:
        """Replicas of every MachineDeployment that has any."""
        out: dict[str, int] = {}
        for md in self.management.list(MACHINE_DEPLOYMENTS, NAMESPACE).items:
            count = int((md.get("spec") or {}).get("replicas") or 0)
            if count:
                out[md["metadata"]["name"]] = count
        return out


def write_kubeconfig(path: Path, url: str, token: str, context: str) -> Path:
    """A kubeconfig for ``url`` whose user carries ``token``, as a user would be handed one."""
    document = kubeconfig_document(url, context)
    document["users"] = [{"name": context, "user": {"token": token}}]
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    path.chmod(0o600)
    return path


def clients_from_command_line(
    argv: list[str], environ: dict[str, str]
) -> tuple[OfficialClient, OfficialClient]:
    """The clients ``karpenter-capi run`` would open for these flags and this environment,
    over the same official ``ApiClient``s, with the stepped driver's zero-timeout watches sent
    as such (``poll_watches``: the in-memory front answers them at once)."""
    parser = argparse.ArgumentParser()
    add_cluster_arguments(parser)
    workload, management = connect_clusters(
        cluster_config_from_args(parser.parse_args(argv), environ)
    )
    return (
        OfficialClient(workload.api_client, poll_watches=True),
        OfficialClient(management.api_client, poll_watches=True),
    )


@contextmanager
def http_fronts(
    env: TwoClusters, tmp_path: Path, **start: Any
) -> Iterator[tuple[HttpFront, HttpFront]]:
    """Both servers behind HTTP fronts and the controller started over them, with clients
    built as ``karpenter-capi run`` builds them; yields ``(workload front, management front)``."""
    with HttpFront(env.workload) as workload_front, HttpFront(env.management) as management:
        kubeconfig = write_kubeconfig(tmp_path / "wl.yaml", workload_front.url, "t", "workload")
        environ = {"KUBECONFIG": str(kubeconfig), "KARPENTER_CAPI_MANAGEMENT_URL": management.url}
        workload, management_client = clients_from_command_line([], environ)
        with workload, management_client:
            env.start(workload, management_client, **start)
            yield workload_front, management


def names(objects: list[JsonObject]) -> list[str]:
    return sorted(o["metadata"]["name"] for o in objects)


def condition(obj: JsonObject, kind: str) -> JsonObject | None:
    for found in (obj.get("status") or {}).get("conditions") or []:
        if found.get("type") == kind:
            return dict(found)
    return None


def ready_nodeclaims(env: TwoClusters) -> list[str]:
    return names(
        [c for c in env.nodeclaims() if (condition(c, "Ready") or {}).get("status") == "True"]
    )


def no_kind_crosses_over(env: TwoClusters) -> None:
    """Nothing of either side was written into the other cluster."""
    assert env.management.list(NODECLAIMS).items == []
    assert env.management.list(NODES).items == []
    assert env.management.list(PODS).items == []
    assert env.workload.list(MACHINES).items == []
    assert env.workload.list(MACHINE_DEPLOYMENTS).items == []
