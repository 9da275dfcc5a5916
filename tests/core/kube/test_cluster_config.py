"""Cluster connection resolution: flags first, environment second, clear one-line errors."""

from __future__ import annotations

import argparse
import base64
from pathlib import Path

import pytest

from karpenter_capi.core.kube.config import (
    ClusterConfigError,
    ClusterConnection,
    add_cluster_arguments,
    cluster_config_from_args,
    connect,
    connect_clusters,
)

PEM = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n"
PEM_B64 = base64.b64encode(PEM.encode()).decode()


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_cluster_arguments(parser)
    return parser.parse_args(argv)


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Path:
    path = tmp_path / "workload.yaml"
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        "clusters:\n- name: c\n  cluster: {server: 'http://127.0.0.1:1'}\n"
        "users:\n- name: u\n  user: {token: t}\n"
        "contexts:\n- name: ctx\n  context: {cluster: c, user: u}\n"
        "current-context: ctx\n"
    )
    return path


def test_management_defaults_to_the_workload_cluster(kubeconfig: Path) -> None:
    config = cluster_config_from_args(_parse(["--kubeconfig", str(kubeconfig)]), {})
    assert config.workload == ClusterConnection(kubeconfig=str(kubeconfig))
    assert config.management is None
    assert config.management_connection == config.workload
    assert config.single_cluster


def test_kubeconfig_comes_from_env_when_no_flag(kubeconfig: Path) -> None:
    config = cluster_config_from_args(_parse(["--context", "ctx"]), {"KUBECONFIG": str(kubeconfig)})
    assert config.workload.kubeconfig == str(kubeconfig)
    assert config.workload.context == "ctx"


def test_flag_wins_over_env(kubeconfig: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.yaml"
    other.write_text(kubeconfig.read_text())
    config = cluster_config_from_args(
        _parse(["--kubeconfig", str(other)]), {"KUBECONFIG": str(kubeconfig)}
    )
    assert config.workload.kubeconfig == str(other)


def test_in_cluster_when_running_in_a_pod_without_kubeconfig() -> None:
    config = cluster_config_from_args(_parse([]), {"KUBERNETES_SERVICE_HOST": "10.0.0.1"})
    assert config.workload.in_cluster


def test_management_url_token_and_ca_from_env(kubeconfig: Path) -> None:
    env = {
        "KUBECONFIG": str(kubeconfig),
        "KARPENTER_CAPI_MANAGEMENT_URL": "https://mgmt.example:6443",
        "KARPENTER_CAPI_MANAGEMENT_TOKEN": "secret",
        "KARPENTER_CAPI_MANAGEMENT_CA_DATA": PEM_B64,
        "KARPENTER_CAPI_MANAGEMENT_INSECURE_SKIP_TLS_VERIFY": "false",
    }
    config = cluster_config_from_args(_parse([]), env)
    assert config.management == ClusterConnection(
        url="https://mgmt.example:6443", token="secret", ca_data=PEM_B64
    )
    assert not config.single_cluster
    assert "secret" not in config.management_connection.describe()


def test_management_insecure_flag(kubeconfig: Path) -> None:
    ns = _parse(
        [
            "--kubeconfig",
            str(kubeconfig),
            "--management-url",
            "https://mgmt:6443",
            "--management-insecure-skip-tls-verify",
        ]
    )
    config = cluster_config_from_args(ns, {})
    assert config.management_connection.insecure_skip_tls_verify


def test_management_kubeconfig_with_context(kubeconfig: Path) -> None:
    ns = _parse(
        [
            "--kubeconfig",
            str(kubeconfig),
            "--management-kubeconfig",
            str(kubeconfig),
            "--management-context",
            "mgmt",
        ]
    )
    config = cluster_config_from_args(ns, {})
    assert config.management == ClusterConnection(kubeconfig=str(kubeconfig), context="mgmt")


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (
            ["--management-url", "https://m:6443", "--management-kubeconfig", "{kc}"],
            {},
            "both a URL and a kubeconfig",
        ),
        (["--management-token", "t"], {}, "--management-token needs --management-url"),
        (["--management-token-file", "{kc}"], {}, "--management-token-file needs --management-url"),
        (
            ["--management-url", "https://m", "--management-token", "t"],
            {"KARPENTER_CAPI_MANAGEMENT_TOKEN_FILE": "{kc}"},
            "both a token and a token file",
        ),
        (
            ["--management-url", "https://m", "--management-token-file", "/nonexistent/token"],
            {},
            "--management-token-file: file not found",
        ),
        ([], {"KARPENTER_CAPI_MANAGEMENT_CA_DATA": PEM_B64}, "--management-ca-data needs"),
        (["--management-kubeconfig", "/nonexistent/mgmt.yaml"], {}, "not found"),
        (["--management-url", "mgmt:6443"], {}, "must start with https:// or http://$"),
        (["--management-url", "https://m", "--management-ca-data", "%%%"], {}, "neither PEM"),
        (
            [],
            {"KARPENTER_CAPI_MANAGEMENT_INSECURE_SKIP_TLS_VERIFY": "maybe"},
            "is not a boolean",
        ),
        (["--management-context", "x"], {}, "needs --management-kubeconfig"),
    ],
)
def test_contradictions_are_one_line_errors(
    kubeconfig: Path, argv: list[str], env: dict[str, str], message: str
) -> None:
    argv = ["--kubeconfig", str(kubeconfig), *(a.replace("{kc}", str(kubeconfig)) for a in argv)]
    env = {name: value.replace("{kc}", str(kubeconfig)) for name, value in env.items()}
    with pytest.raises(ClusterConfigError, match=message) as info:
        cluster_config_from_args(_parse(argv), env)
    assert "\n" not in str(info.value)


def test_missing_workload_kubeconfig_is_reported(tmp_path: Path) -> None:
    with pytest.raises(ClusterConfigError, match="kubeconfig file not found"):
        cluster_config_from_args(_parse(["--kubeconfig", str(tmp_path / "nope")]), {})
    with pytest.raises(ClusterConfigError, match="does not exist"):
        cluster_config_from_args(_parse([]), {"HOME": str(tmp_path)})


def test_kubeconfig_list_needs_only_one_existing_file(kubeconfig: Path, tmp_path: Path) -> None:
    listed = f"{tmp_path / 'missing.yaml'}:{kubeconfig}"
    config = cluster_config_from_args(_parse([]), {"KUBECONFIG": listed})
    assert config.workload.kubeconfig == listed


def test_connect_builds_clients_for_each_kind_of_connection(kubeconfig: Path) -> None:
    from_kubeconfig = connect(ClusterConnection(kubeconfig=str(kubeconfig), context="ctx"))
    from_url = connect(
        ClusterConnection(url="https://mgmt:6443", token="tok", insecure_skip_tls_verify=True)
    )
    try:
        assert from_kubeconfig.host == "http://127.0.0.1:1"
        assert from_url.host == "https://mgmt:6443"
    finally:
        from_kubeconfig.close()
        from_url.close()


def test_connect_clusters_shares_one_client_for_one_cluster(kubeconfig: Path) -> None:
    config = cluster_config_from_args(_parse(["--kubeconfig", str(kubeconfig)]), {})
    workload, management = connect_clusters(config)
    try:
        assert workload is management
    finally:
        workload.close()
