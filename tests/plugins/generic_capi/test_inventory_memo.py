"""The inventory is built once while its inputs stay the same, and afresh when any one changes.

Each change below is checked against a build without the memo (same cluster, same caches), and
``test_every_part_of_the_key_is_needed`` drops each part of the key in turn and expects some
change to come out stale: a key that misses an input fails these tests.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.hookspecs import MachineTemplateDescription, PluginContext
from karpenter_capi.core.kube.resources import CLUSTER_API_NODE_CLASSES
from karpenter_capi.core.values.resources import ResourceList
from karpenter_capi.plugins.generic_capi import inventory as inventory_module
from karpenter_capi.plugins.generic_capi.inventory import (
    Inventory,
    UnavailableOfferings,
    collect_inventory,
)
from karpenter_capi.plugins.generic_capi.inventory_memo import InventoryMemo
from karpenter_capi.plugins.generic_capi.selection import resource_key
from tests.plugins.generic_capi.inventory_builders import (
    add,
    machine,
    machine_template,
    new_env,
    nodeclass,
    scalable,
    sized,
)
from tests.plugins.generic_capi.test_overhead import kubeadm_template, worker

MAX = wellknown.ANNOTATION_AUTOSCALER_MAX_SIZE
NATIVE_KIND = "AWSMachineTemplate"
CAPACITY = {"cpu": "4", "memory": "16Gi", "ephemeral-storage": "100Gi", "pods": "110"}


class World:
    """A management cluster with a NodeClass, two sized MachineDeployments, a templated one, a
    kubeadm-configured one, a native one and a MachineSet."""

    def __init__(self) -> None:
        self.server, self.clock, ctx, self.capi = new_env()
        self.price = 0.1
        self.ctx: PluginContext = dataclasses.replace(ctx, describe_machine_template=self._native)
        add(
            self.server,
            self.capi,
            nodeclass(),
            scalable("MachineDeployment", "md-a", annotations=sized("2", "4Gi"), replicas=1),
            scalable("MachineDeployment", "md-b", annotations=sized("6", "12Gi", **{MAX: "3"})),
            machine_template("small", capacity={"cpu": "1", "memory": "2Gi"}),
            scalable("MachineDeployment", "md-t", template="small"),
            machine_template("m5", kind=NATIVE_KIND, version="v1beta2"),
            scalable("MachineDeployment", "md-n", template="m5", template_kind=NATIVE_KIND),
            kubeadm_template("workers", {"kube-reserved": "cpu=100m"}),
            worker("md-k", replicas=1),
            scalable("MachineSet", "ms-a", annotations=sized("8", "32Gi")),
        )

    def _native(
        self, template: Mapping[str, Any], owner: Mapping[str, Any]
    ) -> MachineTemplateDescription | None:
        if template.get("kind") != NATIVE_KIND:
            return None
        return MachineTemplateDescription(
            source="AWS",
            instance_type="m5.large",
            capacity=ResourceList.parse({"cpu": "2", "memory": "8Gi", "pods": "29"}),
            capacity_type=wellknown.CAPACITY_TYPE_ON_DEMAND,
            zones={"": self.price},
        )

    def nodeclass(self) -> dict[str, Any]:
        return dict(self.server.get(CLUSTER_API_NODE_CLASSES, "default"))

    def inventory(self) -> Inventory:
        return collect_inventory(self.ctx, self.nodeclass(), self.capi)

    def memo(self) -> InventoryMemo:
        return InventoryMemo.shared(self.ctx)

    def patch(self, kind: str, name: str, patch: dict[str, Any]) -> None:
        resource = self._resource(kind)
        self.server.patch(resource, name, patch, "default" if resource.namespaced else None)

    def _resource(self, kind: str) -> Any:
        return {
            "MachineDeployment": self.capi.machine_deployments,
            "MachineSet": self.capi.machine_sets,
            wellknown.NODECLASS_KIND: CLUSTER_API_NODE_CLASSES,
        }[kind]

    def delete(self, kind: str, name: str) -> None:
        self.server.delete(self._resource(kind), name, "default")


def _seen(inventory: Inventory) -> tuple[Any, ...]:
    """Everything a caller sees, including what equality leaves out (uids, shape sources)."""
    return (
        inventory,
        [(p.uid, p.api_version) for p in (*inventory.problems, *inventory.notices)],
        [it.source for it in inventory.instance_types],
        [r.labels for r in inventory.resources],
    )


def _without_memo(world: World, monkeypatch: pytest.MonkeyPatch) -> Inventory:
    with monkeypatch.context() as patched:
        patched.setattr(InventoryMemo, "shared", classmethod(lambda cls, ctx: InventoryMemo()))
        return world.inventory()


def _node(name: str, allocatable_cpu: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "status": {"capacity": CAPACITY, "allocatable": {**CAPACITY, "cpu": allocatable_cpu}},
    }


def _learn(world: World) -> None:
    world.server.apply_manifests([_node("n1", "3500m"), machine("m1", "md-k", "n1", world.capi)])
    world.clock.advance(31)  # past the retry interval of the resource that had no Node


def _template_status(world: World) -> None:
    template = machine_template("small", capacity={"cpu": "2", "memory": "2Gi"})
    world.server.apply_manifests([template])
    world.clock.advance(61)  # past the template reader's cache


def _kubelet(world: World) -> None:
    world.server.apply_manifests([kubeadm_template("workers", {"kube-reserved": "cpu=700m"})])
    world.clock.advance(61)  # past the reader's cache


def _mark(world: World) -> None:
    UnavailableOfferings.shared(world.ctx).mark(
        resource_key("MachineDeployment", "default", "md-a"), "quota"
    )


def _mark_expires(world: World) -> None:
    world.clock.advance(181)


def _native_price(world: World) -> None:
    world.price = 0.2


def _recreate(world: World) -> None:
    world.delete("MachineSet", "ms-a")
    paused = sized("8", "32Gi", **{"cluster.x-k8s.io/paused": ""})  # its problem has its uid
    add(world.server, world.capi, scalable("MachineSet", "ms-a", annotations=paused))


CHANGES: dict[str, Callable[[World], None]] = {
    "a MachineDeployment's annotation": lambda w: w.patch(
        "MachineDeployment", "md-a", {"metadata": {"annotations": sized("2", "16Gi")}}
    ),
    "a MachineDeployment's replicas (reaches max size)": lambda w: w.patch(
        "MachineDeployment", "md-b", {"spec": {"replicas": 3}}
    ),
    "a MachineDeployment paused": lambda w: w.patch(
        "MachineDeployment", "md-a", {"spec": {"paused": True}}
    ),
    "a new MachineSet": lambda w: add(
        w.server, w.capi, scalable("MachineSet", "ms-b", annotations=sized("16", "64Gi"))
    ),
    "a deleted MachineSet": lambda w: w.delete("MachineSet", "ms-a"),
    "a MachineSet recreated (new uid)": _recreate,
    "the NodeClass's settings": lambda w: w.patch(
        wellknown.NODECLASS_KIND,
        "default",
        {"metadata": {"annotations": {"karpenter.cluster.x-k8s.io/kube-reserved": "cpu=1"}}},
    ),
    "the NodeClass's selector": lambda w: w.patch(
        wellknown.NODECLASS_KIND,
        "default",
        {"spec": {"scalableResourceSelector": {"matchLabels": {"nothing": "here"}}}},
    ),
    "a template's status": _template_status,
    "a kubeadm config's kubelet settings": _kubelet,
    "a launch failure": _mark,
    "a native description's price": _native_price,
    "a learned node overhead": _learn,
}


@pytest.fixture
def world() -> World:
    return World()


def test_a_second_call_with_nothing_changed_does_not_rebuild(world: World) -> None:
    first = world.inventory()
    assert len(first.instance_types) == 6
    assert not first.problems
    assert (world.memo().builds, world.memo().hits) == (1, 0)
    second = world.inventory()
    assert (world.memo().builds, world.memo().hits) == (1, 1)
    assert _seen(second) == _seen(first)


def test_what_a_caller_changes_does_not_reach_the_memo(world: World) -> None:
    first = world.inventory()
    first.notices.append(first.problems[0] if first.problems else first.notices[0])
    first.instance_types.clear()
    first.resources.clear()
    with pytest.raises(TypeError):
        world.inventory().resources[0].labels["x"] = "y"  # type: ignore[index]
    again = world.inventory()
    assert again.instance_types
    assert again.resources
    assert world.memo().builds == 1


@pytest.mark.parametrize("change", CHANGES, ids=list(CHANGES))
def test_each_change_gives_the_fresh_result(
    world: World, change: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = world.inventory()
    world.inventory()
    CHANGES[change](world)
    after = world.inventory()
    fresh = _without_memo(world, monkeypatch)
    assert _seen(after) == _seen(fresh)
    assert _seen(after) != _seen(before), "the change must show, or this test proves nothing"


def test_an_expired_launch_failure_gives_the_fresh_result(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    _mark(world)
    marked = world.inventory()
    _mark_expires(world)
    after = world.inventory()
    assert _seen(after) == _seen(_without_memo(world, monkeypatch))
    assert _seen(after) != _seen(marked)


def test_objects_without_a_resource_version_are_never_reused() -> None:
    memo = InventoryMemo()
    builds: list[int] = []

    def build() -> Any:
        builds.append(1)
        return object()

    memo.get_or_build("nc", None, build)
    memo.get_or_build("nc", None, build)
    assert len(builds) == 2
    assert len(memo) == 0


def test_the_memo_is_bounded_and_per_cluster() -> None:
    memo = InventoryMemo(max_entries=2)
    for slot in ("a", "b", "c"):
        memo.get_or_build(slot, (slot,), object)  # type: ignore[arg-type]
    assert len(memo) == 2
    assert memo.get_or_build("a", ("a",), object) is not None
    assert memo.builds == 4
    world, other = World(), World()
    assert world.memo() is world.memo()
    assert world.memo() is not other.memo()


def _dropping(index: int) -> Callable[..., Any]:
    real = inventory_module._memo_key

    def key(settings: Any, inputs: Any) -> tuple[Any, ...] | None:
        full = real(settings, inputs)
        if full is None:
            return None
        if index == 0:
            return (None, *full[1:])
        at = index - 1  # in each resource's part
        return (full[0], *((*k[:at], None, *k[at + 1 :]) for k in full[1:]))

    return key


# Key parts (after the settings, index 0): kind, namespace, name, uid, resourceVersion,
# template, template error, native, native error, kubelet, kubelet error, learned, failure.
# namespace, name and uid are redundant with the resourceVersion on one API server; the read
# errors only change together with the value read; both are kept as cheap belts.
NEEDED = {0: "settings", 5: "resourceVersion", 6: "template", 8: "native"}
NEEDED |= {10: "kubelet", 12: "learned", 13: "failure"}


def _stale_somewhere(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    for name, change in CHANGES.items():
        world = World()
        world.inventory()
        change(world)
        after = world.inventory()
        if _seen(after) != _seen(_without_memo(world, monkeypatch)):
            yield name


@pytest.mark.parametrize("index", NEEDED, ids=list(NEEDED.values()))
def test_every_part_of_the_key_is_needed(index: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inventory_module, "_memo_key", _dropping(index))
    assert list(_stale_somewhere(monkeypatch)), f"no change catches a key without {NEEDED[index]}"


def _malformed(world: World, status: dict[str, Any]) -> None:
    template = machine_template("small")
    template["status"] = status
    world.server.apply_manifests([template])
    world.clock.advance(61)  # past the template reader's cache


def test_a_malformed_template_status_is_a_problem_and_its_changes_show(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    _malformed(world, {"capacity": "four"})
    first = world.inventory()
    [problem] = [p for p in first.problems if p.name == "md-t"]
    assert problem.reason == "InvalidShape"
    assert "status.capacity is not a map" in problem.message
    _malformed(world, {"capacity": {"cpu": "1"}, "nodeInfo": "linux"})
    after = world.inventory()
    assert _seen(after) == _seen(_without_memo(world, monkeypatch))
    [problem] = [p for p in after.problems if p.name == "md-t"]
    assert "status.nodeInfo is not an object" in problem.message
