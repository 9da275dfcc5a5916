"""Credentials for each cluster, from files or the environment, are never printed.

Each case runs ``karpenter-capi run --once`` (with and without ``--dry-run``) at DEBUG, the
way a user would start it, against two HTTP fronts that check bearer tokens, and then searches
everything a user or a log collector could see for the token material (the token, its base64,
the base64 of its ``Authorization`` header, and its distinctive core alone): stdout, stderr,
every log record with its traceback, the Events and statuses written to the workload cluster,
the exceptions the clients raise, and ``--help``. The error paths are the ones where a leak
would be likeliest: the management cluster unreachable, refusing the token (401), forbidding
the request (403), presenting a certificate the given CA did not sign; the workload cluster
refusing the token or unreachable.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

import karpenter_capi
from karpenter_capi import cli
from karpenter_capi.core.kube import (
    CLUSTER_API_NODE_CLASSES,
    EVENTS,
    MACHINE_DEPLOYMENTS,
    NODECLAIMS,
    NODEPOOLS,
    PODS,
)
from karpenter_capi.core.kube.config import ClusterConfig, ClusterConnection
from karpenter_capi.core.kube.errors import ApiError, Forbidden
from karpenter_capi.sim.apiserver.http import HttpFront
from karpenter_capi.sim.apiserver.kubeconfig import kubeconfig_document
from tests.reliability.two_clusters.env import (
    NAMESPACE,
    TwoClusters,
    clients_from_command_line,
    write_kubeconfig,
)
from tests.reliability.two_clusters.tls_server import HandshakeOnlyServer, ca_data, self_signed

CORES = {"workload": "7c1f0e5d9a3b42d8", "management": "4e8b2f6a0c1d97e3"}
WORKLOAD_TOKEN = f"wl-{CORES['workload']}-do-not-print"
MANAGEMENT_TOKEN = f"mgmt-{CORES['management']}-do-not-print"
OTHER_TOKEN = "what-the-server-expects-instead"
DENIED = "ManagementClusterAccessDenied"
REFUSED = "the management cluster refused the controller's credentials"
UNREACHABLE = "the management cluster cannot be reached"
_ENV_CLEARED = (
    "KUBECONFIG",
    "KUBERNETES_SERVICE_HOST",
    "KARPENTER_CAPI_PLUGINS",
    "KARPENTER_CAPI_LOG_LEVEL",
    "KARPENTER_CAPI_LOG_FORMAT",
    "KARPENTER_CAPI_MANAGEMENT_KUBECONFIG",
    "KARPENTER_CAPI_MANAGEMENT_CONTEXT",
    "KARPENTER_CAPI_MANAGEMENT_URL",
    "KARPENTER_CAPI_MANAGEMENT_TOKEN",
    "KARPENTER_CAPI_MANAGEMENT_TOKEN_FILE",
    "KARPENTER_CAPI_MANAGEMENT_CA_DATA",
    "KARPENTER_CAPI_MANAGEMENT_INSECURE_SKIP_TLS_VERIFY",
    "DRY_RUN",
)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def token_material() -> dict[str, str]:
    """Every form of the two tokens a leak could take, by a label saying which it is."""
    forms: dict[str, str] = {}
    for token, core in zip((WORKLOAD_TOKEN, MANAGEMENT_TOKEN), CORES.values(), strict=True):
        forms[token] = token
        forms[f"base64({token})"] = _b64(token)
        forms[f"base64(Bearer {token})"] = _b64(f"Bearer {token}")
        forms[f"core of {token}"] = core
    return forms


def leaks(where: str, text: str) -> list[str]:
    return [f"{label} in {where}" for label, form in token_material().items() if form in text]


def _free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _pending_pod(env: TwoClusters) -> None:
    env.workload.create(
        PODS,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "web-0", "namespace": NAMESPACE},
            "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "500m"}}}]},
        },
        NAMESPACE,
    )
    env.workload.patch(
        PODS,
        "web-0",
        {
            "status": {
                "phase": "Pending",
                "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
                ],
            }
        },
        NAMESPACE,
        subresource="status",
    )


@dataclass
class Setup:
    """How a case is configured: argv after ``run``, the environment, what to expect."""

    argv: list[str]
    environ: dict[str, str]
    exit_code: int
    expect: str
    """A string the run's output must contain: the path under test was taken."""
    reason: str | None = None
    """The ClusterAPINodeClass's Ready reason after a run that writes."""


