"""The ``karpenter-capi`` command as a user runs it: output, exit codes, one-line errors."""

from __future__ import annotations

import gc
import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from karpenter_capi.cli import main
from karpenter_capi.cli.entry import EXIT_BUG
from karpenter_capi.core.runtime.collector import CollectorPolicy
from karpenter_capi.sim.scenario.schema import SHIPPED

ROOT = Path(__file__).resolve().parents[2]


def _run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


def test_every_subcommand_has_help() -> None:
    for command in (
        "run",
        "simulate",
        "apiserver",
        "manifests",
        "plugins",
        "instance-types",
        "explain",
    ):
        result = subprocess.run(
            [sys.executable, "-m", "karpenter_capi", command, "--help"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        assert "usage: karpenter-capi" in result.stdout


def test_manifests_prints_the_crds_deploy_holds() -> None:
    code, text = _run("manifests", "--crds")
    assert code == 0
    names = [doc["metadata"]["name"] for doc in yaml.safe_load_all(text)]
    assert set(names) == {
        "nodepools.karpenter.sh",
        "nodeclaims.karpenter.sh",
        "clusterapinodeclasses.karpenter.cluster.x-k8s.io",
    }
    on_disk = sorted(p.name for p in (ROOT / "deploy" / "crds").glob("*.yaml"))
    assert len(on_disk) == len(names)


def test_plugins_lists_the_builtin_ones_with_distribution() -> None:
    code, text = _run("plugins", "--plugins", "generic_capi", "--json")
    assert code == 0
    rows = {row["name"]: row for row in json.loads(text)}
    assert rows["generic_capi"]["enabled"] is True
    assert rows["generic_capi"]["distribution"] == "karpenter-capi"
    assert rows["capa"]["enabled"] is False


def test_unknown_plugin_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = _run("simulate", "--demo", "--plugins", "nosuchplugin")
    assert code == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("karpenter-capi simulate: error:")
    assert "nosuchplugin" in err
    assert "\n" not in err


def test_missing_manifest_file_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = _run("instance-types", "-f", "/nonexistent/objs.yaml")
    assert code == 1
    err = capsys.readouterr().err
    assert "/nonexistent/objs.yaml" in err
    assert "Traceback" not in err


def test_a_bug_shows_its_traceback_and_is_not_called_the_users_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A ``ValueError`` from deep inside is a bug, not bad input: hiding its traceback behind
    one line would send the user looking for a mistake they did not make."""
    from karpenter_capi.core.api import crds

    def broken() -> str:
        raise ValueError("the CRD generator tripped over itself")

    monkeypatch.setattr(crds, "crds_yaml", broken)
    code, _ = _run("manifests", "--crds")
    err = capsys.readouterr().err
    assert code == EXIT_BUG
    assert code not in (0, 1, 2)
    assert "Traceback (most recent call last):" in err
    assert "ValueError: the CRD generator tripped over itself" in err
    assert err.rstrip().splitlines()[-1] == (
        "karpenter-capi manifests: internal error: this is a bug in karpenter-capi, not in "
        "your input; please report it with the traceback above"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--plugin-option", "capa-region"],
            "plugin option 'capa-region' is not of the form <plugin>.<option>=<value>",
        ),
        (["--context", "nowhere"], "Expected object with name nowhere"),
    ],
)
def test_input_the_user_can_fix_is_one_line_naming_it(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from karpenter_capi.sim.apiserver.kubeconfig import write_kubeconfig

    # Nothing listens there: both mistakes are found before anything is sent.
    kubeconfig = write_kubeconfig("http://127.0.0.1:9", tmp_path / "kubeconfig")
    code, _ = _run("instance-types", "--kubeconfig", str(kubeconfig), *argv)
    err = capsys.readouterr().err
    assert code == 1
    assert "Traceback" not in err
    [line] = err.strip().splitlines()
    assert line.startswith("karpenter-capi instance-types: error: ")
    assert message in line


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--log-level", "chatty", "manifests", "--crds"], "unknown log level 'CHATTY'"),
        (["simulate", "scale-from-zero", "--until", "0s"], "--until '0s': must be longer than 0s"),
    ],
)
def test_a_bad_flag_value_is_one_line_naming_it(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _ = _run(*argv)
    err = capsys.readouterr().err
    assert code == 1
    [line] = err.strip().splitlines()
    assert message in line


def test_an_unreachable_cluster_is_a_one_line_error_not_a_bug(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from karpenter_capi.sim.apiserver.kubeconfig import write_kubeconfig

    kubeconfig = write_kubeconfig("http://127.0.0.1:9", tmp_path / "kubeconfig")
    code, _ = _run("explain", "--kubeconfig", str(kubeconfig))
    err = capsys.readouterr().err
    assert code == 1
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("karpenter-capi explain: error: ")
    assert "cannot reach the API server" in last


def test_python_dash_m_runs_the_command() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "karpenter_capi", "--version"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("karpenter-capi ")


def test_simulate_demo_launches_cheapest_nodes_and_is_idempotent() -> None:
    code, text = _run("simulate", "--demo", "--json")
    assert code == 0
    report = json.loads(text)
    first, second = report["passes"]
    launched = first["launched"]
    pods = {pod for decision in launched for pod in decision["pods"]}
    # Every pod that some offering can hold is covered; the 64-CPU pod is reported, not launched.
    assert "default/too-big" in first["unschedulable"]
    assert "default/trainer" in pods
    assert "default/arm-only" in pods
    assert len(pods) == first["pending"] - len(first["unschedulable"])
    by_pod = {pod: d for d in launched for pod in d["pods"]}
    assert by_pod["default/trainer"]["instanceType"] == "g5.xlarge"
    assert by_pod["default/arm-only"]["instanceType"] == "m6g.xlarge"
    # The second pass finds every pod covered by a NodeClaim already launching.
    assert second["launched"] == []
    assert second["inFlightPods"] == len(pods)
    assert len(report["nodeClaims"]) == len(launched)
    # Then every controller runs next to the emulated Cluster API: each NodeClaim gets its
    # Machine from the MachineDeployment of its instance type and an initialized Node, and
    # nothing more is launched for pods already provided for.
    lifecycle = report["lifecycle"]
    claims = lifecycle["nodeClaims"]
    assert len(claims) == len(launched)
    assert all(c["initialized"] and c["providerID"].startswith("sim://") for c in claims)
    grown = {k: v["after"] for k, v in lifecycle["replicas"].items() if v["after"] > v["before"]}
    assert sum(grown.values()) == len(launched)
    assert grown["MachineDeployment default/workers-g5-xlarge-b"] == 1
    # The scheduler stand-in binds the pods to the new nodes and they run; only the pod no
    # instance type can hold stays pending.
    phases = lifecycle["pods"]
    assert phases["default/too-big"] == "Pending"
    assert all(where.startswith("Running on ") for pod, where in phases.items() if pod in pods)
    assert phases["default/trainer"].startswith("Running on workers-g5-xlarge-b")


def test_instance_types_from_manifests(tmp_path: Path) -> None:
    scenario = SHIPPED / "demo.yaml"
    code, text = _run("instance-types", "-f", str(scenario), "--json")
    assert code == 0
    (inventory,) = json.loads(text)
    types = {it["name"]: it for it in inventory["instanceTypes"]}
    assert set(types) == {"m5.large", "m5.2xlarge", "m6g.xlarge", "g5.xlarge"}
    zones = sorted(o["zone"] for o in types["m5.large"]["offerings"])
    assert zones == ["zone-a", "zone-b"]
    assert types["g5.xlarge"]["taints"] == ["nvidia.com/gpu=present:NoSchedule"]


def test_instance_types_shows_the_overhead_and_where_it_came_from(tmp_path: Path) -> None:
    scenario = SHIPPED / "kubeadm-reserved.yaml"
    manifests = yaml.safe_load(scenario.read_text())["infrastructure"]["manifests"]
    demo = SHIPPED / "demo.yaml"
    path = tmp_path / "objs.yaml"
    path.write_text(yaml.safe_dump_all(manifests))

    code, text = _run("instance-types", "-f", str(path))
    assert code == 0
    header, row = [line.strip() for line in text.splitlines()[1:3]]
    assert header.split()[-1] == "OVERHEAD"
    # kube-reserved 300m + system-reserved 200m; 2Gi + 1Gi + 512Mi of eviction threshold.
    assert row.endswith("cpu=500m,memory=3584Mi (kubeadm-config)")

    code, text = _run("instance-types", "-f", str(path), "--json")
    [reserved] = json.loads(text)[0]["instanceTypes"]
    assert reserved["overhead"] == {
        "kubeReserved": {"cpu": "300m", "memory": "2Gi"},
        "systemReserved": {"cpu": "200m", "memory": "1Gi"},
        "evictionThreshold": {"memory": "512Mi"},
        "total": {"cpu": "500m", "memory": "3584Mi"},
        "source": "kubeadm-config",
    }
    assert reserved["allocatable"]["memory"] == "12800Mi"

    # The demo names a KubeadmConfigTemplate it does not ship: kubeadm's defaults apply.
    code, text = _run("instance-types", "-f", str(demo), "--json")
    for instance_type in json.loads(text)[0]["instanceTypes"]:
        assert instance_type["overhead"]["source"] == "kubeadm default"
        assert instance_type["overhead"]["total"]["memory"] == "100Mi"


def test_instance_types_only_looks_it_writes_nothing_to_the_cluster(tmp_path: Path) -> None:
    from karpenter_capi.core.clock import FakeClock
    from karpenter_capi.core.kube.resources import CLUSTER_API_NODE_CLASSES, EVENTS
    from karpenter_capi.sim.apiserver.http import HttpFront
    from karpenter_capi.sim.apiserver.kubeconfig import write_kubeconfig
    from karpenter_capi.sim.cluster import new_cluster
    from karpenter_capi.sim.demo import DEMO_SCENARIO
    from karpenter_capi.sim.manifests import load_manifest_files

    server = new_cluster(clock=FakeClock())
    server.apply_manifests(load_manifest_files([DEMO_SCENARIO]))
    [before] = server.list(CLUSTER_API_NODE_CLASSES).items
    with HttpFront(server) as front:
        kubeconfig = write_kubeconfig(front.url, tmp_path / "kubeconfig")
        code, output = _run("instance-types", "--kubeconfig", str(kubeconfig))
    assert code == 0, output
    assert "m5.large" in output
    # A running controller writes the NodeClass's Ready condition and Events; a look does not.
    [after] = server.list(CLUSTER_API_NODE_CLASSES).items
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert server.list(EVENTS).items == []


def test_run_once_provisions_over_http_with_a_kubeconfig(tmp_path: Path) -> None:
    from karpenter_capi.core.clock import FakeClock
    from karpenter_capi.core.kube.resources import NODECLAIMS
    from karpenter_capi.sim.apiserver.http import HttpFront
    from karpenter_capi.sim.apiserver.kubeconfig import write_kubeconfig
    from karpenter_capi.sim.cluster import new_cluster
    from karpenter_capi.sim.demo import DEMO_SCENARIO, mark_unschedulable
    from karpenter_capi.sim.manifests import load_manifest_files

    server = new_cluster(clock=FakeClock())
    server.apply_manifests(load_manifest_files([DEMO_SCENARIO]))
    mark_unschedulable(server)
    with HttpFront(server) as front:
        kubeconfig = write_kubeconfig(front.url, tmp_path / "kubeconfig")
        code, output = _run("run", "--once", "--kubeconfig", str(kubeconfig))
    assert code == 0, output
    claims = server.list(NODECLAIMS).items
    assert claims
    for claim in claims:
        assert f"NodeClaim {claim['metadata']['name']}:" in output
    assert "cannot provision default/too-big" in output


def test_simulate_a_shipped_scenario_reports_its_outcome_as_json() -> None:
    code, text = _run("simulate", "scale-from-zero", "--until", "5m", "--json")
    assert code == 0, text
    result = json.loads(text)
    assert result["scenario"] == "scale-from-zero"
    assert result["pods_bound"] == result["pods_total"] > 0
    assert result["pods_pending"] == 0
    assert result["nodes"] == result["nodeclaims"] > 0
    assert result["cost_per_hour"] > 0
    assert set(result["pod_bound_seconds"]) == {"p50", "p95", "max"}
    assert result["virtual_seconds"] == 300
    assert result["errors"] == []


def test_simulate_an_unknown_scenario_is_a_one_line_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["simulate", "no-such-scenario"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "shipped scenarios: " in err[0]


def test_simulate_demo_by_name_says_to_use_the_demo_flag(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # demo.yaml sits with the scenarios but is the manifest file of ``simulate --demo``.
    assert main(["simulate", "demo"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "run `karpenter-capi simulate --demo`" in err[0]


@pytest.mark.parametrize(("level", "shown"), [(None, True), ("WARNING", False)])
def test_run_logs_its_decisions_at_info_unless_told_otherwise(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    level: str | None,
    shown: bool,
) -> None:
    from karpenter_capi.core.clock import FakeClock
    from karpenter_capi.sim.apiserver.http import HttpFront
    from karpenter_capi.sim.apiserver.kubeconfig import write_kubeconfig
    from karpenter_capi.sim.cluster import new_cluster
    from karpenter_capi.sim.demo import DEMO_SCENARIO, mark_unschedulable
    from karpenter_capi.sim.manifests import load_manifest_files

    if level is None:
        monkeypatch.delenv("KARPENTER_CAPI_LOG_LEVEL", raising=False)
    else:
        monkeypatch.setenv("KARPENTER_CAPI_LOG_LEVEL", level)
    server = new_cluster(clock=FakeClock())
    server.apply_manifests(load_manifest_files([DEMO_SCENARIO]))
    mark_unschedulable(server)
    with HttpFront(server) as front:
        kubeconfig = write_kubeconfig(front.url, tmp_path / "kubeconfig")
        code, _output = _run("run", "--once", "--kubeconfig", str(kubeconfig))
    assert code == 0
    logged = capsys.readouterr().err
    for decision in ("found provisionable pod(s)", "created nodeclaim", "could not schedule pod"):
        line = f" INFO karpenter_capi.core.provisioning.provisioner {decision} "
        assert (line in logged) is shown


def test_the_packing_optimizer_budget_reads_durations_and_refuses_nonsense(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from karpenter_capi.cli.run import parse_budget

    assert parse_budget("200ms") == pytest.approx(0.2)
    assert parse_budget("1s") == 1.0
    assert parse_budget("0") == 0.0
    with pytest.raises(SystemExit) as exited:
        _run("run", "--once", "--packing-optimizer-budget", "soon")
    assert exited.value.code == 2
    assert "invalid budget 'soon'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["run", "--management-tokn", "s3cr3t-token"], "--management-tokn <value>"),
        (["run", "--management-tok=s3cr3t-token"], "--management-tok=<value>"),
        (["explain", "--kubeconfig-path", "s3cr3t-token"], "--kubeconfig-path <value>"),
    ],
)
def test_a_misspelt_flag_is_named_without_echoing_its_value(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A misspelt credential flag must not put the credential in a terminal or a CI log."""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "s3cr3t-token" not in err
    assert named in err


class _StopWhenStarted(io.StringIO):
    """The output ``run`` writes its start line to: stops it there, as SIGTERM would."""

    def write(self, text: str) -> int:
        if text.startswith("karpenter-capi running"):
            os.kill(os.getpid(), signal.SIGTERM)
        return super().write(text)


@pytest.mark.parametrize(
    ("owns_process", "policy"),
    [
        (True, "survivors"),
        (True, "unwalked"),
        (True, "middle-survivors"),
        (True, "off"),
        (False, "survivors"),
    ],
)
def test_run_settles_the_heap_only_in_a_process_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, owns_process: bool, policy: str
) -> None:
    # The console script (no argv) freezes what start-up made, so full collections stop
    # walking it; a test or embedding program calling main(argv) keeps its heap unfrozen.
    from karpenter_capi.core.clock import FakeClock
    from karpenter_capi.sim.apiserver.http import HttpFront
    from karpenter_capi.sim.apiserver.kubeconfig import write_kubeconfig
    from karpenter_capi.sim.cluster import new_cluster

    frozen: list[bool] = []
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(True))
    monkeypatch.setattr(gc, "set_threshold", lambda *_: None)
    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    server = new_cluster(clock=FakeClock())
    try:
        with HttpFront(server) as front:
            kubeconfig = write_kubeconfig(front.url, tmp_path / "kubeconfig")
            argv = ["run", "--kubeconfig", str(kubeconfig), "--no-leader-elect"]
            argv += ["--metrics-port", "-1", "--gc-policy", policy]
            if owns_process:
                monkeypatch.setattr(sys, "argv", ["karpenter-capi", *argv])
                code = main(out=_StopWhenStarted())
            else:
                code = main(argv, out=_StopWhenStarted())
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    assert code == 0
    # Start-up frozen, then survivors of collections (``--gc-policy survivors``).
    assert bool(frozen) == (owns_process and policy != "off")
    # Uninstalled when run returns: no hook of the policy left.
    assert not [c for c in gc.callbacks if type(getattr(c, "__self__", None)) is CollectorPolicy]


def test_an_unknown_gc_policy_from_the_environment_is_a_one_line_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # argparse checks the flag's choices, not a default read from GC_POLICY; the command
    # refuses it before it connects anywhere.
    monkeypatch.setenv("GC_POLICY", "never")
    code = main(["run", "--kubeconfig", str(tmp_path / "absent"), "--no-leader-elect"])
    assert code == 1
    err = capsys.readouterr().err
    assert "--gc-policy (env GC_POLICY): unknown collector policy 'never'" in err
    assert "Traceback" not in err
