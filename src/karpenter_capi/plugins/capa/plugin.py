"""The ``capa`` plugin: AWSMachineTemplates described from EC2's catalog and AWS prices.

``generic_capi`` owns the inventory of Cluster API scalable resources; when one is backed by an
``AWSMachineTemplate`` it asks (``ctx.describe_machine_template``) and this plugin answers with
the instance type's shape (``DescribeInstanceTypes``), the zones that sell it
(``DescribeInstanceTypeOfferings``) and its price there (on-demand from the Pricing API, spot
from the spot price history). See docs/aws.md for what is read and the IAM policy it needs.

On an EKS cluster (the ``Cluster``'s ``controlPlaneRef`` is an ``AWSManagedControlPlane``) the
description also carries EKS's node overhead (``eks``); elsewhere it carries none and
``generic_capi``'s precedence (a kubeadm bootstrap config, kubeadm's defaults) applies.

A zone drops out of a description, with its reason, when it cannot be bought now: a spot
template where spot prices are loaded but the type has none (no spot market), a spot price
above ``spotMarketOptions.maxPrice``, or an offering a launcher marked in the shared
``UnavailableOfferings`` (``unavailable_offerings``), as ``capz`` does.

``CapaPlugin`` is the plugin's AWS clients; the core calls it once per ``Plugins`` with the
plugin's ``PluginContext`` and registers the ``CapaHooks`` it makes, which hold that context and
its caches. The ``capa`` entry point names ``CapaHooks``, over boto3's default session or what
``set_default_plugin`` chose. Tests and embedders register their own
``CapaPlugin(clients=...)`` with moto or Stubber clients. Importing this module needs boto3:
without the ``aws`` extra, enabling ``capa`` fails at load with an error naming the extra.

A ClusterAPINodeClass with ``spec.launch.mode: CAPAFleet`` is this plugin's alone: its
inventory is the region's EC2 catalog (``fleet_inventory``), and its NodeClaims launch through
one EC2 ``CreateFleet`` each and are recorded as a Machine, KubeadmConfig and AWSMachine that
stock CAPA adopts (``launcher``). Those hooks run ``tryfirst`` so that ``generic_capi`` never
sees such a NodeClass or NodeClaim; they answer ``None`` for everything else.

Options (``--plugin-option capa.NAME=VALUE``): ``region`` (instead of the AWSCluster's),
``max-pods`` (instead of the VPC CNI formula), ``price-refresh-interval`` (seconds, default
43200), ``price-configmap-namespace`` (default ``$POD_NAMESPACE`` or ``kube-system``),
``price-store`` (``configmap`` or ``none``), ``interruption-queue`` (the SQS queue's name or
URL; see ``interruption`` and docs/aws.md), ``interruption-wait-seconds`` (default 20).
"""

from __future__ import annotations

import logging
import math
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from karpenter_capi.plugin_api import (
    Instance,
    InstanceType,
    InterruptionNotice,
    KubeClient,
    LaunchResult,
    MachineTemplateDescription,
    NodeClaim,
    NodeClassNotReadyError,
    PluginContext,
    hookimpl,
)
from karpenter_capi.plugin_api.karpenter import NodeClass, wellknown
from karpenter_capi.plugin_api.kube import CAPI_INFRASTRUCTURE_GROUP
from karpenter_capi.plugins._cloud.catalog import CatalogCache, CatalogError
from karpenter_capi.plugins._cloud.metrics import CloudMetrics
from karpenter_capi.plugins._cloud.pricebook import (
    DEFAULT_REFRESH_SECONDS,
    ConfigMapPriceStore,
    PriceBook,
    PriceSnapshot,
    PriceStore,
    ReadOnlyPriceStore,
)
from karpenter_capi.plugins._cloud.unavailable import UnavailableOfferings
from karpenter_capi.plugins.capa.catalog import (
    CatalogEntry,
    image_architecture,
    load_instance_type,
)
from karpenter_capi.plugins.capa.clients import AwsClients, Boto3Clients
from karpenter_capi.plugins.capa.eks import EKS_CONTROL_PLANE_KIND, eks_overhead
from karpenter_capi.plugins.capa.fleet_inventory import (
    RegionCatalog,
    fleet_instance_types,
    load_region_catalog,
)
from karpenter_capi.plugins.capa.fleet_target import fleet_launch, nodeclass_name, resolve_target
from karpenter_capi.plugins.capa.interruption import InterruptionQueue, queue_from_options
from karpenter_capi.plugins.capa.launcher import FleetLauncher
from karpenter_capi.plugins.capa.pricing import RegionPrices
from karpenter_capi.plugins.capa.region import (
    RegionError,
    cluster_region,
    control_plane_kind,
    owner_cluster,
)
from karpenter_capi.plugins.capa.versions import NEEDS
from karpenter_capi.plugins.generic_capi.provider_versions import StartChecks

