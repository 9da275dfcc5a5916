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

The core makes one ``CapzHooks`` per ``Plugins`` with the plugin's ``PluginContext`` (the
``capz`` entry point names the class, whose Azure clients are built on first use); it keeps one
``CapzProvider`` (and so one set of caches) and one ``PoolLaunch``. An embedder or a test that
brings its own Azure credential and transports registers ``CapzPlugin(...)``, a factory of
``CapzHooks`` over them (``Plugins.from_objects([("capz", CapzPlugin(...))], env)``).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from karpenter_capi.plugin_api import (
    InstanceType,
    LaunchResult,
    LaunchWatch,
    MachineTemplateDescription,
    NodeClaim,
    NodeClassNotReadyError,
    PluginContext,
    RetryableCreateError,
    hookimpl,
)
from karpenter_capi.plugin_api.karpenter import NodeClass
from karpenter_capi.plugin_api.kube import ApiError
from karpenter_capi.plugins._cloud.metrics import CloudMetrics
from karpenter_capi.plugins.capz.launch import PoolLaunch, is_pool_claim, launch_spec
from karpenter_capi.plugins.capz.provider import (
    PROVIDER,
    CapzProvider,
    CapzSettings,
    OptionError,
    display_name,
)
from karpenter_capi.plugins.capz.template import KINDS
from karpenter_capi.plugins.generic_capi.delete import DeleteFailedError

__all__ = ["CapzHooks", "CapzPlugin", "CapzProvider"]


class CapzPlugin:
    """The ``capz`` plugin bound to injectable Azure clients: a factory of ``CapzHooks``.

    ``provider_options`` are passed to the ``CapzProvider`` (``credential``,
    ``compute_factory``, ``arm_transport``, ``prices``, ``prices_transport``, ``env``,
    ``background``).
    """

    def __init__(self, **provider_options: Any) -> None:
        self._provider_options = provider_options

    def __call__(self, ctx: PluginContext) -> CapzHooks:
        return CapzHooks(ctx, **self._provider_options)


class CapzHooks:
    """The capz hooks for one ``PluginContext``, and the provider and launch state they keep."""

    def __init__(self, ctx: PluginContext, **provider_options: Any) -> None:
        self._ctx = ctx
        self._provider_options = provider_options
        self._lock = threading.Lock()
        self._provider: CapzProvider | None = None
        self._launch: PoolLaunch | None = None

    def provider(self) -> CapzProvider:
        """The provider of the management cluster (made on first use: its caches live as long
        as these hooks)."""
        with self._lock:
            if self._provider is None:
                self._provider = self._make()
            return self._provider

    def _make(self) -> CapzProvider:
        ctx = self._ctx
        options = dict(self._provider_options)
        env: Mapping[str, str] | None = options.get("env")
        settings = CapzSettings.from_options(ctx.options, env, dry_run=ctx.dry_run)
        if ctx.metrics is not None and "metrics" not in options:
            options["metrics"] = CloudMetrics(ctx.metrics, PROVIDER)
        return CapzProvider(ctx.management, ctx.clock, settings=settings, **options)

    def launch(self) -> PoolLaunch:
        """The ``CAPZMachinePool`` launch state (made on first use)."""
        try:
            provider = self.provider()
        except OptionError as exc:
            raise NodeClassNotReadyError("capz", str(exc)) from None
        with self._lock:
            if self._launch is None:
                self._launch = PoolLaunch(self._ctx, provider)
            return self._launch

    def _sent_to_a_pool(self, nodeclaim: NodeClaim) -> bool:
        """Whether this process sent ``nodeclaim`` to a pool before the core recorded it (its
        launch annotation not written yet): its delete is this mode's, to give that back."""
        with self._lock:
            launch = self._launch
        return launch is not None and launch.sent_to(nodeclaim) is not None

    @hookimpl(tryfirst=True)
    def karpenter_capi_instance_types(self, nodeclass: NodeClass) -> list[InstanceType] | None:
        if launch_spec(nodeclass) is None:
            return None
        try:
            return self.launch().instance_types(nodeclass)
        except ApiError as exc:
            name = str(getattr(getattr(nodeclass, "metadata", None), "name", "") or "")
            raise NodeClassNotReadyError(name, f"cannot read the launch objects: {exc}") from exc

    @hookimpl(tryfirst=True)
    def karpenter_capi_create(
        self, nodeclaim: NodeClaim, instance_types: list[InstanceType], nodeclass: NodeClass
    ) -> LaunchResult | None:
        if launch_spec(nodeclass) is None:
            return None
        try:
            return self.launch().create(nodeclaim, instance_types, nodeclass)
        except ApiError as exc:
            raise RetryableCreateError(f"Cluster API request failed: {exc}") from exc

    @hookimpl(tryfirst=True)
    def karpenter_capi_is_drifted(self, nodeclaim: NodeClaim, nodeclass: NodeClass) -> str | None:
        if launch_spec(nodeclass) is None:
            return None
        try:
            return self.launch().is_drifted(nodeclaim, nodeclass)
        except (ApiError, NodeClassNotReadyError) as exc:
            self._ctx.logger.warning("cannot judge drift of a CAPZMachinePool NodeClaim: %s", exc)
            return None

    @hookimpl
    def karpenter_capi_launch_watches(self) -> list[LaunchWatch]:
        return self.launch().watches()

    @hookimpl(tryfirst=True)
    def karpenter_capi_delete(self, nodeclaim: NodeClaim) -> bool | None:
        if not is_pool_claim(nodeclaim) and not self._sent_to_a_pool(nodeclaim):
            return None
        try:
            return self.launch().delete(nodeclaim)
        except ApiError as exc:
            raise DeleteFailedError(f"removing a MachinePool Machine failed: {exc}") from exc

    @hookimpl
    def karpenter_capi_list(self) -> list[Any]:
        """The pool Machines are listed by ``generic_capi`` (they carry its member label);
        this call, minutes apart, tidies the pools up (``launch.PoolLaunch.sweep``)."""
        if not self._ctx.dry_run:
            try:
                self.launch().sweep()
            except (ApiError, NodeClassNotReadyError) as exc:
                self._ctx.logger.warning("could not tidy up the CAPZ MachinePools: %s", exc)
        return []

    @hookimpl
    def karpenter_capi_describe_machine_template(
        self, template: Mapping[str, Any], owner: Mapping[str, Any]
    ) -> MachineTemplateDescription | None:
        if template.get("kind") not in KINDS:
            return None  # not CAPZ's: build no Azure client for it
        try:
            provider = self.provider()
        except OptionError as exc:
            raise NodeClassNotReadyError(display_name(template), str(exc)) from None
        return provider.describe(template, owner)
