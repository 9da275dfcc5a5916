"""Plugin styles and the state they keep: modules of hook functions, and classes or factories
that ``Plugins`` calls once with the plugin's context; and every hookspec reaching the facade."""

from __future__ import annotations

import functools
import logging
import types
from typing import Any, cast

import pytest

from karpenter_capi.core import hookspecs
from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.hookspecs import (
    Instance,
    InterruptionNotice,
    LaunchResult,
    LaunchWatch,
    MachineTemplateDescription,
    PluginContext,
    hookimpl,
)
from karpenter_capi.core.instancetype import InstanceType, Offering
from karpenter_capi.core.kube import NODECLAIMS
from karpenter_capi.core.kube.client import KubeClient
from karpenter_capi.core.observability.metrics import Metrics
from karpenter_capi.core.plugin_host import (
    PluginEnvironment,
    PluginLoadError,
    Plugins,
    is_factory,
)
from karpenter_capi.core.plugin_host._results import RESULT_CHECKS
from karpenter_capi.core.values.resources import ResourceList

NODECLASS: Any = {"kind": "ClusterAPINodeClass", "metadata": {"name": "default"}}
NODEPOOL: Any = {"kind": "NodePool", "metadata": {"name": "general"}}
NODECLAIM: Any = {"kind": "NodeClaim", "metadata": {"name": "nc-1"}}


def environment(**options: dict[str, str]) -> PluginEnvironment:
    return PluginEnvironment(
        workload=cast(KubeClient, object()),
        management=cast(KubeClient, object()),
        clock=FakeClock(),
        logger=logging.getLogger("test.plugins"),
        options=options,
    )


class Counter:
    """A class plugin: made once per ``Plugins`` with its context, it counts launches."""

    made: list[PluginContext] = []

    def __init__(self, ctx: PluginContext) -> None:
        self.ctx = ctx
        self.launched: list[str] = []
        Counter.made.append(ctx)

    @hookimpl
    def karpenter_capi_create(self, nodeclaim: Any) -> LaunchResult:
        self.launched.append(nodeclaim["metadata"]["name"])
        zone = self.ctx.option("zone", "zone-a")
        return LaunchResult(instance_type="small", capacity_type="on-demand", zone=zone)

    @hookimpl
    def karpenter_capi_list(self) -> list[Instance]:
        return [Instance(name=f"{self.ctx.plugin_name}-{name}") for name in self.launched]


def _module_plugin() -> types.ModuleType:
    """A third party's plugin as a module of hook functions, getting ``ctx`` in each call."""
    module = types.ModuleType("third_party_plugin")

    @hookimpl
    def karpenter_capi_list(ctx: PluginContext) -> list[Instance]:
        return [Instance(name=f"{ctx.plugin_name}-module-{ctx.option('label', '?')}")]

    module.karpenter_capi_list = karpenter_capi_list  # type: ignore[attr-defined]
    return module


@pytest.fixture(autouse=True)
def _forget_made() -> None:
    Counter.made.clear()


def test_a_class_plugin_is_made_once_per_plugins_with_its_own_context_and_keeps_state() -> None:
    plugins = Plugins.from_objects([("counter", Counter)], environment(counter={"zone": "z-2"}))
    assert [ctx.plugin_name for ctx in Counter.made] == ["counter"]
    assert Counter.made[0] is plugins.context("counter")

    assert plugins.create(NODECLAIM, [], NODECLASS).zone == "z-2"
    plugins.create({**NODECLAIM, "metadata": {"name": "nc-2"}}, [], NODECLASS)
    assert [i.name for i in plugins.list_instances()] == ["counter-nc-1", "counter-nc-2"]
    assert len(Counter.made) == 1  # hook calls reuse the object
    made = plugins.plugin("counter")
    assert isinstance(made, Counter)
    assert made.launched == ["nc-1", "nc-2"]

    # Another Plugins (a restarted process) has its own object, and so nothing launched yet.
    again = Plugins.from_objects([("counter", Counter)], environment())
    assert again.plugin("counter") is not made
    assert again.list_instances() == []


def test_a_module_of_hook_functions_keeps_working_beside_a_class_plugin() -> None:
    module = _module_plugin()
    plugins = Plugins.from_objects(
        [("mod", module), ("counter", Counter)], environment(mod={"label": "x"})
    )
    assert plugins.plugin("mod") is module  # registered as it is, never called
    plugins.create(NODECLAIM, [], NODECLASS)
    assert [i.name for i in plugins.list_instances()] == ["mod-module-x", "counter-nc-1"]


def test_a_factory_is_called_with_the_context_and_what_it_returns_is_the_plugin() -> None:
    made: list[Counter] = []

    def factory(ctx: PluginContext) -> Counter:
        made.append(Counter(ctx))
        return made[-1]

    plugins = Plugins.from_objects(
        [("by-function", factory), ("by-partial", functools.partial(factory))], environment()
    )
    assert [plugin.ctx.plugin_name for plugin in made] == ["by-function", "by-partial"]
    assert plugins.plugin("by-function") is made[0]
    assert plugins.create(NODECLAIM, [], NODECLASS).instance_type == "small"


