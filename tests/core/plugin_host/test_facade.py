"""The typed facade over pluggy: call order, pricing chain, per-plugin context, result checks."""

from __future__ import annotations

import logging
from typing import Any, cast

import pytest

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.errors import InstanceNotFoundError, InsufficientCapacityError
from karpenter_capi.core.hookspecs import (
    Instance,
    LaunchResult,
    PluginContext,
    hookimpl,
)
from karpenter_capi.core.instancetype import InstanceType, Offering
from karpenter_capi.core.kube.client import KubeClient
from karpenter_capi.core.plugin_host import (
    NotHandledError,
    PluginCallError,
    PluginEnvironment,
    PluginLoadError,
    PluginResultError,
    Plugins,
)
from karpenter_capi.core.values.resources import ResourceList

NODECLASS: Any = {
    "apiVersion": "karpenter.cluster.x-k8s.io/v1alpha1",
    "kind": "ClusterAPINodeClass",
    "metadata": {"name": "default"},
}
NODEPOOL: Any = {
    "apiVersion": "karpenter.sh/v1",
    "kind": "NodePool",
    "metadata": {"name": "general"},
}
NODECLAIM: Any = {
    "apiVersion": "karpenter.sh/v1",
    "kind": "NodeClaim",
    "metadata": {"name": "nc-1"},
}

WORKLOAD = cast(KubeClient, object())
MANAGEMENT = cast(KubeClient, object())


def environment(**options: dict[str, str]) -> PluginEnvironment:
    return PluginEnvironment(
        workload=WORKLOAD,
        management=MANAGEMENT,
        clock=FakeClock(),
        logger=logging.getLogger("test.plugins"),
        options=options,
    )


def small(price: float = 1.0, name: str = "small") -> InstanceType:
    return InstanceType(
        name=name,
        capacity=ResourceList.parse({"cpu": "2", "memory": "4Gi"}),
        offerings=(Offering("zone-a", "on-demand", price),),
    )


class Inventory:
    """Serves ClusterAPINodeClass with one instance type."""

    @hookimpl
    def karpenter_capi_nodeclass_kinds(self) -> list[tuple[str, str]]:
        return [("karpenter.cluster.x-k8s.io", "ClusterAPINodeClass")]

    @hookimpl
    def karpenter_capi_instance_types(self, nodeclass: Any) -> list[InstanceType] | None:
        if nodeclass["kind"] != "ClusterAPINodeClass":
            return None
        return [small()]


class Repricer:
    """Multiplies prices and records the order it was called in."""

    def __init__(self, factor: float, calls: list[str], label: str) -> None:
        self.factor, self.calls, self.label = factor, calls, label

    @hookimpl
    def karpenter_capi_price_offerings(
        self, instance_types: list[InstanceType], ctx: PluginContext
    ) -> list[InstanceType]:
        self.calls.append(f"{self.label}:{ctx.plugin_name}")
        return [
            it.with_offerings(
                Offering(o.zone, o.capacity_type, o.price * self.factor) for o in it.offerings
            )
            for it in instance_types
        ]


def test_pricing_chain_runs_in_enabled_order_and_each_sees_the_previous_output() -> None:
    calls: list[str] = []

    class Adds:
        @hookimpl
        def karpenter_capi_price_offerings(
            self, instance_types: list[InstanceType]
        ) -> list[InstanceType]:
            calls.append("adds")
            return [
                it.with_offerings(
                    Offering(o.zone, o.capacity_type, o.price + 1) for o in it.offerings
                )
                for it in instance_types
            ]

    class Ignores:
        @hookimpl
        def karpenter_capi_price_offerings(self) -> None:
            calls.append("ignores")

    plugins = Plugins.from_objects(
        [
            ("inventory", Inventory()),
            ("double", Repricer(2.0, calls, "double")),
            ("ignores", Ignores()),
            ("adds", Adds()),
        ],
        environment(),
    )
    assert plugins.names == ["inventory", "double", "ignores", "adds"]
    types = plugins.instance_types(NODECLASS, NODEPOOL)
    # (1.0 * 2) + 1 = 3, not (1.0 + 1) * 2 = 4: double ran first, adds saw its output.
    assert [o.price for o in types[0].offerings] == [3.0]
    assert calls == ["double:double", "ignores", "adds"]

    calls.clear()
    reversed_order = Plugins.from_objects(
        [("inventory", Inventory()), ("adds", Adds()), ("double", Repricer(2.0, calls, "d"))],
        environment(),
    )
    assert [o.price for o in reversed_order.instance_types(NODECLASS, NODEPOOL)[0].offerings] == [
        4.0
    ]
    unpriced = reversed_order.instance_types(NODECLASS, NODEPOOL, priced=False)
    assert [o.price for o in unpriced[0].offerings] == [1.0]


