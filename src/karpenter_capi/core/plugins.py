"""Finding, loading and calling provider plugins.

A controller that can create machines must not run whatever happens to be installed, so plugins
are opt-in: the enabled names come from ``--plugins`` or ``KARPENTER_CAPI_PLUGINS`` (default
``generic_capi``), stevedore loads exactly those from the ``karpenter_capi.plugins`` entry-point
group, and a name that is not installed or fails to import stops startup with a
``PluginLoadError`` that says which plugin, from which distribution, and (for a missing optional
SDK) which extra to install.

An entry point names a module of hook functions, or a class or factory: ``Plugins`` calls the
latter once with the plugin's ``PluginContext`` and registers the object it returns, so a
plugin's state lives exactly as long as the ``Plugins`` that made it (no plugin keeps a map of
contexts).

The rest of the core never touches pluggy: it calls the typed ``Plugins`` facade. The facade
calls each implementation itself, in the documented plugin order (see ``core.hookspecs``), so
that it can hand every plugin its own ``PluginContext``, chain the pricing hook, and check what
each plugin returns, naming the plugin whose result has the wrong type or whose code raised.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import logging
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final, TypeVar

import pluggy
from stevedore import NamedExtensionManager

from karpenter_capi.core import hookspecs
from karpenter_capi.core.clock import Clock
from karpenter_capi.core.errors import InstanceNotFoundError, ProviderError
from karpenter_capi.core.hookspecs import (
    PROJECT_NAME,
    Instance,
    LaunchResult,
    LaunchWatch,
    MachineTemplateDescription,
    NodeClass,
    PluginContext,
)
from karpenter_capi.core.instancetype import InstanceType
from karpenter_capi.core.kube.client import KubeClient

if TYPE_CHECKING:
    from karpenter_capi.core.api.nodeclaim import NodeClaim
    from karpenter_capi.core.api.nodepool import NodePool
    from karpenter_capi.core.observability.metrics import Metrics

ENTRY_POINT_GROUP: Final = "karpenter_capi.plugins"
ENV_VAR: Final = "KARPENTER_CAPI_PLUGINS"
DEFAULT_PLUGINS: Final = ("generic_capi",)

_LOG = logging.getLogger(__name__)
_PLUGIN_LOGGER_NAME: Final = "karpenter_capi.plugins"
_T = TypeVar("_T")


class PluginError(Exception):
    """Base of the errors about plugins themselves (as opposed to ``ProviderError``)."""


class PluginLoadError(PluginError):
    """An enabled plugin could not be loaded. The message says which one and what to do."""

    def __init__(
        self,
        plugin: str,
        reason: str,
        *,
        distribution: str | None = None,
        extra: str | None = None,
    ) -> None:
        origin = f" (from distribution {distribution})" if distribution else ""
        hint = ""
        if extra and distribution:
            hint = f"; install it with: pip install '{distribution}[{extra}]'"
        super().__init__(f"plugin {plugin!r}{origin} could not be loaded: {reason}{hint}")
        self.plugin = plugin
        self.reason = reason
        self.distribution = distribution
        self.extra = extra


class PluginCallError(PluginError):
    """A plugin's hook raised something other than a ``ProviderError`` (a bug in the plugin)."""

    def __init__(self, plugin: str, hook: str, error: BaseException) -> None:
        super().__init__(f"plugin {plugin!r} failed in {hook}: {type(error).__name__}: {error}")
        self.plugin = plugin
        self.hook = hook


class PluginResultError(PluginError):
    """A plugin's hook returned a value of the wrong type."""

    def __init__(self, plugin: str, hook: str, expected: str, got: object) -> None:
        super().__init__(
            f"plugin {plugin!r} returned {_describe_value(got)} from {hook}; expected {expected}"
        )
        self.plugin = plugin
        self.hook = hook


