"""Which plugins are enabled, loading them by entry point, and describing what is installed."""

from __future__ import annotations

import importlib.metadata
import re

import pytest

from karpenter_capi.core.plugin_host import (
    DEFAULT_PLUGINS,
    ENTRY_POINT_GROUP,
    ENV_VAR,
    PluginLoadError,
    describe_plugins,
    load_plugins,
    parse_plugin_options,
    resolve_enabled,
)
from karpenter_capi.core.plugin_host._loading import _extra_providing
from karpenter_capi.plugins.capz.plugin import CapzHooks
from karpenter_capi.plugins.generic_capi.plugin import GenericCapiPlugin


def test_enabled_list_prefers_the_flag_then_the_environment_then_the_default() -> None:
    env = {ENV_VAR: "capa, generic_capi"}
    assert resolve_enabled("capz", env) == ["capz"]
    assert resolve_enabled(["capz,capa", "generic_capi"], env) == ["capz", "capa", "generic_capi"]
    assert resolve_enabled(None, env) == ["capa", "generic_capi"]
    assert resolve_enabled("", env) == ["capa", "generic_capi"]
    assert resolve_enabled(None, {}) == list(DEFAULT_PLUGINS) == ["generic_capi"]
    assert resolve_enabled(None, {ENV_VAR: ""}) == ["generic_capi"]
    # Blanks and repeats are dropped; order is kept because it is the plugin order.
    assert resolve_enabled("b,,a, b ,c", {}) == ["b", "a", "c"]


def test_enabled_list_reads_the_process_environment_by_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(ENV_VAR, "capz")
    assert resolve_enabled() == ["capz"]


def test_the_built_in_plugins_are_declared_as_entry_points() -> None:
    names = {ep.name for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}
    assert {"generic_capi", "capa", "capz"} <= names


def test_loading_registers_exactly_the_enabled_plugins() -> None:
    assert load_plugins(["generic_capi"]) == [("generic_capi", GenericCapiPlugin)]
    assert load_plugins(["capz", "generic_capi"]) == [
        ("capz", CapzHooks),
        ("generic_capi", GenericCapiPlugin),
    ]
    assert load_plugins([]) == []


def test_an_unknown_name_is_a_clear_error() -> None:
    with pytest.raises(PluginLoadError) as caught:
        load_plugins(["generic_capi", "does-not-exist"])
    error = caught.value
    assert error.plugin == "does-not-exist"
    message = str(error)
    assert "plugin 'does-not-exist' could not be loaded: not installed" in message
    assert ENTRY_POINT_GROUP in message
    assert "generic_capi" in message  # the installed plugins are listed


def test_a_missing_sdk_is_mapped_to_the_extra_that_installs_it() -> None:
    dist = importlib.metadata.distribution("karpenter-capi")
    assert _extra_providing(dist, "boto3") == "aws"
    assert _extra_providing(dist, "azure.mgmt.compute") == "azure"
    assert _extra_providing(dist, "azure.identity") == "azure"
    assert _extra_providing(dist, "azure") == "azure"
    assert _extra_providing(dist, "kubernetes") is None  # a core dependency, not an extra
    assert _extra_providing(dist, "numpy") is None


def test_load_error_message_names_the_extra() -> None:
    error = PluginLoadError(
        "capa", "module 'boto3' is not installed", distribution="karpenter-capi", extra="aws"
    )
    assert str(error) == (
        "plugin 'capa' (from distribution karpenter-capi) could not be loaded: "
        "module 'boto3' is not installed; install it with: pip install 'karpenter-capi[aws]'"
    )


def test_describe_lists_installed_and_requested_plugins() -> None:
    infos = {info.name: info for info in describe_plugins(["generic_capi", "missing"])}
    generic = infos["generic_capi"]
    assert generic.enabled
    assert generic.module == "karpenter_capi.plugins.generic_capi.plugin:GenericCapiPlugin"
    assert generic.distribution == "karpenter-capi"
    assert generic.version == importlib.metadata.version("karpenter-capi")
    assert not infos["capa"].enabled
    assert infos["capa"].error is None  # disabled plugins are not imported by default
    missing = infos["missing"]
    assert missing.enabled
    assert missing.module is None
    assert missing.error is not None
    assert "not installed" in missing.error
    # Enabled ones first, in plugin order.
    ordered = [info.name for info in describe_plugins(["generic_capi", "missing"])]
    assert ordered[:2] == ["generic_capi", "missing"]


def test_plugin_options_are_split_per_plugin() -> None:
    assert parse_plugin_options(
        ["capa.region=eu-west-1", "capa.pricing.cache=1h", "acme.url=https://x/?a=b"]
    ) == {
        "capa": {"region": "eu-west-1", "pricing.cache": "1h"},
        "acme": {"url": "https://x/?a=b"},
    }
    assert parse_plugin_options([]) == {}
    for malformed in ("region=eu-west-1", "capa.region", ".region=x", "capa.=x"):
        with pytest.raises(ValueError, match=re.escape(repr(malformed))):
            parse_plugin_options([malformed])
