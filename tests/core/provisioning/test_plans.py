"""A round's plan on its NodeClaims, and a new process finishing one its predecessor left.

The demo's first round launches five NodeClaims. A process killed after creating only some of
them is played here by deleting the others before a new ``Provisioner`` (nothing in memory)
runs a round over the same API: it must create exactly the missing ones, for the pods they were
planned with, and leave to its own solve a plan the cluster has moved away from, losing no pod.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube.resources import NODECLAIMS, PODS
from karpenter_capi.core.plugin_host import PluginEnvironment, Plugins
from karpenter_capi.core.provisioning.provisioner import Provisioner
from karpenter_capi.core.provisioning.report import ProvisioningReport
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.cluster import new_cluster
from karpenter_capi.sim.demo import DEMO_SCENARIO, mark_unschedulable
from karpenter_capi.sim.manifests import load_manifest_files


def _world() -> tuple[InMemoryAPIServer, FakeClock]:
    clock = FakeClock()
    server = new_cluster(clock=clock)
    server.apply_manifests(load_manifest_files([Path(DEMO_SCENARIO)]))
    mark_unschedulable(server)
    return server, clock


def _process(server: InMemoryAPIServer, clock: FakeClock) -> Provisioner:
    """A new controller process's provisioner: nothing in memory."""
    plugins = Plugins.load(
        ["generic_capi"],
        PluginEnvironment(
            workload=server, management=server, clock=clock, logger=logging.getLogger("t")
        ),
    )
    return Provisioner(server, plugins, clock)


def _annotations(server: InMemoryAPIServer) -> dict[str, dict[str, str]]:
    return {
        c["metadata"]["name"]: c["metadata"]["annotations"] for c in server.list(NODECLAIMS).items
    }


def _groups(server: InMemoryAPIServer) -> list[str]:
    """Each NodeClaim's pods: what the plan decided, whatever the claims are called."""
    return sorted(a[wellknown.ANNOTATION_NOMINATED_PODS] for a in _annotations(server).values())


def _interrupted(
    server: InMemoryAPIServer, clock: FakeClock, created: int
) -> tuple[list[str], set[str]]:
    """A round whose process died after its first ``created`` NodeClaims: the round's plan
    (as an uninterrupted round left it) and the pods it could not help (the demo's pod too
    big for any node), and only those NodeClaims left in the API."""
    report = _process(server, clock).reconcile()
    assert len(report.launched) == 5
    plan = _groups(server)
    for decision in report.launched[created:]:
        server.delete(NODECLAIMS, decision.nodeclaim)
    return plan, set(report.unschedulable)


def _placed(report: ProvisioningReport) -> set[str]:
    return set(report.placed) | {key for d in report.launched for key in d.pods}


def test_each_nodeclaim_says_its_place_in_the_plan_and_the_first_says_the_rest() -> None:
    server, clock = _world()
    report = _process(server, clock).reconcile()
    annotations = _annotations(server)
    stamps = [annotations[d.nodeclaim][wellknown.ANNOTATION_PLAN] for d in report.launched]
    plan = stamps[0].split("/")[0]
    assert stamps == [f"{plan}/{index}/5" for index in range(5)]
    first, *others = report.launched
    rest = json.loads(annotations[first.nodeclaim][wellknown.ANNOTATION_PLAN_REST])
    assert rest == [["general", ",".join(d.pods)] for d in others]
    assert all(wellknown.ANNOTATION_PLAN_REST not in annotations[d.nodeclaim] for d in others)


@pytest.mark.parametrize("created", [1, 3])
def test_a_new_process_creates_the_missing_nodeclaims_for_the_pods_they_were_planned_for(
    created: int, caplog: pytest.LogCaptureFixture
) -> None:
    server, clock = _world()
    plan, _ = _interrupted(server, clock, created)

    with caplog.at_level(logging.INFO, logger="karpenter_capi.core.provisioning.provisioner"):
        report = _process(server, clock).reconcile()

    assert _groups(server) == plan
    assert len(report.launched) == 5 - created
    assert "finishing an interrupted plan" in caplog.messages
    # Finished: the next round (and the next process) creates nothing more.
    assert not _process(server, clock).reconcile().launched
    assert _groups(server) == plan


def test_a_plan_the_cluster_moved_away_from_is_left_to_the_solve_and_loses_no_pod() -> None:
    server, clock = _world()
    _, unhelped = _interrupted(server, clock, 1)
    rest = json.loads(
        next(
            a[wellknown.ANNOTATION_PLAN_REST]
            for a in _annotations(server).values()
            if wellknown.ANNOTATION_PLAN_REST in a
        )
    )
    # A pod of a missing NodeClaim went away since: that NodeClaim is no longer the plan.
    gone = rest[0][1].split(",")[0]
    namespace, _, name = gone.partition("/")
    server.delete(PODS, name, namespace)

    report = _process(server, clock).reconcile()

    pending = {
        f"{p['metadata']['namespace']}/{p['metadata']['name']}"
        for p in server.list(PODS).items
        if not p["spec"].get("nodeName")
    }
    assert set(report.unschedulable) == unhelped
    assert pending - unhelped <= _placed(report)
    assert gone not in _placed(report)
    stamps = [a.get(wellknown.ANNOTATION_PLAN, "") for a in _annotations(server).values()]
    assert not any(s.endswith("/1/5") for s in stamps), "the stale NodeClaim was created"


def test_an_unreadable_plan_is_ignored_and_its_pods_are_launched_for_anyway() -> None:
    server, clock = _world()
    _, unhelped = _interrupted(server, clock, 1)
    (first,) = server.list(NODECLAIMS).items
    first["metadata"]["annotations"][wellknown.ANNOTATION_PLAN_REST] = "not a plan"
    server.update(NODECLAIMS, first)

    report = _process(server, clock).reconcile()

    pending = {
        f"{p['metadata']['namespace']}/{p['metadata']['name']}"
        for p in server.list(PODS).items
        if not p["spec"].get("nodeName")
    }
    assert report.launched
    assert set(report.unschedulable) == unhelped
    assert pending - unhelped <= _placed(report)
