"""The plugin host: finds, loads and calls the provider plugins for the rest of the core.

Named for what it is beside the ``karpenter_capi.plugins`` package (the plugins themselves). The
modules inside are private; the core, the simulator and the CLI import from here:

* which plugins run: ``resolve_enabled`` and ``parse_plugin_options`` (``_enabling``);
* loading them through their entry points: ``load_plugins``, ``is_factory`` (``_loading``);
* what ``karpenter-capi plugins`` reports: ``describe_plugins``, ``PluginInfo`` (``_info``);
* calling them: the typed ``Plugins`` facade over a ``PluginEnvironment`` (``_facade``), which
  checks each result (``_results``) and reports a faulty plugin by name (``_errors``).

Plugin authors import from ``karpenter_capi.plugin_api`` instead (docs/plugins.md).
"""

from karpenter_capi.core.plugin_host._enabling import (
    DEFAULT_PLUGINS,
    ENV_VAR,
    parse_plugin_options,
    resolve_enabled,
)
from karpenter_capi.core.plugin_host._errors import (
    NotHandledError,
    PluginCallError,
    PluginError,
    PluginLoadError,
    PluginResultError,
)
from karpenter_capi.core.plugin_host._facade import PluginEnvironment, Plugins
from karpenter_capi.core.plugin_host._info import PluginInfo, describe_plugins
from karpenter_capi.core.plugin_host._loading import ENTRY_POINT_GROUP, is_factory, load_plugins

__all__ = [
    "DEFAULT_PLUGINS",
    "ENTRY_POINT_GROUP",
    "ENV_VAR",
    "NotHandledError",
    "PluginCallError",
    "PluginEnvironment",
    "PluginError",
    "PluginInfo",
    "PluginLoadError",
    "PluginResultError",
    "Plugins",
    "describe_plugins",
    "is_factory",
    "load_plugins",
    "parse_plugin_options",
    "resolve_enabled",
]
