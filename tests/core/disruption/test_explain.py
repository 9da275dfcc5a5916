"""``karpenter-capi explain`` against the simulated cluster served over HTTP.

Here rather than in ``tests/cli`` because the cluster worth explaining (a kept node, a pod no
NodePool can hold, a node not quiet for long enough) is the one the whole controller builds on
``SimWorld``. The command runs as a user runs it, through ``main`` and a kubeconfig; it must
answer in words a user can act on, in text and JSON, and write nothing.
"""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path
from typing import Any

from karpenter_capi.cli import main
from karpenter_capi.cli.explain import explain
from karpenter_capi.core.disruption.methods import NO_ROOM
from karpenter_capi.core.plugin_host import PluginEnvironment, Plugins
from karpenter_capi.sim.apiserver.http import HttpFront
from karpenter_capi.sim.apiserver.kubeconfig import write_kubeconfig
from karpenter_capi.sim.scenario.schema import Catalog

from .sim_world import SimWorld

CATALOG = Catalog(cpus=[2, 4, 8], zones=["zone-a"], capacity_types=["on-demand"])
WRITES = ("create", "update", "patch", "delete", "deletecollection")


def _cluster() -> tuple[SimWorld, str, str]:
    """A kept node (two pods nothing cheaper holds), a newer node not yet quiet for
    consolidateAfter, and a pod no instance type can hold."""
    world = SimWorld.build(
        CATALOG,
        disruption={"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "5m"},
    )
    world.deploy("web", 2, "1500m", "1Gi")
    world.advance(360)
    [kept] = world.nodeclaims()
    world.deploy("batch", 1, "1500m", "1Gi")
    world.deploy("huge", 1, "64", "1Gi")
    world.advance(60)
    [young] = [c for c in world.nodeclaims() if c["metadata"]["name"] != kept["metadata"]["name"]]
    return world, kept["metadata"]["name"], young["metadata"]["name"]


def _explain(world: SimWorld, tmp_path: Path, *args: str) -> tuple[str, dict[str, int]]:
    with HttpFront(world.server) as front:
        kubeconfig = write_kubeconfig(front.url, tmp_path / "kubeconfig")
        version = world.server.resource_version
        before = world.server.requests.snapshot()
        out = io.StringIO()
        code = main(["explain", "--kubeconfig", str(kubeconfig), *args], out=out)
        served = world.server.requests.since(before)
        assert world.server.resource_version == version  # nothing written, not even an Event
    assert code == 0
    return out.getvalue(), served


def test_explain_says_why_a_pod_waits_and_why_a_node_stays_and_writes_nothing(
    tmp_path: Path,
) -> None:
    world, kept, young = _cluster()
    [huge] = [p["metadata"]["name"] for p in world.pending_pods()]

    text, served = _explain(world, tmp_path)

    assert served.get("list")  # it did read the cluster, over HTTP
    assert not [verb for verb in served if verb.split("/")[0] in WRITES], served
    assert "Next provisioning round: 1 pending pod(s)" in text
    assert (
        f"default/{huge}: cannot be helped: NodePool catalog: "
        "no instance type is large enough for its requests"
    ) in text
    assert "Next disruption pass: nothing to disrupt" in text
    assert f"NodeClaim {kept} " in text
    assert f"kept: {NO_ROOM}" in text
    assert f"NodeClaim {young} " in text

    document, served = _explain(world, tmp_path, "--json")
    assert not [verb for verb in served if verb.split("/")[0] in WRITES], served
    result = json.loads(document)
    [pod] = result["provisioning"]["pods"]
    assert pod["pod"] == f"default/{huge}"
    assert pod["decision"] == "cannot-help"
    assert "no instance type is large enough" in pod["reason"]
    nodes = {n["nodeclaim"]: n for n in result["disruption"]["nodes"]}
    assert result["disruption"]["command"] is None
    assert nodes[kept]["verdict"] == "kept"
    assert nodes[kept]["reason"] == NO_ROOM
    assert nodes[kept]["consolidatable"] is True
    assert nodes[young]["consolidatable"] is False


def test_explain_says_how_long_until_a_node_may_be_consolidated() -> None:
    world, _kept, young = _cluster()
    environment = PluginEnvironment(
        workload=world.server,
        management=world.server,
        clock=world.clock,
        dry_run=True,
        logger=logging.getLogger("karpenter_capi.plugins"),
    )
    plugins = Plugins.load(["generic_capi"], environment)
    version = world.server.resource_version

    result = explain(world.server, plugins, world.clock)

    assert world.server.resource_version == version
    verdict: Any = next(v for v in result.nodes if v.nodeclaim == young)
    assert verdict.verdict == "kept"
    assert verdict.reason.startswith("consolidateAfter 5m not elapsed yet: ")
    assert verdict.reason.endswith(" left")
    # Quiet since its pod arrived, some tens of seconds ago: minutes, not zero, are left.
    assert verdict.reason.split(": ")[1].startswith("4m")
