"""Which AWS region a MachineDeployment's machines run in: its Cluster's ``AWSCluster``.

An ``AWSMachineTemplate`` does not say its region; the cluster does. The owner's
``spec.clusterName`` names the ``Cluster``, whose ``spec.infrastructureRef`` names the
``AWSCluster`` (``spec.region``); an EKS cluster's ``AWSManagedCluster`` has no region, its
``spec.controlPlaneRef`` (``AWSManagedControlPlane``) has. That reference's kind is also what
says a cluster is EKS (``control_plane_kind``). Versions are discovered, since CAPI and CAPA
versions move independently of this project.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from karpenter_capi.plugin_api import KubeClient, Resource
from karpenter_capi.plugin_api.kube import CAPI_GROUP, CAPI_INFRASTRUCTURE_GROUP, NotFound

CONTROL_PLANE_GROUP = "controlplane.cluster.x-k8s.io"


class RegionError(Exception):
    """The region cannot be found; the message says where the chain broke."""


def get_object(
    client: KubeClient, group: str, kind: str, namespace: str, name: str, *, hint: str = ""
) -> Any:
    """``kind`` ``namespace/name`` of ``group`` at ``hint``'s version, else any served one;
    ``RegionError`` when the group is not served or no version has it."""
    served = client.served_versions(group)
    versions = list(dict.fromkeys(v for v in (hint, *served) if v and v in served))
    if not versions:
        raise RegionError(f"API group {group} is not served (looking for {kind} {name})")
    plural = kind.lower() + "s"
    for version in versions:
        try:
            return client.get(Resource(group, version, plural, kind, True), name, namespace)
        except NotFound:
            continue
    raise RegionError(f"{kind} {namespace}/{name} not found")


def follow_ref(client: KubeClient, namespace: str, ref: Any, default_group: str) -> Any:
    """The object a CAPI reference (``apiGroup`` or ``apiVersion``) names; ``None`` for none."""
    if not isinstance(ref, Mapping) or not ref.get("kind") or not ref.get("name"):
        return None
    group, slash, version = str(ref.get("apiVersion") or "").rpartition("/")
    group = str(ref.get("apiGroup") or (group if slash else "") or default_group)
    return get_object(
        client,
        group,
        str(ref["kind"]),
        str(ref.get("namespace") or namespace),
        str(ref["name"]),
        hint=version,
    )


def cluster_region(client: KubeClient, namespace: str, cluster_name: str) -> str:
    """The region of Cluster ``namespace/cluster_name``; ``RegionError`` when it has none."""
    cluster = get_object(client, CAPI_GROUP, "Cluster", namespace, cluster_name)
    spec = cluster.get("spec") or {}
    for field, group in (
        ("infrastructureRef", CAPI_INFRASTRUCTURE_GROUP),
        ("controlPlaneRef", CONTROL_PLANE_GROUP),
    ):
        target = follow_ref(client, namespace, spec.get(field), group)
        if target is None:
            continue
        region = (target.get("spec") or {}).get("region")
        if region:
            return str(region)
    raise RegionError(
        f"Cluster {namespace}/{cluster_name}: neither its infrastructureRef nor its "
        "controlPlaneRef has spec.region (set the capa.region plugin option)"
    )


def control_plane_kind(client: KubeClient, namespace: str, cluster_name: str) -> str:
    """The kind of Cluster ``namespace/cluster_name``'s ``spec.controlPlaneRef`` (``""``: none);
    ``RegionError`` when the Cluster cannot be read."""
    cluster = get_object(client, CAPI_GROUP, "Cluster", namespace, cluster_name)
    ref = (cluster.get("spec") or {}).get("controlPlaneRef")
    return str(ref.get("kind") or "") if isinstance(ref, Mapping) else ""


def owner_cluster(owner: Mapping[str, Any]) -> tuple[str, str]:
    """``(namespace, cluster name)`` of a MachineDeployment, MachineSet or MachinePool."""
    meta = owner.get("metadata") or {}
    namespace = str(meta.get("namespace") or "default")
    name = (owner.get("spec") or {}).get("clusterName") or (meta.get("labels") or {}).get(
        "cluster.x-k8s.io/cluster-name"
    )
    if not name:
        raise RegionError("the scalable resource has no spec.clusterName")
    return namespace, str(name)