class NotHandledError(PluginError):
    """No enabled plugin took responsibility for a request (a NodeClass, a NodeClaim)."""

    def __init__(self, hook: str, subject: str, enabled: Sequence[str]) -> None:
        names = ", ".join(enabled) or "none"
        super().__init__(f"no enabled plugin handled {hook} for {subject} (enabled: {names})")
        self.hook = hook
        self.subject = subject


def _describe_value(value: object) -> str:
    text = repr(value)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{type(value).__name__} {text}"


# --------------------------------------------------------------------------------------------
# Which plugins are enabled


def resolve_enabled(
    flag_value: str | Sequence[str] | None = None, env: Mapping[str, str] | None = None
) -> list[str]:
    """The enabled plugin names: the ``--plugins`` flag if given, else ``KARPENTER_CAPI_PLUGINS``,
    else ``["generic_capi"]``. Comma-separated values; blanks and repeats are dropped, order is
    kept (it is the plugin order)."""
    environment = os.environ if env is None else env
    raw: str | Sequence[str] | None = flag_value
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        raw = environment.get(ENV_VAR) or None
    if raw is None:
        return list(DEFAULT_PLUGINS)
    parts = raw.split(",") if isinstance(raw, str) else [p for item in raw for p in item.split(",")]
    names: list[str] = []
    for part in parts:
        name = part.strip()
        if name and name not in names:
            names.append(name)
    return names


def parse_plugin_options(items: Iterable[str]) -> dict[str, dict[str, str]]:
    """Parse ``--plugin-option`` values (``capa.region=eu-west-1``) into per-plugin options.

    The plugin name is everything before the first dot; the option name may contain dots.
    Raises ``ValueError`` naming the malformed item.
    """
    options: dict[str, dict[str, str]] = {}
    for item in items:
        target, separator, value = item.partition("=")
        plugin, dot, option = target.strip().partition(".")
        if not separator or not dot or not plugin or not option:
            raise ValueError(f"plugin option {item!r} is not of the form <plugin>.<option>=<value>")
        options.setdefault(plugin, {})[option] = value
    return options


# --------------------------------------------------------------------------------------------
# Loading


@dataclass(frozen=True)
class PluginInfo:
    """One installed (or requested) plugin, for ``karpenter-capi plugins``."""

    name: str
    module: str | None
    distribution: str | None
    version: str | None
    enabled: bool
    error: str | None = None


def _installed_entry_points() -> list[importlib.metadata.EntryPoint]:
    return list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))


def _distribution_of(entry_point: importlib.metadata.EntryPoint) -> importlib.metadata.Distribution:
    """The distribution that declares ``entry_point`` (stevedore's cached entry points lack it)."""
    dist = getattr(entry_point, "dist", None)
    if dist is not None:
        return dist  # type: ignore[no-any-return]
    for candidate in _installed_entry_points():
        if candidate.name == entry_point.name and candidate.value == entry_point.value:
            found = getattr(candidate, "dist", None)
            if found is not None:
                return found  # type: ignore[no-any-return]
    raise LookupError(entry_point.name)


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


_REQUIREMENT_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_EXTRA_MARKER = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")


def _extra_providing(dist: importlib.metadata.Distribution, module: str) -> str | None:
    """The extra of ``dist`` whose requirements provide the missing ``module``, if any.

    A module maps to a requirement by name (``boto3`` -> ``boto3``,
    ``azure.mgmt.compute`` -> ``azure-mgmt-compute``); a bare namespace package (``azure``)
    matches any requirement under it (``azure-identity``).
    """
    wanted = _normalize(module)
    top_level = _normalize(module.split(".", maxsplit=1)[0])
    for requirement in dist.requires or ():
        name_match = _REQUIREMENT_NAME.match(requirement)
        extra_match = _EXTRA_MARKER.search(requirement)
        if name_match is None or extra_match is None:
            continue
        name = _normalize(name_match.group(1))
        if name == wanted or (wanted == top_level and name.startswith(top_level + "-")):
            return extra_match.group(1)
    return None


