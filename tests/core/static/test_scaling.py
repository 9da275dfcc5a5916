"""A static NodePool keeps ``spec.replicas`` nodes: scale-up, scale-down, limits, what users see.

Expectations from upstream Karpenter's static provisioning and deprovisioning suites, checked on
the simulated cluster through what a user looks at: Nodes, NodeClaims, the NodePool's status
and Events, the controller's log.
"""

from __future__ import annotations

import logging

import pytest

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.kube.resources import NODEPOOLS

from .world import (
    STATIC,
    TEAM,
    claims_of,
    condition,
    nodes_of,
    pool_events,
    scale,
    static_world,
)


def test_a_static_nodepool_launches_its_replicas_from_the_template_at_the_cheapest_offering(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger="karpenter_capi.core.static"):
        world = static_world(3)
    claims = claims_of(world)
    assert len(claims) == 3
    assert len(nodes_of(world)) == 3
    pool = world.server.get(NODEPOOLS, STATIC)
    for claim in claims:
        labels = claim["metadata"]["labels"]
        assert labels[wellknown.LABEL_NODEPOOL] == STATIC
        assert labels["team"] == "static"
        assert claim["metadata"]["ownerReferences"][0]["uid"] == pool["metadata"]["uid"]
        # Requirements come from the template alone (no pod asked for anything).
        keys = {r["key"] for r in claim["spec"]["requirements"]}
        assert keys >= {wellknown.LABEL_ARCH, wellknown.LABEL_CAPACITY_TYPE, "team"}
        # The cheapest type of the catalog (2 vCPU, 2 GiB each) is what was launched.
        assert labels[wellknown.LABEL_INSTANCE_TYPE] == "c-2x-amd64-linux"
    status = pool["status"]
    assert status["nodes"] == 3
    assert status["resources"]["nodes"] == "3"
    assert status["resources"]["cpu"] == "6"
    assert status["resources"]["memory"] == "12Gi"
    [scaled] = pool_events(world, "ScaledUp")
    assert "to reach 3 replicas from 0" in scaled["message"]
    lines = [
        r
        for r in caplog.records
        if r.getMessage() == "provisioning nodeclaims to satisfy replica count"
    ]
    assert [(r.current, r.desired, getattr(r, "provision-count")) for r in lines] == [(0, 3, 3)]
    # Nothing is provisioned for the dynamic pool: no pod is pending.
    assert claims_of(world, "catalog") == []


def test_limits_nodes_caps_the_replicas_and_says_so() -> None:
    world = static_world(5, limit=2)
    assert len(claims_of(world)) == 2
    warnings = pool_events(world, "NodeLimitReached")
    assert warnings
    assert warnings[0]["type"] == "Warning"
    assert "limits.nodes 2 reached" in warnings[0]["message"]
    world.advance(300)
    assert len(claims_of(world)) == 2
    # Raising the limit lets the rest come.
    world.server.patch(NODEPOOLS, STATIC, {"spec": {"limits": {"nodes": "10"}}})
    world.advance(90)
    assert len(nodes_of(world)) == 5


def test_a_static_nodepool_that_is_not_ready_provisions_nothing() -> None:
    world = static_world(
        2, template={"nodeClassRef": {**CATALOG_REF, "name": "missing"}}, settle=120
    )
    assert claims_of(world) == []
    ready = condition(world.server.get(NODEPOOLS, STATIC), "Ready")
    assert ready is not None
    assert ready["status"] == "False"


CATALOG_REF = {"group": wellknown.NODECLASS_GROUP, "kind": wellknown.NODECLASS_KIND}


def test_scaling_down_deletes_empty_nodes_first_and_scaling_up_again_adds_back() -> None:
    world = static_world(3)
    # Pods select the static pool; two fit on one node, so one node stays empty... or more.
    world.deploy("web", 2, "1500m", "512Mi", node_selector=TEAM)
    world.advance(30)
    busy = {p["spec"]["nodeName"] for p in world.running_pods()}
    assert len(busy) == 2
    assert claims_of(world, "catalog") == []  # the static nodes hold them
    scale(world, 2)
    world.advance(120)
    names = {n["metadata"]["name"] for n in nodes_of(world)}
    assert names == busy  # the empty node went, the busy ones stay
    [down] = pool_events(world, "ScaledDown")
    assert "to reach 2 replicas from 3" in down["message"]
    terminating = [
        e
        for e in world.events("DisruptionTerminating")
        if e["involvedObject"]["kind"] == "NodeClaim"
    ]
    assert len(terminating) == 1
    assert "chosen as empty" in terminating[0]["message"]
    assert world.server.get(NODEPOOLS, STATIC)["status"]["nodes"] == 2

    scale(world, 4)
    world.advance(90)
    assert len(nodes_of(world)) == 4
    assert world.server.get(NODEPOOLS, STATIC)["status"]["nodes"] == 4
    assert len(world.running_pods()) == 2
