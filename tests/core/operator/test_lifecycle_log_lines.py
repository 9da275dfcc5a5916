"""Each lifecycle line is logged once per NodeClaim over a whole scale-up (issue 25, item 7).

A user follows a NodeClaim through ``created``, ``launched``, ``registered`` and
``initialized``; a line said twice reads as two launches. On a real API server the lifecycle's
write often loses a conflict to another writer (a plugin annotating the NodeClaim, the
disruption controller's condition) or the next reconcile reads a cache that does not show the
write yet; the reconcile then runs again and must not say the same thing again.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import pytest

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.hookspecs import LaunchResult, PluginContext, hookimpl
from karpenter_capi.core.instancetype import InstanceType
from karpenter_capi.core.kube.resources import (
    CLUSTER_API_NODE_CLASSES,
    NODECLAIMS,
    NODEPOOLS,
    NODES,
)
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.cluster import new_cluster
from tests.support import operator_world as world
from tests.support.provider import FakeProvider

_LINES = (
    "created nodeclaim",
    "launched nodeclaim",
    "registered nodeclaim",
    "initialized nodeclaim",
)


class _BusyProvider(FakeProvider):
    """Annotates the NodeClaim it launches while answering, as a plugin recording its own
    bookkeeping does: the lifecycle's write that follows loses the conflict and retries."""

    @hookimpl
    def karpenter_capi_create(
        self,
        nodeclaim: Any,
        instance_types: list[InstanceType],
        nodeclass: Any,
        ctx: PluginContext,
    ) -> LaunchResult | None:
        result = super().karpenter_capi_create(nodeclaim, instance_types, nodeclass, ctx)
        name = str(nodeclaim.metadata.name)
        polls = self.count("create", name)
        ctx.workload.patch(
            NODECLAIMS, name, {"metadata": {"annotations": {"example.com/polls": str(polls)}}}
        )
        return result


def _race_status_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another writer touches each NodeClaim just before the lifecycle's first status write
    of every new set of conditions, so that write loses the conflict and is retried."""
    patch = InMemoryAPIServer.patch
    raced: set[tuple[str, frozenset[str]]] = set()

    def racing(
        server: InMemoryAPIServer, resource: Any, name: str, body: Any, *args: Any, **kwargs: Any
    ) -> Any:
        status = kwargs.get("subresource") == "status" and isinstance(body, dict)
        if resource == NODECLAIMS and status:
            conditions = (body.get("status") or {}).get("conditions") or []
            done = frozenset(c["type"] for c in conditions if c.get("status") == "True")
            if (name, done) not in raced:
                raced.add((name, done))
                touch = {"metadata": {"annotations": {"example.com/race": str(len(raced))}}}
                patch(server, NODECLAIMS, name, touch)
        return patch(server, resource, name, body, *args, **kwargs)

    monkeypatch.setattr(InMemoryAPIServer, "patch", racing)


def _register(api: Any, claim: dict[str, Any]) -> None:
    """What a kubelet does: a Node with the claim's provider ID, tainted, then Ready."""
    api.create(
        NODES,
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": f"node-{claim['metadata']['name']}"},
            "spec": {
                "providerID": claim["status"]["providerID"],
                "taints": [{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}],
            },
            "status": {
                "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        },
    )


def test_each_lifecycle_line_is_logged_once_per_nodeclaim(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    api = new_cluster(clock=clock)
    provider = _BusyProvider(clock, bind_after_polls=1)
    api.create(CLUSTER_API_NODE_CLASSES, world.nodeclass())
    api.create(NODEPOOLS, world.nodepool())
    driver = world.operator(api, clock, provider).stepped()
    _race_status_writes(monkeypatch)
    caplog.set_level(logging.DEBUG)
    for i in range(4):
        world.pending_pod(api, f"web-{i}", cpu="3")
    driver.advance(3)
    claims = api.list(NODECLAIMS).items
    assert len(claims) >= 2
    driver.advance(10)
    claims = api.list(NODECLAIMS).items
    for claim in claims:
        _register(api, claim)
    driver.advance(10)
    said: Counter[tuple[str, str]] = Counter()
    for record in caplog.records:
        message = record.getMessage()
        if record.levelno >= logging.INFO and message in _LINES:
            said[(message, record.__dict__["NodeClaim"]["name"])] += 1
    names = {str(c["metadata"]["name"]) for c in claims}
    assert {k: n for k, n in said.items() if k[1] in names} == {
        (line, name): 1 for line in _LINES for name in names
    }
