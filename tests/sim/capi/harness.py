"""A simulated management cluster with the CAPI emulation running under the stepped driver.

The tests drive it as the autoprovisioner would (scale subresource writes, annotations,
deletes) and read back what the emulated controllers did; object builders write
MachineDeployments, MachineSets and MachinePools in either CAPI layout, so every behaviour
can be checked in both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube import (
    MACHINE_DEPLOYMENTS,
    MACHINE_POOLS,
    MACHINE_SETS,
    MACHINES,
    NODES,
    JsonObject,
    Resource,
)
from karpenter_capi.core.runtime.manager import Manager
from karpenter_capi.core.runtime.stepped import SteppedDriver
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.capi import EmulationSettings, add_capi_emulation
from karpenter_capi.sim.cluster import new_cluster

NAMESPACE = "default"
CLUSTER = "demo"
SHAPES = ("v1beta1", "v1beta2")


def at(resource: Resource, shape: str) -> Resource:
    return resource.with_version(shape)


def _ref(shape: str, group: str, kind: str, name: str) -> JsonObject:
    if shape == "v1beta2":
        return {"apiGroup": group, "kind": kind, "name": name}
    return {"apiVersion": f"{group}/v1beta1", "kind": kind, "name": name}


def machine_template(
    shape: str,
    *,
    version: str = "v1.31.0",
    failure_domain: str | None = None,
    labels: Mapping[str, str] | None = None,
    infra: str = "workers",
) -> JsonObject:
    spec: JsonObject = {
        "clusterName": CLUSTER,
        "version": version,
        "bootstrap": {
            "configRef": _ref(
                shape, "bootstrap.cluster.x-k8s.io", "KubeadmConfigTemplate", "workers"
            )
        },
        "infrastructureRef": _ref(
            shape, "infrastructure.cluster.x-k8s.io", "DockerMachineTemplate", infra
        ),
    }
    if failure_domain:
        spec["failureDomain"] = failure_domain
    return {"metadata": {"labels": dict(labels or {})}, "spec": spec}


def machine_deployment(
    name: str,
    shape: str,
    *,
    replicas: int = 0,
    strategy: str = "RollingUpdate",
    max_surge: int | str | None = None,
    max_unavailable: int | str | None = None,
    deletion_order: str | None = None,
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    template: JsonObject | None = None,
) -> JsonObject:
    rolling: JsonObject = {}
    if max_surge is not None:
        rolling["maxSurge"] = max_surge
    if max_unavailable is not None:
        rolling["maxUnavailable"] = max_unavailable
    rollout: JsonObject = {"type": strategy}
    if rolling and strategy == "RollingUpdate":
        rollout["rollingUpdate"] = rolling
    spec: JsonObject = {
        "clusterName": CLUSTER,
        "replicas": replicas,
        "selector": {"matchLabels": {"cluster.x-k8s.io/deployment-name": name}},
        "template": template or machine_template(shape),
    }
    spec["template"]["metadata"]["labels"]["cluster.x-k8s.io/deployment-name"] = name
    if shape == "v1beta2":
        spec["rollout"] = {"strategy": rollout}
        if deletion_order:
            spec["deletion"] = {"order": deletion_order}
    else:
        if deletion_order:
            rollout.setdefault("rollingUpdate", {})["deletePolicy"] = deletion_order
        spec["strategy"] = rollout
    return {
        "apiVersion": f"cluster.x-k8s.io/{shape}",
        "kind": "MachineDeployment",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": dict(labels or {}),
            "annotations": dict(annotations or {}),
        },
        "spec": spec,
    }


def machine_set(
    name: str,
    shape: str,
    *,
    replicas: int = 0,
    deletion_order: str | None = None,
    annotations: Mapping[str, str] | None = None,
) -> JsonObject:
    spec: JsonObject = {
        "clusterName": CLUSTER,
        "replicas": replicas,
        "selector": {"matchLabels": {"pool": name}},
        "template": machine_template(shape, labels={"pool": name}),
    }
    if deletion_order:
        if shape == "v1beta2":
            spec["deletion"] = {"order": deletion_order}
        else:
            spec["deletePolicy"] = deletion_order
    return {
        "apiVersion": f"cluster.x-k8s.io/{shape}",
        "kind": "MachineSet",
        "metadata": {"name": name, "namespace": NAMESPACE, "annotations": dict(annotations or {})},
        "spec": spec,
    }


def machine_pool(
    name: str,
    shape: str,
    *,
    replicas: int = 0,
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
) -> JsonObject:
    template = machine_template(shape, failure_domain="zone-a")
    template["spec"]["infrastructureRef"] = _ref(
        shape, "infrastructure.cluster.x-k8s.io", "DockerMachinePool", name
    )
    spec: JsonObject = {"clusterName": CLUSTER, "replicas": replicas, "template": template}
    if shape == "v1beta1":
        spec["minReadySeconds"] = 0  # a field only v1beta1 has at this level
    return {
        "apiVersion": f"cluster.x-k8s.io/{shape}",
        "kind": "MachinePool",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": dict(labels or {}),
            "annotations": dict(annotations or {}),
        },
        "spec": spec,
    }


@dataclass
class Sim:
    clock: FakeClock
    api: InMemoryAPIServer
    manager: Manager
    driver: SteppedDriver
    # The version a test reads at: the one it last wrote at. The server converts (as CAPI's
    # conversion webhook does), so what a test reads is in the layout of that version.
    version: str | None = None

    # -- time --------------------------------------------------------------------------------

    def settle(self) -> int:
        return self.driver.run_until_quiet()

    def advance(self, seconds: float) -> int:
        return self.driver.advance(seconds)

    # -- writes as a user or the autoprovisioner makes them ----------------------------------

    def create(self, obj: JsonObject) -> JsonObject:
        resource = {
            "MachineDeployment": MACHINE_DEPLOYMENTS,
            "MachineSet": MACHINE_SETS,
            "MachinePool": MACHINE_POOLS,
            "Machine": MACHINES,
        }[obj["kind"]]
        shape = obj["apiVersion"].rpartition("/")[2]
        self.version = shape
        return self.api.create(at(resource, shape), obj, NAMESPACE)

    def _at(self, resource: Resource) -> Resource:
        return resource if self.version is None else at(resource, self.version)

    def scale(self, resource: Resource, name: str, replicas: int) -> None:
        """A write through the scale subresource with a resourceVersion precondition."""
        scale = self.api.get(resource, name, NAMESPACE, subresource="scale")
        patch = {
            "metadata": {"resourceVersion": scale["metadata"]["resourceVersion"]},
            "spec": {"replicas": replicas},
        }
        self.api.patch(resource, name, patch, NAMESPACE, subresource="scale")

    def annotate(self, resource: Resource, name: str, annotations: Mapping[str, Any]) -> None:
        self.api.patch(resource, name, {"metadata": {"annotations": dict(annotations)}}, NAMESPACE)

    # -- reads -------------------------------------------------------------------------------

    def get(self, resource: Resource, name: str) -> JsonObject:
        return self.api.get(self._at(resource), name, NAMESPACE)

    def machines(self, **labels: str) -> list[JsonObject]:
        selector = ",".join(f"{k}={v}" for k, v in labels.items()) or None
        return self.api.list(self._at(MACHINES), NAMESPACE, label_selector=selector).items

    def machine_names(self, *, live_only: bool = False, **labels: str) -> list[str]:
        return sorted(
            m["metadata"]["name"]
            for m in self.machines(**labels)
            if not (live_only and m["metadata"].get("deletionTimestamp"))
        )

    def machine_sets(self) -> list[JsonObject]:
        return self.api.list(self._at(MACHINE_SETS), NAMESPACE).items

    def nodes(self) -> list[JsonObject]:
        return self.api.list(NODES).items


def new_sim(settings: EmulationSettings | None = None, **overrides: Any) -> Sim:
    clock = FakeClock()
    api = new_cluster(clock=clock)
    manager = Manager(api, clock=clock)
    add_capi_emulation(manager, settings, **overrides)
    return Sim(clock, api, manager, SteppedDriver(manager))


def deployment_labels(name: str) -> dict[str, str]:
    return {"cluster.x-k8s.io/deployment-name": name}
