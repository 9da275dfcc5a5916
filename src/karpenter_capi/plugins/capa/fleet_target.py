"""What a ``CAPAFleet`` NodeClass launches into: region, subnets, security groups, image, templates.

A fleet launch needs facts that live in four Cluster API objects, and every one of them must
agree with what stock CAPA would do for the same node, because CAPA adopts the instance and
then rewrites its tags and security groups:

* the ``Cluster`` names the ``AWSCluster`` (region, the subnets CAPA puts nodes in, the node
  security group it created) and carries the Kubernetes version (``spec.topology.version``,
  else the control plane's ``spec.version``);
* the ``AWSMachineTemplate`` (``launch.infrastructureTemplateRef``) gives the AMI, the IAM
  instance profile, additional security groups and an optional fixed subnet;
* the ``KubeadmConfigTemplate`` (``launch.bootstrapConfigTemplateRef``) is copied into each
  node's ``KubeadmConfig``.

Subnets: the template's ``subnet.id`` when it names one, else the AWSCluster's private subnets
(``spec.network.subnets`` with ``isPublic`` false; all of them when none is private), grouped
by availability zone. Only ids are understood; subnet filters are a ``NodeClassNotReadyError``
that says so, as is a template without ``ami.id`` (CAPA's AMI lookup is not repeated here).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

from karpenter_capi.plugin_api import KubeClient, NodeClassNotReadyError
from karpenter_capi.plugin_api.karpenter import (
    ClusterAPINodeClass,
    LaunchMode,
    LaunchSpec,
    NodeClass,
)
from karpenter_capi.plugin_api.kube import CAPI_GROUP, CAPI_INFRASTRUCTURE_GROUP
from karpenter_capi.plugins.capa.region import (
    CONTROL_PLANE_GROUP,
    RegionError,
    follow_ref,
    get_object,
)

BOOTSTRAP_GROUP: Final = "bootstrap.cluster.x-k8s.io"
NODE_SECURITY_GROUP_ROLES: Final = ("node", "lb")
"""The AWSCluster's security groups CAPA gives every node it launches, in its order
(cluster-api-provider-aws ``pkg/cloud/services/ec2/instances.go: GetCoreSecurityGroups``; the
``lb`` group is left out only for EKS, which uses an AWSManagedControlPlane, not an AWSCluster)."""
METADATA_DEFAULTS: Final[Mapping[str, Any]] = MappingProxyType(
    {
        "httpEndpoint": "enabled",
        "httpProtocolIpv6": "disabled",
        "httpPutResponseHopLimit": 1,
        "httpTokens": "optional",
        "instanceMetadataTags": "disabled",
    }
)
"""What CAPA defaults an AWSMachine's unset ``instanceMetadataOptions`` to
(cluster-api-provider-aws ``api/v1beta2/types.go: InstanceMetadataOptions.SetDefaults``)."""


@dataclass(frozen=True)
class FleetTarget:
    """Everything one NodeClass's fleet launches need, read from the management cluster."""

    nodeclass: str
    cluster: str
    namespace: str
    region: str
    subnets: Mapping[str, tuple[str, ...]]
    """Subnet ids by availability zone, in the order they were listed."""
    security_groups: tuple[str, ...]
    image_id: str
    instance_profile: str | None
    machine_spec: Mapping[str, Any]
    """The AWSMachineTemplate's ``spec.template.spec`` (copied into each AWSMachine)."""
    machine_api_version: str
    bootstrap_template: Mapping[str, Any]
    """The KubeadmConfigTemplate's ``spec.template`` (``metadata`` and ``spec``)."""
    bootstrap_api_version: str
    version: str | None = None
    metadata_options: Mapping[str, Any] = field(default_factory=lambda: METADATA_DEFAULTS)
    """The template's ``instanceMetadataOptions`` over CAPA's defaults: what the instance is
    launched with and its AWSMachine says, so CAPA's ``ensureInstanceMetadataOptions`` after
    adoption finds nothing to change."""

    @property
    def zones(self) -> frozenset[str]:
        return frozenset(self.subnets)


