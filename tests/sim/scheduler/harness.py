"""A simulated workload cluster with only the kube-scheduler stand-in running.

Tests create Nodes and Pods directly, settle the stepped driver, and read back where each pod
landed or what its ``PodScheduled`` condition says.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube import NODES, PODS, JsonObject
from karpenter_capi.core.runtime.manager import Manager
from karpenter_capi.core.runtime.stepped import SteppedDriver
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.cluster import new_cluster
from karpenter_capi.sim.scheduler import SimScheduler

NAMESPACE = "default"
HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


@dataclass
class Sim:
    clock: FakeClock
    api: InMemoryAPIServer
    manager: Manager
    driver: SteppedDriver
    scheduler: SimScheduler

    def node(
        self,
        name: str,
        *,
        cpu: str = "4",
        memory: str = "16Gi",
        pods: str = "110",
        zone: str | None = None,
        labels: Mapping[str, str] | None = None,
        taints: Sequence[JsonObject] = (),
        ready: bool = True,
        unschedulable: bool = False,
        extra: Mapping[str, str] | None = None,
    ) -> JsonObject:
        all_labels = {HOSTNAME: name, **(labels or {})}
        if zone:
            all_labels[ZONE] = zone
        allocatable = {"cpu": cpu, "memory": memory, "pods": pods, **(extra or {})}
        spec: JsonObject = {"taints": list(taints)}
        if unschedulable:
            spec["unschedulable"] = True
        node: JsonObject = {
            "metadata": {"name": name, "labels": all_labels},
            "spec": spec,
        }
        created = self.api.create(NODES, node)
        created["status"] = {
            "capacity": allocatable,
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        }
        return self.api.update(NODES, created, subresource="status")

    def pod(
        self,
        name: str,
        *,
        cpu: str | None = "100m",
        memory: str | None = None,
        labels: Mapping[str, str] | None = None,
        node_name: str | None = None,
        owner_kind: str | None = None,
        **spec: Any,
    ) -> JsonObject:
        requests = {}
        if cpu:
            requests["cpu"] = cpu
        if memory:
            requests["memory"] = memory
        body: JsonObject = {
            "metadata": {"name": name, "labels": dict(labels or {})},
            "spec": {
                "containers": [{"name": "c", "image": "app", "resources": {"requests": requests}}],
                **spec,
            },
        }
        if node_name:
            body["spec"]["nodeName"] = node_name
        if owner_kind:
            body["metadata"]["ownerReferences"] = [
                {
                    "apiVersion": "apps/v1",
                    "kind": owner_kind,
                    "name": "ds",
                    "uid": "u-ds",
                    "controller": True,
                }
            ]
        return self.api.create(PODS, body, NAMESPACE)

    def settle(self) -> None:
        self.driver.run_until_quiet()

    def get(self, name: str) -> JsonObject:
        return self.api.get(PODS, name, NAMESPACE)

    def node_of(self, name: str) -> str | None:
        node: str | None = self.get(name)["spec"].get("nodeName")
        return node

    def scheduled(self, name: str) -> JsonObject | None:
        conditions = (self.get(name).get("status") or {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == "PodScheduled"), None)


def new_sim(seed: int = 0) -> Sim:
    clock = FakeClock()
    api = new_cluster(clock=clock)
    manager = Manager(api, clock=clock)
    scheduler = SimScheduler(api, manager, clock, seed=seed)
    manager.add(scheduler)
    return Sim(clock, api, manager, SteppedDriver(manager), scheduler)
