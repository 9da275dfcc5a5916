"""A small, deterministic stand-in for the controller runtime, for the lifecycle tests.

Until the stepped driver exists, tests drive reconciles by hand: ``Env`` holds an in-memory
cluster on a ``FakeClock``, the fake provider plugin, stepped informers as the caches (so a
reconcile reads a cache, not the API, exactly as in production), and a ``ControllerContext``.
``env.reconcile(controller, name)`` syncs the informers, reconciles once and syncs again.

(The module name is unique on purpose: test directories without ``__init__.py`` share one
module namespace.)
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube.cache import Store
from karpenter_capi.core.kube.client import JsonObject
from karpenter_capi.core.kube.errors import NotFound
from karpenter_capi.core.kube.events import EventRecorder
from karpenter_capi.core.kube.informer import Informer
from karpenter_capi.core.kube.resources import (
    CLUSTER_API_NODE_CLASSES,
    EVENTS,
    NODECLAIMS,
    NODEPOOLS,
    NODES,
    Resource,
)
from karpenter_capi.core.lifecycle import NodeClaimGarbageCollector, NodeClaimLifecycleController
from karpenter_capi.core.runtime.controller import WORKLOAD, ControllerContext, Result
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.cluster import new_cluster
from tests.support.provider import FakeProvider


class SteppedCaches:
    """``Caches`` over informers stepped by hand; a store is listed on first use."""

    def __init__(self, api: InMemoryAPIServer, clock: FakeClock) -> None:
        self._api = api
        self._clock = clock
        self._informers: dict[tuple[Resource, str], Informer[JsonObject]] = {}

    def store(self, resource: Resource, cluster: str = WORKLOAD) -> Store[JsonObject]:
        informer = self._informers.get((resource, cluster))
        if informer is None:
            informer = Informer(self._api, resource, clock=self._clock, rand=lambda: 0.5)
            self._informers[(resource, cluster)] = informer
            self._drain(informer)
        return informer.store

    def has_synced(self) -> bool:
        return all(informer.has_synced() for informer in self._informers.values())

    def sync(self) -> None:
        for informer in self._informers.values():
            self._drain(informer)

    def sync_only(self, *resources: Resource) -> None:
        """Sync these resources' informers only: the others' caches lag (a slow watch)."""
        for (resource, _), informer in self._informers.items():
            if resource in resources:
                self._drain(informer)

    @staticmethod
    def _drain(informer: Informer[JsonObject]) -> None:
        for _ in range(100):
            if not informer.step():
                return
        raise AssertionError(f"informer {informer.name} never went idle")


@dataclass
class MetricCall:
    method: str
    args: tuple[Any, ...]


@dataclass
class RecordingMetrics:
    """Implements ``LifecycleMetrics`` and ``NodeClaimProgressMetrics`` by remembering calls."""

    calls: list[MetricCall] = field(default_factory=list)

    def _record(self, method: str, *args: Any) -> None:
        self.calls.append(MetricCall(method, args))

    def nodeclaim_launched(self, nodepool: str) -> None:
        self._record("nodeclaim_launched", nodepool)

    def nodeclaim_registered(self, nodepool: str) -> None:
        self._record("nodeclaim_registered", nodepool)

    def nodeclaim_initialized(self, nodepool: str) -> None:
        self._record("nodeclaim_initialized", nodepool)

    def node_created(self, nodepool: str, *, zone: str = "") -> None:
        self._record("node_created", nodepool, zone)

    def nodeclaim_disrupted(self, nodepool: str, *, reason: str, capacity_type: str = "") -> None:
        self._record("nodeclaim_disrupted", reason, nodepool, capacity_type)

    def interruption_received(self, message_type: str) -> None:
        self._record("interruption_received", message_type)

    def interruption_deleted(self, count: int) -> None:
        self._record("interruption_deleted", count)

    @contextmanager
    def cloudprovider_call(self, method: str, *, provider: str, controller: str) -> Iterator[None]:
        self._record("cloudprovider_call", method, provider, controller)
        yield

    def named(self, method: str) -> list[tuple[Any, ...]]:
        return [call.args for call in self.calls if call.method == method]


CAPACITY_TYPE = wellknown.LABEL_CAPACITY_TYPE
INSTANCE_TYPE = wellknown.LABEL_INSTANCE_TYPE
NODEPOOL_HASH = wellknown.ANNOTATION_NODEPOOL_HASH
NODECLASS_REF = {
    "group": wellknown.NODECLASS_GROUP,
    "kind": wellknown.NODECLASS_KIND,
    "name": "default",
}


@dataclass
class Env:
    clock: FakeClock
    api: InMemoryAPIServer
    provider: FakeProvider
    caches: SteppedCaches
    ctx: ControllerContext
    metrics: RecordingMetrics

    # Controllers.

    def lifecycle(self, **options: Any) -> NodeClaimLifecycleController:
        return NodeClaimLifecycleController(self.ctx, **options)

    def gc(self, **options: Any) -> NodeClaimGarbageCollector:
        return NodeClaimGarbageCollector(self.ctx, **options)

    def reconcile(self, controller: NodeClaimLifecycleController, name: str) -> Result:
        self.caches.sync()
        result = controller.reconcile(name)
        self.caches.sync()
        return result

    def run_gc(self, collector: NodeClaimGarbageCollector) -> Result:
        self.caches.sync()
        result = collector.run_once()
        self.caches.sync()
        return result

    # Objects.

    def nodepool(self, name: str = "general", **template_spec: Any) -> JsonObject:
        spec: dict[str, Any] = {"nodeClassRef": NODECLASS_REF, "requirements": []}
        spec.update(template_spec)
        return self.api.create(
            NODEPOOLS,
            {
                "apiVersion": "karpenter.sh/v1",
                "kind": "NodePool",
                "metadata": {"name": name},
                "spec": {
                    "template": {
                        "metadata": {"labels": {"example.com/team": "platform"}},
                        "spec": spec,
                    }
                },
            },
        )

    def nodeclass(self, name: str = "default") -> JsonObject:
        return self.api.create(
            CLUSTER_API_NODE_CLASSES,
            {
                "apiVersion": wellknown.NODECLASS_API_VERSION,
                "kind": wellknown.NODECLASS_KIND,
                "metadata": {"name": name},
                "spec": {},
            },
        )

    def nodeclaim(
        self,
        name: str = "general-abc12",
        *,
        nodepool: str = "general",
        instance_types: tuple[str, ...] = ("small",),
        capacity_types: tuple[str, ...] = ("on-demand",),
        requests: Mapping[str, str] | None = None,
        taints: list[dict[str, str]] | None = None,
        startup_taints: list[dict[str, str]] | None = None,
        annotations: Mapping[str, str] | None = None,
    ) -> JsonObject:
        """A NodeClaim as the provisioner writes it (owner reference, labels, requirements)."""
        try:
            owners = [
                {
                    "apiVersion": "karpenter.sh/v1",
                    "kind": "NodePool",
                    "name": nodepool,
                    "uid": self.api.get(NODEPOOLS, nodepool)["metadata"]["uid"],
                    "blockOwnerDeletion": True,
                }
            ]
        except NotFound:
            owners = []
        spec: dict[str, Any] = {
            "nodeClassRef": NODECLASS_REF,
            "requirements": [
                {"key": CAPACITY_TYPE, "operator": "In", "values": list(capacity_types)},
                {"key": wellknown.LABEL_NODEPOOL, "operator": "In", "values": [nodepool]},
                {"key": INSTANCE_TYPE, "operator": "In", "values": list(instance_types)},
            ],
            "resources": {"requests": dict(requests or {"cpu": "500m", "memory": "1Gi"})},
        }
        if taints:
            spec["taints"] = taints
        if startup_taints:
            spec["startupTaints"] = startup_taints
        return self.api.create(
            NODECLAIMS,
            {
                "apiVersion": "karpenter.sh/v1",
                "kind": "NodeClaim",
                "metadata": {
                    "name": name,
                    "labels": {wellknown.LABEL_NODEPOOL: nodepool, "example.com/team": "platform"},
                    "annotations": {NODEPOOL_HASH: "123", **(annotations or {})},
                    "ownerReferences": owners,
                },
                "spec": spec,
            },
        )

    def node(
        self,
        name: str,
        provider_id: str,
        *,
        ready: bool = False,
        taints: list[dict[str, str]] | None = None,
        labels: Mapping[str, str] | None = None,
        allocatable: Mapping[str, str] | None = None,
    ) -> JsonObject:
        """A Node as a kubelet registers it (by default with the unregistered taint)."""
        if taints is None:
            taints = [{"key": wellknown.TAINT_UNREGISTERED_KEY, "effect": "NoExecute"}]
        return self.api.create(
            NODES,
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": {wellknown.LABEL_HOSTNAME: name, **(labels or {})},
                },
                "spec": {"providerID": provider_id, "taints": taints},
                "status": {
                    "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                    "allocatable": dict(allocatable or {"cpu": "1930m", "memory": "3Gi"}),
                },
            },
        )

    def set_node(self, name: str, patch: JsonObject) -> JsonObject:
        """What a kubelet or daemon does to its Node (merge patch, main resource)."""
        return self.api.patch(NODES, name, patch)

    def set_node_ready(self, name: str, ready: bool = True) -> JsonObject:
        return self.api.patch(
            NODES,
            name,
            {"status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}},
            subresource="status",
        )

    # Reads.

    def get(self, name: str) -> JsonObject:
        return self.api.get(NODECLAIMS, name)

    def get_node(self, name: str) -> JsonObject:
        return self.api.get(NODES, name)

    def events(self, reason: str | None = None) -> list[JsonObject]:
        items = self.api.list(EVENTS).items
        return [e for e in items if reason is None or e.get("reason") == reason]


def condition(obj: Mapping[str, Any], condition_type: str) -> dict[str, Any]:
    for found in (obj.get("status") or {}).get("conditions") or ():
        if found.get("type") == condition_type:
            return dict(found)
    raise AssertionError(f"no {condition_type} condition in {obj.get('status')}")


def new_env(*, dry_run: bool = False, **provider_options: Any) -> Env:
    clock = FakeClock()
    api = new_cluster(clock=clock)
    provider = FakeProvider(clock, **provider_options)
    caches = SteppedCaches(api, clock)
    metrics = RecordingMetrics()
    ctx = ControllerContext(
        client=api,
        management=api,
        caches=caches,
        clock=clock,
        plugins=provider.plugins(api),
        recorder=EventRecorder(api, clock),
        metrics=metrics,
        dry_run=dry_run,
        log=logging.getLogger("test.lifecycle"),
    )
    env = Env(clock, api, provider, caches, ctx, metrics)
    env.nodeclass()
    env.nodepool()
    return env


_READS = ("get", "list", "watch")


def writes_since(env: Env, before: dict[str, int]) -> dict[str, int]:
    """The writes since ``before`` (a ``requests.by_resource()`` snapshot), by ``verb resource``."""
    now = env.api.requests.by_resource()
    return {
        key: count - before.get(key, 0)
        for key, count in sorted(now.items())
        if key.split(" ", 1)[0] not in _READS and count > before.get(key, 0)
    }
