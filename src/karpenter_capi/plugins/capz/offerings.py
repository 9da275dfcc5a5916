"""What a ``CAPZMachinePool`` NodeClass can launch: every VM size of its Cluster's location, in
every zone and priority Azure sells it, each offering backed by the pool that would make it.

The NodeClass names no sizes: like upstream Karpenter, the NodePool's requirements narrow the
catalog. The catalog is the capz provider's (Resource SKUs of the Cluster's subscription and
location, cached for hours; Retail Prices, refreshed in the background), so building this
inventory at every round costs no Azure call. A size is offered when the subscription may use
it and Azure has a Linux price for it (on-demand; Spot when it is ``LowPriorityCapable`` and has
a Spot price); one offering per zone it is not restricted in (``""`` in a location without
zones). An offering recently refused (``provider.unavailable``: a pool that failed or produced
no Machine in time) is unavailable for three minutes, so the solver picks the next cheapest.

The result is a ``generic_capi`` ``Inventory``: its instance types go to the core, its resources
(one per offering: the MachinePool named by ``pools.pool_name``, which may not exist yet) to
``generic_capi``'s launch logic, which ranks, scales and binds exactly as for selected pools.
What each node keeps for itself comes from the ``KubeadmConfigTemplate``'s kubelet settings,
else kubeadm's defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from karpenter_capi.plugin_api import InstanceType, KubeClient, NodeClassNotReadyError, Offering
from karpenter_capi.plugin_api.karpenter import wellknown
from karpenter_capi.plugin_api.kube import (
    CAPI_GROUP,
    CAPI_INFRASTRUCTURE_GROUP,
    ApiError,
    CapiResources,
)
from karpenter_capi.plugins._cloud.catalog import CatalogError
from karpenter_capi.plugins._cloud.pricebook import PriceSnapshot
from karpenter_capi.plugins.capz.cluster import AzureClusterError, read_served
from karpenter_capi.plugins.capz.fit import unfit
from karpenter_capi.plugins.capz.pools import (
    BOOTSTRAP_GROUP,
    LaunchTemplates,
    PoolOffering,
    capacity_annotations,
    pool_name,
)
from karpenter_capi.plugins.capz.provider import (
    ON_DEMAND,
    SOURCE,
    SPOT,
    CapzProvider,
    node_capacity,
    node_labels,
    zone_label,
)
from karpenter_capi.plugins.capz.retail import spot_price
from karpenter_capi.plugins.capz.skus import VmSku
from karpenter_capi.plugins.capz.template import AzureNodeSpec, TemplateSpecError, parse_template
from karpenter_capi.plugins.generic_capi.inventory import Inventory
from karpenter_capi.plugins.generic_capi.kubelet import KubeletConfigError, kubelet_settings
from karpenter_capi.plugins.generic_capi.offering import ScalableResource
from karpenter_capi.plugins.generic_capi.overhead import default_overhead
from karpenter_capi.plugins.generic_capi.scaling import ResourceRef
from karpenter_capi.plugins.generic_capi.shape import NodeShape
from karpenter_capi.plugins.generic_capi.sources import UnavailableOfferings as ResourceMarks

AZURE_MACHINE_TEMPLATE: Final = "AzureMachineTemplate"
KUBEADM_CONFIG_TEMPLATE: Final = "KubeadmConfigTemplate"


@dataclass(frozen=True)
class PoolSpec:
    """One offering's pool: what it makes and everything needed to create it."""

    templates: LaunchTemplates
    offering: PoolOffering
    zone_label: str
    annotations: Mapping[str, str]

    @property
    def name(self) -> str:
        return pool_name(self.templates.nodeclass, self.offering, self.templates.digest)


@dataclass
class PoolInventory(Inventory):
    """An ``Inventory`` whose resources are pools, indexed for ``resources_for`` (a location
    has hundreds of sizes) and by resource key for the pools' specs."""

    pools: dict[str, PoolSpec] = field(default_factory=dict)
    _index: dict[tuple[str, str, str], list[ScalableResource]] = field(default_factory=dict)

    def add(self, resource: ScalableResource, pool: PoolSpec) -> None:
        self.resources.append(resource)
        self.pools[resource.key] = pool
        key = (resource.instance_type, resource.zone, resource.capacity_type)
        self._index.setdefault(key, []).append(resource)

    def resources_for(
        self, instance_type: str, zone: str | None = None, capacity_type: str | None = None
    ) -> list[ScalableResource]:
        if zone is None or capacity_type is None:
            return super().resources_for(instance_type, zone, capacity_type)
        return list(self._index.get((instance_type, zone, capacity_type), ()))


