"""The errors about plugins themselves, as opposed to a provider's ``ProviderError``.

A ``ProviderError`` is a plugin telling the core what happened to a machine; these say that a
plugin could not be loaded, raised something it should not have, returned the wrong type, or
that no plugin took a request. Each names the plugin (or the hook) so that an operator knows
whose bug or whose configuration it is.
"""

from __future__ import annotations

from collections.abc import Sequence


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