CASES = (
    "healthy",
    "management-token-file-in-kubeconfig",
    "management-token-file-in-env",
    "management-refuses-the-token",
    "management-forbids",
    "management-unreachable",
    "management-certificate-not-signed-by-the-ca",
    "management-token-with-a-line-break",
    "workload-refuses-the-token",
    "workload-unreachable",
)
ERRORS = CASES.index("management-refuses-the-token")
"""Cases from this index on are error paths."""


@dataclass
class World:
    env: TwoClusters
    workload_front: HttpFront
    management_front: HttpFront
    tls: HandshakeOnlyServer
    tmp_path: Path
    monkeypatch: pytest.MonkeyPatch


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    """The two clusters (a pending pod in the workload one) behind fronts that check tokens,
    and a TLS server with a certificate nobody trusts."""
    env = TwoClusters()
    _pending_pod(env)
    with (
        HttpFront(env.workload, token=WORKLOAD_TOKEN) as workload_front,
        HttpFront(env.management, token=MANAGEMENT_TOKEN) as management_front,
        HandshakeOnlyServer() as tls,
    ):
        yield World(env, workload_front, management_front, tls, tmp_path, monkeypatch)


def _setup(case: str, world: World) -> Setup:
    env, workload_front, management_front = world.env, world.workload_front, world.management_front
    tmp_path, tls = world.tmp_path, world.tls
    workload_kubeconfig = write_kubeconfig(
        tmp_path / "workload.kubeconfig", workload_front.url, WORKLOAD_TOKEN, "workload"
    )
    environ = {
        "KUBECONFIG": str(workload_kubeconfig),
        "KARPENTER_CAPI_MANAGEMENT_URL": management_front.url,
        "KARPENTER_CAPI_MANAGEMENT_TOKEN": MANAGEMENT_TOKEN,
    }
    if case == "healthy":
        return Setup([], environ, 0, "1 NodeClaims,", "Ready")
    if case == "management-token-file-in-kubeconfig":
        token_file = tmp_path / "management.token"
        token_file.write_text(MANAGEMENT_TOKEN + "\n")
        token_file.chmod(0o600)
        kubeconfig = tmp_path / "management.kubeconfig"
        document = kubeconfig_document(management_front.url, "management")
        document["users"] = [{"name": "management", "user": {"tokenFile": str(token_file)}}]
        kubeconfig.write_text(yaml.safe_dump(document))
        del environ["KARPENTER_CAPI_MANAGEMENT_URL"], environ["KARPENTER_CAPI_MANAGEMENT_TOKEN"]
        return Setup(
            ["--management-kubeconfig", str(kubeconfig)], environ, 0, "1 NodeClaims,", "Ready"
        )
    if case == "management-token-file-in-env":
        token_file = tmp_path / "token"
        token_file.write_text(MANAGEMENT_TOKEN + "\n")
        del environ["KARPENTER_CAPI_MANAGEMENT_TOKEN"]
        environ["KARPENTER_CAPI_MANAGEMENT_TOKEN_FILE"] = str(token_file)
        return Setup([], environ, 0, "1 NodeClaims,", "Ready")
    if case == "management-refuses-the-token":
        management_front.token = OTHER_TOKEN
        return Setup([], environ, 0, REFUSED, DENIED)
    if case == "management-forbids":
        env.management.faults.fail(
            "*", "*", Forbidden(f"User {MANAGEMENT_TOKEN[:4]}... cannot list"), times=None
        )
        return Setup([], environ, 0, REFUSED, DENIED)
    if case == "management-unreachable":
        environ["KARPENTER_CAPI_MANAGEMENT_URL"] = f"http://127.0.0.1:{_free_port()}"
        return Setup([], environ, 0, UNREACHABLE, "ManagementClusterUnreachable")
    if case == "management-certificate-not-signed-by-the-ca":
        other_ca, _ = self_signed("some other CA")
        environ["KARPENTER_CAPI_MANAGEMENT_URL"] = tls.url
        environ["KARPENTER_CAPI_MANAGEMENT_CA_DATA"] = ca_data(other_ca)
        return Setup([], environ, 0, UNREACHABLE, "ManagementClusterUnreachable")
    if case == "management-token-with-a-line-break":
        environ["KARPENTER_CAPI_MANAGEMENT_TOKEN"] = MANAGEMENT_TOKEN.replace("-do-", "-\r\ndo-")
        return Setup([], environ, 0, "not a valid HTTP header value", DENIED)
    if case == "workload-refuses-the-token":
        workload_front.token = OTHER_TOKEN
        return Setup([], environ, 1, "Unauthorized")
    assert case == "workload-unreachable"
    write_kubeconfig(
        workload_kubeconfig, f"http://127.0.0.1:{_free_port()}", WORKLOAD_TOKEN, "workload"
    )
    return Setup([], environ, 1, "cannot reach the API server")