def _load_error(
    entry_point: importlib.metadata.EntryPoint, error: BaseException
) -> PluginLoadError:
    try:
        dist: importlib.metadata.Distribution | None = _distribution_of(entry_point)
    except LookupError:
        dist = None
    distribution = dist.metadata["Name"] if dist is not None else None
    extra = None
    if isinstance(error, ModuleNotFoundError) and error.name:
        declared = list(getattr(entry_point, "extras", []) or [])
        extra = declared[0] if declared else (_extra_providing(dist, error.name) if dist else None)
        reason = f"module {error.name!r} is not installed"
        if extra is None:
            reason += f" (importing {entry_point.value})"
    else:
        reason = f"importing {entry_point.value} raised {type(error).__name__}: {error}"
    return PluginLoadError(entry_point.name, reason, distribution=distribution, extra=extra)


def _new_manager() -> pluggy.PluginManager:
    manager = pluggy.PluginManager(PROJECT_NAME)
    manager.add_hookspecs(hookspecs)
    return manager


def _register(manager: pluggy.PluginManager, name: str, plugin: object) -> None:
    try:
        manager.register(plugin, name=name)
    except (pluggy.PluginValidationError, ValueError) as error:
        detail = "; ".join(line.strip() for line in str(error).splitlines() if line.strip())
        problem = (
            "invalid hook implementation"
            if isinstance(error, pluggy.PluginValidationError)
            else "cannot be registered"
        )
        raise PluginLoadError(name, f"{problem}: {detail}") from error
    for hook_name in hookspecs.HOOK_NAMES:
        for impl in getattr(manager.hook, hook_name).get_hookimpls():
            if impl.plugin_name == name and (impl.hookwrapper or impl.wrapper):
                manager.unregister(name=name)
                raise PluginLoadError(name, f"{hook_name}: hook wrappers are not supported")
    unknown = [
        attribute
        for attribute in dir(plugin)
        if attribute.startswith(f"{PROJECT_NAME}_")
        and attribute not in hookspecs.HOOK_NAMES
        and callable(getattr(plugin, attribute, None))
        and manager.parse_hookimpl_opts(plugin, attribute) is not None
    ]
    if unknown:
        manager.unregister(name=name)
        raise PluginLoadError(name, f"implements unknown hooks: {', '.join(sorted(unknown))}")


def load_plugins(enabled: Sequence[str]) -> list[tuple[str, object]]:
    """Load exactly the ``enabled`` plugins through their entry points, in the order given.

    Returns ``(name, plugin)`` pairs as ``Plugins.from_objects`` takes them: what each entry
    point names (a module, a class or a factory; see ``is_factory``). Raises
    ``PluginLoadError`` for the first name that is not installed, is installed twice, fails to
    import, or (module or class) implements hooks wrongly; a factory's hooks are checked when
    ``Plugins`` makes its object.
    """
    names = list(dict.fromkeys(enabled))
    installed = _installed_entry_points()
    for name in names:
        providers = {_dist_name(ep) or ep.value for ep in installed if ep.name == name}
        if len(providers) > 1:
            raise PluginLoadError(
                name, f"installed twice, by {', '.join(sorted(providers))}; uninstall one"
            )

    failures: dict[str, BaseException] = {}
    failed_entry_points: dict[str, importlib.metadata.EntryPoint] = {}

    def on_failure(
        _manager: object, entry_point: importlib.metadata.EntryPoint, error: BaseException
    ) -> None:
        failures[entry_point.name] = error
        failed_entry_points[entry_point.name] = entry_point

    missing: set[str] = set()
    extensions: NamedExtensionManager[Any] = NamedExtensionManager(
        namespace=ENTRY_POINT_GROUP,
        names=names,
        invoke_on_load=False,
        name_order=True,
        on_load_failure_callback=on_failure,
        on_missing_entrypoints_callback=missing.update,
    )
    loaded = {extension.name: extension.plugin for extension in extensions}
    for name in names:
        if name in failures:
            raise _load_error(failed_entry_points[name], failures[name]) from failures[name]
        if name in missing or name not in loaded:
            available = sorted({ep.name for ep in installed}) or ["none"]
            raise PluginLoadError(
                name,
                f"not installed: no entry point {name!r} in group {ENTRY_POINT_GROUP!r} "
                f"(installed plugins: {', '.join(available)})",
            )

    for name in names:
        if not is_factory(loaded[name]) or isinstance(loaded[name], type):
            # pluggy reads a class's hook methods as it reads an object's (``self`` aside).
            manager = _new_manager()
            _register(manager, name, loaded[name])
            if not any(_implements(manager, hook, name) for hook in hookspecs.HOOK_NAMES):
                # Most likely the entry point names the wrong thing (a package, or a module
                # whose hooks moved into a class): say so rather than serve nothing.
                raise PluginLoadError(name, f"{_entry_value(installed, name)} implements no hook")
    return [(name, loaded[name]) for name in names]


