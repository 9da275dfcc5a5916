"""The simulated cluster with a static NodePool beside the catalog's dynamic one.

``SimWorld`` (the whole controller, Cluster API, kubelets, Deployments and the scheduler
stand-in on a virtual clock) plus a NodePool ``static`` with ``spec.replicas``, the catalog's
NodeClass and requirements, and a ``team: static`` template label pods can select.
"""

from __future__ import annotations

from typing import Any

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.kube.resources import EVENTS, NODECLAIMS, NODEPOOLS, NODES
from karpenter_capi.sim.scenario.schema import Catalog
from tests.core.disruption.sim_world import SimWorld

CATALOG = Catalog(cpus=[2, 4, 8], zones=["zone-a"], capacity_types=["on-demand"])
STATIC = "static"
TEAM = {"team": "static"}


def static_world(
    replicas: int,
    *,
    limit: int | None = None,
    budget: str = "100%",
    template: dict[str, Any] | None = None,
    catalog_disruption: dict[str, Any] | None = None,
    settle: float = 60,
) -> SimWorld:
    """The world with the static NodePool created and ``settle`` seconds run."""
    world = SimWorld.build(CATALOG, disruption=catalog_disruption)
    catalog_pool = world.server.get(NODEPOOLS, "catalog")
    spec = dict(catalog_pool["spec"]["template"]["spec"])
    spec.update(template or {})
    body: dict[str, Any] = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": STATIC},
        "spec": {
            "replicas": replicas,
            "template": {"metadata": {"labels": dict(TEAM)}, "spec": spec},
            "disruption": {"consolidateAfter": "0s", "budgets": [{"nodes": budget}]},
        },
    }
    if limit is not None:
        body["spec"]["limits"] = {"nodes": str(limit)}
    world.server.create(NODEPOOLS, body)
    world.advance(settle)
    return world


def claims_of(world: SimWorld, pool: str = STATIC, *, live: bool = True) -> list[dict[str, Any]]:
    return [
        c
        for c in world.nodeclaims(live=live)
        if c["metadata"]["labels"].get(wellknown.LABEL_NODEPOOL) == pool
    ]


def nodes_of(world: SimWorld, pool: str = STATIC) -> list[dict[str, Any]]:
    """Ready Nodes of ``pool`` (what ``kubectl get nodes -l karpenter.sh/nodepool=...`` lists)."""
    return [
        n
        for n in world.nodes()
        if n["metadata"].get("labels", {}).get(wellknown.LABEL_NODEPOOL) == pool
        and any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in n.get("status", {}).get("conditions", [])
        )
    ]


def scale(world: SimWorld, replicas: int) -> None:
    world.server.patch(NODEPOOLS, STATIC, {"spec": {"replicas": replicas}})


def pool_events(world: SimWorld, reason: str) -> list[dict[str, Any]]:
    return [
        e
        for e in world.server.list(EVENTS).items
        if e["involvedObject"]["kind"] == "NodePool" and e["reason"] == reason
    ]


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in obj.get("status", {}).get("conditions", []) if c["type"] == kind), None)


__all__ = [
    "CATALOG",
    "NODECLAIMS",
    "NODES",
    "STATIC",
    "TEAM",
    "SimWorld",
    "claims_of",
    "condition",
    "nodes_of",
    "pool_events",
    "scale",
    "static_world",
]
