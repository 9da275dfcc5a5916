"""The capz provider: an Azure template in, a ``MachineTemplateDescription`` out.

``CapzProvider.describe`` is called at every inventory round for every node group backed by a
CAPZ template, so nothing on its path waits for Azure more than once in a while:

* the Resource SKUs of a (subscription, location) are a ``CatalogCache`` entry (6 hours;
  a failed reload keeps serving the previous catalog);
* the prices of a location are a ``PriceBook`` (refreshed every 12 hours off the caller's
  thread, last good prices kept, persisted to a ConfigMap so a restart without Azure access
  still has prices);
* the location and subscription of a Cluster are read from the management cluster once a
  minute.

Everything that talks to Azure is injectable (a credential, a compute-client factory, azure-core
transports for ARM and for the Retail Prices API), so tests run the real SDK against canned
answers and never the network. Credentials default to azure-identity's
``DefaultAzureCredential`` (environment, workload identity, managed identity, Azure CLI),
created on first use; no secret is ever logged.
"""

from __future__ import annotations

import logging
import math
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from azure.identity import DefaultAzureCredential
from azure.mgmt.compute import ComputeManagementClient

from karpenter_capi.plugin_api import (
    Clock,
    KubeClient,
    MachineTemplateDescription,
    NodeClassNotReadyError,
    ResourceList,
)
from karpenter_capi.plugin_api.karpenter import wellknown
from karpenter_capi.plugins._cloud.catalog import CatalogCache, CatalogError
from karpenter_capi.plugins._cloud.metrics import CloudMetrics, timed
from karpenter_capi.plugins._cloud.pricebook import (
    DEFAULT_REFRESH_SECONDS,
    ConfigMapPriceStore,
    PriceBook,
    PriceSnapshot,
    PriceStore,
    ReadOnlyPriceStore,
)
from karpenter_capi.plugins._cloud.unavailable import UnavailableOfferings
from karpenter_capi.plugins.capz.cluster import (
    AzureClusterError,
    AzureTarget,
    cluster_name,
    resolve_target,
)
from karpenter_capi.plugins.capz.retail import RetailPricesClient, spot_price
from karpenter_capi.plugins.capz.skus import VmSku, list_vm_skus
from karpenter_capi.plugins.capz.template import AzureNodeSpec, TemplateSpecError, parse_template

log = logging.getLogger(__name__)

SOURCE: Final = "Azure"
PROVIDER: Final = "capz"
"""The ``provider`` label of the cloud-call metrics and the price-age gauge (the plugin name, as
``capa`` labels its own)."""
DEFAULT_MAX_PODS: Final = 110
"""Pods per node: AKS's default with kubenet and Azure CNI Overlay, and the kubelet's."""
CLUSTER_TTL_SECONDS: Final = 60.0
PRICES_CONFIGMAP_PREFIX: Final = "karpenter-capi-prices-azure-"
ON_DEMAND: Final = wellknown.CAPACITY_TYPE_ON_DEMAND
SPOT: Final = wellknown.CAPACITY_TYPE_SPOT

# Plugin options (``--plugin-option capz.<name>=<value>``; ``_`` may stand for ``-``), named
# as the ``capa`` plugin names its own.
OPTION_SUBSCRIPTION: Final = "subscription-id"
OPTION_LOCATION: Final = "location"
OPTION_MAX_PODS: Final = "max-pods"
OPTION_PRICE_REFRESH: Final = "price-refresh-interval"
OPTION_PRICE_STORE: Final = "price-store"
OPTION_PRICES_NAMESPACE: Final = "price-configmap-namespace"
CATALOG_TTL_SECONDS: Final = 6 * 3600.0

ComputeFactory = Callable[[str], Any]
"""Builds an azure-mgmt-compute ``ComputeManagementClient`` for a subscription ID."""


class OptionError(ValueError):
    """A capz plugin option has an invalid value."""


def _option(options: Mapping[str, str], name: str) -> str | None:
    value = options.get(name)
    if value is None:
        value = options.get(name.replace("-", "_"))
    return value.strip() if value is not None and value.strip() else None