def fleet_launch(nodeclass: NodeClass) -> LaunchSpec | None:
    """The NodeClass's launch spec when it asks for ``CAPAFleet``, else ``None``."""
    if isinstance(nodeclass, ClusterAPINodeClass):
        launch = nodeclass.spec.launch
    elif isinstance(nodeclass, Mapping) and nodeclass.get("kind") == "ClusterAPINodeClass":
        raw = (nodeclass.get("spec") or {}).get("launch")
        if not isinstance(raw, Mapping):
            return None
        try:
            launch = LaunchSpec.model_validate(raw)
        except ValueError:
            return None
    else:
        return None
    if launch is None or launch.mode != LaunchMode.CAPA_FLEET:
        return None
    return launch


def nodeclass_name(nodeclass: NodeClass) -> str:
    if isinstance(nodeclass, ClusterAPINodeClass):
        return nodeclass.metadata.name or ""
    if isinstance(nodeclass, Mapping):
        return str((nodeclass.get("metadata") or {}).get("name") or "")
    return ""


def _subnet_id(subnet: Mapping[str, Any]) -> str:
    for key in ("resourceID", "id"):
        value = str(subnet.get(key) or "")
        if value.startswith("subnet-"):
            return value
    return ""


def _cluster_subnets(aws_cluster: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
    subnets = [
        s
        for s in ((aws_cluster.get("spec") or {}).get("network") or {}).get("subnets") or []
        if isinstance(s, Mapping) and _subnet_id(s) and s.get("availabilityZone")
    ]
    private = [s for s in subnets if not s.get("isPublic")]
    chosen = private or subnets
    result: dict[str, list[str]] = {}
    for subnet in chosen:
        result.setdefault(str(subnet["availabilityZone"]), []).append(_subnet_id(subnet))
    return {zone: tuple(ids) for zone, ids in result.items()}


def _zone_of(aws_cluster: Mapping[str, Any], subnet_id: str) -> str | None:
    for subnet in ((aws_cluster.get("spec") or {}).get("network") or {}).get("subnets") or []:
        if isinstance(subnet, Mapping) and _subnet_id(subnet) == subnet_id:
            zone = subnet.get("availabilityZone")
            return str(zone) if zone else None
    return None


def _node_security_groups(aws_cluster: Mapping[str, Any]) -> list[str]:
    groups = ((aws_cluster.get("status") or {}).get("networkStatus") or {}).get(
        "securityGroups"
    ) or {}
    found: list[str] = []
    for role in NODE_SECURITY_GROUP_ROLES:
        group = groups.get(role) if isinstance(groups, Mapping) else None
        if isinstance(group, Mapping) and group.get("id"):
            found.append(str(group["id"]))
    return found


def _version(client: KubeClient, namespace: str, cluster: Mapping[str, Any]) -> str | None:
    spec = cluster.get("spec") or {}
    topology = spec.get("topology") or {}
    if topology.get("version"):
        return str(topology["version"])
    try:
        control_plane = follow_ref(
            client, namespace, spec.get("controlPlaneRef"), CONTROL_PLANE_GROUP
        )
    except RegionError:
        return None
    version = ((control_plane or {}).get("spec") or {}).get("version")
    return str(version) if version else None


def metadata_options(machine: Mapping[str, Any]) -> Mapping[str, Any]:
    """The AWSMachineTemplate's metadata options as CAPA defaults them."""
    raw = machine.get("instanceMetadataOptions") or {}
    given = {k: v for k, v in raw.items() if k in METADATA_DEFAULTS and v not in (None, "", 0)}
    return MappingProxyType({**METADATA_DEFAULTS, **given})


def resolve_target(
    client: KubeClient, nodeclass: NodeClass, region_option: str | None
) -> FleetTarget:
    """Read what ``nodeclass``'s fleet launches need; ``NodeClassNotReadyError`` says what is
    missing (the message reaches the NodeClass and the NodeClaim's events)."""
    launch = fleet_launch(nodeclass)
    name = nodeclass_name(nodeclass)
    if launch is None:
        raise NodeClassNotReadyError(name, "spec.launch.mode is not CAPAFleet")
    namespace = launch.namespace
    try:
        cluster = get_object(client, CAPI_GROUP, "Cluster", namespace, launch.cluster_name)
        aws_cluster = follow_ref(
            client,
            namespace,
            (cluster.get("spec") or {}).get("infrastructureRef"),
            CAPI_INFRASTRUCTURE_GROUP,
        )
        infra = launch.infrastructure_template_ref
        template = get_object(
            client,
            CAPI_INFRASTRUCTURE_GROUP,
            infra.kind,
            namespace,
            infra.name,
            hint=(infra.api_version or "").rpartition("/")[2],
        )
        boot = launch.bootstrap_config_template_ref
        bootstrap = get_object(
            client,
            BOOTSTRAP_GROUP,
            boot.kind,
            namespace,
            boot.name,
            hint=(boot.api_version or "").rpartition("/")[2],
        )
    except RegionError as exc:
        raise NodeClassNotReadyError(name, str(exc)) from None
    if infra.kind != "AWSMachineTemplate":
        raise NodeClassNotReadyError(
            name, f"CAPAFleet needs an AWSMachineTemplate, not {infra.kind}"
        )
    aws_cluster = aws_cluster or {}
    region = region_option or str((aws_cluster.get("spec") or {}).get("region") or "")
    if not region:
        raise NodeClassNotReadyError(
            name, f"AWSCluster of {namespace}/{launch.cluster_name} has no spec.region"
        )
    machine = ((template.get("spec") or {}).get("template") or {}).get("spec") or {}
    image = str((machine.get("ami") or {}).get("id") or "")
    if not image:
        raise NodeClassNotReadyError(
            name, f"AWSMachineTemplate {infra.name} has no spec.template.spec.ami.id"
        )
    if machine.get("ignition") is not None:
        raise NodeClassNotReadyError(
            name,
            f"AWSMachineTemplate {infra.name} uses ignition; CAPAFleet launches cloud-init "
            "nodes (a cloud-init boothook fetches each node's bootstrap data), use a "
            "cloud-init template or the generic_capi launch",
        )
    subnets = _subnets(name, infra.name, aws_cluster, machine)
    if not subnets:
        raise NodeClassNotReadyError(
            name, f"AWSCluster of {namespace}/{launch.cluster_name} lists no subnet with a zone"
        )
    groups = _node_security_groups(aws_cluster) + [
        str(g["id"])
        for g in machine.get("additionalSecurityGroups") or []
        if isinstance(g, Mapping) and g.get("id")
    ]
    profile = machine.get("iamInstanceProfile")
    return FleetTarget(
        nodeclass=name,
        cluster=launch.cluster_name,
        namespace=namespace,
        region=region,
        subnets=MappingProxyType(subnets),
        security_groups=tuple(dict.fromkeys(groups)),
        image_id=image,
        instance_profile=str(profile) if profile else None,
        machine_spec=MappingProxyType(dict(machine)),
        machine_api_version=str(template.get("apiVersion") or ""),
        bootstrap_template=MappingProxyType(
            dict(((bootstrap.get("spec") or {}).get("template")) or {})
        ),
        bootstrap_api_version=str(bootstrap.get("apiVersion") or ""),
        version=_version(client, namespace, cluster),
        metadata_options=metadata_options(machine),
    )


def _subnets(
    name: str, template: str, aws_cluster: Mapping[str, Any], machine: Mapping[str, Any]
) -> dict[str, tuple[str, ...]]:
    """Zone -> subnets a launch may use: the template's one subnet (which must be among the
    AWSCluster's, to know its zone), else every AWSCluster subnet with a zone."""
    subnet = machine.get("subnet") or {}
    if subnet.get("filters") and not subnet.get("id"):
        raise NodeClassNotReadyError(
            name, f"AWSMachineTemplate {template}: subnet filters are not supported, name an id"
        )
    if not subnet.get("id"):
        return _cluster_subnets(aws_cluster)
    zone = _zone_of(aws_cluster, str(subnet["id"]))
    if zone is None:
        raise NodeClassNotReadyError(
            name, f"subnet {subnet['id']} is not among the AWSCluster's subnets"
        )
    return {zone: (str(subnet["id"]),)}
