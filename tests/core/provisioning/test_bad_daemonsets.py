"""A DaemonSet whose pod cannot be read stops nothing: it is left out of the daemon overhead
and said on the DaemonSet, while every pending pod still gets capacity sized for the others."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube.resources import DAEMONSETS, EVENTS, NODECLAIMS
from karpenter_capi.core.plugin_host import PluginEnvironment, Plugins
from karpenter_capi.core.provisioning.provisioner import Provisioner
from karpenter_capi.core.values.resources import ResourceList
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.cluster import new_cluster
from karpenter_capi.sim.demo import DEMO_SCENARIO, mark_unschedulable
from karpenter_capi.sim.manifests import load_manifest_files


def _daemonset(name: str, cpu: str) -> dict[str, Any]:
    container = {"name": "agent", "image": "agent", "resources": {"requests": {"cpu": cpu}}}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": "kube-system"},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [container]},
            },
        },
    }


def _round(*daemonsets: dict[str, Any]) -> tuple[InMemoryAPIServer, Provisioner]:
    clock = FakeClock()
    server = new_cluster(clock=clock)
    server.apply_manifests(load_manifest_files([Path(DEMO_SCENARIO)]))
    mark_unschedulable(server)
    for daemonset in daemonsets:
        server.create(DAEMONSETS, daemonset, "kube-system")
    plugins = Plugins.load(
        ["generic_capi"],
        PluginEnvironment(
            workload=server, management=server, clock=clock, logger=logging.getLogger("t")
        ),
    )
    provisioner = Provisioner(server, plugins, clock)
    return server, provisioner


def _requested(server: InMemoryAPIServer) -> ResourceList:
    claims = server.list(NODECLAIMS).items
    assert claims, "no NodeClaim was launched"
    return ResourceList.sum(ResourceList.parse(c["spec"]["resources"]["requests"]) for c in claims)


def test_pending_pods_get_nodeclaims_sized_for_the_daemonsets_that_can_be_read() -> None:
    good = _daemonset("logs", "300m")
    bad = _daemonset("broken-agent", "lots")
    with_good, provisioner = _round(good)
    provisioner.reconcile()
    without, provisioner = _round()
    provisioner.reconcile()
    assert _requested(with_good) != _requested(without)  # the good overhead counts

    server, provisioner = _round(good, bad)
    report = provisioner.reconcile()
    assert report.launched
    assert _requested(server) == _requested(with_good)
    events = [e for e in server.list(EVENTS).items if e["involvedObject"]["kind"] == "DaemonSet"]
    assert [(e["type"], e["involvedObject"]["name"]) for e in events] == [
        ("Warning", "broken-agent")
    ]
    message = events[0]["message"]
    assert "resource 'cpu': 'lots': not a valid Kubernetes quantity" in message, message
    assert "left out of the DaemonSet overhead" in message, message


def test_an_unreadable_daemonset_is_logged_once_while_it_lasts_and_again_when_it_changes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server, provisioner = _round(_daemonset("broken-agent", "lots"))

    def warnings() -> list[str]:
        return [
            r.getMessage()
            for r in caplog.records
            if r.levelno == logging.WARNING and "broken-agent" in r.getMessage()
        ]

    with caplog.at_level(logging.DEBUG, logger="karpenter_capi"):
        for _ in range(3):
            provisioner.reconcile()
        assert len(warnings()) == 1, warnings()
        assert "'lots'" in warnings()[0]
        assert all(r.exc_info is None for r in caplog.records if r.levelno >= logging.WARNING)
        changed = server.get(DAEMONSETS, "broken-agent", "kube-system")
        changed["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "x"
        server.update(DAEMONSETS, changed)
        provisioner.reconcile()
    assert len(warnings()) == 2, warnings()
    assert "'x'" in warnings()[1]
