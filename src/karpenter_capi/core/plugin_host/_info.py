"""What ``karpenter-capi plugins`` reports: every installed plugin, and whether it loads.

The report is for a person deciding what to enable, so it lists the installed plugins as well as
the enabled ones and turns a load failure into the message instead of stopping.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from karpenter_capi.core.plugin_host._errors import PluginLoadError
from karpenter_capi.core.plugin_host._loading import (
    ENTRY_POINT_GROUP,
    installed_entry_points,
    load_plugins,
)


@dataclass(frozen=True)
class PluginInfo:
    """One installed (or requested) plugin, for ``karpenter-capi plugins``."""

    name: str
    module: str | None
    distribution: str | None
    version: str | None
    enabled: bool
    error: str | None = None


def describe_plugins(enabled: Sequence[str], *, check_all: bool = False) -> list[PluginInfo]:
    """Every installed plugin and every enabled name, with where it comes from and whether it
    loads. Enabled plugins are loaded to report their error; with ``check_all`` the disabled
    ones are too. Sorted: enabled first in plugin order, then the others by name."""
    enabled_names = list(dict.fromkeys(enabled))
    infos: dict[str, PluginInfo] = {}
    for entry_point in installed_entry_points():
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