@dataclass(frozen=True)
class CapzSettings:
    """The plugin options, parsed once (see ``docs/azure.md``). ``prices_namespace`` ``None``
    keeps prices in memory only (``price-store=none``); ``dry_run`` reads stored prices but
    writes none."""

    subscription_id: str | None = None
    location: str | None = None
    max_pods: int = DEFAULT_MAX_PODS
    price_refresh_seconds: float = DEFAULT_REFRESH_SECONDS
    prices_namespace: str | None = "kube-system"
    dry_run: bool = False

    @classmethod
    def from_options(
        cls,
        options: Mapping[str, str],
        env: Mapping[str, str] | None = None,
        *,
        dry_run: bool = False,
    ) -> CapzSettings:
        """Parse the options; ``OptionError`` names the one that is wrong."""
        environment = os.environ if env is None else env

        def number(name: str, default: float) -> float:
            raw = _option(options, name)
            if raw is None:
                return default
            try:
                value = float(raw)
            except ValueError:
                raise OptionError(f"plugin option capz.{name}={raw!r} is not a number") from None
            if not math.isfinite(value) or value <= 0:
                raise OptionError(f"plugin option capz.{name}={raw!r} must be positive")
            return value

        max_pods = number(OPTION_MAX_PODS, DEFAULT_MAX_PODS)
        if max_pods != int(max_pods):
            raise OptionError(f"plugin option capz.{OPTION_MAX_PODS} must be a whole number")
        store = (_option(options, OPTION_PRICE_STORE) or "configmap").lower()
        if store not in ("configmap", "none"):
            raise OptionError(
                f"plugin option capz.{OPTION_PRICE_STORE}={store!r} is not configmap or none"
            )
        namespace = (
            _option(options, OPTION_PRICES_NAMESPACE)
            or environment.get("POD_NAMESPACE")
            or "kube-system"
        )
        return cls(
            subscription_id=_option(options, OPTION_SUBSCRIPTION),
            location=_option(options, OPTION_LOCATION),
            max_pods=int(max_pods),
            price_refresh_seconds=number(OPTION_PRICE_REFRESH, DEFAULT_REFRESH_SECONDS),
            prices_namespace=namespace if store == "configmap" else None,
            dry_run=dry_run,
        )


class _TargetCache:
    """The Azure target of each Cluster, failures included, for a minute of the clock."""

    def __init__(self, clock: Clock, resolve: Callable[[Mapping[str, Any]], AzureTarget]) -> None:
        self._clock = clock
        self._resolve = resolve
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, str], tuple[float, AzureTarget | str]] = {}

    def get(self, owner: Mapping[str, Any]) -> AzureTarget:
        metadata = owner.get("metadata") or {}
        key = (str(metadata.get("namespace") or "default"), cluster_name(owner) or "")
        now = self._clock.monotonic()
        with self._lock:
            cached = self._entries.get(key)
        if cached is None or cached[0] <= now:
            result: AzureTarget | str
            try:
                result = self._resolve(owner)
            except AzureClusterError as exc:
                result = str(exc)
            cached = (now + CLUSTER_TTL_SECONDS, result)
            with self._lock:
                self._entries[key] = cached
        if isinstance(cached[1], str):
            raise AzureClusterError(cached[1])
        return cached[1]