log = logging.getLogger(__name__)

SOURCE: Final = "AWS"
TEMPLATE_KIND: Final = "AWSMachineTemplate"
PLUGIN_NAME: Final = "capa"
CATALOG_TTL_SECONDS: Final = 6 * 3600.0
REGION_TTL_SECONDS: Final = 300.0


@dataclass
class _State:
    """The caches of the hooks, made on first use."""

    catalogs: CatalogCache[tuple[str, str], CatalogEntry]
    regions: CatalogCache[tuple[str, str], str]
    control_planes: CatalogCache[tuple[str, str], str]
    metrics: CloudMetrics | None
    unavailable: UnavailableOfferings
    region_catalogs: CatalogCache[str, RegionCatalog]
    launcher: FleetLauncher
    books: dict[str, PriceBook] = field(default_factory=dict)
    images: dict[tuple[str, str], str | None] = field(default_factory=dict)
    """``kubernetes.io/arch`` of each (region, AMI) a fleet NodeClass named."""


def _option(ctx: PluginContext, name: str) -> str | None:
    """``name`` as given, or with underscores (``max-pods`` or ``max_pods``)."""
    value = ctx.option(name)
    if value is None:
        value = ctx.option(name.replace("-", "_"))
    return value.strip() if value is not None and value.strip() else None