def _implements(manager: pluggy.PluginManager, hook: str, plugin: str) -> bool:
    caller: pluggy.HookCaller = getattr(manager.hook, hook)
    return any(impl.plugin_name == plugin for impl in caller.get_hookimpls())


def _entry_value(installed: Sequence[importlib.metadata.EntryPoint], name: str) -> str:
    return next((ep.value for ep in installed if ep.name == name), name)


def is_factory(plugin: object) -> bool:
    """Whether ``plugin`` (what an entry point or ``from_objects`` names) makes the plugin.

    A class or any other callable (a function, a ``functools.partial``) is called once per
    ``Plugins`` with the plugin's ``PluginContext`` and its result registered; a module, or an
    object that is not callable, is registered as it is and gets ``ctx`` in each hook call.
    """
    return callable(plugin) and not isinstance(plugin, ModuleType)


def _make(name: str, plugin: object, ctx: PluginContext) -> object:
    if not is_factory(plugin):
        return plugin
    factory: Callable[[PluginContext], object] = plugin  # type: ignore[assignment]
    try:
        made = factory(ctx)
    except PluginError:
        raise
    except Exception as error:
        raise PluginLoadError(
            name, f"creating it raised {type(error).__name__}: {error}"
        ) from error
    if made is None:
        raise PluginLoadError(name, "its factory returned None")
    return made


def _dist_name(entry_point: importlib.metadata.EntryPoint) -> str | None:
    dist = getattr(entry_point, "dist", None)
    return None if dist is None else str(dist.metadata["Name"])


def describe_plugins(enabled: Sequence[str], *, check_all: bool = False) -> list[PluginInfo]:
    """Every installed plugin and every enabled name, with where it comes from and whether it
    loads. Enabled plugins are loaded to report their error; with ``check_all`` the disabled
    ones are too. Sorted: enabled first in plugin order, then the others by name."""
    enabled_names = list(dict.fromkeys(enabled))
    infos: dict[str, PluginInfo] = {}
    for entry_point in _installed_entry_points():
        dist = getattr(entry_point, "dist", None)
        is_enabled = entry_point.name in enabled_names
        error = None
        if is_enabled or check_all:
            try:
                load_plugins([entry_point.name])
            except PluginLoadError as load_error:
                error = str(load_error)
        infos[entry_point.name] = PluginInfo(
            name=entry_point.name,
            module=entry_point.value,
            distribution=None if dist is None else str(dist.metadata["Name"]),
            version=None if dist is None else str(dist.version),
            enabled=is_enabled,
            error=error,
        )
    for name in enabled_names:
        if name not in infos:
            infos[name] = PluginInfo(
                name=name,
                module=None,
                distribution=None,
                version=None,
                enabled=True,
                error=f"not installed: no entry point {name!r} in group {ENTRY_POINT_GROUP!r}",
            )
    ordered = [infos[name] for name in enabled_names]
    ordered += sorted((i for i in infos.values() if not i.enabled), key=lambda i: i.name)
    return ordered


# --------------------------------------------------------------------------------------------
# The typed facade


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

    def context_for(self, plugin_name: str) -> PluginContext:
        return PluginContext(
            plugin_name=plugin_name,
            workload=self.workload,
            management=self.management,
            clock=self.clock,
            logger=self.logger.getChild(plugin_name),
            options=dict(self.options.get(plugin_name, {})),
            dry_run=self.dry_run,
            metrics=self.metrics,
        )


