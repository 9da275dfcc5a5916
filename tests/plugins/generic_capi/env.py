"""A management cluster with the CAPI emulation, the generic_capi plugin, and the core's side
of the launch contract, for the launch, delete, instances and drift tests.

Two ways to drive the plugin:

- **by hand** (``Env.launch``/``Env.delete``): call a hook through the ``Plugins`` facade, then
  record the result on the NodeClaim as the lifecycle controller would (labels, annotations,
  provider ID). A test decides what a crash skips: ``launch(..., record=False)`` is a process
  that died after the hook's writes and before the NodeClaim's; ``restart()`` builds a new
  facade, hence a new plugin context with empty caches;
- **with the core** (``Env.with_core``): the real NodeClaim lifecycle and termination
  controllers and the emulation under one stepped driver.

The plugin's clients (``plugin_management``, ``plugin_workload``) and the core's
(``core``) are ``CountingClient``s, so tests can count who wrote what; the emulation writes
through the API directly. The API shape (``v1beta1``/``v1beta2``) selects
the served version the plugin discovers, the emulation's version and the objects' layout.

(Module name unique on purpose: test directories share one module namespace.)
"""

from __future__ import annotations

import builtins
import dataclasses
import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.api.nodeclaim import NodeClaim
from karpenter_capi.core.api.nodeclass import ClusterAPINodeClass
from karpenter_capi.core.api.nodepool import NodePool
from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.hookspecs import Instance, LaunchResult
from karpenter_capi.core.kube import (
    CLUSTER_API_NODE_CLASSES,
    MACHINE_DEPLOYMENTS,
    MACHINE_POOLS,
    MACHINE_SETS,
    MACHINES,
    NODECLAIMS,
    NODEPOOLS,
    JsonObject,
    KubeClient,
    ListResult,
    PatchType,
    Preconditions,
    PropagationPolicy,
    Resource,
    WatchStream,
)
from karpenter_capi.core.kube.writelog import WriteLog
from karpenter_capi.core.lifecycle import lifecycle_controllers
from karpenter_capi.core.lifecycle.launch import claim_requirements, launchable_instance_types
from karpenter_capi.core.plugin_host import PluginEnvironment, Plugins
from karpenter_capi.core.runtime.manager import Manager
from karpenter_capi.core.runtime.stepped import SteppedDriver
from karpenter_capi.core.termination.controllers import (
    NodeClaimTerminationController,
    NodeTerminationController,
)
from karpenter_capi.plugins.generic_capi.binding import ANNOTATION_NODECLAIM
from karpenter_capi.plugins.generic_capi.plugin import GenericCapiPlugin
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.capi import (
    ANNOTATION_MACHINE_POOL_MACHINES,
    EmulationSettings,
    add_capi_emulation,
)
from karpenter_capi.sim.cluster import new_cluster

NAMESPACE = "default"
CLUSTER = "demo"
SHAPES = ("v1beta1", "v1beta2")
P = wellknown.CAPACITY_ANNOTATION_PREFIX
PRICE = "karpenter.cluster.x-k8s.io/price"
MEMBER = wellknown.LABEL_KARPENTER_MEMBER
NODECLASS_REF = {
    "group": wellknown.NODECLASS_GROUP,
    "kind": wellknown.NODECLASS_KIND,
    "name": "default",
}


