"""``karpenter-capi run --fleet`` as a user runs it: a process in the management cluster, over
HTTP, reaching each workload cluster through the kubeconfig in its Cluster's Secret."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from karpenter_capi.cli.entry import main
from karpenter_capi.core.api.crds import generate_crds
from karpenter_capi.core.clock import SystemClock
from karpenter_capi.core.kube import EVENTS, NAMESPACES, NODECLAIMS, PODS, SECRETS
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.apiserver.http import HttpFront
from karpenter_capi.sim.apiserver.kubeconfig import write_kubeconfig
from karpenter_capi.sim.demo import mark_unschedulable
from karpenter_capi.sim.scenario.catalog import generate_catalog
from tests.fleet.world import kubeconfig_secret
from tests.reliability.two_clusters.env import CATALOG

_WORKLOAD_KINDS = frozenset({"NodePool", "ClusterAPINodeClass"})


def _server(seed: int) -> InMemoryAPIServer:
    # Real processes on the wall clock: a FakeClock's 2026-01-01 would expire their objects.
    server = InMemoryAPIServer(clock=SystemClock(), random_seed=seed)
    server.apply_manifests(generate_crds())
    server.register_cluster_api()
    return server


def _add(management: InMemoryAPIServer, workload: InMemoryAPIServer, name: str) -> None:
    namespace = f"team-{name}"
    management.create(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    )
    catalog = CATALOG.model_copy(update={"cluster_name": name, "namespace": namespace})
    for obj in generate_catalog(catalog):
        if obj["kind"] in _WORKLOAD_KINDS:
            workload.apply_manifests([obj])
            continue
        if obj["kind"] == "MachineDeployment":
            obj["metadata"].setdefault("labels", {})["cluster.x-k8s.io/cluster-name"] = name
        management.apply_manifests([obj])


def _pending_pods(server: InMemoryAPIServer, count: int) -> None:
    for index in range(count):
        server.create(
            PODS,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"web-{index}", "namespace": "default"},
                "spec": {
                    "containers": [
                        {"name": "app", "image": "app", "resources": {"requests": {"cpu": "500m"}}}
                    ]
                },
            },
            "default",
        )
    mark_unschedulable(server)


def _wait_for(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.1)


def _reasons(management: InMemoryAPIServer, name: str) -> set[str]:
    return {
        e["reason"]
        for e in management.list(EVENTS, f"team-{name}").items
        if e["involvedObject"].get("name") == name
    }


def test_run_fleet_serves_a_cluster_and_tells_a_broken_one(tmp_path: Path) -> None:
    management, alpha = _server(1), _server(2)
    _add(management, alpha, "alpha")
    _add(management, _server(3), "beta")
    _pending_pods(alpha, 3)
    with HttpFront(management) as management_front, HttpFront(alpha) as alpha_front:
        management.create(SECRETS, kubeconfig_secret("team-alpha", "alpha", alpha_front.url))
        management.create(
            SECRETS,
            kubeconfig_secret("team-beta", "beta", "unused", value="bm90IGEga3ViZWNvbmZpZw=="),
        )
        kubeconfig = write_kubeconfig(management_front.url, tmp_path / "management")
        command = [
            sys.executable, "-m", "karpenter_capi", "run", "--fleet",
            "--kubeconfig", str(kubeconfig),
            "--leader-election-namespace", "default",
            "--batch-idle-duration", "0.2",
            "--metrics-port", "0", "--metrics-host", "127.0.0.1",
        ]  # fmt: skip
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "FLEET_SHARDS": "false"}
        log = (tmp_path / "run.log").open("wb")
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, env=env)
        try:
            assert process.stdout is not None
            banner = process.stdout.readline().decode()
            assert "karpenter-capi running in fleet mode on http://127.0.0.1:" in banner, banner
            url = re.search(r"http://\S+", banner)
            assert url is not None
            _wait_for(lambda: bool(alpha.list(NODECLAIMS).items), "a NodeClaim in alpha")
            _wait_for(lambda: "KubeconfigInvalid" in _reasons(management, "beta"), "beta's Event")
            assert "FleetServing" in _reasons(management, "alpha")
            with urllib.request.urlopen(f"{url.group(0).rstrip(':')}/metrics") as answer:
                metrics = answer.read().decode()
            assert 'cluster="team-alpha/alpha"' in metrics
            assert "karpenter_fleet_clusters_served 1.0" in metrics
        finally:
            process.send_signal(signal.SIGTERM)
            code = process.wait(timeout=30)
        assert code == 0, (tmp_path / "run.log").read_text()
    logged = (tmp_path / "run.log").read_text()
    assert "Traceback" not in logged
    assert logged.count("KubeconfigInvalid") == 1


def test_fleet_flags_that_cannot_work_are_one_line_errors(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["run", "--fleet", "--once"]) == 1
    assert "--once serves one cluster; it cannot be used with --fleet" in capsys.readouterr().err
    management = _server(1)
    with HttpFront(management) as front:
        kubeconfig = write_kubeconfig(front.url, tmp_path / "management")
        code = main(
            [
                "run",
                "--fleet",
                "--kubeconfig",
                str(kubeconfig),
                "--fleet-cluster-selector",
                "a in (b",
            ]
        )
        assert code == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1
        assert "--fleet-cluster-selector 'a in (b'" in err[0]


def test_explain_with_cluster_explains_within_that_workload_cluster(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    management, alpha, beta = _server(1), _server(2), _server(3)
    _add(management, alpha, "alpha")
    _add(management, beta, "beta")
    _pending_pods(alpha, 2)
    with (
        HttpFront(management) as management_front,
        HttpFront(alpha) as alpha_front,
        HttpFront(beta) as beta_front,
    ):
        management.create(SECRETS, kubeconfig_secret("team-alpha", "alpha", alpha_front.url))
        management.create(SECRETS, kubeconfig_secret("team-beta", "beta", beta_front.url))
        kubeconfig = str(write_kubeconfig(management_front.url, tmp_path / "management"))
        assert main(["explain", "--kubeconfig", kubeconfig, "--cluster", "alpha"]) == 0
        alpha_said = capsys.readouterr().out
        assert main(["explain", "--kubeconfig", kubeconfig, "--cluster", "team-beta/beta"]) == 0
        beta_said = capsys.readouterr().out
        assert main(["explain", "--kubeconfig", kubeconfig, "--cluster", "gamma"]) == 1
        missing = capsys.readouterr().err
    assert "default/web-0" in alpha_said
    assert "a new NodeClaim of NodePool catalog" in alpha_said
    assert "web-0" not in beta_said
    assert "--cluster 'gamma': no Cluster of that name in the management cluster" in missing
    # It only looked: nothing was written in either cluster.
    assert alpha.list(NODECLAIMS).items == []


def test_fleet_flags_read_their_environment_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    from karpenter_capi.cli.entry import build_parser
    from karpenter_capi.cli.run import fleet_namespaces

    monkeypatch.setenv("FLEET", "true")
    monkeypatch.setenv("FLEET_CLUSTER_SELECTOR", "autoscaler=karpenter")
    monkeypatch.setenv("FLEET_NAMESPACES", "team-a, team-b,,team-a")
    monkeypatch.setenv("FLEET_SHARDS", "false")
    monkeypatch.setenv("FLEET_WORKERS", "3")
    monkeypatch.setenv("FLEET_DECISION_WORKERS", "1")
    monkeypatch.setenv("FLEET_RUNNING_WORKERS", "0")
    args = build_parser().parse_args(["run"])
    assert args.fleet_workers == 3
    assert args.fleet_decision_workers == 1
    assert args.fleet_running_workers == 0
    assert args.fleet is True
    assert args.fleet_cluster_selector == "autoscaler=karpenter"
    assert fleet_namespaces(args) == ("team-a", "team-b")
    assert args.fleet_shards is False
    # Flags win over the environment.
    args = build_parser().parse_args(
        ["run", "--fleet-namespace", "ops", "--fleet-namespace", "dev", "--fleet-shards"]
    )
    assert fleet_namespaces(args) == ("ops", "dev")
    assert args.fleet_shards is True