def _written(env: TwoClusters) -> str:
    """Everything the controller could have written to the workload cluster, as JSON."""
    kinds = (EVENTS, CLUSTER_API_NODE_CLASSES, NODEPOOLS, NODECLAIMS, PODS)
    return json.dumps({kind.plural: env.workload.list(kind).items for kind in kinds})


@pytest.mark.parametrize("dry_run", [False, True], ids=["writes", "dry-run"])
@pytest.mark.parametrize("case", CASES)
def test_run_never_prints_a_token(
    case: str,
    dry_run: bool,
    world: World,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    env, monkeypatch = world.env, world.monkeypatch
    setup = _setup(case, world)
    for name in _ENV_CLEARED:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(world.tmp_path))
    for name, value in setup.environ.items():
        monkeypatch.setenv(name, value)
    caplog.set_level(logging.DEBUG)
    argv = ["--log-level", "DEBUG", "run", "--once", *setup.argv]
    code = cli.main([*argv, "--dry-run"] if dry_run else argv)
    out, err = capsys.readouterr()
    logs = "\n".join(
        caplog.handler.format(record) for record in caplog.records
    )  # messages, arguments and tracebacks, every level
    written = _written(env)
    assert code == setup.exit_code, err
    assert setup.expect in out + err + logs, out + err
    if setup.reason is not None and not dry_run:
        (nodeclass,) = env.workload.list(CLUSTER_API_NODE_CLASSES).items
        (ready,) = nodeclass["status"]["conditions"]
        assert ready["reason"] == setup.reason
    assert caplog.records, "nothing was logged: the search below would prove nothing"
    found = leaks("stdout", out) + leaks("stderr", err) + leaks("logs", logs)
    found += leaks("the workload cluster's objects", written)
    assert not found


def test_the_exceptions_of_every_error_path_carry_no_token(world: World) -> None:
    raised: list[ApiError] = []
    for case in CASES[ERRORS:]:
        world.management_front.token = MANAGEMENT_TOKEN
        world.workload_front.token = WORKLOAD_TOKEN
        setup = _setup(case, world)
        workload, management = clients_from_command_line(setup.argv, setup.environ)
        with workload, management:
            client = workload if case.startswith("workload") else management
            with pytest.raises(ApiError) as info:
                client.list(MACHINE_DEPLOYMENTS if client is management else PODS)
            raised.append(info.value)
        world.env.management.faults.clear()
    assert len(raised) == len(CASES) - ERRORS
    found = []
    for error in raised:
        text = "".join(traceback.format_exception(error)) + repr(error) + repr(error.to_status())
        found += leaks(f"{type(error).__name__} {error}", text)
    assert not found