def _object_name(obj: object) -> str:
    """``kind/name`` of a model or a JSON dict, for messages."""
    metadata: Any = getattr(obj, "metadata", None)
    kind: Any = getattr(obj, "kind", None)
    if isinstance(obj, Mapping):
        metadata = obj.get("metadata")
        kind = obj.get("kind")
    name = (
        metadata.get("name") if isinstance(metadata, Mapping) else getattr(metadata, "name", None)
    )
    return f"{kind or 'object'}/{name or '?'}"


def _is_list_of(value: object, item_type: type) -> bool:
    return isinstance(value, list) and all(isinstance(item, item_type) for item in value)


def _is_kind_list(value: object) -> bool:
    return isinstance(value, list) and all(
        isinstance(item, tuple)
        and len(item) == 2
        and isinstance(item[0], str)
        and isinstance(item[1], str)
        for item in value
    )


def _hook(spec: Callable[..., object]) -> str:
    """The name of the hook ``spec`` (a function of ``core.hookspecs``): names are written as
    references to the specs, so a renamed or removed hook fails type checking here."""
    return spec.__name__


# What each hook must return when it answers (None, "not mine", is handled by the caller).
_RESULT_CHECKS: Final[dict[str, tuple[Callable[[object], bool], str]]] = {
    _hook(hookspecs.karpenter_capi_nodeclass_kinds): (
        _is_kind_list,
        "a list of (group, kind) string tuples",
    ),
    _hook(hookspecs.karpenter_capi_instance_types): (
        lambda v: _is_list_of(v, InstanceType),
        "a list of InstanceType or None",
    ),
    _hook(hookspecs.karpenter_capi_price_offerings): (
        lambda v: _is_list_of(v, InstanceType),
        "a list of InstanceType or None",
    ),
    _hook(hookspecs.karpenter_capi_create): (
        lambda v: isinstance(v, LaunchResult),
        "a LaunchResult or None",
    ),
    _hook(hookspecs.karpenter_capi_launch_watches): (
        lambda v: _is_list_of(v, LaunchWatch),
        "a list of LaunchWatch or None",
    ),
    _hook(hookspecs.karpenter_capi_delete): (lambda v: v is True, "True or None"),
    _hook(hookspecs.karpenter_capi_get): (lambda v: isinstance(v, Instance), "an Instance or None"),
    _hook(hookspecs.karpenter_capi_list): (
        lambda v: _is_list_of(v, Instance),
        "a list of Instance",
    ),
    _hook(hookspecs.karpenter_capi_is_drifted): (
        lambda v: isinstance(v, str) and bool(v),
        "a non-empty string or None",
    ),
    _hook(hookspecs.karpenter_capi_disruption_blocked): (
        lambda v: (
            isinstance(v, dict)
            and all(isinstance(k, str) and isinstance(w, str) for k, w in v.items())
        ),
        "a dict of NodeClaim name to reason, or None",
    ),
    _hook(hookspecs.karpenter_capi_describe_machine_template): (
        lambda v: isinstance(v, MachineTemplateDescription),
        "a MachineTemplateDescription or None",
    ),
}


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
        self._manager = self._registered()

    @classmethod
    def load(cls, enabled: Sequence[str], environment: PluginEnvironment) -> Plugins:
        return cls(load_plugins(enabled), environment)

    @classmethod
    def from_objects(
        cls, plugins: Iterable[tuple[str, object]], environment: PluginEnvironment
    ) -> Plugins:
        return cls(plugins, environment)

    def _registered(self) -> pluggy.PluginManager:
        made = [(name, _make(name, plugin, self.context(name))) for name, plugin in self._sources]
        manager = _new_manager()
        # pluggy calls the most recently registered implementation first; register in reverse
        # so that the enabled order is the call order.
        for name, plugin in reversed(made):
            _register(manager, name, plugin)
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
                self._environment.context_for(plugin_name),
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
        valid, expected = _RESULT_CHECKS[hook]
        if not valid(value):
            raise PluginResultError(plugin, hook, expected, value)
        return value

    def nodeclass_kinds(self) -> dict[tuple[str, str], list[str]]:
        """``(group, kind)`` -> the plugins serving it, in plugin order."""
        hook = _hook(hookspecs.karpenter_capi_nodeclass_kinds)
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
        hook = _hook(hookspecs.karpenter_capi_instance_types)
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
                _hook(hookspecs.karpenter_capi_instance_types), _object_name(nodeclass), self.names
            )
        return self.price_offerings(types, nodeclass, nodepool) if priced else types

    def price_offerings(
        self, instance_types: list[InstanceType], nodeclass: NodeClass, nodepool: NodePool
    ) -> list[InstanceType]:
        """Run the pricing chain: each plugin, in plugin order, sees the previous one's output."""
        hook = _hook(hookspecs.karpenter_capi_price_offerings)
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
        hook = _hook(hookspecs.karpenter_capi_create)
        arguments = {
            "nodeclaim": nodeclaim,
            "instance_types": instance_types,
            "nodeclass": nodeclass,
        }
        for plugin, result in self._each(hook, arguments):
            if result is not None:
                launched: LaunchResult = self._checked(plugin, hook, result)
                return launched
        raise NotHandledError(hook, _object_name(nodeclaim), self.names)

    def launch_watches(self) -> list[tuple[str, LaunchWatch]]:
        """Every plugin's ``LaunchWatch``es, with the plugin's name, in plugin order."""
        hook = _hook(hookspecs.karpenter_capi_launch_watches)
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
        hook = _hook(hookspecs.karpenter_capi_delete)
        for plugin, result in self._each(hook, {"nodeclaim": nodeclaim}):
            if result is None:
                continue
            self._checked(plugin, hook, result)
            return plugin
        raise NotHandledError(hook, _object_name(nodeclaim), self.names)

    def get(self, provider_id: str) -> Instance:
        """The machine with ``provider_id``; ``InstanceNotFoundError`` when no plugin has it."""
        hook = _hook(hookspecs.karpenter_capi_get)
        for plugin, result in self._each(hook, {"provider_id": provider_id}):
            if result is not None:
                instance: Instance = self._checked(plugin, hook, result)
                return instance
        raise InstanceNotFoundError(provider_id, "no enabled plugin knows it")

    def list_instances(self) -> list[Instance]:
        """Every machine of every plugin, plugin by plugin."""
        hook = _hook(hookspecs.karpenter_capi_list)
        instances: list[Instance] = []
        for plugin, result in self._each(hook, {}):
            instances.extend(self._checked(plugin, hook, result))
        return instances

    def is_drifted(self, nodeclaim: NodeClaim, nodeclass: NodeClass) -> str | None:
        """The first drift reason a plugin reports, or None."""
        hook = _hook(hookspecs.karpenter_capi_is_drifted)
        for plugin, result in self._each(hook, {"nodeclaim": nodeclaim, "nodeclass": nodeclass}):
            if result is not None:
                reason: str = self._checked(plugin, hook, result)
                return reason
        return None

    def describe_machine_template(
        self, template: Mapping[str, Any], owner: Mapping[str, Any]
    ) -> MachineTemplateDescription | None:
        """What the first plugin that knows ``template``'s kind says about it, or None."""
        hook = _hook(hookspecs.karpenter_capi_describe_machine_template)
        for plugin, result in self._each(hook, {"template": template, "owner": owner}):
            if result is not None:
                description: MachineTemplateDescription = self._checked(plugin, hook, result)
                return description
        return None

    def disruption_blocked(self, nodeclaims: list[NodeClaim]) -> dict[str, str]:
        """NodeClaim name -> why a plugin cannot remove it now (every plugin's answer)."""
        hook = _hook(hookspecs.karpenter_capi_disruption_blocked)
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
