"""Where a CAPZ node group's VMs live: the Azure location and subscription of its Cluster.

A MachineDeployment names its ``Cluster`` (``spec.clusterName``); the Cluster's
``spec.infrastructureRef`` names an ``AzureCluster`` whose ``spec.location`` and
``spec.subscriptionID`` are exactly what CAPZ itself uses to create the VMs. For AKS clusters
managed by CAPZ the infrastructure cluster is an ``AzureManagedCluster`` that carries neither;
the ``AzureManagedControlPlane`` (``spec.controlPlaneRef``) does. Either may be missing or
unreadable (RBAC), so the plugin options ``location`` and ``subscription-id`` and the
``AZURE_SUBSCRIPTION_ID`` environment variable fill in what the cluster objects do not say.

Kinds are read at every version their group serves (discovery), the plural derived as
cluster-autoscaler does (lower-case kind + ``s``), so CAPI v1beta1 and v1beta2 both work.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from karpenter_capi.plugin_api import KubeClient, Resource
from karpenter_capi.plugin_api.kube import CAPI_GROUP, CAPI_INFRASTRUCTURE_GROUP, ApiError, NotFound

CLUSTER_NAME_LABEL: Final = "cluster.x-k8s.io/cluster-name"
AZURE_CLUSTER: Final = "AzureCluster"
AZURE_MANAGED_CLUSTER: Final = "AzureManagedCluster"
AZURE_MANAGED_CONTROL_PLANE: Final = "AzureManagedControlPlane"
SUBSCRIPTION_ENV: Final = "AZURE_SUBSCRIPTION_ID"


class AzureClusterError(Exception):
    """The location (or subscription) of a node group cannot be found; the message says why."""


@dataclass(frozen=True)
class AzureTarget:
    """The Azure location and subscription one node group's VMs are created in."""

    location: str
    subscription_id: str


@dataclass(frozen=True)
class _Found:
    location: str | None
    subscription_id: str | None


def cluster_name(owner: Mapping[str, Any]) -> str | None:
    """The Cluster a scalable resource belongs to (``spec.clusterName``, else its label)."""
    spec = owner.get("spec") or {}
    labels = (owner.get("metadata") or {}).get("labels") or {}
    name = spec.get("clusterName") or labels.get(CLUSTER_NAME_LABEL)
    return str(name) if name else None


def _ref_parts(ref: Mapping[str, Any], namespace: str) -> tuple[str, str, str, str, str]:
    """(group, version hint, kind, name, namespace) of a v1beta1 or v1beta2 reference."""
    api_version = str(ref.get("apiVersion") or "")
    group, slash, version = api_version.rpartition("/")
    group = str(ref.get("apiGroup") or (group if slash else "") or CAPI_INFRASTRUCTURE_GROUP)
    return (
        group,
        version if slash else "",
        str(ref.get("kind") or ""),
        str(ref.get("name") or ""),
        str(ref.get("namespace") or namespace),
    )


def read_served(
    client: KubeClient, group: str, kind: str, name: str, namespace: str, *, hint: str = ""
) -> Mapping[str, Any] | None:
    """``kind`` ``namespace/name`` at whichever version ``group`` serves it, or ``None``."""
    served = list(client.served_versions(group))
    plural = kind.lower() + "s"
    for version in dict.fromkeys(v for v in (hint, *served) if v and v in served):
        try:
            return client.get(Resource(group, version, plural, kind, True), name, namespace)
        except NotFound:
            continue
    return None


def _from_cluster(client: KubeClient, namespace: str, name: str) -> _Found:
    cluster = read_served(client, CAPI_GROUP, "Cluster", name, namespace)
    if cluster is None:
        raise AzureClusterError(f"Cluster {namespace}/{name} not found")
    spec = cluster.get("spec") or {}
    infra = spec.get("infrastructureRef") or {}
    group, hint, kind, infra_name, infra_ns = _ref_parts(infra, namespace)
    if kind == AZURE_MANAGED_CLUSTER:
        # AKS: the managed control plane holds the location and subscription.
        plane = spec.get("controlPlaneRef") or {}
        group, hint, kind, infra_name, infra_ns = _ref_parts(plane, namespace)
        if kind != AZURE_MANAGED_CONTROL_PLANE:
            return _Found(None, None)
    elif kind != AZURE_CLUSTER:
        return _Found(None, None)
    found = read_served(client, group, kind, infra_name, infra_ns, hint=hint)
    if found is None:
        raise AzureClusterError(f"{kind} {infra_ns}/{infra_name} of Cluster {name} not found")
    infra_spec = found.get("spec") or {}
    location = infra_spec.get("location")
    subscription = infra_spec.get("subscriptionID")
    return _Found(
        str(location).lower() if location else None,
        str(subscription) if subscription else None,
    )


def resolve_target(
    client: KubeClient,
    owner: Mapping[str, Any],
    *,
    location: str | None = None,
    subscription_id: str | None = None,
    env: Mapping[str, str] | None = None,
) -> AzureTarget:
    """The location and subscription of ``owner``'s VMs.

    First the cluster objects, then ``location``/``subscription_id`` (the plugin options),
    then ``env[AZURE_SUBSCRIPTION_ID]``. Raises ``AzureClusterError`` naming what is missing.
    """
    namespace = str((owner.get("metadata") or {}).get("namespace") or "default")
    name = cluster_name(owner)
    found = _Found(None, None)
    problem = ""
    if name is not None:
        try:
            found = _from_cluster(client, namespace, name)
        except AzureClusterError as exc:
            problem = f" ({exc})"
        except ApiError as exc:
            problem = f" (cannot read Cluster {namespace}/{name}: {exc})"
    else:
        problem = " (the resource names no Cluster)"
    resolved_location = found.location or (location.lower() if location else None)
    resolved_subscription = (
        found.subscription_id or subscription_id or (env or {}).get(SUBSCRIPTION_ENV) or None
    )
    if not resolved_location:
        raise AzureClusterError(
            "no Azure location: set spec.location on the AzureCluster or the plugin option "
            f"capz.location{problem}"
        )
    if not resolved_subscription:
        raise AzureClusterError(
            "no Azure subscription: set spec.subscriptionID on the AzureCluster, the plugin "
            f"option capz.subscription-id or {SUBSCRIPTION_ENV}{problem}"
        )
    return AzureTarget(resolved_location, resolved_subscription)
