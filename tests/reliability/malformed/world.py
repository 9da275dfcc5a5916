"""The whole controller on a simulated cluster with one good scalable resource and bad input
next to it, for the malformed-input cases.

Every case asks the same two questions (issue 17, item 5): does the controller say what is wrong,
naming the object and the problem, where a user looks (a condition, an Event); and does the rest
of the cluster keep working in the same pass (the good resource is scaled and the pods that fit it
run). The world is ``disruption.sim_world.SimWorld`` (the real ``Operator`` with ``generic_capi``,
the emulated Cluster API with nodes, the scheduler and workload stand-ins, on a ``FakeClock``),
with a one-resource catalog and the infrastructure and bootstrap templates it names, so a clean
world says nothing at all and whatever is said comes from the bad input.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.api.crds import generate_crds
from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube.client import JsonObject
from karpenter_capi.core.kube.resources import (
    CLUSTER_API_NODE_CLASSES,
    EVENTS,
    MACHINE_DEPLOYMENTS,
    MACHINE_POOLS,
    MACHINE_SETS,
    NODECLAIMS,
    NODEPOOLS,
    PODS,
    Resource,
)
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.scenario.catalog import NAME, POOL_LABEL, generate_catalog
from karpenter_capi.sim.scenario.schema import Catalog
from tests.core.disruption.sim_world import SimWorld

GOOD: Final = "m-2x-amd64-zone-a-on-demand"
"""The catalog's one MachineDeployment: 2 vCPU, 8 GiB, zone-a, on-demand."""
NODECLASS: Final = NAME
NODEPOOL: Final = NAME
NAMESPACE: Final = "default"
CA: Final = wellknown.CAPACITY_ANNOTATION_PREFIX
PRICE: Final = "karpenter.cluster.x-k8s.io/price"
INFRA: Final = "infrastructure.cluster.x-k8s.io"
BOOTSTRAP: Final = "bootstrap.cluster.x-k8s.io"
TEMPLATE: Final = "sim-workers"
KINDS: Final = ("MachineDeployment", "MachineSet", "MachinePool")
_RESOURCES: Final = {
    "MachineDeployment": MACHINE_DEPLOYMENTS,
    "MachineSet": MACHINE_SETS,
    "MachinePool": MACHINE_POOLS,
}
NODECLASS_REF: Final = {
    "group": wellknown.NODECLASS_GROUP,
    "kind": wellknown.NODECLASS_KIND,
    "name": NODECLASS,
}


def resource(kind: str) -> Resource:
    return _RESOURCES[kind].with_version("v1beta2")


@dataclass
class Event:
    kind: str
    name: str
    type: str
    reason: str
    message: str

    def __str__(self) -> str:
        return f"{self.type} {self.reason} on {self.kind} {self.name}: {self.message}"


