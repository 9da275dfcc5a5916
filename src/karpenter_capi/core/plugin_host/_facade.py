"""The typed facade through which the core calls the enabled plugins.

The rest of the core never touches pluggy: it calls ``Plugins``. The facade calls each
implementation itself, in the documented plugin order (see ``core.hookspecs``), so that it can
hand every plugin its own ``PluginContext``, chain the pricing hook, and check what each plugin
returns, naming the plugin whose result has the wrong type or whose code raised. A plugin made
from a class or factory is made here, once per ``Plugins``, so its state lives exactly as long
as the ``Plugins`` that made it (no plugin keeps a map of contexts).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import pluggy

from karpenter_capi.core import hookspecs
from karpenter_capi.core.clock import Clock
from karpenter_capi.core.errors import InstanceNotFoundError, ProviderError
from karpenter_capi.core.hookspecs import (
    ClusterState,
    Instance,
    InterruptionNotice,
    LaunchResult,
    LaunchWatch,
    MachineTemplateDescription,
    NodeClass,
    PluginContext,
)
from karpenter_capi.core.instancetype import InstanceType
from karpenter_capi.core.kube.client import KubeClient
from karpenter_capi.core.plugin_host._errors import (
    NotHandledError,
    PluginCallError,
    PluginError,
    PluginResultError,
)
from karpenter_capi.core.plugin_host._interrupted import InterruptedOfferings
from karpenter_capi.core.plugin_host._loading import load_plugins, make, new_manager, register
from karpenter_capi.core.plugin_host._results import RESULT_CHECKS, object_name, spec_name

if TYPE_CHECKING:
    from karpenter_capi.core.api.nodeclaim import NodeClaim
    from karpenter_capi.core.api.nodepool import NodePool
    from karpenter_capi.core.observability.metrics import Metrics

_PLUGIN_LOGGER_NAME: Final = "karpenter_capi.plugins"


@dataclass(frozen=True)
class PluginEnvironment:
    """What the core shares with every plugin; ``Plugins`` derives each one's ``PluginContext``.

    ``options`` maps a plugin name to that plugin's own options.
    """

    workload: KubeClient
    management: KubeClient
    clock: Clock
    logger: logging.Logger = field(default_factory=lambda: logging.getLogger(_PLUGIN_LOGGER_NAME))
    options: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    dry_run: bool = False
    metrics: Metrics | None = None

    def context_for(
        self, plugin_name: str, cluster_state: ClusterState | None = None
    ) -> PluginContext:
        return PluginContext(
            plugin_name=plugin_name,
            workload=self.workload,
            management=self.management,
            clock=self.clock,
            logger=self.logger.getChild(plugin_name),
            options=dict(self.options.get(plugin_name, {})),
            dry_run=self.dry_run,
            metrics=self.metrics,
            cluster_state=cluster_state if cluster_state is not None else ClusterState(),
        )


class Plugins:
    """The typed entry point from the core to the enabled plugins.

    Build it with ``Plugins.load(names, environment)`` (entry points) or
    ``Plugins.from_objects([(name, plugin), ...], environment)`` (embedding, tests), where a
    plugin is a module, an object, or a class or factory that this ``Plugins`` calls once with
    the plugin's ``PluginContext`` (``is_factory``): the object it makes is the plugin for as
    long as this ``Plugins`` lives, so its state is this ``Plugins``'s and nobody else's.
    Every method calls the implementations in plugin order, one at a time, with each plugin's
    own ``PluginContext``; ``ProviderError``s propagate unchanged, any other exception becomes a
    ``PluginCallError`` and a wrongly typed result a ``PluginResultError``, both naming the plugin.
    """

    def __init__(
        self, plugins: Iterable[tuple[str, object]], environment: PluginEnvironment
    ) -> None:
        self._sources = list(plugins)
        self._environment = environment
        self._contexts: dict[str, PluginContext] = {}
        self.cluster_state = ClusterState()
        """What the plugins keep for this cluster (``PluginContext.state``): it lives exactly
        as long as this ``Plugins``."""
        self._manager = self._registered()
        self.interrupted = InterruptedOfferings(environment.clock)
        """Offerings spot interruptions took away: every inventory returned shows them
        unavailable (``core.interruption`` marks them)."""

    @classmethod
    def load(cls, enabled: Sequence[str], environment: PluginEnvironment) -> Plugins:
        return cls(load_plugins(enabled), environment)

    @classmethod
    def from_objects(
        cls, plugins: Iterable[tuple[str, object]], environment: PluginEnvironment
    ) -> Plugins:
        return cls(plugins, environment)

    def _registered(self) -> pluggy.PluginManager:
        made = [(name, make(name, plugin, self.context(name))) for name, plugin in self._sources]
        manager = new_manager()
        # pluggy calls the most recently registered implementation first; register in reverse
        # so that the enabled order is the call order.
        for name, plugin in reversed(made):
            register(manager, name, plugin)
        return manager

    def use_metrics(self, metrics: Metrics) -> None:
        """Give every plugin's context the operator's metrics.

        The operator builds its ``Metrics`` after the plugins are loaded, so it hands them over
        here, before any hook runs: contexts made earlier are rebuilt, and so are the plugins
        made from a class or factory (they were handed the old context).
        """
        self._environment = dataclasses.replace(self._environment, metrics=metrics)
        self._contexts.clear()
        self._manager = self._registered()

    @property
    def manager(self) -> pluggy.PluginManager:
        return self._manager

    def plugin(self, name: str) -> object:
        """The registered plugin ``name``: the module or object, or what its factory made."""
        found = self._manager.get_plugin(name)
        if found is None:
            raise KeyError(name)
        return found

    @property
    def names(self) -> list[str]:
        """Enabled plugin names, in the order they were enabled."""
        return [name for name, _ in reversed(self._manager.list_name_plugin())]

    def context(self, plugin_name: str) -> PluginContext:
        context = self._contexts.get(plugin_name)
        if context is None:
            context = dataclasses.replace(
                self._environment.context_for(plugin_name, self.cluster_state),
                describe_machine_template=self.describe_machine_template,
            )
            self._contexts[plugin_name] = context
        return context

    def _implementations(self, hook_name: str) -> list[pluggy.HookImpl]:
        caller: pluggy.HookCaller = getattr(self._manager.hook, hook_name)
        # pluggy keeps implementations in reverse call order (see core.hookspecs).
        return list(reversed(caller.get_hookimpls()))

    def _call(self, impl: pluggy.HookImpl, hook_name: str, arguments: Mapping[str, object]) -> Any:
        name = impl.plugin_name
        if "ctx" in impl.argnames:
            arguments = {**arguments, "ctx": self.context(name)}
        try:
            return impl.function(*(arguments[argument] for argument in impl.argnames))
        except (ProviderError, PluginError):
            raise
        except Exception as error:
            raise PluginCallError(name, hook_name, error) from error

    def _each(
        self, hook_name: str, arguments: Mapping[str, object]
    ) -> Iterable[tuple[str, object]]:
        for impl in self._implementations(hook_name):
            yield impl.plugin_name, self._call(impl, hook_name, arguments)

    @staticmethod
    def _checked(plugin: str, hook: str, value: object) -> Any:
        valid, expected = RESULT_CHECKS[hook]
        if not valid(value):
            raise PluginResultError(plugin, hook, expected, value)
        return value

    def nodeclass_kinds(self) -> dict[tuple[str, str], list[str]]:
        """``(group, kind)`` -> the plugins serving it, in plugin order."""
        hook = spec_name(hookspecs.karpenter_capi_nodeclass_kinds)
        served: dict[tuple[str, str], list[str]] = {}
        for plugin, result in self._each(hook, {}):
            kinds: list[tuple[str, str]] = self._checked(plugin, hook, result)
            for kind in kinds:
                served.setdefault(kind, []).append(plugin)
        return served

    def serving_plugin(self, nodeclass: NodeClass, nodepool: NodePool) -> str | None:
        """The plugin owning the inventory of ``nodeclass`` (first to answer), or None."""
        return self._inventory(nodeclass, nodepool)[0]

    def _inventory(
        self, nodeclass: NodeClass, nodepool: NodePool
    ) -> tuple[str | None, list[InstanceType]]:
        hook = spec_name(hookspecs.karpenter_capi_instance_types)
        arguments = {"nodeclass": nodeclass, "nodepool": nodepool}
        for plugin, result in self._each(hook, arguments):
            if result is None:
                continue
            types: list[InstanceType] = self._checked(plugin, hook, result)
            return plugin, types
        return None, []

    def instance_types(
        self, nodeclass: NodeClass, nodepool: NodePool, *, priced: bool = True
    ) -> list[InstanceType]:
        """The inventory for a NodePool and its NodeClass, priced by the pricing chain.

        Raises ``NotHandledError`` when no enabled plugin serves ``nodeclass``.
        """
        owner, types = self._inventory(nodeclass, nodepool)
        if owner is None:
            raise NotHandledError(
                spec_name(hookspecs.karpenter_capi_instance_types),
                object_name(nodeclass),
                self.names,
            )
        if priced:
            types = self.price_offerings(types, nodeclass, nodepool)
        return self.interrupted.apply(types)

    def price_offerings(
        self, instance_types: list[InstanceType], nodeclass: NodeClass, nodepool: NodePool
    ) -> list[InstanceType]:
        """Run the pricing chain: each plugin, in plugin order, sees the previous one's output."""
        hook = spec_name(hookspecs.karpenter_capi_price_offerings)
        current = list(instance_types)
        for impl in self._implementations(hook):
            arguments = {"instance_types": current, "nodeclass": nodeclass, "nodepool": nodepool}
            result = self._call(impl, hook, arguments)
            if result is None:
                continue
            current = self._checked(impl.plugin_name, hook, result)
        return current

    def create(
        self, nodeclaim: NodeClaim, instance_types: list[InstanceType], nodeclass: NodeClass
    ) -> LaunchResult:
        """Start a launch through the first plugin that accepts it.

        Raises the plugin's ``ProviderError`` as is, or ``NotHandledError`` if no plugin serves
        ``nodeclass``.
        """
        hook = spec_name(hookspecs.karpenter_capi_create)
        arguments = {
            "nodeclaim": nodeclaim,
            "instance_types": instance_types,
            "nodeclass": nodeclass,
        }
        for plugin, result in self._each(hook, arguments):
            if result is not None:
                launched: LaunchResult = self._checked(plugin, hook, result)
                return launched
        raise NotHandledError(hook, object_name(nodeclaim), self.names)

    def launch_watches(self) -> list[tuple[str, LaunchWatch]]:
        """Every plugin's ``LaunchWatch``es, with the plugin's name, in plugin order."""
        hook = spec_name(hookspecs.karpenter_capi_launch_watches)
        watches: list[tuple[str, LaunchWatch]] = []
        for plugin, result in self._each(hook, {}):
            if result is None:
                continue
            listed: list[LaunchWatch] = self._checked(plugin, hook, result)
            watches.extend((plugin, watch) for watch in listed)
        return watches

    def delete(self, nodeclaim: NodeClaim) -> str:
        """Start deleting the machine of ``nodeclaim``; returns the plugin that took it.

        Raises ``InstanceNotFoundError`` (from the plugin) once the machine is gone, and
        ``NotHandledError`` when no plugin owns the NodeClaim.
        """
        hook = spec_name(hookspecs.karpenter_capi_delete)
        for plugin, result in self._each(hook, {"nodeclaim": nodeclaim}):
            if result is None:
                continue
            self._checked(plugin, hook, result)
            return plugin
        raise NotHandledError(hook, object_name(nodeclaim), self.names)

    def get(self, provider_id: str) -> Instance:
        """The machine with ``provider_id``; ``InstanceNotFoundError`` when no plugin has it."""
        hook = spec_name(hookspecs.karpenter_capi_get)
        for plugin, result in self._each(hook, {"provider_id": provider_id}):
            if result is not None:
                instance: Instance = self._checked(plugin, hook, result)
                return instance
        raise InstanceNotFoundError(provider_id, "no enabled plugin knows it")

    def list_instances(self) -> list[Instance]:
        """Every machine of every plugin, plugin by plugin."""
        hook = spec_name(hookspecs.karpenter_capi_list)
        instances: list[Instance] = []
        for plugin, result in self._each(hook, {}):
            instances.extend(self._checked(plugin, hook, result))
        return instances

    def is_drifted(self, nodeclaim: NodeClaim, nodeclass: NodeClass) -> str | None:
        """The first drift reason a plugin reports, or None."""
        hook = spec_name(hookspecs.karpenter_capi_is_drifted)
        for plugin, result in self._each(hook, {"nodeclaim": nodeclaim, "nodeclass": nodeclass}):
            if result is not None:
                reason: str = self._checked(plugin, hook, result)
                return reason
        return None

    def describe_machine_template(
        self, template: Mapping[str, Any], owner: Mapping[str, Any]
    ) -> MachineTemplateDescription | None:
        """What the first plugin that knows ``template``'s kind says about it, or None."""
        hook = spec_name(hookspecs.karpenter_capi_describe_machine_template)
        for plugin, result in self._each(hook, {"template": template, "owner": owner}):
            if result is not None:
                description: MachineTemplateDescription = self._checked(plugin, hook, result)
                return description
        return None

    def disruption_blocked(self, nodeclaims: list[NodeClaim]) -> dict[str, str]:
        """NodeClaim name -> why a plugin cannot remove it now (every plugin's answer)."""
        hook = spec_name(hookspecs.karpenter_capi_disruption_blocked)
        blocked: dict[str, str] = {}
        if not nodeclaims:
            return blocked
        for plugin, result in self._each(hook, {"nodeclaims": nodeclaims}):
            if result is None:
                continue
            answer: dict[str, str] = self._checked(plugin, hook, result)
            for name, why in answer.items():
                blocked.setdefault(name, why)
        return blocked

    def interruptions(self) -> list[tuple[str, InterruptionNotice]]:
        """Every plugin's interruption notices, with the plugin's name, in plugin order."""
        hook = spec_name(hookspecs.karpenter_capi_interruptions)
        notices: list[tuple[str, InterruptionNotice]] = []
        for plugin, result in self._each(hook, {}):
            if result is None:
                continue
            listed: list[InterruptionNotice] = self._checked(plugin, hook, result)
            notices.extend((plugin, notice) for notice in listed)
        return notices

    def interruptions_handled(self, plugin: str, notices: list[InterruptionNotice]) -> None:
        """Hand ``notices`` back to the one plugin that returned them."""
        hook = spec_name(hookspecs.karpenter_capi_interruptions_handled)
        for impl in self._implementations(hook):
            if impl.plugin_name == plugin:
                self._call(impl, hook, {"notices": notices})