def _positive(ctx: PluginContext, name: str, default: float | None) -> float | None:
    raw = _option(ctx, name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        where = f"plugin option capa.{name}"
        raise NodeClassNotReadyError(where, f"{raw!r} is not a number") from None
    if value <= 0:
        raise NodeClassNotReadyError(f"plugin option capa.{name}", f"{raw!r} must be positive")
    return value


class CapaPlugin:
    """The ``capa`` plugin over injectable AWS clients: a factory of ``CapaHooks``.

    ``background_refresh=False`` refreshes prices on the caller's thread when due (tests and
    the simulator, which run on a fake clock and must be deterministic).
    """

    def __init__(
        self, clients: AwsClients | None = None, *, background_refresh: bool = True
    ) -> None:
        self._clients = clients
        self.background_refresh = background_refresh
        self._clients_lock = threading.Lock()

    @property
    def clients(self) -> AwsClients:
        with self._clients_lock:
            if self._clients is None:
                self._clients = Boto3Clients()
            return self._clients

    def __call__(self, ctx: PluginContext) -> CapaHooks:
        return CapaHooks(ctx, self)


class CapaHooks:
    """The hooks of the ``capa`` plugin for one ``PluginContext``, and their caches.

    What the ``capa`` entry point names: without a ``plugin``, over ``default_plugin()``'s
    clients."""

    def __init__(self, ctx: PluginContext, plugin: CapaPlugin | None = None) -> None:
        self._ctx = ctx
        self._plugin = plugin or default_plugin()
        self._lock = threading.Lock()  # the state and its price books
        self._built: _State | None = None
        self._queue: InterruptionQueue | None = None
        self._versions = StartChecks(ctx)

    # -- hooks -----------------------------------------------------------------------------------

    @hookimpl
    def karpenter_capi_describe_machine_template(
        self, template: Mapping[str, Any], owner: Mapping[str, Any]
    ) -> MachineTemplateDescription | None:
        if not _is_aws_template(template):
            return None
        return self.describe(template, owner)

    @hookimpl(tryfirst=True)
    def karpenter_capi_instance_types(self, nodeclass: NodeClass) -> list[InstanceType] | None:
        if fleet_launch(nodeclass) is None:
            return None
        return self.fleet_instance_types(nodeclass)

    @hookimpl(tryfirst=True)
    def karpenter_capi_create(
        self, nodeclaim: NodeClaim, instance_types: list[InstanceType], nodeclass: NodeClass
    ) -> LaunchResult | None:
        if fleet_launch(nodeclass) is None:
            return None
        return self.launcher().create(nodeclaim, instance_types, nodeclass)

    @hookimpl(tryfirst=True)
    def karpenter_capi_delete(self, nodeclaim: NodeClaim) -> bool | None:
        return self.launcher().delete(nodeclaim)

    @hookimpl(tryfirst=True)
    def karpenter_capi_get(self, provider_id: str) -> Instance | None:
        return self.launcher().get(provider_id)

    @hookimpl
    def karpenter_capi_list(self) -> list[Instance]:
        return self.launcher().list()

    @hookimpl
    def karpenter_capi_interruptions(self) -> list[InterruptionNotice] | None:
        with self._lock:
            if self._queue is None:
                self._queue = queue_from_options(self._ctx, self._plugin.clients)
        return self._queue.receive() if self._queue is not None else None

    @hookimpl
    def karpenter_capi_interruptions_handled(self, notices: list[InterruptionNotice]) -> None:
        if self._queue is not None:
            self._queue.handled(notices)

    # -- fleet launches --------------------------------------------------------------------------

    def launcher(self) -> FleetLauncher:
        """The fleet launcher of the management cluster (its counters are read by the
        simulator's report)."""
        return self._state().launcher

    def fleet_instance_types(self, nodeclass: NodeClass) -> list[InstanceType]:
        """The inventory of a ``CAPAFleet`` NodeClass (see ``fleet_inventory``)."""
        ctx = self._ctx
        state = self._state()
        target = resolve_target(ctx.management, nodeclass, _option(ctx, "region"))
        self._versions.once(nodeclass_name(nodeclass), NEEDS)  # the cluster answered
        try:
            catalog = state.region_catalogs.get(target.region)
        except CatalogError as exc:
            raise NodeClassNotReadyError(
                target.nodeclass, f"cannot read the EC2 catalog: {exc}"
            ) from None
        snapshot = self._book(state, target.region).snapshot()
        max_pods = _positive(ctx, "max-pods", None)
        found = fleet_instance_types(
            catalog,
            target.zones,
            snapshot,
            state.unavailable,
            int(max_pods) if max_pods is not None else None,
            arch=self._image_arch(state, target.region, target.image_id),
        )
        if not found:
            raise NodeClassNotReadyError(
                target.nodeclass,
                f"EC2 sells no priced instance type in the zones of its subnets "
                f"({', '.join(sorted(target.zones))})",
            )
        return found

    def _image_arch(self, state: _State, region: str, image_id: str) -> str | None:
        key = (region, image_id)
        with self._lock:
            if key in state.images:
                return state.images[key]
        arch = image_architecture(self._plugin.clients.ec2(region), image_id)
        with self._lock:
            state.images[key] = arch
        return arch

    # -- the description -------------------------------------------------------------------------

    def describe(
        self, template: Mapping[str, Any], owner: Mapping[str, Any]
    ) -> MachineTemplateDescription:
        """What nodes of ``template`` (an AWSMachineTemplate) are, where and at what price."""
        ctx = self._ctx
        meta = template.get("metadata") or {}
        what = f"{TEMPLATE_KIND} {meta.get('namespace', '')}/{meta.get('name', '')}"
        machine = ((template.get("spec") or {}).get("template") or {}).get("spec") or {}
        instance_type = str(machine.get("instanceType") or "")
        if not instance_type:
            raise NodeClassNotReadyError(what, "spec.template.spec.instanceType is not set")
        spot_options = machine.get("spotMarketOptions")
        spot = spot_options is not None
        max_price = _max_price(spot_options, what) if isinstance(spot_options, Mapping) else None
        state = self._state()
        region = self._region(state, owner, what)
        try:
            entry = state.catalogs.get((region, instance_type))
        except CatalogError as exc:
            raise NodeClassNotReadyError(what, f"cannot read the EC2 catalog: {exc}") from None
        info = entry.info
        if info is None:
            raise NodeClassNotReadyError(
                what, f"instance type {instance_type} is not sold in {region} (or cannot be a node)"
            )
        max_pods = _positive(ctx, "max-pods", None)
        capacity_type = wellknown.CAPACITY_TYPE_SPOT if spot else wellknown.CAPACITY_TYPE_ON_DEMAND
        snapshot = self._book(state, region).snapshot()
        # Zones the type is sold in but cannot be bought in now, and why.
        excluded: dict[str, str] = {}
        zones: dict[str, float | None] = {}
        for zone in sorted(entry.zones):
            price, why = _zone_price(snapshot, instance_type, zone, spot, max_price)
            marked = state.unavailable.reason(instance_type, zone, capacity_type)
            if marked is not None:
                why = f"{instance_type} in {zone} was recently found unavailable ({marked})"
            if why is None:
                zones[zone] = price
            else:
                excluded[zone] = why
        capacity = info.capacity(int(max_pods) if max_pods is not None else None)
        return MachineTemplateDescription(
            source=SOURCE,
            instance_type=instance_type,
            capacity=capacity,
            capacity_type=capacity_type,
            zones=zones,
            labels={
                wellknown.LABEL_ARCH: info.arch,
                wellknown.LABEL_OS: "linux",
                wellknown.LABEL_INSTANCE_TYPE: instance_type,
            },
            unavailable_reason=_unavailable_reason(zones, excluded, _failure_domains(owner))
            or (
                None
                if entry.zones
                else f"{instance_type} is not offered{' as spot' if spot else ''} in any "
                f"availability zone of {region}"
            ),
            overhead=eks_overhead(capacity) if self._is_eks(state, owner) else None,
        )

    def unavailable_offerings(self) -> UnavailableOfferings:
        """The offerings a launcher found unavailable: what a launcher marks
        (InsufficientInstanceCapacity) and ``describe`` leaves out for 3 minutes."""
        return self._state().unavailable

    # -- caches ----------------------------------------------------------------------------------

    def _state(self) -> _State:
        ctx = self._ctx
        with self._lock:
            if self._built is None:
                clients = self._plugin.clients
                metrics = CloudMetrics(ctx.metrics, PLUGIN_NAME) if ctx.metrics else None
                client = ctx.management
                unavailable = UnavailableOfferings(ctx.clock)
                state = _State(
                    catalogs=CatalogCache(
                        "EC2 catalog",
                        lambda key: load_instance_type(
                            clients.ec2(key[0]), key[0], key[1], metrics
                        ),
                        ctx.clock,
                        ttl_seconds=CATALOG_TTL_SECONDS,
                    ),
                    regions=CatalogCache(
                        "cluster region",
                        lambda key: cluster_region(client, key[0], key[1]),
                        ctx.clock,
                        ttl_seconds=REGION_TTL_SECONDS,
                        retry_seconds=30.0,
                    ),
                    control_planes=CatalogCache(
                        "cluster control plane",
                        lambda key: control_plane_kind(client, key[0], key[1]),
                        ctx.clock,
                        ttl_seconds=REGION_TTL_SECONDS,
                        retry_seconds=30.0,
                    ),
                    metrics=metrics,
                    unavailable=unavailable,
                    region_catalogs=CatalogCache(
                        "EC2 region catalog",
                        lambda region: load_region_catalog(clients.ec2(region), region, metrics),
                        ctx.clock,
                        ttl_seconds=CATALOG_TTL_SECONDS,
                    ),
                    launcher=FleetLauncher(
                        client,
                        clients,
                        ctx.clock,
                        unavailable,
                        region_option=_option(ctx, "region"),
                        workload=ctx.workload,
                    ),
                )
                self._built = state
            return self._built

    def _region(self, state: _State, owner: Mapping[str, Any], what: str) -> str:
        configured = _option(self._ctx, "region")
        if configured:
            return configured
        try:
            return state.regions.get(owner_cluster(owner))
        except (RegionError, CatalogError) as exc:
            raise NodeClassNotReadyError(what, f"cannot tell the AWS region: {exc}") from None

    def _is_eks(self, state: _State, owner: Mapping[str, Any]) -> bool:
        """Whether the owner's Cluster is EKS; unknown (no Cluster to read) counts as not, so
        ``generic_capi``'s own precedence applies."""
        try:
            kind = state.control_planes.get(owner_cluster(owner))
        except (RegionError, CatalogError) as exc:
            log.debug("cannot tell whether the cluster is EKS: %s", exc)
            return False
        return kind == EKS_CONTROL_PLANE_KIND

    def _book(self, state: _State, region: str) -> PriceBook:
        with self._lock:
            book = state.books.get(region)
            if book is None:
                book = self._new_book(state, region)
                state.books[region] = book
            return book

    def _new_book(self, state: _State, region: str) -> PriceBook:
        ctx = self._ctx
        metrics = state.metrics.for_region(region) if state.metrics else None

        # Only spot failing keeps the book's current spot prices: the fetch reads them back.
        def current() -> PriceSnapshot | None:
            return book.current()

        fetch = RegionPrices(self._plugin.clients, region, ctx.clock, metrics, current)
        refresh = _positive(ctx, "price-refresh-interval", DEFAULT_REFRESH_SECONDS)
        book = PriceBook(
            f"{PLUGIN_NAME}/{region}",
            fetch,
            ctx.clock,
            refresh_seconds=refresh or DEFAULT_REFRESH_SECONDS,
            store=_store(ctx, ctx.management, region),
            metrics=metrics,
            background=self._plugin.background_refresh,
        )
        return book


def _max_price(spot_options: Mapping[str, Any], what: str) -> float | None:
    """``spotMarketOptions.maxPrice``: a string of dollars per hour; absent or empty means AWS's
    default cap, the on-demand price (which a spot price never exceeds in practice)."""
    raw = spot_options.get("maxPrice")
    if raw is None or str(raw).strip() == "":
        return None
    try:
        price = float(str(raw))
    except ValueError:
        price = math.nan
    if not math.isfinite(price) or price <= 0:
        raise NodeClassNotReadyError(
            what, f"spotMarketOptions.maxPrice {raw!r} is not a positive number of dollars"
        )
    return price


def _zone_price(
    snapshot: PriceSnapshot | None,
    instance_type: str,
    zone: str,
    spot: bool,
    max_price: float | None,
) -> tuple[float | None, str | None]:
    """(the price of ``instance_type`` in ``zone``, why it cannot be bought there or ``None``)."""
    if not spot:
        return (snapshot.on_demand.get(instance_type) if snapshot else None), None
    if snapshot is None or not snapshot.spot:
        return None, None  # no spot prices loaded at all: estimated, not ruled out
    price = snapshot.spot.get((instance_type, zone))
    if price is None:
        return None, f"{instance_type} has no spot price (no spot market) in {zone}"
    if max_price is not None and price > max_price:
        return price, (
            f"the spot price of {instance_type} in {zone}, {price:g}/h, is above "
            f"spotMarketOptions.maxPrice {max_price:g}"
        )
    return price, None


def _failure_domains(owner: Mapping[str, Any]) -> tuple[str, ...]:
    """The owner's zones: a MachineDeployment's or MachineSet's failure domain, a
    MachinePool's failure domains (empty: any zone)."""
    spec = owner.get("spec") or {}
    single = ((spec.get("template") or {}).get("spec") or {}).get("failureDomain")
    if single:
        return (str(single),)
    return tuple(str(zone) for zone in spec.get("failureDomains") or () if zone)


def _unavailable_reason(
    zones: Mapping[str, float | None],
    excluded: Mapping[str, str],
    failure_domains: tuple[str, ...],
) -> str | None:
    """Why nothing of the owner can be bought, or ``None``: the reasons of its excluded zones
    when all it may use are excluded (a zone AWS does not sell in is left to ``generic_capi``,
    which names the zones that do)."""
    if failure_domains:
        wanted = [z for z in failure_domains if z in zones or z in excluded]
    else:
        wanted = sorted({*zones, *excluded})
    if not wanted or any(z in zones for z in wanted):
        return None
    return "; ".join(excluded[z] for z in wanted)


def _store(ctx: PluginContext, client: KubeClient, region: str) -> PriceStore | None:
    if (_option(ctx, "price-store") or "configmap").lower() == "none":
        return None
    namespace = (
        _option(ctx, "price-configmap-namespace")
        or os.environ.get("POD_NAMESPACE")
        or "kube-system"
    )
    store: PriceStore = ConfigMapPriceStore(
        client,
        namespace,
        f"karpenter-capi-prices-aws-{region}",
        clock=None if ctx.dry_run else ctx.clock,  # a dry run writes no Event
    )
    return ReadOnlyPriceStore(store) if ctx.dry_run else store


def _is_aws_template(template: Mapping[str, Any]) -> bool:
    group = str(template.get("apiVersion") or "").rpartition("/")[0]
    return template.get("kind") == TEMPLATE_KIND and group == CAPI_INFRASTRUCTURE_GROUP


# -- the entry point's clients: boto3's default session ------------------------------------

_default_lock = threading.Lock()
_default: CapaPlugin | None = None


def default_plugin() -> CapaPlugin:
    """The ``CapaPlugin`` the entry point uses (boto3's default credential chain)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = CapaPlugin(Boto3Clients())
        return _default


def set_default_plugin(plugin: CapaPlugin | None) -> None:
    """Replace the plugin the entry point uses (``None``: back to boto3's default).

    For embedders that enable ``capa`` by name but bring their own clients (a custom session,
    a proxy, canned responses in tests). It applies to the ``Plugins`` loaded afterwards.
    """
    global _default
    with _default_lock:
        _default = plugin
