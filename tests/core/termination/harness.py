"""A small world for the termination tests: the in-memory API, a fake provider, a stepping loop.

Until the stepped runtime lands, the tests drive the two controllers themselves: every step
reconciles every Node and NodeClaim once, then moves the fake clock to the earliest
``requeue_after`` any reconcile asked for. Because the clock only ever jumps to a time a
controller asked for, a test that checks *when* something happened also checks that the
controller asked to be woken in time. Caches are read straight from the server on each
``store()`` call, so they are never stale (the informer's lag is not what these tests are about).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.clock import FakeClock, format_timestamp
from karpenter_capi.core.errors import InstanceNotFoundError
from karpenter_capi.core.hookspecs import Instance, hookimpl
from karpenter_capi.core.kube.cache import Store, object_key
from karpenter_capi.core.kube.client import JsonObject
from karpenter_capi.core.kube.errors import ApiError, NotFound
from karpenter_capi.core.kube.events import EventRecorder
from karpenter_capi.core.kube.indexes import BY_PROVIDER_ID, NODE_INDEXERS, POD_INDEXERS, index_by
from karpenter_capi.core.kube.resources import (
    EVENTS,
    NODECLAIMS,
    NODES,
    POD_DISRUPTION_BUDGETS,
    PODS,
    Resource,
)
from karpenter_capi.core.observability.metrics import Metrics
from karpenter_capi.core.plugin_host import PluginEnvironment, Plugins
from karpenter_capi.core.runtime.controller import WORKLOAD, ControllerContext, Result
from karpenter_capi.core.termination import (
    NodeClaimTerminationController,
    NodeTerminationController,
)
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.cluster import new_cluster

NAMESPACE = "default"


class ServerCaches:
    """``Caches`` over the API server itself: each ``store()`` is a fresh list."""

    _INDEXERS: dict[Resource, Any] = {
        PODS: POD_INDEXERS,
        NODES: NODE_INDEXERS,
        # As the runtime's manager indexes them: by status.providerID.
        NODECLAIMS: {BY_PROVIDER_ID: index_by(lambda o: (o.get("status") or {}).get("providerID"))},
    }

    def __init__(self, server: InMemoryAPIServer) -> None:
        self._server = server

    def store(self, resource: Resource, cluster: str = WORKLOAD) -> Store[JsonObject]:
        store: Store[JsonObject] = Store(self._INDEXERS.get(resource))
        store.replace({object_key(o): o for o in self._server.list(resource).items})
        return store

    def has_synced(self) -> bool:
        return True


class FakeProvider:
    """A provider plugin whose machines need ``polls`` delete calls to go away.

    The first ``polls`` calls of the delete hook for a machine answer "deletion under way"; the
    next one finds it gone and raises ``InstanceNotFoundError``, as the hook contract asks.
    """

    def __init__(self, polls: int = 1) -> None:
        self.polls = polls
        self.machines: dict[str, str] = {}  # NodeClaim name -> provider ID
        self.delete_calls: list[str] = []
        self.fail_with: Exception | None = None  # raised by the delete hook while set
        self._left: dict[str, int] = {}

    def add(self, nodeclaim: str, provider_id: str) -> None:
        self.machines[nodeclaim] = provider_id
        self._left[nodeclaim] = self.polls

    @hookimpl
    def karpenter_capi_delete(self, nodeclaim: Any) -> bool | None:
        name = nodeclaim.metadata.name
        self.delete_calls.append(name)
        if self.fail_with is not None:
            raise self.fail_with
        if name not in self.machines:
            raise InstanceNotFoundError(name, "no such machine")
        if self._left[name] == 0:
            del self.machines[name]
            raise InstanceNotFoundError(name, "deleted")
        self._left[name] -= 1
        return True

    @hookimpl
    def karpenter_capi_get(self, provider_id: str) -> Instance | None:
        for name, known in self.machines.items():
            if known == provider_id:
                return Instance(name=name, provider_id=provider_id, nodeclaim_name=name)
        raise InstanceNotFoundError(provider_id)


@dataclass
class Call:
    """One pod-removing request, as the API server saw it."""

    at: float  # seconds since the harness started
    verb: str  # "evict" or "delete"
    pod: str  # namespace/name
    grace: int | None = None
    code: int = 200


class RecordingClient:
    """The server, with every eviction and pod delete recorded with its (fake) time."""

    def __init__(self, server: InMemoryAPIServer, clock: FakeClock) -> None:
        self._server = server
        self._clock = clock
        self._start = clock.now()
        self.calls: list[Call] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._server, name)

    def _now(self) -> float:
        return (self._clock.now() - self._start).total_seconds()

    def evict(self, name: str, namespace: str, *, grace_period_seconds: int | None = None) -> None:
        call = Call(self._now(), "evict", f"{namespace}/{name}")
        self.calls.append(call)
        try:
            self._server.evict(name, namespace, grace_period_seconds=grace_period_seconds)
        except ApiError as error:
            call.code = error.code
            raise

    def delete(self, resource: Resource, name: str, namespace: str | None = None, **kw: Any) -> Any:
        if resource == PODS:
            grace = kw.get("grace_period_seconds")
            self.calls.append(Call(self._now(), "delete", f"{namespace}/{name}", grace))
        return self._server.delete(resource, name, namespace, **kw)

    def evictions(self, *, code: int | None = None) -> list[Call]:
        return [c for c in self.calls if c.verb == "evict" and (code is None or c.code == code)]

    def deletes(self) -> list[Call]:
        return [c for c in self.calls if c.verb == "delete"]


@dataclass
class Harness:
    server: InMemoryAPIServer
    clock: FakeClock
    client: RecordingClient
    provider: FakeProvider
    ctx: ControllerContext
    node_controller: NodeTerminationController
    nodeclaim_controller: NodeClaimTerminationController
    start: datetime = field(init=False)

    def __post_init__(self) -> None:
        self.start = self.clock.now()

    # --- the world --------------------------------------------------------------------------

    def add_node(
        self,
        name: str,
        *,
        nodeclaim: str | None = None,
        termination_grace_period: str | None = None,
        ready: bool = True,
        machine: bool = True,
    ) -> None:
        """A registered Node and its NodeClaim, both with our finalizer, and their machine."""
        claim_name = nodeclaim or f"{name}-claim"
        provider_id = f"fake:///{name}"
        spec: JsonObject = {
            "requirements": [],
            "nodeClassRef": {
                "group": wellknown.NODECLASS_GROUP,
                "kind": wellknown.NODECLASS_KIND,
                "name": "default",
            },
        }
        if termination_grace_period:
            spec["terminationGracePeriod"] = termination_grace_period
        labels = {wellknown.LABEL_NODEPOOL: "general", wellknown.LABEL_CAPACITY_TYPE: "on-demand"}
        self.server.seed(
            NODECLAIMS,
            {
                "apiVersion": "karpenter.sh/v1",
                "kind": "NodeClaim",
                "metadata": {
                    "name": claim_name,
                    "labels": labels,
                    "finalizers": [wellknown.FINALIZER_TERMINATION],
                },
                "spec": spec,
                "status": {"providerID": provider_id, "nodeName": name},
            },
        )
        self.server.seed(
            NODES,
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": {wellknown.LABEL_NODEPOOL: "general"},
                    "finalizers": [wellknown.FINALIZER_TERMINATION],
                },
                "spec": {"providerID": provider_id},
                "status": {
                    "conditions": [{"type": "Ready", "status": "True" if ready else "Unknown"}]
                },
            },
        )
        if machine:
            self.provider.add(claim_name, provider_id)

    def add_pod(
        self,
        name: str,
        node: str,
        *,
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
        owner_kind: str | None = None,
        priority_class: str | None = None,
        grace: int | None = None,
        tolerations: list[JsonObject] | None = None,
        finalizers: list[str] | None = None,
        phase: str = "Running",
    ) -> None:
        metadata: JsonObject = {"name": name, "labels": labels or {"app": name}}
        if annotations:
            metadata["annotations"] = annotations
        if finalizers:
            metadata["finalizers"] = finalizers
        if owner_kind:
            api_version = "v1" if owner_kind == "Node" else "apps/v1"
            metadata["ownerReferences"] = [
                {
                    "apiVersion": api_version,
                    "kind": owner_kind,
                    "name": f"{name}-owner",
                    "uid": f"uid-{name}-owner",
                    "controller": True,
                }
            ]
        spec: JsonObject = {"nodeName": node, "containers": [{"name": "c", "image": "pause"}]}
        if priority_class:
            spec["priorityClassName"] = priority_class
        if grace is not None:
            spec["terminationGracePeriodSeconds"] = grace
        if tolerations:
            spec["tolerations"] = tolerations
        self.server.seed(
            PODS,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": metadata,
                "spec": spec,
                "status": {"phase": phase},
            },
            NAMESPACE,
        )

    def add_pdb(self, name: str, selector: dict[str, str], min_available: int) -> None:
        self.server.create(
            POD_DISRUPTION_BUDGETS,
            {
                "metadata": {"name": name},
                "spec": {"minAvailable": min_available, "selector": {"matchLabels": selector}},
            },
            NAMESPACE,
        )

    def set_pdb(self, name: str, min_available: int) -> None:
        self.server.patch(
            POD_DISRUPTION_BUDGETS, name, {"spec": {"minAvailable": min_available}}, NAMESPACE
        )

    # --- reading it back --------------------------------------------------------------------

    def get(self, resource: Resource, name: str, namespace: str | None = None) -> JsonObject | None:
        try:
            return self.server.get(resource, name, namespace)
        except NotFound:
            return None

    def pod(self, name: str) -> JsonObject | None:
        return self.get(PODS, name, NAMESPACE)

    def events(self, reason: str, *, name: str | None = None) -> list[JsonObject]:
        return [
            e
            for e in self.server.list(EVENTS).items
            if e.get("reason") == reason and (name is None or e["involvedObject"]["name"] == name)
        ]

    def elapsed(self) -> float:
        return (self.clock.now() - self.start).total_seconds()

    def at(self, seconds: float) -> str:
        """The timestamp ``seconds`` after the harness started, as the API writes it."""
        from datetime import timedelta

        return format_timestamp(self.start + timedelta(seconds=seconds))

    # --- driving ----------------------------------------------------------------------------

    def _versions(self) -> list[tuple[str, str]]:
        return [
            (object_key(o), o["metadata"]["resourceVersion"])
            for resource in (NODES, NODECLAIMS, PODS)
            for o in self.server.list(resource).items
        ]

    def step(self) -> list[Result]:
        """Reconcile every Node and every NodeClaim, again and again while that changes
        Nodes, NodeClaims or Pods (as their watch events would), without moving the clock."""
        for _ in range(20):
            before = self._versions()
            results = [
                self.node_controller.reconcile(object_key(node))
                for node in self.server.list(NODES).items
            ]
            results += [
                self.nodeclaim_controller.reconcile(object_key(claim))
                for claim in self.server.list(NODECLAIMS).items
            ]
            if self._versions() == before:
                return results
        raise AssertionError("the controllers keep writing without time passing")

    def run(self, until: Callable[[], bool], *, limit: float = 24 * 3600) -> None:
        """Step, then jump the clock to the earliest requeue, until ``until()`` holds."""
        while True:
            results = self.step()
            if until():
                return
            delays = [r.requeue_after for r in results if r.requeue_after is not None]
            if not delays:
                raise AssertionError("no controller asked to be called again, yet not done")
            if self.elapsed() > limit:
                raise AssertionError(f"not done after {limit}s of simulated time")
            self.clock.advance(max(min(delays), 0.001))

    def gone(self) -> bool:
        return not self.server.list(NODES).items and not self.server.list(NODECLAIMS).items


def new_harness(
    *, polls: int = 1, dry_run: bool = False, metrics: Metrics | None = None
) -> Harness:
    clock = FakeClock()
    server = new_cluster(clock=clock)
    client = RecordingClient(server, clock)
    provider = FakeProvider(polls)
    plugins = Plugins.from_objects(
        [("fake", provider)],
        PluginEnvironment(workload=server, management=server, clock=clock),
    )
    ctx = ControllerContext(
        client=client,  # type: ignore[arg-type]
        management=server,
        caches=ServerCaches(server),
        clock=clock,
        plugins=plugins,
        recorder=EventRecorder(server, clock),
        metrics=metrics,
        dry_run=dry_run,
        log=logging.getLogger("karpenter_capi.test"),
    )
    return Harness(
        server,
        clock,
        client,
        provider,
        ctx,
        NodeTerminationController(ctx),
        NodeClaimTerminationController(ctx),
    )
