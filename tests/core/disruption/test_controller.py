"""Disruption end to end: the controller, Cluster API and the workloads on the simulated cluster."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.kube.resources import MACHINE_DEPLOYMENTS, NODECLAIMS, NODEPOOLS, NODES
from karpenter_capi.plugins.generic_capi.binding import ANNOTATION_SCALABLE_RESOURCE
from karpenter_capi.sim.scenario.schema import Catalog

from .sim_world import SimWorld

CATALOG = Catalog(cpus=[2, 4, 8], zones=["zone-a"], capacity_types=["on-demand"])


def _world(
    policy: str, consolidate_after: str, *, budget: str | None = "100%", **build: Any
) -> SimWorld:
    """The simulated cluster with the catalog NodePool's disruption settings."""
    disruption: dict[str, Any] = {
        "consolidationPolicy": policy,
        "consolidateAfter": consolidate_after,
    }
    if budget is not None:
        disruption["budgets"] = [{"nodes": budget}]
    return SimWorld.build(CATALOG, disruption=disruption, **build)


def _taint_disrupted(world: SimWorld, node: dict[str, Any]) -> None:
    taints = [
        *(node["spec"].get("taints") or []),
        {"key": wellknown.TAINT_DISRUPTED_KEY, "effect": "NoSchedule"},
    ]
    world.server.patch(NODES, node["metadata"]["name"], {"spec": {"taints": taints}})


def _condition(obj: dict, kind: str) -> dict | None:
    return next((c for c in obj.get("status", {}).get("conditions", []) if c["type"] == kind), None)


def test_an_emptied_node_goes_once_consolidate_after_has_passed_and_not_before() -> None:
    world = _world("WhenEmpty", "2m")
    world.deploy("keep", 1, "1500m", "1Gi")
    world.advance(60)
    world.deploy("batch", 3, "1500m", "1Gi")
    world.advance(60)
    keep_node = next(
        p["spec"]["nodeName"] for p in world.running_pods() if "keep" in p["metadata"]["name"]
    )
    emptied = {p["spec"]["nodeName"] for p in world.running_pods()} - {keep_node}
    assert emptied
    assert not world.pending_pods()

    world.scale("batch", 0)
    world.advance(110)  # less than consolidateAfter since the pods left
    assert {n["metadata"]["name"] for n in world.nodes()} >= emptied

    world.advance(120)  # consolidateAfter, the 15 s validation, the drain
    assert [n["metadata"]["name"] for n in world.nodes()] == [keep_node]
    [claim] = world.nodeclaims()
    assert _condition(claim, "Consolidatable") is not None
    deleted = world.events("DisruptionTerminating")
    claims = {
        e["involvedObject"]["name"] for e in deleted if e["involvedObject"]["kind"] == "NodeClaim"
    }
    assert len(claims) == len(emptied)
    assert "Empty/Delete" in deleted[0]["message"]
    metrics = world.operator.metrics.render().decode()
    disrupted = 'karpenter_nodeclaims_disrupted_total{capacity_type="on-demand",nodepool="catalog"'
    assert f'{disrupted},reason="empty"}} {len(emptied)}.0' in metrics
    decisions = "karpenter_voluntary_disruption_decisions_total"
    assert f'{decisions}{{consolidation_type="",decision="delete",reason="empty"}} 1.0' in metrics


def test_underused_nodes_are_merged_into_a_cheaper_one_and_every_pod_keeps_running() -> None:
    world = _world("WhenEmptyOrUnderutilized", "30s")
    world.deploy("web", 8, "1500m", "1Gi")
    world.advance(60)
    before = world.instance_types()
    world.scale("web", 2)
    world.advance(600)

    after = world.instance_types()
    assert len(after) < len(before)
    assert len(world.running_pods()) == 2
    assert not world.pending_pods()
    assert world.events("DisruptionTerminating")