class CountingClient:
    """A ``KubeClient`` that forwards everything and remembers every write."""

    def __init__(self, inner: KubeClient) -> None:
        self.inner = inner
        self.writes: list[tuple[str, str, str]] = []
        self.lists: list[tuple[str, str]] = []
        """``(plural, label selector)`` of every list."""

    def count(self, verb: str | None = None, plural: str | None = None, sub: str = "*") -> int:
        return sum(
            1
            for v, p, s in self.writes
            if (verb is None or v == verb) and (plural is None or p == plural) and sub in ("*", s)
        )

    def summary(self) -> Counter[str]:
        return Counter(f"{v} {p}{'/' + s if s else ''}" for v, p, s in self.writes)

    @property
    def drains_zero_timeout_watch(self) -> bool:
        return self.inner.drains_zero_timeout_watch

    @property
    def write_log(self) -> WriteLog | None:
        """The inner client's, so a mirror over this one follows a watch as over that one."""
        log = getattr(self.inner, "write_log", None)
        return log if isinstance(log, WriteLog) else None

    def _record(self, verb: str, resource: Resource, subresource: str | None) -> None:
        self.writes.append((verb, resource.plural, subresource or ""))

    def get(
        self,
        resource: Resource,
        name: str,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
    ) -> JsonObject:
        return self.inner.get(resource, name, namespace, subresource=subresource)

    def list(self, resource: Resource, namespace: str | None = None, **kw: Any) -> ListResult:
        self.lists.append((resource.plural, str(kw.get("label_selector") or "")))
        return self.inner.list(resource, namespace, **kw)

    def watch(self, resource: Resource, namespace: str | None = None, **kw: Any) -> WatchStream:
        return self.inner.watch(resource, namespace, **kw)

    def create(self, resource: Resource, obj: JsonObject, namespace: str | None = None) -> Any:
        self._record("create", resource, None)
        return self.inner.create(resource, obj, namespace)

    def update(self, resource: Resource, obj: JsonObject, *, subresource: str | None = None) -> Any:
        self._record("update", resource, subresource)
        return self.inner.update(resource, obj, subresource=subresource)

    def patch(
        self,
        resource: Resource,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        patch_type: PatchType = PatchType.MERGE,
        subresource: str | None = None,
    ) -> Any:
        self._record("patch", resource, subresource)
        return self.inner.patch(
            resource, name, patch, namespace, patch_type=patch_type, subresource=subresource
        )

    def delete(
        self,
        resource: Resource,
        name: str,
        namespace: str | None = None,
        *,
        preconditions: Preconditions | None = None,
        propagation_policy: PropagationPolicy | None = None,
        grace_period_seconds: int | None = None,
    ) -> Any:
        self._record("delete", resource, None)
        return self.inner.delete(
            resource,
            name,
            namespace,
            preconditions=preconditions,
            propagation_policy=propagation_policy,
            grace_period_seconds=grace_period_seconds,
        )

    def evict(self, name: str, namespace: str, *, grace_period_seconds: int | None = None) -> None:
        self.inner.evict(name, namespace, grace_period_seconds=grace_period_seconds)

    def server_version(self) -> JsonObject:
        return self.inner.server_version()

    def served_versions(self, group: str) -> builtins.list[str]:
        return self.inner.served_versions(group)


def _ref(shape: str, group: str, kind: str, name: str) -> JsonObject:
    if shape == "v1beta2":
        return {"apiGroup": group, "kind": kind, "name": name}
    return {"apiVersion": f"{group}/v1beta1", "kind": kind, "name": name}


