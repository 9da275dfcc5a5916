"""A simulated workload cluster (in-memory API, workload emulation, stepped driver) and builders
for the Nodes, Deployments, DaemonSets and pods the tests drive it with."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube import DEPLOYMENTS, NODES, PODS, REPLICASETS, JsonObject
from karpenter_capi.core.runtime.manager import Manager
from karpenter_capi.core.runtime.stepped import SteppedDriver
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.cluster import new_cluster
from karpenter_capi.sim.workloads import add_workload_emulation

NS = "default"


@dataclass
class Sim:
    clock: FakeClock
    api: InMemoryAPIServer
    driver: SteppedDriver

    def settle(self) -> None:
        self.driver.run_until_quiet()

    def advance(self, seconds: float) -> None:
        self.driver.advance(seconds)

    def pods(self, owner: str | None = None) -> list[JsonObject]:
        """The pods (of ``owner``: one it owns, or one its ReplicaSets own)."""
        items = self.api.list(PODS, NS).items
        if owner is None:
            return items
        owners = {owner, *(rs["metadata"]["name"] for rs in self.replicasets(owner))}
        return [
            p
            for p in items
            if any(r.get("name") in owners for r in p["metadata"].get("ownerReferences") or [])
        ]

    def replicasets(self, deployment: str) -> list[JsonObject]:
        """The ReplicaSets the Deployment ``deployment`` controls."""
        return [
            rs
            for rs in self.api.list(REPLICASETS, NS).items
            if any(
                r.get("kind") == "Deployment"
                and r.get("name") == deployment
                and r.get("controller")
                for r in rs["metadata"].get("ownerReferences") or []
            )
        ]

    def live(self, owner: str) -> list[JsonObject]:
        return [p for p in self.pods(owner) if not p["metadata"].get("deletionTimestamp")]

    def node(self, name: str, *, ready: bool = True, **spec: Any) -> JsonObject:
        return self.api.create(NODES, node(name, ready=ready, **spec))

    def deployment(self, name: str, replicas: int, **template: Any) -> JsonObject:
        return self.api.create(DEPLOYMENTS, deployment(name, replicas, **template), NS)

    def scale(self, name: str, replicas: int) -> None:
        self.api.patch(DEPLOYMENTS, name, {"spec": {"replicas": replicas}}, NS)

    def bind(self, pod: Mapping[str, Any], node_name: str) -> None:
        """Bind as kube-scheduler does, through ``pods/binding`` (an update may not)."""
        name = pod["metadata"]["name"]
        target = {"kind": "Node", "name": node_name}
        self.api.bind({"metadata": {"name": name, "namespace": NS}, "target": target}, NS)


def new_sim(**overrides: Any) -> Sim:
    clock = FakeClock()
    api = new_cluster(clock=clock)
    manager = Manager(api, clock=clock)
    add_workload_emulation(manager, **overrides)
    return Sim(clock, api, SteppedDriver(manager))


def node(
    name: str,
    *,
    ready: bool = True,
    labels: Mapping[str, str] | None = None,
    taints: list[JsonObject] | None = None,
) -> JsonObject:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {"taints": taints or []},
        "status": {
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
        },
    }


def pod_spec(**extra: Any) -> JsonObject:
    return {"containers": [{"name": "app", "image": "nginx"}], **extra}


def deployment(name: str, replicas: int, **template: Any) -> JsonObject:
    labels = {"app": name}
    return {
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod_spec(**template)},
        },
    }


def daemonset(name: str, **template: Any) -> JsonObject:
    labels = {"daemon": name}
    return {
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod_spec(**template)},
        },
    }


def condition(obj: Mapping[str, Any], kind: str) -> str | None:
    for entry in (obj.get("status") or {}).get("conditions") or []:
        if entry.get("type") == kind:
            return str(entry.get("status"))
    return None