def test_drift_launches_the_replacement_before_the_old_node_drains() -> None:
    world = _world("WhenEmpty", "Never")
    world.deploy("web", 2, "500m", "1Gi")
    world.advance(60)
    [old] = world.nodeclaims()
    old_name = old["metadata"]["name"]

    # A new label on the NodePool's template changes its hash: every node it made has drifted.
    pool = world.server.list(NODEPOOLS).items[0]
    world.server.patch(
        NODEPOOLS,
        pool["metadata"]["name"],
        {"spec": {"template": {"metadata": {"labels": {"team": "payments"}}}}},
    )
    seen_replacement_initialized_before_delete = None
    for _ in range(300):
        world.advance(1)
        claims = {c["metadata"]["name"]: c for c in world.nodeclaims(live=False)}
        current = claims.get(old_name)
        if current is not None and _condition(current, "Drifted") is not None:
            assert _condition(current, "Drifted")["reason"] == "NodePoolDrifted"
        if current is None or current["metadata"].get("deletionTimestamp"):
            others = [c for name, c in claims.items() if name != old_name]
            seen_replacement_initialized_before_delete = any(
                (_condition(c, "Initialized") or {}).get("status") == "True" for c in others
            )
            break
        if current["status"].get("nodeName"):
            node = world.server.get(NODES, current["status"]["nodeName"])
            taints = [t["key"] for t in node["spec"].get("taints") or []]
            if wellknown.TAINT_DISRUPTED_KEY in taints:
                # Tainted while the replacement launches: no new pod may land here.
                assert any(name != old_name for name in claims)
    assert seen_replacement_initialized_before_delete is True
    world.advance(120)
    [new] = world.nodeclaims()
    assert new["metadata"]["name"] != old_name
    assert new["metadata"]["labels"]["team"] == "payments"
    assert len(world.running_pods()) == 2
    reasons = [c["reason"] for c in world.events("DisruptionLaunching")]
    assert reasons


def test_expiration_deletes_nodes_even_with_a_zero_budget() -> None:
    world = _world("WhenEmpty", "Never", budget="0", template={"expireAfter": "10m"})
    world.deploy("web", 2, "500m", "1Gi")
    world.advance(60)
    [first] = world.nodeclaims()
    assert first["spec"]["expireAfter"] == "10m"

    world.advance(600)

    names = [c["metadata"]["name"] for c in world.nodeclaims()]
    assert first["metadata"]["name"] not in names
    assert len(world.running_pods()) == 2  # the pods found a new node
    metrics = world.operator.metrics.render().decode()
    assert 'reason="expired"} 1.0' in metrics


def test_a_restart_mid_command_restores_the_nodes_it_had_tainted() -> None:
    world = _world("WhenEmpty", "Never")
    world.deploy("web", 1, "500m", "1Gi")
    world.advance(60)
    [node] = world.nodes()
    _taint_disrupted(world, node)  # what a command under way leaves when its process dies

    world.restart()
    world.advance(15)

    node = world.server.get(NODES, node["metadata"]["name"])
    assert wellknown.TAINT_DISRUPTED_KEY not in [t["key"] for t in node["spec"].get("taints") or []]
    assert len(world.nodes()) == 1


def test_a_machine_deployment_at_its_min_size_is_not_shrunk() -> None:
    world = _world("WhenEmpty", "30s")
    world.deploy("web", 1, "1500m", "1Gi")
    world.advance(60)
    [claim] = world.nodeclaims()
    kind, namespace, name = claim["metadata"]["annotations"][ANNOTATION_SCALABLE_RESOURCE].split(
        "/"
    )
    assert kind == "MachineDeployment"
    # The operator declares the MachineDeployment's floor: it keeps one Machine.
    world.server.patch(
        MACHINE_DEPLOYMENTS,
        name,
        {"metadata": {"annotations": {wellknown.ANNOTATION_AUTOSCALER_MIN_SIZE: "1"}}},
        namespace,
    )
    world.scale("web", 0)
    world.advance(300)

    # Empty, consolidatable, yet kept: removing it would only make Cluster API replace it.
    [still] = world.nodeclaims()
    assert still["metadata"]["name"] == claim["metadata"]["name"]
    assert _condition(still, "Consolidatable") is not None
    report = world.operator.disruption.last_report
    assert report is not None
    assert "at its min size (1)" in report.excluded[claim["metadata"]["name"]]
    md = world.server.get(MACHINE_DEPLOYMENTS, name, namespace)
    assert md["spec"]["replicas"] == 1


