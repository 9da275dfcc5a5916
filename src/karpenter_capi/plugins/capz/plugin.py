"""The ``capz`` plugin's hooks: Azure shapes, zones and prices for CAPZ node groups.

Enabled with ``--plugins generic_capi,capz``: ``generic_capi`` owns the inventory and asks,
through ``ctx.describe_machine_template``, what each node group's infrastructure template
makes; this module answers for ``AzureMachineTemplate`` and ``AzureMachinePool`` (see
``provider``). The Azure SDK is imported at module level on purpose: enabling ``capz`` without
the ``azure`` extra then fails at load time with ``PluginLoadError`` naming the extra, instead of
at the first inventory round.

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

from karpenter_capi.core.errors import NodeClassNotReadyError
from karpenter_capi.core.hookspecs import MachineTemplateDescription, PluginContext, hookimpl
from karpenter_capi.core.kube.client import KubeClient
from karpenter_capi.plugins.capz.provider import (
    PROVIDER,
    CapzProvider,
    CapzSettings,
    OptionError,
    display_name,
)
from karpenter_capi.plugins.capz.template import KINDS
from karpenter_capi.plugins.cloud.metrics import CloudMetrics

__all__ = ["CapzPlugin", "CapzProvider", "karpenter_capi_describe_machine_template"]

_ProviderKey = tuple[object, ...]


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
