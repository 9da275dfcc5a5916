"""Which plugins are enabled, and with which options.

A controller that can create machines must not run whatever happens to be installed, so plugins
are opt-in: the enabled names come from ``--plugins`` or ``KARPENTER_CAPI_PLUGINS`` (default
``generic_capi``), and their order is the plugin order. Kept apart from loading because the CLI
resolves names and options before anything is imported.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

from karpenter_capi.core.errors import InvalidInputError

ENV_VAR: Final = "KARPENTER_CAPI_PLUGINS"
DEFAULT_PLUGINS: Final = ("generic_capi",)


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
    Raises ``InvalidInputError`` naming the malformed item.
    """
    options: dict[str, dict[str, str]] = {}
    for item in items:
        target, separator, value = item.partition("=")
        plugin, dot, option = target.strip().partition(".")
        if not separator or not dot or not plugin or not option:
            raise InvalidInputError(
                f"plugin option {item!r} is not of the form <plugin>.<option>=<value>"
            )
        options.setdefault(plugin, {})[option] = value
    return options
