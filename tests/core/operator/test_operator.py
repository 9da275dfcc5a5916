"""The whole operator, every controller wired, against the in-memory API."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube.resources import (
    CLUSTER_API_NODE_CLASSES,
    NODECLAIMS,
    NODEPOOLS,
    NODES,
)
from karpenter_capi.core.observability.endpoint import ObservabilityServer
from karpenter_capi.core.operator import Operator
from karpenter_capi.core.scheduling import highs
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.cluster import new_cluster
from tests.support import operator_world as world
from tests.support.provider import FakeProvider


def _setup() -> tuple[FakeClock, InMemoryAPIServer, FakeProvider, Operator]:
    clock = FakeClock()
    api = new_cluster(clock=clock)
    provider = FakeProvider(clock, bind_after_polls=1)
    api.create(CLUSTER_API_NODE_CLASSES, world.nodeclass())
    api.create(NODEPOOLS, world.nodepool())
    return clock, api, provider, world.operator(api, clock, provider)


def _node_for(api: InMemoryAPIServer, claim: dict[str, Any]) -> None:
    """What a kubelet does: register a Node with the claim's provider ID, tainted, then Ready."""
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


def _condition(claim: dict[str, Any], kind: str) -> str | None:
    for condition in (claim.get("status") or {}).get("conditions") or []:
        if condition["type"] == kind:
            return str(condition["status"])
    return None


def test_a_scale_up_runs_from_pending_pods_to_initialized_nodes_and_is_measured() -> None:
    _, api, _, operator = _setup()
    driver = operator.stepped()
    for i in range(3):
        world.pending_pod(api, f"web-{i}")
    driver.advance(3)  # past the batching window
    claims = api.list(NODECLAIMS).items
    assert claims
    driver.advance(10)
    claims = api.list(NODECLAIMS).items
    assert all(_condition(c, "Launched") == "True" for c in claims)
    for claim in claims:
        _node_for(api, claim)
    driver.advance(10)
    claims = api.list(NODECLAIMS).items
    assert all(_condition(c, "Initialized") == "True" for c in claims)
    nodes = api.list(NODES).items
    assert all(n["metadata"]["labels"].get(wellknown.LABEL_REGISTERED) == "true" for n in nodes)

    with ObservabilityServer(operator.metrics, port=0, ready=operator.ready) as server:
        body = urllib.request.urlopen(f"{server.url}/metrics", timeout=5).read().decode()
        ready = urllib.request.urlopen(f"{server.url}/readyz", timeout=5).status
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            values[sample.name] = values.get(sample.name, 0.0) + sample.value
    assert ready == 200
    assert values["karpenter_nodeclaims_created_total"] == len(claims)
    assert values["karpenter_nodeclaims_launched_total"] == len(claims)
    assert values["karpenter_nodeclaims_registered_total"] == len(claims)
    assert values["karpenter_nodes_created_total"] == len(claims)
    assert values["karpenter_scheduler_scheduling_duration_seconds_count"] >= 1
    assert values["controller_runtime_reconcile_total"] > 0


def test_deleting_a_nodeclaim_drains_and_removes_everything() -> None:
    _, api, provider, operator = _setup()
    driver = operator.stepped()
    world.pending_pod(api, "web-0")
    driver.advance(15)
    (claim,) = api.list(NODECLAIMS).items
    _node_for(api, claim)
    driver.advance(10)
    original_machines = set(provider.instances)
    api.delete(NODECLAIMS, claim["metadata"]["name"])
    driver.advance(30)
    # The NodeClaim, its Node and its machine are gone...
    names = [c["metadata"]["name"] for c in api.list(NODECLAIMS).items]
    assert claim["metadata"]["name"] not in names
    assert f"node-{claim['metadata']['name']}" not in [
        n["metadata"]["name"] for n in api.list(NODES).items
    ]
    assert not original_machines & set(provider.instances)
    # ...and the pod, still pending (nothing binds it here), gets a replacement, as it would
    # from Karpenter.
    assert len(names) == 1


def test_the_operator_warms_the_packing_solver_up_when_it_starts(monkeypatch: Any) -> None:
    # The first scale-up after a start must not pay SciPy's import inside its round.
    calls: list[str] = []
    monkeypatch.setattr(highs, "warm_up", lambda: calls.append("warmed"))
    _setup()
    assert calls == ["warmed"]


def test_warming_up_imports_scipy_and_solves_once() -> None:
    code = (
        "import sys; from karpenter_capi.core.scheduling import highs; "
        "assert 'scipy.optimize' not in sys.modules; highs.warm_up(); "
        "assert 'scipy.optimize' in sys.modules; print('ok')"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120
    )
    assert done.stdout.strip() == "ok", done.stderr