def _ref_group(ref: Any, default: str) -> tuple[str, str]:
    """(group, version hint) of a ``TemplateReference`` (model or dict)."""
    api_version = str(getattr(ref, "api_version", None) or "")
    group, slash, version = api_version.rpartition("/")
    return (group if slash else default), (version if slash else "")


def _read(
    client: KubeClient, ref: Any, default_group: str, namespace: str, nodeclass: str
) -> Mapping[str, Any]:
    group, hint = _ref_group(ref, default_group)
    found = read_served(client, group, ref.kind, ref.name, namespace, hint=hint)
    if found is None:
        raise NodeClassNotReadyError(nodeclass, f"{ref.kind} {namespace}/{ref.name} not found")
    return found


def _version(client: KubeClient, namespace: str, cluster: str, nodeclass: str) -> str:
    """The Kubernetes version of the Cluster's nodes: its topology's, else its control
    plane's (``spec.version`` of a KubeadmControlPlane or any control plane of that contract)."""
    found = read_served(client, CAPI_GROUP, "Cluster", cluster, namespace)
    if found is None:
        raise NodeClassNotReadyError(nodeclass, f"Cluster {namespace}/{cluster} not found")
    spec = found.get("spec") or {}
    version = (spec.get("topology") or {}).get("version")
    if version:
        return str(version)
    plane = spec.get("controlPlaneRef") or {}
    if plane.get("kind") and plane.get("name"):
        api_version = str(plane.get("apiVersion") or "")
        group = str(plane.get("apiGroup") or api_version.rpartition("/")[0])
        hint = api_version.rpartition("/")[2] if "/" in api_version else ""
        obj = read_served(
            client,
            group or "controlplane.cluster.x-k8s.io",
            str(plane["kind"]),
            str(plane["name"]),
            namespace,
            hint=hint,
        )
        if obj is not None and (obj.get("spec") or {}).get("version"):
            return str(obj["spec"]["version"])
    raise NodeClassNotReadyError(
        nodeclass,
        f"cannot tell the Kubernetes version of Cluster {namespace}/{cluster}: neither "
        "spec.topology.version nor its control plane's spec.version is set",
    )


def load_templates(
    client: KubeClient, provider: CapzProvider, nodeclass: str, launch: Any
) -> LaunchTemplates:
    """Read what the NodeClass's ``spec.launch`` names; ``NodeClassNotReadyError`` says what
    is missing."""
    namespace = launch.namespace
    try:
        infrastructure = _read(
            client,
            launch.infrastructure_template_ref,
            CAPI_INFRASTRUCTURE_GROUP,
            namespace,
            nodeclass,
        )
        bootstrap = _read(
            client, launch.bootstrap_config_template_ref, BOOTSTRAP_GROUP, namespace, nodeclass
        )
        version = _version(client, namespace, launch.cluster_name, nodeclass)
    except ApiError as exc:
        raise NodeClassNotReadyError(nodeclass, f"cannot read the launch templates: {exc}") from exc
    if infrastructure.get("kind") != AZURE_MACHINE_TEMPLATE:
        raise NodeClassNotReadyError(
            nodeclass, f"spec.launch.infrastructureTemplateRef must be an {AZURE_MACHINE_TEMPLATE}"
        )
    owner = {"metadata": {"namespace": namespace}, "spec": {"clusterName": launch.cluster_name}}
    try:
        target = provider.target(owner)
    except AzureClusterError as exc:
        raise NodeClassNotReadyError(nodeclass, str(exc)) from None
    return LaunchTemplates(
        nodeclass=nodeclass,
        cluster=launch.cluster_name,
        namespace=namespace,
        location=target.location,
        version=version,
        infrastructure=infrastructure,
        bootstrap=bootstrap,
    )


def _node_spec(templates: LaunchTemplates) -> AzureNodeSpec:
    """The node spec of the NodeClass's infrastructure template, which must be CAPZ's."""
    try:
        node_spec = parse_template(templates.infrastructure, {})
    except TemplateSpecError as exc:
        raise NodeClassNotReadyError(templates.nodeclass, str(exc)) from None
    if node_spec is None:
        raise NodeClassNotReadyError(
            templates.nodeclass, "the infrastructure template is not CAPZ's"
        )
    return node_spec