class CapzProvider:
    """Describes CAPZ templates from Azure's own data (see the module docstring).

    ``management`` serves the Cluster API objects and keeps the prices ConfigMaps.
    ``credential`` (an azure-core ``TokenCredential``), ``compute_factory``, ``arm_transport``
    and ``prices`` / ``prices_transport`` replace the real Azure clients. ``background=False``
    refreshes prices inline (deterministic tests).
    """

    def __init__(
        self,
        management: KubeClient,
        clock: Clock,
        *,
        settings: CapzSettings | None = None,
        credential: Any = None,
        compute_factory: ComputeFactory | None = None,
        arm_transport: Any = None,
        prices: RetailPricesClient | None = None,
        prices_transport: Any = None,
        env: Mapping[str, str] | None = None,
        metrics: CloudMetrics | None = None,
        background: bool = True,
    ) -> None:
        self._management = management
        self._clock = clock
        self._env = os.environ if env is None else env
        self.settings = settings or CapzSettings.from_options({}, self._env)
        self._credential = credential
        self._compute_factory = compute_factory or self._default_compute
        self._arm_transport = arm_transport
        self._prices = prices or RetailPricesClient(transport=prices_transport)
        self._metrics = metrics
        self._background = background
        self._lock = threading.Lock()
        self._computes: dict[str, Any] = {}
        self._books: dict[str, PriceBook] = {}
        self.unavailable = UnavailableOfferings(clock)
        """Offerings a launcher found unavailable (SkuNotAvailable, ZonalAllocationFailed)."""
        self.skus: CatalogCache[tuple[str, str], dict[str, VmSku]] = CatalogCache(
            "Azure Resource SKUs",
            self._load_skus,
            clock,
            ttl_seconds=CATALOG_TTL_SECONDS,
        )
        self._targets = _TargetCache(clock, self._resolve_target)

    # -- Azure clients -----------------------------------------------------------------------

    def _default_compute(self, subscription_id: str) -> Any:
        with self._lock:
            if self._credential is None:
                self._credential = DefaultAzureCredential()
            credential = self._credential
        kwargs: dict[str, Any] = {}
        if self._arm_transport is not None:
            kwargs["transport"] = self._arm_transport
        return ComputeManagementClient(credential, subscription_id, **kwargs)

    def _compute(self, subscription_id: str) -> Any:
        with self._lock:
            client = self._computes.get(subscription_id)
        if client is None:
            client = self._compute_factory(subscription_id)
            with self._lock:
                client = self._computes.setdefault(subscription_id, client)
        return client

    def _load_skus(self, key: tuple[str, str]) -> dict[str, VmSku]:
        subscription_id, location = key
        compute = self._compute(subscription_id)
        with timed(self._metrics, "ResourceSkus.List"):
            found = list_vm_skus(compute, location)
        if not found:
            raise CatalogError(f"Azure lists no VM sizes in location {location!r}")
        # Azure's names are case-insensitive; templates are not always written in its case.
        return {name.lower(): sku for name, sku in found.items()}

    def price_book(self, location: str) -> PriceBook:
        """The price book of ``location`` (one per location, made on first use)."""
        with self._lock:
            book = self._books.get(location)
            if book is None:
                book = PriceBook(
                    f"capz/{location}",
                    lambda: self._fetch_prices(location),
                    self._clock,
                    refresh_seconds=self.settings.price_refresh_seconds,
                    store=self._store(location),
                    metrics=self._metrics.for_region(location) if self._metrics else None,
                    background=self._background,
                )
                self._books[location] = book
        return book

    def _store(self, location: str) -> PriceStore | None:
        namespace = self.settings.prices_namespace
        if not namespace:
            return None
        store = ConfigMapPriceStore(
            self._management,
            namespace,
            PRICES_CONFIGMAP_PREFIX + location,
            clock=None if self.settings.dry_run else self._clock,  # a dry run writes no Event
        )
        return ReadOnlyPriceStore(store) if self.settings.dry_run else store

    def _fetch_prices(self, location: str) -> PriceSnapshot:
        with timed(self._metrics, "RetailPrices"):
            return self._prices.snapshot(location, self._clock.now)

    def _resolve_target(self, owner: Mapping[str, Any]) -> AzureTarget:
        return resolve_target(
            self._management,
            owner,
            location=self.settings.location,
            subscription_id=self.settings.subscription_id,
            env=self._env,
        )

    def target(self, owner: Mapping[str, Any]) -> AzureTarget:
        """The location and subscription of ``owner``'s Cluster (cached for a minute);
        ``AzureClusterError`` says what is missing."""
        return self._targets.get(owner)

    # -- the hook --------------------------------------------------------------------------

    def describe(
        self, template: Mapping[str, Any], owner: Mapping[str, Any]
    ) -> MachineTemplateDescription | None:
        """What ``template`` (owned by ``owner``) makes, or ``None`` when it is not CAPZ's.

        Raises ``NodeClassNotReadyError`` when it is CAPZ's but cannot be described: no
        location or subscription, Azure unreachable before any catalog was loaded, a VM size
        the location does not have.
        """
        try:
            spec = parse_template(template, owner)
        except TemplateSpecError as exc:
            raise NodeClassNotReadyError(display_name(template), str(exc)) from None
        if spec is None:
            return None
        try:
            target = self._targets.get(owner)
        except AzureClusterError as exc:
            raise NodeClassNotReadyError(spec.display, str(exc)) from None
        try:
            catalog = self.skus.get((target.subscription_id, target.location))
        except CatalogError as exc:
            raise NodeClassNotReadyError(
                spec.display, f"cannot list Azure VM sizes in {target.location}: {exc}"
            ) from None
        sku = catalog.get(spec.vm_size.lower())
        if sku is None:
            raise NodeClassNotReadyError(
                spec.display,
                f"VM size {spec.vm_size} is not offered in location {target.location}",
            )
        price = self._price(sku, spec, target.location)
        zones, unavailable = offered_zones(sku, spec, price)
        capacity_type = SPOT if spec.spot else ON_DEMAND
        zones = {
            zone: zone_price
            for zone, zone_price in zones.items()
            if not self.unavailable.is_unavailable(sku.name, zone, capacity_type)
        }
        if not zones and unavailable is None:
            unavailable = f"every offering of {sku.name} was recently found unavailable"
        return MachineTemplateDescription(
            source=SOURCE,
            instance_type=sku.name,
            capacity=node_capacity(sku, spec, self.settings.max_pods),
            capacity_type=capacity_type,
            zones=zones,
            labels=node_labels(sku, spec, target.location),
            unavailable_reason=unavailable,
        )

    def _price(self, sku: VmSku, spec: AzureNodeSpec, location: str) -> float | None:
        if spec.os_type != "linux":
            return None  # the book holds Linux prices; a Windows licence costs extra
        snapshot = self.price_book(location).snapshot()
        if snapshot is None:
            return None
        if spec.spot:
            return spot_price(snapshot, sku.name)
        return snapshot.on_demand.get(sku.name)


