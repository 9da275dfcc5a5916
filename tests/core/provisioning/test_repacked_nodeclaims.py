"""A provisioning round buys the re-packed (cheaper) NodeClaims, and only greedy's when told to.

The demo cluster's MachineDeployments (m5.large 2 vCPU $0.096, m6g.xlarge 4 vCPU $0.154,
m5.2xlarge 8 vCPU $0.384, a tainted GPU type; kubeadm nodes, so no CPU is reserved) and 15
one-CPU pods: greedy fills two m5.2xlarge ($0.768/h); four m6g.xlarge hold the same pods for
$0.616/h.
"""

from __future__ import annotations

import io
import logging
from pathlib import Path
from typing import Any

import pytest

from karpenter_capi.cli.explain import explain
from karpenter_capi.core.api import wellknown
from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube.resources import EVENTS, NODECLAIMS, PODS
from karpenter_capi.core.plugin_host import PluginEnvironment, Plugins
from karpenter_capi.core.provisioning.provisioner import Provisioner
from karpenter_capi.core.provisioning.report import ProvisioningReport
from karpenter_capi.core.scheduling import highs
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.cluster import new_cluster
from karpenter_capi.sim.demo import DEMO_SCENARIO, mark_unschedulable
from karpenter_capi.sim.manifests import load_manifest_files


def _round(budget: float | None) -> tuple[InMemoryAPIServer, ProvisioningReport]:
    server, provisioner = _world(budget)
    return server, provisioner.reconcile()


def _world(budget: float | None, *, dry_run: bool = False) -> tuple[InMemoryAPIServer, Provisioner]:
    clock = FakeClock()
    server = new_cluster(clock=clock)
    server.apply_manifests(load_manifest_files([Path(DEMO_SCENARIO)]))
    for pod in server.list(PODS).items:
        server.delete(PODS, pod["metadata"]["name"], pod["metadata"]["namespace"])
    for i in range(15):
        server.create(
            PODS,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"app-{i:02d}", "namespace": "default"},
                "spec": {
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.k8s.io/pause:3.9",
                            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                        }
                    ]
                },
            },
        )
    mark_unschedulable(server)
    plugins = Plugins.load(
        ["generic_capi"],
        PluginEnvironment(
            workload=server,
            management=server,
            clock=clock,
            logger=logging.getLogger("t"),
            dry_run=dry_run,
        ),
    )
    provisioner = (
        Provisioner(server, plugins, clock, dry_run=dry_run)
        if budget is None
        else Provisioner(server, plugins, clock, packing_budget=budget, dry_run=dry_run)
    )
    return server, provisioner


def _bought(report: ProvisioningReport) -> list[str]:
    return sorted(decision.instance_type for decision in report.launched)


def test_the_provisioner_creates_the_repacked_nodeclaims_by_default() -> None:
    server, report = _round(None)
    # kubeadm nodes reserve no CPU: a 4-CPU m6g.xlarge holds four 1-CPU pods.
    assert round(report.hourly_cost, 3) == 0.616
    assert _bought(report) == ["m6g.xlarge"] * 4
    assert len(server.list(NODECLAIMS).items) == 4
    assert not report.unschedulable
    nominated = {
        e["involvedObject"]["name"]
        for e in server.list(EVENTS).items
        if e.get("reason") == "Nominated"
    }
    # Upstream's shared bucket (burst 10) tells 10 of the 15; the plan is on the NodeClaims.
    assert len(nominated) == 10
    assert nominated <= {f"app-{i:02d}" for i in range(15)}
    on_claims = {
        key.split("/")[1]
        for claim in server.list(NODECLAIMS).items
        for key in claim["metadata"]["annotations"][wellknown.ANNOTATION_NOMINATED_PODS].split(",")
    }
    assert on_claims == {f"app-{i:02d}" for i in range(15)}
    # Every claim asks for what its pods need, as a greedy one does.
    for claim in server.list(NODECLAIMS).items:
        assert claim["spec"]["resources"]["requests"]["cpu"] in {"3", "4"}


def test_a_zero_budget_provisions_what_greedy_decides() -> None:
    server, report = _round(0)
    assert round(report.hourly_cost, 3) == 0.768
    assert _bought(report) == ["m5.2xlarge", "m5.2xlarge"]
    assert len(server.list(NODECLAIMS).items) == 2


# -- saying why (issue 25, item 7) -------------------------------------------------------------


def _said(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage() == "re-packing outcome"]


def test_a_round_says_what_re_packing_saved_once_while_it_decides_the_same(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="karpenter_capi")
    _, provisioner = _world(None, dry_run=True)
    report = provisioner.reconcile()
    assert report.packing is not None
    assert report.packing.outcome == "re-packed"
    assert round(report.packing.saved, 3) == 0.152
    (line,) = _said(caplog)
    assert line.levelno == logging.INFO
    assert line.__dict__["outcome"] == "re-packed"
    assert line.__dict__["reason"] == (
        "re-packed 1 group of NodeClaims: saved $0.1520/h against greedy's plan "
        "($0.7680/h -> $0.6160/h)"
    )
    caplog.clear()
    provisioner.reconcile()  # a dry run decides the same again: said at DEBUG only
    assert [r.levelno for r in _said(caplog)] == [logging.DEBUG]


def test_a_round_whose_re_packing_was_stopped_by_its_budget_says_so(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    def out_of_budget(*args: Any, **kwargs: Any) -> tuple[str, None]:
        return "budget-exhausted", None

    monkeypatch.setattr(highs.HiGHS, "milp", out_of_budget)
    caplog.set_level(logging.INFO, logger="karpenter_capi")
    _, report = _round(None)
    assert _bought(report) == ["m5.2xlarge", "m5.2xlarge"]
    assert report.packing is not None
    assert report.packing.outcome == "stopped-by-budget"
    (line,) = _said(caplog)
    assert line.__dict__["reason"] == (
        "kept greedy's plan ($0.7680/h): the re-packing was stopped by its budget before it "
        "found a cheaper plan"
    )


def test_a_round_without_re_packing_says_nothing_about_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="karpenter_capi")
    _, report = _round(0)
    assert report.packing is None
    assert _said(caplog) == []


def test_explain_says_what_re_packing_saved() -> None:
    server, provisioner = _world(None, dry_run=True)
    version = server.resource_version
    result = explain(server, provisioner._plugins, FakeClock())
    assert server.resource_version == version
    out = io.StringIO()
    result.write_text(out)
    assert (
        "  Re-packing: re-packed 1 group of NodeClaims: saved $0.1520/h against greedy's plan "
        "($0.7680/h -> $0.6160/h)\n"
    ) in out.getvalue()
    packing = result.as_dict()["provisioning"]["packing"]
    assert packing["outcome"] == "re-packed"
    assert packing["saved"] == 0.152
    assert packing["greedyCost"] == 0.768