def test_tryfirst_and_trylast_override_the_enabled_order() -> None:
    calls: list[str] = []

    class Early:
        @hookimpl(tryfirst=True)
        def karpenter_capi_price_offerings(self, instance_types: list[InstanceType]) -> None:
            calls.append("early")

    class Late:
        @hookimpl(trylast=True)
        def karpenter_capi_price_offerings(self, instance_types: list[InstanceType]) -> None:
            calls.append("late")

    class Plain:
        @hookimpl
        def karpenter_capi_price_offerings(self, instance_types: list[InstanceType]) -> None:
            calls.append("plain")

    plugins = Plugins.from_objects(
        [("late", Late()), ("plain", Plain()), ("early", Early())], environment()
    )
    assert plugins.price_offerings([small()], NODECLASS, NODEPOOL) == [small()]
    assert calls == ["early", "plain", "late"]


def test_each_plugin_gets_its_own_context() -> None:
    seen: dict[str, PluginContext] = {}

    class Records:
        @hookimpl
        def karpenter_capi_list(self, ctx: PluginContext) -> list[Instance]:
            seen[ctx.plugin_name] = ctx
            return [Instance(name=f"{ctx.plugin_name}-machine")]

    env = environment(capa={"region": "eu-west-1"})
    plugins = Plugins.from_objects([("capa", Records()), ("other", Records())], env)
    instances = plugins.list_instances()
    assert [i.name for i in instances] == ["capa-machine", "other-machine"]
    assert seen["capa"].option("region") == "eu-west-1"
    assert seen["other"].option("region", "none") == "none"
    assert seen["capa"].logger.name == "test.plugins.capa"
    assert seen["capa"].workload is WORKLOAD
    assert seen["capa"].management is MANAGEMENT
    assert seen["capa"].clock is env.clock


def test_inventory_is_firstresult_and_unserved_nodeclasses_are_reported() -> None:
    class Other:
        @hookimpl
        def karpenter_capi_instance_types(self, nodeclass: Any) -> list[InstanceType] | None:
            return [small(name="other")] if nodeclass["kind"] == "OtherNodeClass" else None

    plugins = Plugins.from_objects([("other", Other()), ("inventory", Inventory())], environment())
    assert [it.name for it in plugins.instance_types(NODECLASS, NODEPOOL)] == ["small"]
    assert plugins.serving_plugin(NODECLASS, NODEPOOL) == "inventory"
    other_class = {**NODECLASS, "kind": "OtherNodeClass"}
    assert [it.name for it in plugins.instance_types(other_class, NODEPOOL)] == ["other"]
    with pytest.raises(NotHandledError) as caught:
        plugins.instance_types({**NODECLASS, "kind": "Unknown"}, NODEPOOL)
    assert "Unknown/default" in str(caught.value)
    assert "enabled: other, inventory" in str(caught.value)