def template(
    shape: str,
    *,
    version: str = "v1.31.0",
    infra: str = "workers",
    bootstrap: str = "workers",
    zone: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> JsonObject:
    spec: JsonObject = {
        "clusterName": CLUSTER,
        "version": version,
        "bootstrap": {
            "configRef": _ref(
                shape, "bootstrap.cluster.x-k8s.io", "KubeadmConfigTemplate", bootstrap
            )
        },
        "infrastructureRef": _ref(
            shape, "infrastructure.cluster.x-k8s.io", "DockerMachineTemplate", infra
        ),
    }
    if zone:
        spec["failureDomain"] = zone
    return {"metadata": {"labels": dict(labels or {})}, "spec": spec}


def shape_annotations(instance_type: str, price: float, zone: str) -> dict[str, str]:
    return {
        P + "cpu": "2",
        P + "memory": "8Gi",
        P + "labels": f"{wellknown.LABEL_INSTANCE_TYPE}={instance_type},"
        f"{wellknown.LABEL_TOPOLOGY_ZONE}={zone}",
        PRICE: str(price),
    }


@dataclass
class Env:
    shape: str
    clock: FakeClock
    api: InMemoryAPIServer
    plugin_management: CountingClient
    plugin_workload: CountingClient
    core: CountingClient
    manager: Manager
    options: dict[str, str]
    plugins: Plugins = field(init=False)
    results: dict[str, LaunchResult] = field(default_factory=dict)
    _driver: SteppedDriver | None = None

    def __post_init__(self) -> None:
        self.restart()

    @property
    def driver(self) -> SteppedDriver:
        """The stepped driver, made on first use (controllers cannot be added after)."""
        if self._driver is None:
            self._driver = SteppedDriver(self.manager)
        return self._driver

    # --- the plugin -------------------------------------------------------------------------

    def restart(self) -> None:
        """A new process: a new facade, a new plugin context, empty caches."""
        self.plugins = Plugins.from_objects(
            [("generic_capi", GenericCapiPlugin)],
            PluginEnvironment(
                workload=self.plugin_workload,
                management=self.plugin_management,
                clock=self.clock,
                logger=logging.getLogger("test.generic_capi"),
                options={"generic_capi": dict(self.options)},
            ),
        )

    def use_client(self, client: KubeClient) -> None:
        """Give the plugin another transport (the official client over the HTTP front) and
        restart it; the emulation keeps writing in process."""
        self.plugin_management = CountingClient(client)
        self.plugin_workload = CountingClient(client)
        self.restart()

    def res(self, resource: Resource) -> Resource:
        return resource.with_version(self.shape)

    # --- objects ----------------------------------------------------------------------------

    def nodeclass(self, annotations: Mapping[str, str] | None = None) -> JsonObject:
        return self.api.create(
            CLUSTER_API_NODE_CLASSES,
            {
                "apiVersion": wellknown.NODECLASS_API_VERSION,
                "kind": wellknown.NODECLASS_KIND,
                "metadata": {"name": "default", "annotations": dict(annotations or {})},
                "spec": {"scalableResourceSelector": {"matchLabels": {"pool": "general"}}},
            },
        )

    def nodepool(self) -> JsonObject:
        return self.api.create(
            NODEPOOLS,
            {
                "apiVersion": "karpenter.sh/v1",
                "kind": "NodePool",
                "metadata": {"name": "general"},
                "spec": {"template": {"spec": {"nodeClassRef": NODECLASS_REF, "requirements": []}}},
            },
        )

    def deployment(
        self,
        name: str,
        *,
        replicas: int = 0,
        instance_type: str = "m5.large",
        price: float = 0.1,
        zone: str = "zone-a",
        strategy: str = "OnDelete",
        annotations: Mapping[str, str] | None = None,
        version: str = "v1.31.0",
    ) -> JsonObject:
        spec: JsonObject = {
            "clusterName": CLUSTER,
            "replicas": replicas,
            "selector": {"matchLabels": {"cluster.x-k8s.io/deployment-name": name}},
            "template": template(
                self.shape,
                zone=zone,
                version=version,
                labels={"cluster.x-k8s.io/deployment-name": name},
            ),
        }
        if self.shape == "v1beta2":
            spec["rollout"] = {"strategy": {"type": strategy}}
        else:
            spec["strategy"] = {"type": strategy}
        return self.api.create(
            self.res(MACHINE_DEPLOYMENTS),
            {
                "apiVersion": f"cluster.x-k8s.io/{self.shape}",
                "kind": "MachineDeployment",
                "metadata": {
                    "name": name,
                    "namespace": NAMESPACE,
                    "labels": {MEMBER: "", "pool": "general"},
                    "annotations": {
                        **shape_annotations(instance_type, price, zone),
                        **(annotations or {}),
                    },
                },
                "spec": spec,
            },
            NAMESPACE,
        )

    def machine_set(
        self,
        name: str,
        *,
        replicas: int = 0,
        instance_type: str = "m5.large",
        price: float = 0.1,
        zone: str = "zone-a",
        annotations: Mapping[str, str] | None = None,
    ) -> JsonObject:
        return self.api.create(
            self.res(MACHINE_SETS),
            {
                "apiVersion": f"cluster.x-k8s.io/{self.shape}",
                "kind": "MachineSet",
                "metadata": {
                    "name": name,
                    "namespace": NAMESPACE,
                    "labels": {MEMBER: "", "pool": "general"},
                    "annotations": {
                        **shape_annotations(instance_type, price, zone),
                        **(annotations or {}),
                    },
                },
                "spec": {
                    "clusterName": CLUSTER,
                    "replicas": replicas,
                    "selector": {"matchLabels": {"set": name}},
                    "template": template(self.shape, zone=zone, labels={"set": name}),
                },
            },
            NAMESPACE,
        )

    def machine_pool(
        self,
        name: str,
        *,
        replicas: int = 0,
        instance_type: str = "m5.large",
        price: float = 0.1,
        zone: str = "zone-a",
        annotations: Mapping[str, str] | None = None,
    ) -> JsonObject:
        """A MachinePool whose instances get MachinePool Machines (so they can be bound)."""
        pool_template = template(self.shape, zone=zone)
        pool_template["spec"]["infrastructureRef"] = _ref(
            self.shape, "infrastructure.cluster.x-k8s.io", "DockerMachinePool", name
        )
        return self.api.create(
            self.res(MACHINE_POOLS),
            {
                "apiVersion": f"cluster.x-k8s.io/{self.shape}",
                "kind": "MachinePool",
                "metadata": {
                    "name": name,
                    "namespace": NAMESPACE,
                    "labels": {MEMBER: "", "pool": "general"},
                    "annotations": {
                        **shape_annotations(instance_type, price, zone),
                        ANNOTATION_MACHINE_POOL_MACHINES: "true",
                        **(annotations or {}),
                    },
                },
                "spec": {"clusterName": CLUSTER, "replicas": replicas, "template": pool_template},
            },
            NAMESPACE,
        )

    def nodeclaim(
        self,
        name: str,
        *,
        instance_types: tuple[str, ...] = ("m5.large",),
        zones: tuple[str, ...] | None = None,
    ) -> JsonObject:
        requirements: list[JsonObject] = [
            {"key": wellknown.LABEL_NODEPOOL, "operator": "In", "values": ["general"]},
            {
                "key": wellknown.LABEL_INSTANCE_TYPE,
                "operator": "In",
                "values": list(instance_types),
            },
        ]
        if zones:
            requirements.append(
                {"key": wellknown.LABEL_TOPOLOGY_ZONE, "operator": "In", "values": list(zones)}
            )
        return self.api.create(
            NODECLAIMS,
            {
                "apiVersion": "karpenter.sh/v1",
                "kind": "NodeClaim",
                "metadata": {
                    "name": name,
                    "labels": {wellknown.LABEL_NODEPOOL: "general"},
                    "finalizers": [wellknown.FINALIZER_TERMINATION],
                },
                "spec": {
                    "nodeClassRef": NODECLASS_REF,
                    "requirements": requirements,
                    "resources": {"requests": {"cpu": "500m"}},
                },
            },
        )

    # --- the core's side, by hand -----------------------------------------------------------

    def _models(self) -> tuple[ClusterAPINodeClass, NodePool]:
        nodeclass = ClusterAPINodeClass.model_validate(
            self.api.get(CLUSTER_API_NODE_CLASSES, "default")
        )
        nodepool = NodePool.model_validate(self.api.get(NODEPOOLS, "general"))
        return nodeclass, nodepool

    def launch(self, name: str, *, record: bool = True) -> LaunchResult:
        """One ``create`` call for NodeClaim ``name`` as the lifecycle controller makes it."""
        raw = self.api.get(NODECLAIMS, name)
        nodeclass, nodepool = self._models()
        inventory = self.plugins.instance_types(nodeclass, nodepool)
        allowed = launchable_instance_types(inventory, claim_requirements(raw))
        result = self.plugins.create(NodeClaim.model_validate(raw), allowed, nodeclass)
        self.results[name] = result
        if record:
            self.record(name, result)
        return result

    def record(self, name: str, result: LaunchResult) -> None:
        """What the lifecycle controller writes from a result: labels and annotations in one
        write, the provider ID in a status write."""
        labels = {
            wellknown.LABEL_INSTANCE_TYPE: result.instance_type,
            wellknown.LABEL_CAPACITY_TYPE: result.capacity_type,
        }
        if result.zone:
            labels[wellknown.LABEL_TOPOLOGY_ZONE] = result.zone
        self.api.patch(
            NODECLAIMS,
            name,
            {"metadata": {"labels": labels, "annotations": dict(result.annotations)}},
        )
        if result.provider_id:
            self.api.patch(
                NODECLAIMS,
                name,
                {"status": {"providerID": result.provider_id}},
                subresource="status",
            )

    def launch_all(self, names: list[str], *, rounds: int = 20, step: float = 5.0) -> None:
        """Poll ``create`` for every NodeClaim until all have a provider ID, letting the
        emulation run between rounds, as the core's 5 s poll does."""
        for _ in range(rounds):
            pending = [n for n in names if not self.provider_id(n)]
            if not pending:
                return
            for name in pending:
                self.launch(name)
            self.driver.advance(step)
        missing = [n for n in names if not self.provider_id(n)]
        raise AssertionError(f"not launched after {rounds} rounds: {missing}")

    def delete(self, name: str) -> bool | None:
        """One ``delete`` hook call for NodeClaim ``name`` (marked deleting first, as a user's
        ``kubectl delete`` with the termination finalizer leaves it)."""
        raw = self.api.get(NODECLAIMS, name)
        if not raw["metadata"].get("deletionTimestamp"):
            self.api.delete(NODECLAIMS, name)
            raw = self.api.get(NODECLAIMS, name)
        return self.plugins.delete(NodeClaim.model_validate(raw)) and True

    def get(self, provider_id: str) -> Instance:
        return self.plugins.get(provider_id)

    # --- the core's side, for real ----------------------------------------------------------

    def with_core(self) -> None:
        """Add the core's NodeClaim lifecycle and termination controllers to the driver; their
        writes go through ``core``."""
        ctx = dataclasses.replace(self.manager.context(self.plugins), client=self.core)
        self.manager.add(*lifecycle_controllers(ctx))
        self.manager.add(NodeTerminationController(ctx), NodeClaimTerminationController(ctx))

    # --- reads ------------------------------------------------------------------------------

    def claim(self, name: str) -> JsonObject:
        return self.api.get(NODECLAIMS, name)

    def provider_id(self, name: str) -> str:
        return str((self.claim(name).get("status") or {}).get("providerID") or "")

    def replicas(self, name: str, resource: Resource = MACHINE_DEPLOYMENTS) -> int:
        return int(self.api.get(self.res(resource), name, NAMESPACE)["spec"]["replicas"])

    def machines(self, *, live: bool = True, **labels: str) -> list[JsonObject]:
        selector = ",".join(f"{k}={v}" for k, v in labels.items()) or None
        items = self.api.list(MACHINES, NAMESPACE, label_selector=selector).items
        return [m for m in items if not (live and m["metadata"].get("deletionTimestamp"))]

    def bindings(self) -> dict[str, list[str]]:
        """NodeClaim name -> names of the Machines naming it."""
        found: dict[str, list[str]] = {}
        for machine in self.machines(live=False):
            claim = (machine["metadata"].get("annotations") or {}).get(ANNOTATION_NODECLAIM)
            if claim:
                found.setdefault(claim, []).append(machine["metadata"]["name"])
        return found

    def scale_writes(self) -> int:
        """The plugin's writes through a scale subresource."""
        return sum(1 for _, _, sub in self.plugin_management.writes if sub == "scale")

    def machine_writes(self) -> int:
        """The plugin's writes of Machines (binds, marks)."""
        return sum(1 for _, plural, _ in self.plugin_management.writes if plural == "machines")


def new_env(
    shape: str = "v1beta2",
    *,
    options: Mapping[str, str] | None = None,
    monkeypatch: pytest.MonkeyPatch | None = None,
    **emulation: Any,
) -> Env:
    """An empty cluster with a NodeClass and a NodePool; ``emulation`` overrides the
    ``EmulationSettings`` (``provision_delay`` defaults to 10 s)."""
    if monkeypatch is not None:
        monkeypatch.setenv("CAPI_VERSION", shape)
    clock = FakeClock()
    api = new_cluster(clock=clock)
    manager = Manager(api, clock=clock)
    settings = EmulationSettings(version=shape, default_shape=shape)
    add_capi_emulation(manager, settings, **emulation)
    env = Env(
        shape=shape,
        clock=clock,
        api=api,
        plugin_management=CountingClient(api),
        plugin_workload=CountingClient(api),
        core=CountingClient(api),
        manager=manager,
        options=dict(options or {}),
    )
    env.nodeclass()
    env.nodepool()
    return env


def names(prefix: str, count: int) -> list[str]:
    return [f"{prefix}-{i:03d}" for i in range(count)]
