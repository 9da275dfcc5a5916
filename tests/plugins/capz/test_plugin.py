"""The capz plugin as the core loads and calls it."""

from __future__ import annotations

import logging
import sys

import pytest

from karpenter_capi.core.errors import NodeClassNotReadyError
from karpenter_capi.core.observability.metrics import Metrics
from karpenter_capi.core.plugin_host import (
    PluginEnvironment,
    PluginLoadError,
    Plugins,
    load_plugins,
)
from karpenter_capi.plugins.capz.plugin import CapzHooks, CapzPlugin
from tests.plugins.capz.env import CapzWorld, azure_machine_template, machine_deployment


def _plugins(world: CapzWorld, options: dict[str, str] | None = None) -> Plugins:
    environment = PluginEnvironment(
        workload=world.server,
        management=world.server,
        clock=world.clock,
        logger=logging.getLogger("test.capz"),
        options={"capz": dict(options or {})},
    )
    return Plugins.from_objects([("capz", CapzPlugin(**world.provider_options()))], environment)


def test_another_plugin_asks_through_its_context(world: CapzWorld) -> None:
    # generic_capi reaches capz through ctx.describe_machine_template.
    plugins = _plugins(world, {"max-pods": "50"})
    ask = plugins.context("generic_capi").describe_machine_template
    found = ask(azure_machine_template("t", "Standard_D4s_v5"), machine_deployment("md", "t"))
    assert found is not None
    assert found.instance_type == "Standard_D4s_v5"
    assert found.capacity["pods"].milli_value() == 50_000
    assert dict(found.zones)["eastus-1"] == 0.192
    docker = {
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
        "kind": "DockerMachineTemplate",
    }
    assert ask(docker, machine_deployment("md", "t")) is None


def test_azure_calls_and_price_age_reach_the_operator_metrics(world: CapzWorld) -> None:
    metrics = Metrics(world.clock)
    environment = PluginEnvironment(
        workload=world.server,
        management=world.server,
        clock=world.clock,
        metrics=metrics,
    )
    plugins = Plugins.from_objects([("capz", CapzPlugin(**world.provider_options()))], environment)
    plugins.describe_machine_template(
        azure_machine_template("t", "Standard_D4s_v5"), machine_deployment("md", "t")
    )
    world.clock.advance(60)
    plugins.describe_machine_template(
        azure_machine_template("t", "Standard_D4s_v5"), machine_deployment("md", "t")
    )
    registry = metrics.registry
    for method in ("ResourceSkus.List", "RetailPrices"):
        count = registry.get_sample_value(
            "karpenter_cloudprovider_duration_seconds_count",
            {"controller": "inventory", "method": method, "provider": "capz"},
        )
        assert count == 1, method
    age = registry.get_sample_value(
        "karpenter_capi_pricing_age_seconds", {"plugin": "capz", "region": "eastus"}
    )
    assert age == 60.0


def test_each_plugins_keeps_its_own_provider_for_as_long_as_it_lives(world: CapzWorld) -> None:
    factory = CapzPlugin(**world.provider_options())
    first = _plugins(world, {})
    hooks = first.plugin("capz")
    assert isinstance(hooks, CapzHooks)
    assert hooks.provider() is hooks.provider()
    assert first.plugin("capz") is hooks
    # A restarted process (a new Plugins over the same cluster) starts with empty caches.
    other = Plugins.from_objects(
        [("capz", factory)], PluginEnvironment(world.server, world.server, world.clock)
    )
    again = other.plugin("capz")
    assert isinstance(again, CapzHooks)
    assert again.provider() is not hooks.provider()


def test_an_invalid_option_makes_the_template_not_ready(world: CapzWorld) -> None:
    plugins = _plugins(world, {"max-pods": "many"})
    with pytest.raises(NodeClassNotReadyError, match=r"capz\.max-pods='many' is not a number"):
        plugins.describe_machine_template(
            azure_machine_template("t", "Standard_D4s_v5"), machine_deployment("md", "t")
        )


def test_the_entry_point_names_the_hooks_class() -> None:
    assert dict(load_plugins(["capz"]))["capz"] is CapzHooks


def test_enabling_capz_without_the_azure_extra_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Make the Azure SDK unimportable (None in sys.modules), and forget the capz modules so
    # that loading the entry point imports them afresh.
    for name in [m for m in sys.modules if m.startswith("karpenter_capi.plugins.capz")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "azure.mgmt.compute", None)
    with pytest.raises(PluginLoadError) as raised:
        load_plugins(["capz"])
    assert raised.value.extra == "azure"
    assert "plugin 'capz' (from distribution karpenter-capi) could not be loaded" in str(
        raised.value
    )
    assert "pip install 'karpenter-capi[azure]'" in str(raised.value)