def test_the_connection_settings_never_show_a_token() -> None:
    connection = ClusterConnection(
        url="https://mgmt.example:6443", token=MANAGEMENT_TOKEN, ca_data=_b64("-----BEGIN")
    )
    config = ClusterConfig(workload=ClusterConnection(kubeconfig="/k"), management=connection)
    text = repr(config) + str(config) + connection.describe() + repr(connection)
    assert not leaks("the connection settings", text)
    assert connection.token == MANAGEMENT_TOKEN  # kept, only not shown


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["explain", "--help"]])
def test_help_shows_no_token_even_when_the_environment_holds_them(
    argv: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("KARPENTER_CAPI_MANAGEMENT_TOKEN", MANAGEMENT_TOKEN)
    monkeypatch.setenv("KARPENTER_CAPI_MANAGEMENT_CA_DATA", _b64(WORKLOAD_TOKEN))
    kubeconfig = write_kubeconfig(tmp_path / "kc", "http://127.0.0.1:1", WORKLOAD_TOKEN, "w")
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 0
    out, err = capsys.readouterr()
    assert "--management-token" in out or argv == ["--help"]
    assert not leaks("--help", out + err)


def test_a_rotated_token_file_is_picked_up_without_a_restart(world: World) -> None:
    token_file = world.tmp_path / "token"
    token_file.write_text(MANAGEMENT_TOKEN + "\n")
    _, management = clients_from_command_line(
        [],
        {
            "KUBECONFIG": str(
                write_kubeconfig(world.tmp_path / "kc", world.workload_front.url, "x", "w")
            ),
            "KARPENTER_CAPI_MANAGEMENT_URL": world.management_front.url,
            "KARPENTER_CAPI_MANAGEMENT_TOKEN_FILE": str(token_file),
        },
    )
    with management:
        assert management.list(MACHINE_DEPLOYMENTS, NAMESPACE).items
        rotated = MANAGEMENT_TOKEN + "-rotated"
        world.management_front.token = rotated
        with pytest.raises(ApiError) as refused:
            management.list(MACHINE_DEPLOYMENTS, NAMESPACE)
        assert refused.value.code == 401
        token_file.write_text(rotated + "\n")
        assert management.list(MACHINE_DEPLOYMENTS, NAMESPACE).items


@pytest.mark.parametrize("case", ["management-refuses-the-token", "management-unreachable"])
def test_a_running_controller_never_prints_a_token(case: str, world: World) -> None:
    """``karpenter-capi run`` as a process, threaded, until SIGTERM: informers, retries and
    the provisioning loop all log at DEBUG while the management cluster fails."""
    setup = _setup(case, world)
    source = Path(karpenter_capi.__file__).resolve().parents[1]
    environ = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(world.tmp_path),
        "PYTHONPATH": str(source),
        "BATCH_IDLE_DURATION": "0.2",
        **setup.environ,
    }
    argv = ["--log-level", "DEBUG", "run", "--no-leader-elect", "--metrics-port", "-1"]
    process = subprocess.Popen(
        [sys.executable, "-m", "karpenter_capi", *argv, *setup.argv],
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not _ready_reason(world.env, setup.reason):
            time.sleep(0.2)
            assert process.poll() is None, process.communicate()
    finally:
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert "karpenter-capi running" in out
    assert setup.expect in err
    assert " DEBUG " in err, "the search below needs the DEBUG lines"
    found = leaks("stdout", out) + leaks("stderr", err)
    found += leaks("the workload cluster's objects", _written(world.env))
    assert not found


def _ready_reason(env: TwoClusters, reason: str | None) -> bool:
    """Whether the NodeClass's Ready condition has ``reason`` (the controller got that far)."""
    (nodeclass,) = env.workload.list(CLUSTER_API_NODE_CLASSES).items
    conditions = (nodeclass.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("reason") == reason for c in conditions)