def test_handing_over_the_metrics_remakes_the_objects_with_the_new_context() -> None:
    plugins = Plugins.from_objects([("counter", Counter)], environment())
    first = plugins.plugin("counter")
    assert isinstance(first, Counter)
    assert first.ctx.metrics is None
    metrics = Metrics(FakeClock())
    plugins.use_metrics(metrics)
    second = plugins.plugin("counter")
    assert isinstance(second, Counter)
    assert second is not first
    assert second.ctx.metrics is metrics
    assert second.ctx is plugins.context("counter")


def test_styles_are_told_apart_by_whether_they_can_be_called() -> None:
    assert is_factory(Counter)
    assert is_factory(functools.partial(Counter))
    assert not is_factory(_module_plugin())
    assert not is_factory(object())


def test_a_factory_that_fails_or_makes_a_bad_plugin_stops_loading_by_name() -> None:
    def broken(ctx: PluginContext) -> object:
        raise RuntimeError("no credentials")

    with pytest.raises(PluginLoadError, match=r"'broken'.*RuntimeError: no credentials"):
        Plugins.from_objects([("broken", broken)], environment())

    class Typo:
        def __init__(self, ctx: PluginContext) -> None:
            pass

        @hookimpl
        def karpenter_capi_lsit(self) -> list[Instance]:
            return []

    with pytest.raises(PluginLoadError, match=r"'typo'.*unknown hooks: karpenter_capi_lsit"):
        Plugins.from_objects([("typo", Typo)], environment())

    with pytest.raises(PluginLoadError, match=r"'nothing'.*returned None"):
        Plugins.from_objects([("nothing", lambda ctx: None)], environment())


# -- every hookspec has a result check and a facade method that calls it ------------------------

_ANSWERS: dict[str, object] = {
    "karpenter_capi_nodeclass_kinds": [("example.com", "ExampleNodeClass")],
    "karpenter_capi_instance_types": [
        InstanceType(
            name="small",
            capacity=ResourceList.parse({"cpu": "2", "memory": "4Gi"}),
            offerings=(Offering("zone-a", "on-demand", 1.0),),
        )
    ],
    "karpenter_capi_price_offerings": None,
    "karpenter_capi_create": LaunchResult(instance_type="small", capacity_type="on-demand"),
    "karpenter_capi_launch_watches": [LaunchWatch(NODECLAIMS, lambda _machine: [])],
    "karpenter_capi_delete": True,
    "karpenter_capi_get": Instance(name="m-1"),
    "karpenter_capi_list": [Instance(name="m-1")],
    "karpenter_capi_is_drifted": "Drifted",
    "karpenter_capi_describe_machine_template": MachineTemplateDescription(
        source="test",
        instance_type="small",
        capacity=ResourceList.parse({"cpu": "2"}),
        capacity_type="on-demand",
        zones={"zone-a": 1.0},
    ),
    "karpenter_capi_disruption_blocked": {"nc-1": "kept"},
    "karpenter_capi_interruptions": [InterruptionNotice("spot_interrupted", "i-0abc")],
    "karpenter_capi_interruptions_handled": None,
}


def _recording_plugin(called: list[str]) -> object:
    """An object implementing every hookspec (by name, from ``HOOK_NAMES``) that records calls."""
    plugin = types.SimpleNamespace()
    for name in hookspecs.HOOK_NAMES:
        # No parameters (a default is not an argument to pluggy): the answer ignores them.
        def hook(_name: str = name) -> object:
            called.append(_name)
            return _ANSWERS[_name]

        setattr(plugin, name, hookimpl(hook))
    return plugin


def test_every_hookspec_has_a_result_check() -> None:
    assert set(RESULT_CHECKS) == set(hookspecs.HOOK_NAMES)
    assert set(_ANSWERS) == set(hookspecs.HOOK_NAMES), "give the new hook an answer above"


def test_every_hookspec_is_called_by_a_facade_method() -> None:
    called: list[str] = []
    plugins = Plugins.from_objects([("all", _recording_plugin(called))], environment())
    plugins.nodeclass_kinds()
    plugins.instance_types(NODECLASS, NODEPOOL)  # inventory, then the pricing chain
    plugins.create(NODECLAIM, [], NODECLASS)
    plugins.launch_watches()
    plugins.delete(NODECLAIM)
    plugins.get("test:///m-1")
    plugins.list_instances()
    plugins.is_drifted(NODECLAIM, NODECLASS)
    plugins.describe_machine_template({"kind": "T"}, {"kind": "MachineDeployment"})
    plugins.disruption_blocked([NODECLAIM])
    plugins.interruptions_handled("all", [n for _, n in plugins.interruptions()])
    missing = sorted(set(hookspecs.HOOK_NAMES) - set(called))
    assert not missing, f"hookspecs no Plugins method calls: {missing}"