def _prices(snapshot: PriceSnapshot, sku: VmSku) -> dict[str, float]:
    """Capacity type -> the size's price, for those it is priced and may run as."""
    prices = {ON_DEMAND: snapshot.on_demand.get(sku.name)}
    if sku.spot_capable:
        prices[SPOT] = spot_price(snapshot, sku.name)
    return {kind: price for kind, price in prices.items() if price is not None}


def build_inventory(
    provider: CapzProvider,
    templates: LaunchTemplates,
    capi: CapiResources,
    marks: ResourceMarks,
) -> PoolInventory:
    """Every offering of the location as an instance type, each backed by its pool."""
    nodeclass = templates.nodeclass
    node_spec = _node_spec(templates)
    owner = {
        "metadata": {"namespace": templates.namespace},
        "spec": {"clusterName": templates.cluster},
    }
    try:
        target = provider.target(owner)
        catalog = provider.skus.get((target.subscription_id, target.location))
    except (AzureClusterError, CatalogError) as exc:
        raise NodeClassNotReadyError(nodeclass, f"cannot list Azure VM sizes: {exc}") from None
    snapshot = provider.price_book(target.location).snapshot()
    if snapshot is None:
        raise NodeClassNotReadyError(nodeclass, f"no Azure prices for {target.location} yet")
    try:
        settings = kubelet_settings(templates.bootstrap)
    except KubeletConfigError as exc:
        raise NodeClassNotReadyError(nodeclass, str(exc)) from None
    max_pods = settings.max_pods or provider.settings.max_pods
    inventory = PoolInventory()
    vm = ((templates.infrastructure.get("spec") or {}).get("template") or {}).get("spec") or {}
    for sku in sorted(catalog.values(), key=lambda s: s.name):
        if sku.restricted is not None or node_spec.os_type != "linux" or unfit(sku, vm):
            continue  # the template's VMs cannot run on it: a pool of it would only fail
        priced = _prices(snapshot, sku)
        if not priced:
            continue
        spec = AzureNodeSpec(
            kind=node_spec.kind,
            name=node_spec.name,
            namespace=node_spec.namespace,
            vm_size=sku.name,
            spot=False,
            os_type=node_spec.os_type,
            os_disk_gib=node_spec.os_disk_gib,
        )
        capacity = node_capacity(sku, spec, max_pods)
        labels = node_labels(sku, spec, target.location)
        components = settings.components
        overhead = (
            components.overhead(capacity, settings.source)
            if components is not None
            else default_overhead(capacity)
        )
        shape_labels = {k: v for k, v in labels.items() if k != wellknown.LABEL_INSTANCE_TYPE}
        zones = sku.zones if sku.zonal_location else ("",)
        offerings = []
        for capacity_type, price in sorted(priced.items()):
            for zone in zones:
                offering = PoolOffering(sku.name, capacity_type, zone)
                label = zone_label(target.location, zone) if zone else ""
                node = {
                    **labels,
                    wellknown.LABEL_CAPACITY_TYPE: capacity_type,
                    **({wellknown.LABEL_TOPOLOGY_ZONE: label} if label else {}),
                }
                pool = PoolSpec(templates, offering, label, capacity_annotations(capacity, node))
                why = provider.unavailable.reason(sku.name, label, capacity_type)
                ref = ResourceRef("MachinePool", templates.namespace, pool.name)
                why = why or marks.reason(ref.key)
                inventory.add(
                    ScalableResource(
                        resource=capi.machine_pools,
                        namespace=templates.namespace,
                        name=pool.name,
                        instance_type=sku.name,
                        shape=NodeShape(capacity, shape_labels, (), price, SOURCE),
                        labels=shape_labels,
                        zone=label,
                        capacity_type=capacity_type,
                        replicas=0,
                        max_size=None,
                        price=price,
                        unavailable_reason=why,
                        price_source=SOURCE,
                    ),
                    pool,
                )
                offerings.append(
                    Offering(
                        zone=label,
                        capacity_type=capacity_type,
                        price=price,
                        available=why is None,
                        price_source=SOURCE,
                    )
                )
        inventory.instance_types.append(
            InstanceType(
                name=sku.name,
                capacity=capacity,
                offerings=tuple(offerings),
                requirements={k: frozenset((v,)) for k, v in shape_labels.items()},
                overhead=overhead,
                source=SOURCE,
            )
        )
    inventory.selected = len(inventory.resources)
    if not inventory.instance_types:
        raise NodeClassNotReadyError(
            nodeclass, f"Azure offers no priced Linux VM size in {target.location}"
        )
    return inventory