def test_a_command_is_dropped_when_its_node_gets_pods_during_validation() -> None:
    world = _world("WhenEmpty", "0s")
    world.deploy("web", 1, "1500m", "1Gi")
    world.advance(60)
    [claim] = world.nodeclaims()
    disruption = world.operator.disruption
    world.scale("web", 0)
    for _ in range(60):  # until the emptied node's command waits for validation
        world.advance(1)
        if disruption.busy:
            break
    assert disruption.busy
    world.scale("web", 1)  # a pod comes back within the 15 s and lands on that node
    world.advance(60)

    [still] = world.nodeclaims()
    assert still["metadata"]["name"] == claim["metadata"]["name"]
    assert len(world.running_pods()) == 1
    assert not world.events("DisruptionTerminating")


def test_a_stray_mark_is_removed_by_the_next_pass_without_a_restart() -> None:
    world = _world("WhenEmpty", "Never", budget=None)
    world.deploy("web", 1, "500m", "1Gi")
    world.advance(60)
    [node] = world.nodes()
    [claim] = world.nodeclaims()
    _taint_disrupted(world, node)
    conditions = [
        *claim["status"]["conditions"],
        {
            "type": "DisruptionReason",
            "status": "True",
            "reason": "Underutilized",
            "message": "left by a command that died",
            "lastTransitionTime": claim["metadata"]["creationTimestamp"],
        },
    ]
    world.server.patch(
        NODECLAIMS,
        claim["metadata"]["name"],
        {"status": {"conditions": conditions}},
        subresource="status",
    )

    world.advance(15)

    node = world.server.get(NODES, node["metadata"]["name"])
    assert wellknown.TAINT_DISRUPTED_KEY not in [t["key"] for t in node["spec"].get("taints") or []]
    claim = world.server.get(NODECLAIMS, claim["metadata"]["name"])
    assert _condition(claim, "DisruptionReason") is None


def test_a_restart_does_not_restart_consolidate_after() -> None:
    world = _world("WhenEmpty", "10m", budget=None)
    world.deploy("web", 2, "500m", "1Gi")
    world.advance(300)
    [claim] = world.nodeclaims()
    before = claim["status"]["lastPodEventTime"]

    world.restart()  # the new process sees every pod anew
    world.advance(10)

    [claim] = world.nodeclaims()
    assert claim["status"]["lastPodEventTime"] == before


def test_regaining_leadership_forgets_commands_and_restores_their_nodes() -> None:
    world = _world("WhenEmptyOrUnderutilized", "0s")
    world.deploy("web", 3, "1500m", "1Gi")
    world.advance(60)
    world.scale("web", 1)
    disruption = world.operator.disruption
    for _ in range(120):  # until a command holds tainted nodes
        world.advance(1)
        if any(not f.done for f in disruption.history) and disruption.busy:
            break
    held = [c.node_name for f in disruption.history if not f.done for c in f.command.candidates]
    assert held

    disruption.reset()  # what the operator does when it regains the Lease
    world.advance(10)

    for name in held:
        node = world.server.get(NODES, name)
        taints = [t["key"] for t in node["spec"].get("taints") or []]
        assert wellknown.TAINT_DISRUPTED_KEY not in taints


def test_a_dry_run_decides_and_says_so_but_changes_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    world = _world("WhenEmpty", "30s")
    world.deploy("web", 1, "1500m", "1Gi")
    world.advance(60)
    world.deploy("batch", 2, "1500m", "1Gi")
    world.advance(25)  # batch runs on its own node, not yet quiet for consolidateAfter
    nodes_before = {n["metadata"]["name"] for n in world.nodes()}
    assert len(nodes_before) >= 2
    assert sum(1 for c in world.nodeclaims() if _condition(c, "Consolidatable")) == 1
    statuses = {c["metadata"]["name"]: c["status"] for c in world.nodeclaims()}
    world.restart(dry_run=True)  # `karpenter-capi run --dry-run` over the same cluster
    world.scale("batch", 0)
    with caplog.at_level(logging.INFO, logger="karpenter_capi"):
        world.advance(300)

    assert {n["metadata"]["name"] for n in world.nodes()} == nodes_before
    for claim in world.nodeclaims():  # nothing written: the pods that left are not recorded
        assert claim["status"] == statuses[claim["metadata"]["name"]]
    report = world.operator.disruption.last_report
    assert report is not None
    assert report.command is not None
    assert report.command.reason.value == "Empty"
    would_delete = [
        r.getMessage() for r in caplog.records if "would delete NodeClaim" in r.getMessage()
    ]
    assert len(would_delete) == len(report.command.candidates)  # said once, not every pass
