"""One Cluster of the fleet by name, for the commands that look at a single workload cluster.

``karpenter-capi explain --cluster NAMESPACE/NAME`` (or ``NAME`` when only one namespace has
it) reads the management cluster as fleet mode does: the Cluster, its kubeconfig Secret, a
client of the workload cluster, and the management cluster scoped to that Cluster. A name
that matches nothing or several Clusters, or a Secret that cannot be used, is an
``InvalidInputError`` saying which and what to pass instead.
"""

from __future__ import annotations

from dataclasses import dataclass

from karpenter_capi.core.errors import InvalidInputError
from karpenter_capi.core.fleet.discovery import ObservedCluster
from karpenter_capi.core.fleet.kubeconfigs import (
    Kubeconfig,
    KubeconfigProblem,
    read_kubeconfig,
    secret_name,
)
from karpenter_capi.core.fleet.scoped import ScopedClient
from karpenter_capi.core.kube.client import KubeClient
from karpenter_capi.core.kube.errors import NotFound
from karpenter_capi.core.kube.resources import CLUSTERS, SECRETS


@dataclass(frozen=True)
class ClusterAccess:
    """A Cluster found by name, its kubeconfig, and the management cluster as it may see it."""

    cluster: ObservedCluster
    kubeconfig: Kubeconfig
    management: ScopedClient


def find_cluster(management: KubeClient, reference: str) -> ClusterAccess:
    """The Cluster ``NAMESPACE/NAME`` (or ``NAME``, when unique) and its usable kubeconfig."""
    namespace, _, name = reference.rpartition("/")
    if not name:
        raise InvalidInputError(f"--cluster {reference!r}: expected NAMESPACE/NAME or NAME")
    if namespace:
        try:
            obj = management.get(CLUSTERS, name, namespace)
        except NotFound:
            raise InvalidInputError(
                f"--cluster {reference!r}: no Cluster {name!r} in namespace {namespace!r} "
                "of the management cluster"
            ) from None
    else:
        found = [
            c
            for c in management.list(CLUSTERS).items
            if (c.get("metadata") or {}).get("name") == name
        ]
        if not found:
            raise InvalidInputError(
                f"--cluster {name!r}: no Cluster of that name in the management cluster"
            )
        if len(found) > 1:
            where = ", ".join(sorted(f"{c['metadata']['namespace']}/{name}" for c in found))
            raise InvalidInputError(
                f"--cluster {name!r}: several Clusters have that name ({where}); "
                "pass NAMESPACE/NAME"
            )
        obj = found[0]
        namespace = str(obj["metadata"]["namespace"])
    try:
        secret = management.get(SECRETS, secret_name(name), namespace)
    except NotFound:
        secret = None
    try:
        kubeconfig = read_kubeconfig(secret, namespace, name)
    except KubeconfigProblem as problem:
        raise InvalidInputError(f"--cluster {reference!r}: {problem.message}") from None
    return ClusterAccess(
        ObservedCluster(namespace, name, obj, secret),
        kubeconfig,
        ScopedClient(management, namespace, name),
    )


__all__ = ["ClusterAccess", "find_cluster"]