def test_nodeclass_kinds_are_collected_from_every_plugin() -> None:
    class Aws:
        @hookimpl
        def karpenter_capi_nodeclass_kinds(self) -> list[tuple[str, str]]:
            return [
                ("karpenter.cluster.x-k8s.io", "ClusterAPINodeClass"),
                ("karpenter.k8s.aws", "EC2NodeClass"),
            ]

    plugins = Plugins.from_objects([("generic", Inventory()), ("aws", Aws())], environment())
    assert plugins.nodeclass_kinds() == {
        ("karpenter.cluster.x-k8s.io", "ClusterAPINodeClass"): ["generic", "aws"],
        ("karpenter.k8s.aws", "EC2NodeClass"): ["aws"],
    }


@pytest.mark.parametrize(
    ("hook", "bad_value", "call"),
    [
        (
            "karpenter_capi_instance_types",
            {"small": 1},
            lambda p: p.instance_types(NODECLASS, NODEPOOL),
        ),
        (
            "karpenter_capi_price_offerings",
            [small(), "medium"],
            lambda p: p.price_offerings([small()], NODECLASS, NODEPOOL),
        ),
        ("karpenter_capi_nodeclass_kinds", [("group-only",)], lambda p: p.nodeclass_kinds()),
        (
            "karpenter_capi_create",
            {"providerID": "x"},
            lambda p: p.create(NODECLAIM, [small()], NODECLASS),
        ),
        ("karpenter_capi_delete", "yes", lambda p: p.delete(NODECLAIM)),
        ("karpenter_capi_get", "aws:///i-1", lambda p: p.get("aws:///i-1")),
        ("karpenter_capi_list", None, lambda p: p.list_instances()),
        ("karpenter_capi_is_drifted", "", lambda p: p.is_drifted(NODECLAIM, NODECLASS)),
    ],
)
def test_wrongly_typed_results_name_the_plugin_and_the_hook(
    hook: str, bad_value: object, call: Any
) -> None:
    broken = type("Broken", (), {hook: hookimpl(lambda self: bad_value)})()
    plugins = Plugins.from_objects([("well-behaved", object()), ("broken", broken)], environment())
    with pytest.raises(PluginResultError) as caught:
        call(plugins)
    assert caught.value.plugin == "broken"
    assert caught.value.hook == hook
    assert "'broken'" in str(caught.value)
    assert hook in str(caught.value)


def test_provider_errors_pass_through_and_bugs_are_attributed() -> None:
    class Full:
        @hookimpl
        def karpenter_capi_create(self) -> LaunchResult:
            raise InsufficientCapacityError("zone-a exhausted")

    class Buggy:
        @hookimpl
        def karpenter_capi_create(self) -> LaunchResult:
            raise KeyError("spec")

    with pytest.raises(InsufficientCapacityError, match="zone-a exhausted"):
        Plugins.from_objects([("full", Full())], environment()).create(NODECLAIM, [], NODECLASS)
    with pytest.raises(PluginCallError) as caught:
        Plugins.from_objects([("buggy", Buggy())], environment()).create(NODECLAIM, [], NODECLASS)
    assert "plugin 'buggy' failed in karpenter_capi_create: KeyError" in str(caught.value)
    assert isinstance(caught.value.__cause__, KeyError)


