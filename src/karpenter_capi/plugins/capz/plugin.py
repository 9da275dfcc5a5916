"""The ``capz`` plugin's hooks: Azure shapes, zones and prices for CAPZ node groups, and the
``CAPZMachinePool`` launch mode.

Enabled with ``--plugins generic_capi,capz``: ``generic_capi`` owns the inventory and asks,
through ``ctx.describe_machine_template``, what each node group's infrastructure template
makes; this module answers for ``AzureMachineTemplate`` and ``AzureMachinePool`` (see
``provider``). The Azure SDK is imported at module level on purpose: enabling ``capz`` without
the ``azure`` extra then fails at load time with ``PluginLoadError`` naming the extra, instead of
at the first inventory round.

A ClusterAPINodeClass with ``spec.launch.mode: CAPZMachinePool`` is served by this plugin
instead (``launch``): its inventory, create and delete hooks are ``tryfirst`` and answer only
for such NodeClasses (and the NodeClaims they launched), so ``generic_capi`` keeps every other
NodeClass. ``get`` and ``list`` of the pool Machines stay ``generic_capi``'s (a bound pool
Machine carries its member label); this plugin's ``list`` only tidies up empty pools.

``CapzPlugin`` is the plugin as an object, so an embedder or a test registers one with its own
Azure credential and transports (``Plugins.from_objects([("capz", CapzPlugin(...))], env)``);
the module-level hook delegates to a default instance whose Azure clients are built on first
use. One ``CapzProvider`` (and so one set of caches) is kept per management cluster, options,
clock and metrics.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping
from typing import Any

from karpenter_capi.core.errors import NodeClassNotReadyError, RetryableCreateError
from karpenter_capi.core.hookspecs import (
    LaunchResult,
    LaunchWatch,
    MachineTemplateDescription,
    NodeClass,
    PluginContext,
    hookimpl,
)
from karpenter_capi.core.instancetype import InstanceType
from karpenter_capi.core.kube.client import KubeClient
from karpenter_capi.core.kube.errors import ApiError
from karpenter_capi.plugins.capz.launch import PoolLaunch, is_pool_claim, launch_spec
from karpenter_capi.plugins.capz.provider import (
    PROVIDER,
    CapzProvider,
    CapzSettings,
    OptionError,
    display_name,
)
from karpenter_capi.plugins.capz.template import KINDS
from karpenter_capi.plugins.cloud.metrics import CloudMetrics
from karpenter_capi.plugins.generic_capi.delete import DeleteFailedError

__all__ = [
    "CapzPlugin",
    "CapzProvider",
    "karpenter_capi_create",
    "karpenter_capi_delete",
    "karpenter_capi_describe_machine_template",
    "karpenter_capi_instance_types",
    "karpenter_capi_is_drifted",
    "karpenter_capi_launch_watches",
    "karpenter_capi_list",
]

_ProviderKey = tuple[object, ...]
_MAX_LAUNCHES = 16


class CapzPlugin:
    """The capz hooks bound to injectable Azure clients.

    ``provider_options`` are passed to every ``CapzProvider`` it makes (``credential``,
    ``compute_factory``, ``arm_transport``, ``prices``, ``prices_transport``, ``env``,
    ``background``).
    """

    def __init__(self, **provider_options: Any) -> None:
        self._provider_options = provider_options
        self._lock = threading.Lock()
        self._providers: weakref.WeakKeyDictionary[KubeClient, dict[_ProviderKey, CapzProvider]] = (
            weakref.WeakKeyDictionary()
        )
        # Per context, as generic_capi keeps its state: one per process, a few in tests.
        self._launches: dict[int, tuple[PluginContext, PoolLaunch]] = {}

    def provider(self, ctx: PluginContext) -> CapzProvider:
        """The provider for ``ctx``'s management cluster, options, clock and metrics (made on
        first use: its caches live as long as the plugin)."""
        key: _ProviderKey = (
            tuple(sorted(ctx.options.items())),
            ctx.dry_run,
            id(ctx.clock),
            id(ctx.metrics),
        )
        with self._lock:
            per_client = self._providers.setdefault(ctx.management, {})
            provider = per_client.get(key)
            if provider is None:
                provider = self._make(ctx)
                per_client[key] = provider
            return provider

    def _make(self, ctx: PluginContext) -> CapzProvider:
        options = dict(self._provider_options)
        env: Mapping[str, str] | None = options.get("env")
        settings = CapzSettings.from_options(ctx.options, env, dry_run=ctx.dry_run)
        if ctx.metrics is not None and "metrics" not in options:
            options["metrics"] = CloudMetrics(ctx.metrics, PROVIDER)
        return CapzProvider(ctx.management, ctx.clock, settings=settings, **options)

    def launch(self, ctx: PluginContext) -> PoolLaunch:
        """The ``CAPZMachinePool`` launch state of ``ctx`` (made on first use)."""
        with self._lock:
            found = self._launches.get(id(ctx))
            if found is not None and found[0] is ctx:
                return found[1]
        try:
            provider = self.provider(ctx)
        except OptionError as exc:
            raise NodeClassNotReadyError("capz", str(exc)) from None
        made = PoolLaunch(ctx, provider)
        with self._lock:
            found = self._launches.get(id(ctx))
            if found is not None and found[0] is ctx:
                return found[1]
            self._launches[id(ctx)] = (ctx, made)
            while len(self._launches) > _MAX_LAUNCHES:
                self._launches.pop(next(iter(self._launches)))
        return made

    @hookimpl(tryfirst=True)
    def karpenter_capi_instance_types(
        self, nodeclass: NodeClass, ctx: PluginContext
    ) -> list[InstanceType] | None:
        if launch_spec(nodeclass) is None:
            return None
        try:
            return self.launch(ctx).instance_types(nodeclass)
        except ApiError as exc:
            name = str(getattr(getattr(nodeclass, "metadata", None), "name", "") or "")
            raise NodeClassNotReadyError(name, f"cannot read the launch objects: {exc}") from exc

    @hookimpl(tryfirst=True)
    def karpenter_capi_create(
        self,
        nodeclaim: Any,
        instance_types: list[InstanceType],
        nodeclass: NodeClass,
        ctx: PluginContext,
    ) -> LaunchResult | None:
        if launch_spec(nodeclass) is None:
            return None
        try:
            return self.launch(ctx).create(nodeclaim, instance_types, nodeclass)
        except ApiError as exc:
            raise RetryableCreateError(f"Cluster API request failed: {exc}") from exc

    @hookimpl(tryfirst=True)
    def karpenter_capi_is_drifted(
        self, nodeclaim: Any, nodeclass: NodeClass, ctx: PluginContext
    ) -> str | None:
        if launch_spec(nodeclass) is None:
            return None
        try:
            return self.launch(ctx).is_drifted(nodeclaim, nodeclass)
        except (ApiError, NodeClassNotReadyError) as exc:
            ctx.logger.warning("cannot judge drift of a CAPZMachinePool NodeClaim: %s", exc)
            return None

    @hookimpl
    def karpenter_capi_launch_watches(self, ctx: PluginContext) -> list[LaunchWatch]:
        return self.launch(ctx).watches()

    @hookimpl(tryfirst=True)
    def karpenter_capi_delete(self, nodeclaim: Any, ctx: PluginContext) -> bool | None:
        if not is_pool_claim(nodeclaim):
            return None
        try:
            return self.launch(ctx).delete(nodeclaim)
        except ApiError as exc:
            raise DeleteFailedError(f"removing a MachinePool Machine failed: {exc}") from exc

    @hookimpl
    def karpenter_capi_list(self, ctx: PluginContext) -> list[Any]:
        """The pool Machines are listed by ``generic_capi`` (they carry its member label);
        this call, minutes apart, tidies the pools up (``launch.PoolLaunch.sweep``)."""
        if not ctx.dry_run:
            try:
                self.launch(ctx).sweep()
            except (ApiError, NodeClassNotReadyError) as exc:
                ctx.logger.warning("could not tidy up the CAPZ MachinePools: %s", exc)
        return []

    @hookimpl
    def karpenter_capi_describe_machine_template(
        self, template: Mapping[str, Any], owner: Mapping[str, Any], ctx: PluginContext
    ) -> MachineTemplateDescription | None:
        if template.get("kind") not in KINDS:
            return None  # not CAPZ's: build no Azure client for it
        try:
            provider = self.provider(ctx)
        except OptionError as exc:
            raise NodeClassNotReadyError(display_name(template), str(exc)) from None
        return provider.describe(template, owner)


_default = CapzPlugin()


@hookimpl
def karpenter_capi_describe_machine_template(
    template: Mapping[str, Any], owner: Mapping[str, Any], ctx: PluginContext
) -> MachineTemplateDescription | None:
    """Describe an ``AzureMachineTemplate`` or ``AzureMachinePool``; ``None`` for other kinds."""
    return _default.karpenter_capi_describe_machine_template(template, owner, ctx)


@hookimpl(tryfirst=True)
def karpenter_capi_instance_types(
    nodeclass: NodeClass, ctx: PluginContext
) -> list[InstanceType] | None:
    """The offerings of a ``CAPZMachinePool`` NodeClass; ``None`` for other NodeClasses."""
    return _default.karpenter_capi_instance_types(nodeclass, ctx)


@hookimpl(tryfirst=True)
def karpenter_capi_create(
    nodeclaim: Any, instance_types: list[InstanceType], nodeclass: NodeClass, ctx: PluginContext
) -> LaunchResult | None:
    """Launch through a MachinePool for a ``CAPZMachinePool`` NodeClass; ``None`` otherwise."""
    return _default.karpenter_capi_create(nodeclaim, instance_types, nodeclass, ctx)


@hookimpl
def karpenter_capi_launch_watches(ctx: PluginContext) -> list[LaunchWatch]:
    return _default.karpenter_capi_launch_watches(ctx)


@hookimpl(tryfirst=True)
def karpenter_capi_is_drifted(
    nodeclaim: Any, nodeclass: NodeClass, ctx: PluginContext
) -> str | None:
    """``NodeClassDrift`` for a pool node whose NodeClass templates changed."""
    return _default.karpenter_capi_is_drifted(nodeclaim, nodeclass, ctx)


@hookimpl(tryfirst=True)
def karpenter_capi_delete(nodeclaim: Any, ctx: PluginContext) -> bool | None:
    """Remove the pool Machine of a NodeClaim this mode launched; ``None`` otherwise."""
    return _default.karpenter_capi_delete(nodeclaim, ctx)


@hookimpl
def karpenter_capi_list(ctx: PluginContext) -> list[Any]:
    return _default.karpenter_capi_list(ctx)
