"""Loading the enabled plugins through their entry points, and checking that they are plugins.

stevedore loads exactly the enabled names from the ``karpenter_capi.plugins`` entry-point
group; a name that is not installed, is installed twice or fails to import stops startup with a
``PluginLoadError`` that says which plugin, from which distribution, and (for a missing optional
SDK) which extra to install. A module or class is registered once on a scratch pluggy manager
here so that a wrong hook implementation fails at startup, not at its first call.

An entry point names a module of hook functions, or a class or factory that the facade calls
once with the plugin's ``PluginContext`` (``is_factory``, ``make``).
"""

from __future__ import annotations

import importlib.metadata
import re
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any, Final

import pluggy
from stevedore import NamedExtensionManager

from karpenter_capi.core import hookspecs
from karpenter_capi.core.hookspecs import PROJECT_NAME, PluginContext
from karpenter_capi.core.plugin_host._errors import PluginError, PluginLoadError

ENTRY_POINT_GROUP: Final = "karpenter_capi.plugins"


def installed_entry_points() -> list[importlib.metadata.EntryPoint]:
    """Every installed entry point of the plugin group, enabled or not."""
    return list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))


def _distribution_of(entry_point: importlib.metadata.EntryPoint) -> importlib.metadata.Distribution:
    """The distribution that declares ``entry_point`` (stevedore's cached entry points lack it)."""
    dist = getattr(entry_point, "dist", None)
    if dist is not None:
        return dist  # type: ignore[no-any-return]
    for candidate in installed_entry_points():
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


def new_manager() -> pluggy.PluginManager:
    """A pluggy manager that knows the hook specifications and no plugin yet."""
    manager = pluggy.PluginManager(PROJECT_NAME)
    manager.add_hookspecs(hookspecs)
    return manager


def register(manager: pluggy.PluginManager, name: str, plugin: object) -> None:
    """Register ``plugin`` as ``name``, or raise ``PluginLoadError`` saying what is wrong with
    its hooks (invalid, a wrapper, or named like a hook that does not exist)."""
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
    installed = installed_entry_points()
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
            manager = new_manager()
            register(manager, name, loaded[name])
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


def make(name: str, plugin: object, ctx: PluginContext) -> object:
    """What to register for ``plugin``: itself, or what its factory makes from ``ctx``."""
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