class World:
    """A one-MachineDeployment cluster under the real operator, plus whatever a case adds."""

    def __init__(self) -> None:
        clock = FakeClock()
        server = InMemoryAPIServer(clock=clock, random_seed=1)
        server.apply_manifests(generate_crds())
        server.register_cluster_api()
        server.apply_manifests(
            generate_catalog(Catalog(cpus=[2], families={"m": 4}, zones=["zone-a"]))
        )
        server.apply_manifests(catalog_templates())
        # SimWorld's wiring, started only once the templates exist (templates read as missing
        # are remembered for a minute).
        self.sim = SimWorld(server, clock, *SimWorld._operator(server, clock))
        self.server = server
        self.sim.driver.run_until_quiet()

    @property
    def clock(self) -> FakeClock:
        return self.sim.clock

    # --- adding input ---------------------------------------------------------------------

    def scalable(
        self,
        kind: str,
        name: str,
        *,
        annotations: Mapping[str, str | None] | None = None,
        template_spec: Mapping[str, Any] | None = None,
        labels: Mapping[str, str] | None = None,
        cluster: str = "sim",
    ) -> JsonObject:
        """A MachineDeployment, MachineSet or MachinePool selected by the NodeClass: the good
        one's annotations with ``annotations`` merged in (``None`` removes one), of Cluster
        ``cluster``."""
        good = self.server.get(resource("MachineDeployment"), GOOD, NAMESPACE)
        merged = dict(good["metadata"]["annotations"])
        for key, value in (annotations or {}).items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = value
        machine = copy.deepcopy(good["spec"]["template"])
        machine["metadata"]["labels"] = {"malformed.test/owner": name}
        machine["spec"].update(template_spec or {})
        machine["spec"]["clusterName"] = cluster
        spec: JsonObject = {"clusterName": cluster, "replicas": 0, "template": machine}
        if kind != "MachinePool":
            spec["selector"] = {"matchLabels": {"malformed.test/owner": name}}
        if kind == "MachineDeployment":
            spec["rollout"] = {"strategy": {"type": "OnDelete"}}
        else:
            machine["spec"]["infrastructureRef"] = {
                "apiGroup": INFRA,
                "kind": "DockerMachinePool",
                "name": name,
            }
        return self.server.create(
            resource(kind),
            {
                "apiVersion": "cluster.x-k8s.io/v1beta2",
                "kind": kind,
                "metadata": {
                    "name": name,
                    "namespace": NAMESPACE,
                    "labels": {
                        wellknown.LABEL_KARPENTER_MEMBER: "",
                        POOL_LABEL: NAME,
                        **(labels or {}),
                    },
                    "annotations": merged,
                },
                "spec": spec,
            },
            NAMESPACE,
        )

    def nodeclass(
        self, name: str, spec: Mapping[str, Any], annotations: Mapping[str, str] | None = None
    ) -> JsonObject:
        return self.server.create(
            CLUSTER_API_NODE_CLASSES,
            {
                "apiVersion": wellknown.NODECLASS_API_VERSION,
                "kind": wellknown.NODECLASS_KIND,
                "metadata": {"name": name, "annotations": dict(annotations or {})},
                "spec": dict(spec),
            },
        )

    def nodepool(self, name: str, template_spec: Mapping[str, Any], **spec: Any) -> JsonObject:
        """A NodePool on the catalog NodeClass (unless ``template_spec`` names another)."""
        return self.server.create(
            NODEPOOLS,
            {
                "apiVersion": "karpenter.sh/v1",
                "kind": "NodePool",
                "metadata": {"name": name},
                "spec": {
                    "template": {
                        "spec": {"nodeClassRef": NODECLASS_REF, "requirements": []}
                        | dict(template_spec)
                    },
                    **spec,
                },
            },
        )

    def deploy(self, name: str = "web", replicas: int = 2, **extra: Any) -> None:
        """A Deployment whose pods fit the good resource (500m, 1Gi unless overridden)."""
        extra.setdefault("cpu", "500m")
        extra.setdefault("memory", "1Gi")
        self.sim.deploy(name, replicas, **extra)

    def pod(self, name: str, spec: Mapping[str, Any]) -> JsonObject:
        """A bare pod (for specs a Deployment's schema would not carry)."""
        return self.server.create(
            PODS,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app": name}},
                "spec": dict(spec),
            },
            NAMESPACE,
        )

    def run(self, seconds: float = 90.0) -> None:
        """Long enough for a launch from zero: batching, provision and boot delays."""
        self.sim.driver.run_until_quiet()
        self.sim.advance(seconds)

    # --- looking --------------------------------------------------------------------------

    def replicas(self, name: str, kind: str = "MachineDeployment") -> int:
        return int(self.server.get(resource(kind), name, NAMESPACE)["spec"].get("replicas") or 0)

    def running(self, prefix: str = "") -> list[str]:
        return sorted(
            p["metadata"]["name"]
            for p in self.sim.running_pods()
            if p["metadata"]["name"].startswith(prefix)
        )

    def pending(self, prefix: str = "") -> list[str]:
        return sorted(
            p["metadata"]["name"]
            for p in self.sim.pending_pods()
            if p["metadata"]["name"].startswith(prefix)
        )

    def condition(self, resource_: Resource, name: str, kind: str) -> JsonObject:
        obj = self.server.get(resource_, name)
        for condition in (obj.get("status") or {}).get("conditions") or []:
            if condition.get("type") == kind:
                return dict(condition)
        raise AssertionError(f"{resource_.kind} {name} has no {kind} condition: {obj}")

    def nodeclass_ready(self, name: str = NODECLASS) -> JsonObject:
        return self.condition(CLUSTER_API_NODE_CLASSES, name, "Ready")

    def nodepool_condition(self, name: str, kind: str = "Ready") -> JsonObject:
        return self.condition(NODEPOOLS, name, kind)

    def events(self, reason: str | None = None) -> list[Event]:
        found = []
        for item in self.server.list(EVENTS).items:
            involved = item.get("involvedObject") or {}
            event = Event(
                kind=str(involved.get("kind") or ""),
                name=str(involved.get("name") or ""),
                type=str(item.get("type") or ""),
                reason=str(item.get("reason") or ""),
                message=str(item.get("message") or ""),
            )
            if reason is None or event.reason == reason:
                found.append(event)
        return found

    def event_about(self, *words: str) -> Event:
        """The one Event whose message says every word, or an error listing them all."""
        found = [e for e in self.events() if all(w in e.message for w in words)]
        if not found:
            listed = "\n".join(map(str, self.events()))
            raise AssertionError(f"no Event says {words!r}; the Events are:\n{listed}")
        return found[0]

    def nodeclaims(self) -> list[JsonObject]:
        return list(self.server.list(NODECLAIMS).items)

    def violations(self, *, settled: bool = True) -> list[str]:
        """What the invariant checker finds wrong with the cluster (one line each)."""
        from karpenter_capi.sim.invariants import check_invariants

        return [str(v) for v in check_invariants(self.server, clock=self.clock, settled=settled)]

    def assert_good_resource_served(self, pods: int = 2, prefix: str = "web") -> None:
        """The good MachineDeployment was scaled and the pods that fit it run."""
        assert self.replicas(GOOD) >= 1, f"{GOOD} was not scaled up"
        assert len(self.running(prefix)) == pods, (
            f"running {self.running(prefix)}, pending {self.pending(prefix)}; Events:\n"
            + "\n".join(map(str, self.events()))
        )
        assert self.violations() == []


def catalog_templates() -> list[JsonObject]:
    """The infrastructure and bootstrap templates the catalog names (a clean run is quiet)."""
    return [
        {
            "apiVersion": f"{INFRA}/v1beta1",
            "kind": "DockerMachineTemplate",
            "metadata": {"name": TEMPLATE, "namespace": NAMESPACE},
            "spec": {"template": {"spec": {}}},
        },
        {
            "apiVersion": f"{BOOTSTRAP}/v1beta2",
            "kind": "KubeadmConfigTemplate",
            "metadata": {"name": TEMPLATE, "namespace": NAMESPACE},
            "spec": {"template": {"spec": {}}},
        },
    ]
