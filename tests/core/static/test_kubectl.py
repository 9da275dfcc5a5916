"""``kubectl scale nodepool`` and ``karpenter-capi explain`` on a static NodePool, over HTTP.

The user's way in: kubectl writes ``spec.replicas`` through the scale subresource of the
simulated API server's HTTP front, ``kubectl get nodepools`` shows the Nodes column from
``status.nodes``, and ``explain`` says what the static controllers will do next.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from karpenter_capi.cli import main
from karpenter_capi.core.kube.resources import NODEPOOLS
from karpenter_capi.sim.apiserver.http import HttpFront
from karpenter_capi.sim.apiserver.kubeconfig import write_kubeconfig

from .world import STATIC, nodes_of, scale, static_world

KUBECTL = shutil.which("kubectl")


def _kubectl(kubeconfig: Path, home: Path, *args: str) -> str:
    assert KUBECTL is not None
    done = subprocess.run(
        [KUBECTL, *args],
        capture_output=True,
        text=True,
        env={
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "KUBECONFIG": str(kubeconfig),
        },
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.kubectl
@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed on this machine")
def test_kubectl_scale_nodepool_changes_the_node_count(tmp_path: Path) -> None:
    world = static_world(2)
    with HttpFront(world.server) as front:
        kubeconfig = write_kubeconfig(front.url, tmp_path / "kubeconfig")
        out = _kubectl(kubeconfig, tmp_path, "scale", "nodepool", STATIC, "--replicas=4")
        assert "scaled" in out
        assert world.server.get(NODEPOOLS, STATIC)["spec"]["replicas"] == 4
        world.advance(90)
        assert len(nodes_of(world)) == 4
        lines = _kubectl(kubeconfig, tmp_path, "get", "nodepools").splitlines()
        header = lines[0].split()
        row = next(line.split() for line in lines if line.startswith(STATIC))
        assert row[header.index("NODES")] == "4"
        scale_json = json.loads(
            _kubectl(
                kubeconfig,
                tmp_path,
                "get",
                "--raw",
                f"/apis/karpenter.sh/v1/nodepools/{STATIC}/scale",
            )
        )
        assert scale_json["spec"]["replicas"] == 4
        assert scale_json["status"]["replicas"] == 4

        _kubectl(kubeconfig, tmp_path, "scale", "nodepool", STATIC, "--replicas=1")
        world.advance(120)
        assert len(nodes_of(world)) == 1
        assert world.server.get(NODEPOOLS, STATIC)["status"]["nodes"] == 1


def test_explain_says_what_a_static_nodepool_will_do_next(tmp_path: Path) -> None:
    world = static_world(3, limit=4)
    scale(world, 1)  # not acted on yet: no step has run since
    with HttpFront(world.server) as front:
        kubeconfig = write_kubeconfig(front.url, tmp_path / "kubeconfig")
        out = io.StringIO()
        assert main(["explain", "--kubeconfig", str(kubeconfig)], out=out) == 0
        text = out.getvalue()
        assert "Static NodePools (spec.replicas):" in text
        line = next(
            line for line in text.splitlines() if line.strip().startswith(f"NodePool {STATIC}:")
        )
        assert "3 of 1 replicas active" in line
        assert "deleting 2 NodeClaim(s)" in line
        out = io.StringIO()
        assert main(["explain", "--kubeconfig", str(kubeconfig), "--json"], out=out) == 0
        [static] = json.loads(out.getvalue())["static"]
        assert static["replicas"] == 1
        assert static["active"] == 3
        assert len(static["delete"]) == 2
        # The static nodes are never consolidated, and the pass says so.
        verdicts = json.loads(out.getvalue())["disruption"]["nodes"]
        reasons = {v["reason"] for v in verdicts if v["nodepool"] == STATIC}
        assert reasons == {
            f"NodePool {STATIC} is static (replicas 1): its nodes are never consolidated"
        }

    scale(world, 6)
    with HttpFront(world.server) as front:
        kubeconfig = write_kubeconfig(front.url, tmp_path / "kubeconfig2")
        out = io.StringIO()
        assert main(["explain", "--kubeconfig", str(kubeconfig)], out=out) == 0
        assert "creating 1 NodeClaim(s); limits.nodes 4 reached" in out.getvalue()
