"""What a user of `karpenter-capi run` sees of its decisions: INFO lines and Events.

The whole controller on the simulated cluster (``SimWorld``). Each decision is one INFO line
in upstream Karpenter's words with its fields, said once however many rounds or passes repeat
it; a consolidatable node that stays gets an ``Unconsolidatable`` Event on the Node and on the
NodeClaim saying why, deduplicated.
"""

from __future__ import annotations

import itertools
import logging
from collections import Counter
from typing import Any

import pytest

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.disruption.methods import NO_ROOM
from karpenter_capi.core.kube.resources import NODES
from karpenter_capi.sim.scenario.schema import Catalog

from .sim_world import SimWorld

CATALOG = Catalog(cpus=[2, 4, 8], zones=["zone-a"], capacity_types=["on-demand"])


def _world(policy: str, consolidate_after: str) -> SimWorld:
    return SimWorld.build(
        CATALOG,
        disruption={
            "consolidationPolicy": policy,
            "consolidateAfter": consolidate_after,
            "budgets": [{"nodes": "100%"}],
        },
    )


def _records(caplog: pytest.LogCaptureFixture, message: str, level: int) -> list[Any]:
    return [r for r in caplog.records if r.getMessage() == message and r.levelno == level]


def _names(records: list[Any], field: str) -> Counter[str]:
    return Counter(str(getattr(r, field)["name"]) for r in records)


def test_a_scale_up_logs_each_decision_once_and_a_pod_it_cannot_help_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    world = _world("WhenEmpty", "Never")
    with caplog.at_level(logging.DEBUG, logger="karpenter_capi"):
        world.deploy("web", 3, "1500m", "1Gi")
        world.deploy("huge", 1, "64", "1Gi")
        world.advance(120)

    claims = {c["metadata"]["name"] for c in world.nodeclaims()}
    assert claims
    assert len(world.running_pods()) == 3
    info = logging.INFO
    created = _records(caplog, "created nodeclaim", info)
    assert _names(created, "NodeClaim") == Counter(claims)  # each once, none other
    for record in created:
        assert record.NodePool == {"name": "catalog"}
        assert record.requests["cpu"]
        assert record.__dict__["instance-types"]
    for message in ("launched nodeclaim", "registered nodeclaim", "initialized nodeclaim"):
        records = _records(caplog, message, info)
        assert _names(records, "NodeClaim") == Counter(claims), message
        assert all(r.__dict__["provider-id"].startswith("sim://") for r in records)
    [launched] = _records(caplog, "launched nodeclaim", info)[:1]
    assert launched.__dict__["capacity-type"] == "on-demand"
    assert launched.zone == "zone-a"
    assert launched.allocatable["cpu"]

    # The pod nothing can hold: said once at INFO, though later rounds (as nodes joined) saw
    # it pending again and said it only at DEBUG.
    [refused] = _records(caplog, "could not schedule pod", info)
    assert refused.Pod["namespace"] == "default"
    assert refused.Pod["name"].startswith("huge-")
    assert "no instance type is large enough" in refused.error
    assert _records(caplog, "could not schedule pod", logging.DEBUG)
    found = _records(caplog, "found provisionable pod(s)", info)
    repeats = _records(caplog, "found provisionable pod(s)", logging.DEBUG)
    assert repeats
    pod_sets = [r.Pods for r in found]
    assert all(a != b for a, b in itertools.pairwise(pod_sets))
    assert [r.nodeclaims for r in _records(caplog, "computed new nodeclaim(s) to fit pod(s)", info)]


def test_a_consolidation_logs_each_command_and_each_deletion_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    world = _world("WhenEmptyOrUnderutilized", "30s")
    world.deploy("web", 8, "1500m", "1Gi")
    world.advance(60)
    before = {c["metadata"]["name"] for c in world.nodeclaims()}
    with caplog.at_level(logging.INFO, logger="karpenter_capi"):
        world.scale("web", 2)
        world.advance(600)

    gone = before - {c["metadata"]["name"] for c in world.nodeclaims()}
    assert gone
    commands = _records(caplog, "disrupting node(s)", logging.INFO)
    assert commands
    assert len({r.__dict__["command-id"] for r in commands}) == len(commands)
    disrupted: Counter[str] = Counter()
    for record in commands:
        fields = record.__dict__
        assert fields["reason"] in ("empty", "underutilized")
        assert fields["decision"] in ("delete", "replace")
        assert fields["disrupted-node-count"] == len(fields["disrupted-nodes"])
        assert fields["replacement-node-count"] == len(fields["replacement-nodes"])
        assert fields["decision"] == ("replace" if fields["replacement-node-count"] else "delete")
        assert isinstance(fields["pod-count"], int)
        assert fields["savings"] > 0
        disrupted.update(n["NodeClaim"]["name"] for n in fields["disrupted-nodes"])
    assert disrupted == Counter(gone)  # each disrupted NodeClaim in exactly one command
    assert _names(_records(caplog, "deleted nodeclaim", logging.INFO), "NodeClaim") == Counter(gone)
    deleted_nodes = _names(_records(caplog, "deleted node", logging.INFO), "Node")
    assert len(deleted_nodes) == len(gone)
    assert set(deleted_nodes.values()) == {1}


def _unconsolidatable(world: SimWorld) -> dict[tuple[str, str], list[dict[str, Any]]]:
    found: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for event in world.events("Unconsolidatable"):
        involved = event["involvedObject"]
        found.setdefault((involved["kind"], involved["name"]), []).append(event)
    return found


def test_a_kept_node_and_its_nodeclaim_are_told_why_once_per_reason() -> None:
    world = _world("WhenEmptyOrUnderutilized", "30s")
    world.deploy("web", 2, "1500m", "1Gi")  # both on one 4-CPU node: nothing cheaper holds them
    world.advance(120)
    [claim] = world.nodeclaims()
    claim_name, node_name = claim["metadata"]["name"], claim["status"]["nodeName"]

    events = _unconsolidatable(world)
    assert set(events) == {("Node", node_name), ("NodeClaim", claim_name)}
    for [event] in events.values():
        assert event["type"] == "Normal"
        assert event["message"] == NO_ROOM
        assert event["count"] == 1

    # Passes keep running (every minute at least) and keep the node for the same reason:
    # nothing more is written within upstream's 15-minute window.
    report = world.operator.disruption.last_report
    world.advance(600)
    assert world.operator.disruption.last_report is not report
    assert {k: [e["count"] for e in v] for k, v in _unconsolidatable(world).items()} == {
        ("Node", node_name): [1],
        ("NodeClaim", claim_name): [1],
    }

    # A new reason is said at once, on both objects.
    world.server.patch(
        NODES,
        node_name,
        {"metadata": {"annotations": {wellknown.ANNOTATION_DO_NOT_DISRUPT: "true"}}},
    )
    world.advance(30)
    pinned = 'Node has "karpenter.sh/do-not-disrupt: true"'
    for key in (("Node", node_name), ("NodeClaim", claim_name)):
        messages = Counter(e["message"] for e in _unconsolidatable(world)[key])
        assert messages == Counter([NO_ROOM, pinned])

    # After the window, the still-true reason is said again.
    world.advance(16 * 60)
    for key in (("Node", node_name), ("NodeClaim", claim_name)):
        messages = [e["message"] for e in _unconsolidatable(world)[key]]
        assert messages.count(pinned) == 2
