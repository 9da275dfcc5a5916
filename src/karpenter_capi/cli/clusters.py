"""The clusters and plugins a subcommand works on, from its flags.

``run``, ``explain`` and ``instance-types`` all open the workload and management clusters (or
an in-memory cluster holding ``-f`` manifests) and load the enabled plugins over them; this is
the one place that does it, imported by each. What a user can get wrong here (a kubeconfig
context that does not exist, a malformed ``--plugin-option``) is an ``InvalidInputError``.
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from karpenter_capi.cli.options import plugin_names
from karpenter_capi.core.errors import InvalidInputError

if TYPE_CHECKING:
    from karpenter_capi.core.fleet.scoped import ScopedClient
    from karpenter_capi.core.kube.client import KubeClient
    from karpenter_capi.core.plugin_host import Plugins


def user_agent(args: argparse.Namespace) -> str:
    """The ``User-Agent`` of every client a subcommand builds: ``karpenter-capi/VERSION``, with
    ``(IDENTITY)`` where ``run`` is given a ``--leader-election-identity``, so an API server's
    audit log (or ``benchmarks/fleet_launches.py``'s request log) tells the replicas apart.
    ``run --fleet`` gives the same to the clients it builds from the kubeconfig Secrets."""
    from karpenter_capi import __version__

    identity = getattr(args, "leader_election_identity", None)
    return f"karpenter-capi/{__version__}" + (f" ({identity})" if identity else "")


def clients(args: argparse.Namespace) -> tuple[KubeClient, KubeClient]:
    """The workload and management clients: a cluster, or manifests in memory with ``-f``."""
    if getattr(args, "filename", None):
        from karpenter_capi.sim.cluster import new_cluster
        from karpenter_capi.sim.manifests import load_manifest_files

        server = new_cluster()
        server.apply_manifests(load_manifest_files(args.filename))
        return server, server
    from kubernetes.config.config_exception import ConfigException

    from karpenter_capi.core.kube.config import cluster_config_from_args, connect_clusters

    config = cluster_config_from_args(args, os.environ)
    try:
        return connect_clusters(config, user_agent=user_agent(args))
    except ConfigException as exc:
        # The client library's word for a kubeconfig (or a pod's service account) it cannot use.
        raise InvalidInputError(f"cluster configuration: {exc}") from None


def fleet_management_client(args: argparse.Namespace) -> KubeClient:
    """``run --fleet``'s one connection: the management cluster, from ``--kubeconfig`` or the
    pod's service account; each workload cluster is reached through its Cluster's Secret."""
    if getattr(args, "filename", None):
        raise InvalidInputError("--fleet serves real clusters; it cannot be used with -f")
    from kubernetes.config.config_exception import ConfigException

    from karpenter_capi.core.kube.config import cluster_config_from_args, connect

    config = cluster_config_from_args(args, os.environ)
    if config.management is not None:
        raise InvalidInputError(
            "--fleet runs in the management cluster, given by --kubeconfig (or the pod's "
            "service account); the --management-* flags do not apply"
        )
    try:
        return connect(config.workload, user_agent=user_agent(args))
    except ConfigException as exc:
        raise InvalidInputError(f"cluster configuration: {exc}") from None


def fleet_member_clients(
    args: argparse.Namespace, reference: str
) -> tuple[KubeClient, ScopedClient]:
    """``(workload, management)`` of one fleet Cluster (``--cluster``): ``--kubeconfig`` is the
    management cluster, the workload cluster is opened from the Cluster's kubeconfig Secret,
    and the management client is scoped to the Cluster as in ``run --fleet``."""
    from karpenter_capi.core.fleet.lookup import find_cluster
    from karpenter_capi.core.kube.config import connect_kubeconfig

    management = fleet_management_client(args)
    access = find_cluster(management, reference)
    workload = connect_kubeconfig(access.kubeconfig.document, user_agent=user_agent(args))
    return workload, access.management


def load_plugins(
    args: argparse.Namespace,
    workload: KubeClient,
    management: KubeClient,
    *,
    read_only: bool = False,
    cluster: tuple[str, str] | None = None,
) -> Plugins:
    """The enabled plugins; ``read_only`` (a command that only looks) runs them as under
    ``--dry-run``, so they write nothing (no NodeClass status, no price ConfigMap). ``cluster``:
    the fleet Cluster ``(namespace, name)`` the NodeClasses must launch into, as under
    ``run --fleet`` (``core.fleet.guard``)."""
    from karpenter_capi.core.clock import SystemClock
    from karpenter_capi.core.plugin_host import (
        PluginEnvironment,
        Plugins,
        parse_plugin_options,
    )
    from karpenter_capi.core.plugin_host import (
        load_plugins as load_entry_points,
    )

    environment = PluginEnvironment(
        workload=workload,
        management=management,
        clock=SystemClock(),
        options=parse_plugin_options(args.plugin_option),
        dry_run=read_only or bool(getattr(args, "dry_run", False)),
    )
    sources = load_entry_points(plugin_names(args))
    if cluster is not None:
        from karpenter_capi.core.fleet.guard import GUARD_PLUGIN, ClusterGuard

        sources.insert(0, (GUARD_PLUGIN, ClusterGuard(*cluster)))
    return Plugins.from_objects(sources, environment)