def display_name(template: Mapping[str, Any]) -> str:
    """``Kind namespace/name`` of a template, for messages."""
    metadata = template.get("metadata") or {}
    return f"{template.get('kind')} {metadata.get('namespace') or 'default'}/{metadata.get('name')}"


def zone_label(location: str, zone: str) -> str:
    """The ``topology.kubernetes.io/zone`` of a VM in Azure zone ``zone`` (``eastus-1``), as
    the Azure cloud provider labels nodes."""
    return f"{location}-{zone}"


def _failure_domain_zone(location: str, failure_domain: str) -> str:
    """A CAPZ failure domain (``"1"``; tolerate ``"eastus-1"``) as Azure's zone number."""
    return failure_domain.removeprefix(f"{location}-")


def offered_zones(
    sku: VmSku, spec: AzureNodeSpec, price: float | None
) -> tuple[dict[str, float | None], str | None]:
    """(zone label -> price where ``spec``'s VMs can be bought, why none can or ``None``).

    The owner's failure domains narrow the zones; without any, every zone that offers the size
    is listed. In a location without availability zones the one zone is ``""``.
    """
    where = f"{sku.name} in {sku.location}"
    if sku.restricted is not None:
        return {}, f"VM size {where} is restricted for the subscription ({sku.restricted})"
    if spec.spot and not sku.spot_capable:
        return {}, f"VM size {where} cannot run as Spot (LowPriorityCapable is not True)"
    if spec.spot and spec.max_price is not None and price is not None and price > spec.max_price:
        return {}, (
            f"the Spot price of {where}, {price:g}/h, is above spotVMOptions.maxPrice "
            f"{spec.max_price:g}"
        )
    if not sku.zonal_location:
        return {"": price}, None
    wanted = [_failure_domain_zone(sku.location, fd) for fd in spec.failure_domains]
    chosen = [z for z in wanted if z in sku.zones] if wanted else list(sku.zones)
    if not chosen:
        reasons = sorted({sku.zone_restrictions[z] for z in wanted if z in sku.zone_restrictions})
        detail = f" ({', '.join(reasons)})" if reasons else ""
        return {}, (
            f"VM size {where} is not offered in zone(s) {', '.join(wanted)}{detail}; "
            f"offered in {', '.join(sku.zones) or 'none'}"
        )
    return {zone_label(sku.location, z): price for z in chosen}, None


def node_labels(sku: VmSku, spec: AzureNodeSpec, location: str) -> dict[str, str]:
    """The node labels Azure decides. With one failure domain the node's zone is known, and
    it is not the failure domain's name (``2``) but the cloud provider's label (``eastus-2``):
    stating it here is how ``generic_capi`` learns the offering's zone (its own rule would take
    the failure domain's name)."""
    labels = {
        wellknown.LABEL_ARCH: sku.architecture,
        wellknown.LABEL_OS: spec.os_type,
        wellknown.LABEL_INSTANCE_TYPE: sku.name,
        wellknown.LABEL_TOPOLOGY_REGION: location,
    }
    if sku.zonal_location and len(spec.failure_domains) == 1:
        zone = _failure_domain_zone(location, spec.failure_domains[0])
        labels[wellknown.LABEL_TOPOLOGY_ZONE] = zone_label(location, zone)
    return labels


def node_capacity(sku: VmSku, spec: AzureNodeSpec, max_pods: int) -> ResourceList:
    """The node's capacity: the size's vCPUs, memory and GPUs, the pods limit, the OS disk."""
    values: dict[str, str] = {
        "cpu": str(sku.vcpus),
        "memory": f"{sku.memory_mib}Mi",
        "pods": str(max_pods),
    }
    if sku.gpus:
        values[sku.gpu_resource] = str(sku.gpus)
    if spec.os_disk_gib:
        values["ephemeral-storage"] = f"{spec.os_disk_gib}Gi"
    return ResourceList.parse(values)
