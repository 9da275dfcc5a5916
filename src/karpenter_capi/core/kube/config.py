"""Where the two clusters are: the workload cluster (Nodes, Pods) and the management cluster.

Cluster API may run its objects in a different cluster from the one whose Nodes it manages, so
the controller holds two connections, configured separately and defaulting to one. Every flag
has an environment variable, because in a Deployment the chart sets env, while at a terminal a
user types flags; flags win. Contradictions (a URL *and* a kubeconfig for the management
cluster) and missing files are reported as one-line ``ClusterConfigError``s before anything
connects, so a typo never surfaces as a confusing TLS or 404 error later.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from karpenter_capi.core.errors import InvalidInputError
from karpenter_capi.core.kube._official_credentials import decode_ca_data
from karpenter_capi.core.kube.official import DEFAULT_USER_AGENT, OfficialClient

ENV_KUBECONFIG = "KUBECONFIG"
ENV_MANAGEMENT_KUBECONFIG = "KARPENTER_CAPI_MANAGEMENT_KUBECONFIG"
ENV_MANAGEMENT_CONTEXT = "KARPENTER_CAPI_MANAGEMENT_CONTEXT"
ENV_MANAGEMENT_URL = "KARPENTER_CAPI_MANAGEMENT_URL"
ENV_MANAGEMENT_TOKEN = "KARPENTER_CAPI_MANAGEMENT_TOKEN"
ENV_MANAGEMENT_TOKEN_FILE = "KARPENTER_CAPI_MANAGEMENT_TOKEN_FILE"
ENV_MANAGEMENT_CA_DATA = "KARPENTER_CAPI_MANAGEMENT_CA_DATA"
ENV_MANAGEMENT_INSECURE = "KARPENTER_CAPI_MANAGEMENT_INSECURE_SKIP_TLS_VERIFY"
# Set by the kubelet in every pod: the sign that the service account can be used.
ENV_IN_CLUSTER_HOST = "KUBERNETES_SERVICE_HOST"

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"", "0", "false", "no", "off"})


class ClusterConfigError(InvalidInputError):
    """The cluster connection flags/env are contradictory or point at something missing."""


@dataclass(frozen=True, slots=True)
class ClusterConnection:
    """How to reach one cluster: exactly one of kubeconfig, in-cluster, or URL."""

    kubeconfig: str | None = None  # a path, or an os.pathsep-separated list like $KUBECONFIG
    context: str | None = None
    in_cluster: bool = False
    url: str | None = None
    # Kept out of repr: a connection printed in a log or a traceback must not show it.
    token: str | None = field(default=None, repr=False)
    token_file: str | None = None  # read at each request after it changes (rotated Secrets)
    ca_data: str | None = None  # base64-encoded PEM, as kubeconfig certificate-authority-data
    insecure_skip_tls_verify: bool = False

    def describe(self) -> str:
        """A short human description for logs (never the token)."""
        if self.url:
            return f"url {self.url}"
        if self.in_cluster:
            return "in-cluster service account"
        where = self.kubeconfig or "default kubeconfig"
        return f"kubeconfig {where}" + (f" context {self.context}" if self.context else "")


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    workload: ClusterConnection
    management: ClusterConnection | None = None

    @property
    def management_connection(self) -> ClusterConnection:
        """The management cluster's connection; the workload cluster unless set apart."""
        return self.management if self.management is not None else self.workload

    @property
    def single_cluster(self) -> bool:
        return self.management is None or self.management == self.workload


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the cluster connection flags. Defaults are ``None`` so env can fill them later."""
    group = parser.add_argument_group("cluster connection")
    group.add_argument(
        "--kubeconfig",
        help=f"kubeconfig of the workload cluster (env {ENV_KUBECONFIG}; "
        "default: in-cluster service account when running in a pod, else ~/.kube/config)",
    )
    group.add_argument("--context", help="kubeconfig context of the workload cluster")
    group.add_argument(
        "--management-kubeconfig",
        help="kubeconfig of the Cluster API management cluster, when it is not the workload "
        f"cluster (env {ENV_MANAGEMENT_KUBECONFIG})",
    )
    group.add_argument(
        "--management-context",
        help=f"kubeconfig context of the management cluster (env {ENV_MANAGEMENT_CONTEXT})",
    )
    group.add_argument(
        "--management-url",
        help=f"API server URL of the management cluster (env {ENV_MANAGEMENT_URL})",
    )
    group.add_argument(
        "--management-token",
        help=f"bearer token for --management-url (env {ENV_MANAGEMENT_TOKEN})",
    )
    group.add_argument(
        "--management-token-file",
        help="file holding the bearer token for --management-url, re-read when it changes "
        f"(a mounted Secret); instead of --management-token (env {ENV_MANAGEMENT_TOKEN_FILE})",
    )
    group.add_argument(
        "--management-ca-data",
        help=f"base64 PEM CA bundle for --management-url (env {ENV_MANAGEMENT_CA_DATA})",
    )
    group.add_argument(
        "--management-insecure-skip-tls-verify",
        action="store_true",
        default=None,
        help=f"do not verify the management server's certificate (env {ENV_MANAGEMENT_INSECURE})",
    )


def cluster_config_from_args(
    ns: argparse.Namespace, environ: Mapping[str, str] | None = None
) -> ClusterConfig:
    """Resolve flags (first) and environment (second) into a ``ClusterConfig``."""
    env = os.environ if environ is None else environ

    def pick(attr: str, env_name: str | None) -> str | None:
        value = getattr(ns, attr, None)
        if value is None and env_name is not None:
            value = env.get(env_name) or None
        return str(value) if value is not None else None

    workload = _workload_connection(pick("kubeconfig", ENV_KUBECONFIG), pick("context", None), env)

    m_kubeconfig = pick("management_kubeconfig", ENV_MANAGEMENT_KUBECONFIG)
    m_context = pick("management_context", ENV_MANAGEMENT_CONTEXT)
    m_url = pick("management_url", ENV_MANAGEMENT_URL)
    m_token = pick("management_token", ENV_MANAGEMENT_TOKEN)
    m_token_file = pick("management_token_file", ENV_MANAGEMENT_TOKEN_FILE)
    m_ca_data = pick("management_ca_data", ENV_MANAGEMENT_CA_DATA)
    m_insecure_flag = getattr(ns, "management_insecure_skip_tls_verify", None)
    m_insecure = (
        bool(m_insecure_flag)
        if m_insecure_flag is not None
        else _parse_bool(ENV_MANAGEMENT_INSECURE, env.get(ENV_MANAGEMENT_INSECURE, ""))
    )

    if m_url and m_kubeconfig:
        raise ClusterConfigError(
            "the management cluster is given both a URL and a kubeconfig: "
            "use --management-url or --management-kubeconfig, not both"
        )
    if not m_url:
        for given, flag in (
            (m_token, "--management-token"),
            (m_token_file, "--management-token-file"),
            (m_ca_data, "--management-ca-data"),
            (m_insecure, "--management-insecure-skip-tls-verify"),
        ):
            if given:
                raise ClusterConfigError(f"{flag} needs --management-url")
    if m_token and m_token_file:
        raise ClusterConfigError(
            "the management cluster is given both a token and a token file: "
            "use --management-token or --management-token-file, not both"
        )
    if m_context and not m_kubeconfig:
        raise ClusterConfigError("--management-context needs --management-kubeconfig")

    management: ClusterConnection | None = None
    if m_url:
        if not m_url.startswith(("https://", "http://")):
            raise ClusterConfigError(
                f"--management-url {m_url!r} must start with https:// or http://"
            )
        if m_ca_data:
            try:
                decode_ca_data(m_ca_data)
            except ValueError as exc:
                raise ClusterConfigError(f"--management-ca-data: {exc}") from None
        if m_token_file and not Path(m_token_file).expanduser().is_file():
            raise ClusterConfigError(f"--management-token-file: file not found: {m_token_file}")
        management = ClusterConnection(
            url=m_url,
            token=m_token,
            token_file=m_token_file,
            ca_data=m_ca_data,
            insecure_skip_tls_verify=m_insecure,
        )
    elif m_kubeconfig:
        _require_kubeconfig(m_kubeconfig, "--management-kubeconfig")
        management = ClusterConnection(kubeconfig=m_kubeconfig, context=m_context)
    return ClusterConfig(workload=workload, management=management)


def connect(conn: ClusterConnection, *, user_agent: str = DEFAULT_USER_AGENT) -> OfficialClient:
    """Open a client for one connection (nothing is sent until the first call), naming itself
    ``user_agent`` in every request."""
    if conn.url:
        return OfficialClient.from_url(
            conn.url,
            token=conn.token,
            token_file=conn.token_file,
            ca_data=conn.ca_data,
            insecure_skip_tls_verify=conn.insecure_skip_tls_verify,
            user_agent=user_agent,
        )
    if conn.in_cluster:
        return OfficialClient.in_cluster(user_agent=user_agent)
    return OfficialClient.from_kubeconfig(conn.kubeconfig, conn.context, user_agent=user_agent)


def connect_kubeconfig(
    document: Mapping[str, Any],
    *,
    context: str | None = None,
    poll_watches: bool = False,
    user_agent: str = DEFAULT_USER_AGENT,
) -> OfficialClient:
    """Open a client from a kubeconfig already read into a dict: what fleet mode does with the
    ``value`` of each Cluster's ``<cluster>-kubeconfig`` Secret, which never touches a file.

    The library's global default configuration is left untouched, as for a kubeconfig file.
    ``poll_watches`` as ``OfficialClient`` (for the stepped driver over the in-memory front);
    ``user_agent``: ``run --fleet`` passes the replica's, as for its management client.
    """
    from kubernetes.client import Configuration
    from kubernetes.config import load_kube_config_from_dict

    configuration = type.__call__(Configuration)
    load_kube_config_from_dict(
        config_dict=dict(document),
        context=context,
        client_configuration=configuration,
        persist_config=False,
    )  # type: ignore[no-untyped-call]
    return OfficialClient.from_configuration(
        configuration, poll_watches=poll_watches, user_agent=user_agent
    )


def connect_clusters(
    config: ClusterConfig, *, user_agent: str = DEFAULT_USER_AGENT
) -> tuple[OfficialClient, OfficialClient]:
    """Clients for (workload, management); one shared client when they are the same cluster."""
    workload = connect(config.workload, user_agent=user_agent)
    if config.single_cluster:
        return workload, workload
    return workload, connect(config.management_connection, user_agent=user_agent)


def _workload_connection(
    kubeconfig: str | None, context: str | None, env: Mapping[str, str]
) -> ClusterConnection:
    if kubeconfig:
        _require_kubeconfig(kubeconfig, "--kubeconfig/KUBECONFIG")
        return ClusterConnection(kubeconfig=kubeconfig, context=context)
    if env.get(ENV_IN_CLUSTER_HOST) and context is None:
        return ClusterConnection(in_cluster=True)
    default = Path(env.get("HOME", "~")).expanduser() / ".kube" / "config"
    if not default.is_file():
        raise ClusterConfigError(
            f"no cluster to talk to: not running in a pod and {default} does not exist "
            "(pass --kubeconfig or set KUBECONFIG)"
        )
    return ClusterConnection(kubeconfig=str(default), context=context)


def _require_kubeconfig(value: str, flag: str) -> None:
    """Like kubectl, a list of paths is fine as long as one of them exists."""
    paths = [p for p in value.split(os.pathsep) if p]
    if not any(Path(p).expanduser().is_file() for p in paths):
        missing = ", ".join(paths) or repr(value)
        raise ClusterConfigError(f"{flag}: kubeconfig file not found: {missing}")


def _parse_bool(name: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ClusterConfigError(f"{name}={value!r} is not a boolean (use true or false)")
