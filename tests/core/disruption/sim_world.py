"""The whole controller on the simulated cluster, stepped by hand, for disruption stories.

The same wiring as ``sim.scenario.runner`` (the real ``Operator`` with ``generic_capi``, the
emulated Cluster API with nodes, kubelet, Deployments and the scheduler stand-in, on a
``FakeClock``), but driven one step at a time so a test can look at the cluster between steps:
which NodeClaim was created before which was deleted, what a Node's taints were.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from karpenter_capi.core.api.crds import generate_crds
from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube.resources import (
    DEPLOYMENTS,
    EVENTS,
    NODECLAIMS,
    NODEPOOLS,
    NODES,
    PODS,
)
from karpenter_capi.core.operator import Operator, OperatorOptions
from karpenter_capi.core.plugin_host import PluginEnvironment, Plugins
from karpenter_capi.core.runtime.stepped import SteppedDriver
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.capi import add_capi_emulation
from karpenter_capi.sim.scenario.catalog import generate_catalog
from karpenter_capi.sim.scenario.runner import deployment
from karpenter_capi.sim.scenario.schema import Catalog, Workload
from karpenter_capi.sim.scheduler import SimScheduler
from karpenter_capi.sim.workloads import add_workload_emulation


@dataclass
class SimWorld:
    server: InMemoryAPIServer
    clock: FakeClock
    operator: Operator
    driver: SteppedDriver

    @classmethod
    def build(
        cls,
        catalog: Catalog,
        *,
        disruption: dict[str, Any] | None = None,
        template: dict[str, Any] | None = None,
    ) -> SimWorld:
        clock = FakeClock()
        server = InMemoryAPIServer(clock=clock, random_seed=1)
        server.apply_manifests(generate_crds())
        server.register_cluster_api()
        server.apply_manifests(generate_catalog(catalog))
        pool = server.list(NODEPOOLS).items[0]
        patch: dict[str, Any] = {"spec": {}}
        if disruption is not None:
            patch["spec"]["disruption"] = disruption
        if template is not None:
            patch["spec"]["template"] = {"spec": template}
        server.patch(NODEPOOLS, pool["metadata"]["name"], patch)
        world = cls(server, clock, *cls._operator(server, clock))
        world.driver.run_until_quiet()
        return world

    @staticmethod
    def _operator(
        server: InMemoryAPIServer, clock: FakeClock, *, dry_run: bool = False
    ) -> tuple[Operator, SteppedDriver]:
        environment = PluginEnvironment(
            workload=server,
            management=server,
            clock=clock,
            logger=logging.getLogger("karpenter_capi.plugins"),
        )
        operator = Operator(
            server,
            server,
            Plugins.load(["generic_capi"], environment),
            clock,
            OperatorOptions(leader_elect=False, metrics_port=None, dry_run=dry_run),
        )
        add_capi_emulation(operator.manager, nodes=True)
        add_workload_emulation(operator.manager)
        operator.manager.add(SimScheduler(server, operator.manager, clock))
        return operator, operator.stepped()

    def restart(self, *, dry_run: bool = False) -> None:
        """A new controller process over the same cluster (the old one's memory is lost)."""
        self.operator, self.driver = self._operator(self.server, self.clock, dry_run=dry_run)
        self.driver.run_until_quiet()

    # -- acting ----------------------------------------------------------------------------

    def deploy(self, name: str, replicas: int, cpu: str, memory: str, **extra: Any) -> None:
        workload = Workload(name=name, replicas=replicas, cpu=cpu, memory=memory, **extra)
        self.server.apply_manifests([deployment(workload)])
        self.driver.run_until_quiet()

    def scale(self, name: str, replicas: int) -> None:
        self.server.patch(DEPLOYMENTS, name, {"spec": {"replicas": replicas}}, "default")
        self.driver.run_until_quiet()

    def advance(self, seconds: float) -> None:
        self.driver.advance(seconds)

    # -- looking ---------------------------------------------------------------------------

    def nodeclaims(self, *, live: bool = True) -> list[dict[str, Any]]:
        items = self.server.list(NODECLAIMS).items
        return [c for c in items if not (live and c["metadata"].get("deletionTimestamp"))]

    def nodes(self) -> list[dict[str, Any]]:
        return [
            n for n in self.server.list(NODES).items if not n["metadata"].get("deletionTimestamp")
        ]

    def running_pods(self) -> list[dict[str, Any]]:
        return [
            p
            for p in self.server.list(PODS, "default").items
            if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")
        ]

    def pending_pods(self) -> list[dict[str, Any]]:
        return [p for p in self.server.list(PODS, "default").items if not p["spec"].get("nodeName")]

    def events(self, reason: str) -> list[dict[str, Any]]:
        return [e for e in self.server.list(EVENTS).items if e.get("reason") == reason]

    def instance_types(self) -> list[str]:
        return sorted(
            n["metadata"]["labels"]["node.kubernetes.io/instance-type"] for n in self.nodes()
        )