def test_create_delete_get_and_drift_route_to_the_first_plugin_that_answers() -> None:
    class NotMine:
        @hookimpl
        def karpenter_capi_create(self) -> None:
            return None

        @hookimpl
        def karpenter_capi_delete(self) -> None:
            return None

        @hookimpl
        def karpenter_capi_get(self, provider_id: str) -> Instance | None:
            return None

        @hookimpl
        def karpenter_capi_is_drifted(self) -> None:
            return None

    class Mine:
        def __init__(self) -> None:
            self.deleted: list[str] = []

        @hookimpl
        def karpenter_capi_create(
            self, nodeclaim: Any, instance_types: list[InstanceType]
        ) -> LaunchResult:
            chosen = instance_types[0]
            offering = chosen.cheapest_offering()
            assert offering is not None
            return LaunchResult(
                instance_type=chosen.name,
                capacity_type=offering.capacity_type,
                zone=offering.zone,
                annotations={"example.com/intent": nodeclaim["metadata"]["name"]},
            )

        @hookimpl
        def karpenter_capi_delete(self, nodeclaim: Any) -> bool:
            self.deleted.append(nodeclaim["metadata"]["name"])
            return True

        @hookimpl
        def karpenter_capi_get(self, provider_id: str) -> Instance | None:
            if provider_id == "gone://1":
                raise InstanceNotFoundError(provider_id)
            return Instance(name="m-1", provider_id=provider_id)

        @hookimpl
        def karpenter_capi_is_drifted(self, nodeclass: Any) -> str:
            return "TemplateDrift"

    mine = Mine()
    plugins = Plugins.from_objects([("not-mine", NotMine()), ("mine", mine)], environment())
    launched = plugins.create(NODECLAIM, [small()], NODECLASS)
    assert launched.instance_type == "small"
    assert launched.zone == "zone-a"
    assert launched.provider_id is None
    assert launched.annotations["example.com/intent"] == "nc-1"
    assert plugins.delete(NODECLAIM) == "mine"
    assert mine.deleted == ["nc-1"]
    assert plugins.get("fake://1") == Instance(name="m-1", provider_id="fake://1")
    with pytest.raises(InstanceNotFoundError):
        plugins.get("gone://1")
    assert plugins.is_drifted(NODECLAIM, NODECLASS) == "TemplateDrift"

    nobody = Plugins.from_objects([("not-mine", NotMine())], environment())
    with pytest.raises(NotHandledError, match="NodeClaim/nc-1"):
        nobody.create(NODECLAIM, [small()], NODECLASS)
    with pytest.raises(NotHandledError, match="karpenter_capi_delete"):
        nobody.delete(NODECLAIM)
    with pytest.raises(InstanceNotFoundError, match="no enabled plugin"):
        nobody.get("fake://1")
    assert nobody.is_drifted(NODECLAIM, NODECLASS) is None


def test_hooks_are_optional() -> None:
    plugins = Plugins.from_objects([("empty", object())], environment())
    assert plugins.nodeclass_kinds() == {}
    assert plugins.list_instances() == []
    assert plugins.price_offerings([small()], NODECLASS, NODEPOOL) == [small()]


def test_invalid_plugins_are_refused_at_registration() -> None:
    class Typo:
        @hookimpl
        def karpenter_capi_instance_type(self) -> None:  # missing "s"
            return None

    class Wrapper:
        @hookimpl(wrapper=True)
        def karpenter_capi_list(self) -> Any:
            return (yield)

    class WrongArgument:
        @hookimpl
        def karpenter_capi_get(self, instance_id: str) -> None:
            return None

    with pytest.raises(PluginLoadError, match=r"'typo'.*karpenter_capi_instance_type"):
        Plugins.from_objects([("typo", Typo())], environment())
    with pytest.raises(PluginLoadError, match="wrappers are not supported"):
        Plugins.from_objects([("wrapper", Wrapper())], environment())
    with pytest.raises(PluginLoadError, match=r"'wrong'.*instance_id"):
        Plugins.from_objects([("wrong", WrongArgument())], environment())


def test_hooks_receive_the_api_models_and_errors_name_them() -> None:
    from karpenter_capi.core.api.nodeclaim import NodeClaim

    nodeclaim = NodeClaim.model_validate(
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {"name": "general-x7k2p"},
            "spec": {
                "nodeClassRef": {
                    "group": "karpenter.cluster.x-k8s.io",
                    "kind": "ClusterAPINodeClass",
                    "name": "default",
                },
                "requirements": [],
            },
        }
    )
    received: list[object] = []

    class Observer:
        @hookimpl
        def karpenter_capi_delete(self, nodeclaim: Any) -> None:
            received.append(nodeclaim)

    plugins = Plugins.from_objects([("observer", Observer())], environment())
    with pytest.raises(NotHandledError, match="NodeClaim/general-x7k2p"):
        plugins.delete(nodeclaim)
    assert received == [nodeclaim]
