"""NodePools the CRD admits but that cannot be satisfied, next to one that can.

A user who pins pods to such a NodePool reads why on the pods (FailedScheduling, naming the
NodePool and the requirement that excludes every instance type, or the limit) or on the NodePool
(its Ready condition and a NodePoolNotReady Event, naming the NodeClass or rule at fault; for
limits no node fits under, which leave it Ready, a NoNodeWithinLimits Event); the catalog
NodePool keeps provisioning for the other pods in the same round.
"""

from __future__ import annotations

from typing import Any

import pytest

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.kube.resources import NODEPOOLS

from .world import NODECLASS_REF, NODEPOOL, World

IT = wellknown.LABEL_INSTANCE_TYPE
ZONE = wellknown.LABEL_TOPOLOGY_ZONE
ARCH = wellknown.LABEL_ARCH
CT = wellknown.LABEL_CAPACITY_TYPE


def _req(key: str, operator: str, *values: str, **extra: Any) -> dict[str, Any]:
    return {"key": key, "operator": operator, "values": list(values), **extra}


# (id, NodePool template spec, NodePool spec extras, words on the pinned pods' Event)
ON_PODS: list[tuple[str, dict[str, Any], dict[str, Any], tuple[str, ...]]] = [
    (
        "instance-type-typo",
        {"requirements": [_req(IT, "In", "m-2x-amd64-linux-typo")]},
        {},
        ("NodePool bad: no instance type meets", "m-2x-amd64-linux-typo"),
    ),
    (
        "instance-type-excluded",
        {"requirements": [_req(IT, "NotIn", "m-2x-amd64-linux")]},
        {},
        ("NodePool bad: no instance type meets", f"{IT} NotIn [m-2x-amd64-linux]"),
    ),
    (
        "arch-not-offered",
        {"requirements": [_req(ARCH, "In", "arm64")]},
        {},
        ("NodePool bad: no instance type meets", f"{ARCH} In [arm64]"),
    ),
    (
        "os-not-offered",
        {"requirements": [_req(wellknown.LABEL_OS, "In", "windows")]},
        {},
        ("NodePool bad: no instance type meets", "windows"),
    ),
    (
        "zone-not-offered",
        {"requirements": [_req(ZONE, "In", "zone-z")]},
        {},
        (
            "NodePool bad: no instance type meets",
            "none of its offerings (zone-a/on-demand)",
            "zone-z",
        ),
    ),
    (
        "capacity-type-not-offered",
        {"requirements": [_req(CT, "In", "spot")]},
        {},
        ("NodePool bad: no instance type meets", "none of its offerings", "spot"),
    ),
    (
        "min-values-too-many",
        {"requirements": [_req(IT, "Exists", minValues=5)]},
        {},
        ("NodePool bad: minValues 5", "only 1 value(s) remain"),
    ),
    (
        "limits-zero-cpu",
        {},
        {"limits": {"cpu": "0"}},
        ("NodePool bad: the NodePool's limits would be exceeded (cpu)",),
    ),
    (
        "limits-zero-nodes",
        {},
        {"limits": {"nodes": "0"}},
        ("NodePool bad: the NodePool's limits would be exceeded (nodes)",),
    ),
    (
        "limits-below-one-node",
        {},
        {"limits": {"memory": "1Gi"}},
        ("NodePool bad: the NodePool's limits would be exceeded (memory)",),
    ),
    (
        "taint-not-tolerated",
        {"taints": [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]},
        {},
        ("NodePool bad: taint dedicated=ml:NoSchedule not tolerated",),
    ),
]

# (id, template spec, the NodePool condition type, its reason, words in its message)
ON_NODEPOOL: list[tuple[str, dict[str, Any], str, str, tuple[str, ...]]] = [
    (
        "nodeclass-missing",
        {"nodeClassRef": {**NODECLASS_REF, "name": "nope"}},
        "NodeClassReady",
        "NodeClassNotFound",
        ("ClusterAPINodeClass nope not found",),
    ),
    (
        "taints-duplicate-with-startup-taints",
        {
            "taints": [{"key": "a", "effect": "NoSchedule"}],
            "startupTaints": [{"key": "a", "effect": "NoSchedule"}],
        },
        "ValidationSucceeded",
        "ValidationFailed",
        ("spec.template.spec.startupTaints[0]: duplicate taint Key/Effect pair a=NoSchedule",),
    ),
    (
        "taint-value-invalid",
        {"taints": [{"key": "a", "value": "v" * 64, "effect": "NoSchedule"}]},
        "ValidationSucceeded",
        "ValidationFailed",
        ("spec.template.spec.taints[0].value", "no more than 63 characters"),
    ),
    (
        "capacity-type-unknown",
        {"requirements": [_req(CT, "In", "cheap")]},
        "ValidationSucceeded",
        "ValidationFailed",
        ("cheap",),
    ),
]


def _pinned(world: World, pool: str = "bad") -> None:
    world.deploy("pinned", 2, node_selector={wellknown.LABEL_NODEPOOL: pool})


@pytest.mark.parametrize(
    ("template", "spec", "words"),
    [pytest.param(t, s, w, id=case) for case, t, s, w in ON_PODS],
)
def test_pods_pinned_to_an_unsatisfiable_nodepool_are_told_why_and_the_others_run(
    template: dict[str, Any], spec: dict[str, Any], words: tuple[str, ...]
) -> None:
    world = World()
    world.nodepool("bad", template, **spec)
    _pinned(world)
    world.deploy()
    world.run()

    pinned = world.pending("pinned")
    assert len(pinned) == 2
    events = [e for e in world.events("FailedScheduling") if e.name in pinned]
    assert events, "\n".join(map(str, world.events()))
    assert all(word in events[-1].message for word in words), events[-1].message
    assert not [
        c
        for c in world.nodeclaims()
        if c["metadata"]["labels"].get(wellknown.LABEL_NODEPOOL) == "bad"
    ]
    world.assert_good_resource_served()


@pytest.mark.parametrize(
    ("template", "condition", "reason", "words"),
    [pytest.param(t, c, r, w, id=case) for case, t, c, r, w in ON_NODEPOOL],
)
def test_a_nodepool_that_cannot_be_used_says_so_on_itself_and_the_others_run(
    template: dict[str, Any], condition: str, reason: str, words: tuple[str, ...]
) -> None:
    world = World()
    world.nodepool("bad", template)
    _pinned(world)
    world.deploy()
    world.run()

    found = world.nodepool_condition("bad", condition)
    assert (found["status"], found["reason"]) == ("False", reason), found
    assert all(word in found["message"] for word in words), found["message"]
    assert world.nodepool_condition("bad")["status"] == "False"
    event = world.event_about(*words)
    assert (event.kind, event.name, event.type) == ("NodePool", "bad", "Warning")
    assert world.nodepool_condition(NODEPOOL)["status"] == "True"
    world.assert_good_resource_served()


@pytest.mark.parametrize(
    "requirement",
    [
        pytest.param(_req("example.com/cpus", "Gt", "64"), id="gt"),
        pytest.param(_req("example.com/cpus", "Lt", "4"), id="lt"),
        pytest.param(_req("example.com/team", "Exists"), id="exists"),
        pytest.param(_req("example.com/team", "NotIn", "a", "b"), id="not-in"),
    ],
)
def test_a_custom_label_requirement_with_many_values_labels_the_node_instead_of_churning(
    requirement: dict[str, Any],
) -> None:
    """No instance type defines the label, so the node carries whatever the NodeClaim gives it;
    without a value there, the node failed its own NodePool's requirement and was replaced as
    drifted as soon as it launched, forever (the pods evicted each time)."""
    world = World()
    world.nodepool("bad", {"requirements": [requirement]})
    _pinned(world)
    world.run(120)
    claims = [c["metadata"]["name"] for c in world.nodeclaims()]
    world.run(600)

    assert len(world.running("pinned")) == 2
    assert [c["metadata"]["name"] for c in world.nodeclaims()] == claims
    assert not world.events("Evicted")
    assert not [e for e in world.events() if "Drifted" in e.message]
    [claim] = world.nodeclaims()
    value = claim["metadata"]["labels"][requirement["key"]]
    assert value not in requirement["values"]
    assert world.violations() == []


# The ON_PODS cases whose requirements no instance type of the NodeClass meets: the NodePool
# itself says so (issue 24 item 2), not only the pods pinned to it.
UNSATISFIABLE = {
    "instance-type-typo": f"{IT} In [m-2x-amd64-linux-typo]",
    "instance-type-excluded": f"{IT} NotIn [m-2x-amd64-linux]",
    "arch-not-offered": f"{ARCH} In [arm64]",
    "os-not-offered": f"{wellknown.LABEL_OS} In [windows]",
    "zone-not-offered": f"{ZONE} In [zone-z]",
    "capacity-type-not-offered": f"{CT} In [spot]",
}


@pytest.mark.parametrize(
    ("template", "requirement"),
    [
        pytest.param(t, UNSATISFIABLE[case], id=case)
        for case, t, _, _ in ON_PODS
        if case in UNSATISFIABLE
    ],
)
def test_a_nodepool_no_instance_type_can_satisfy_is_not_ready_naming_the_requirement(
    template: dict[str, Any], requirement: str
) -> None:
    world = World()
    world.nodepool("bad", template)
    world.deploy()
    world.run()

    found = world.nodepool_condition("bad", "InstanceTypesSatisfiable")
    assert (found["status"], found["reason"]) == ("False", "NoInstanceTypeMeetsRequirements")
    assert requirement in found["message"], found["message"]
    assert "ClusterAPINodeClass catalog" in found["message"], found["message"]
    ready = world.nodepool_condition("bad")
    assert ready["status"] == "False", ready
    event = world.event_about(requirement)
    assert (event.kind, event.name, event.type, event.reason) == (
        "NodePool",
        "bad",
        "Warning",
        "NodePoolNotReady",
    )
    assert world.nodepool_condition(NODEPOOL, "InstanceTypesSatisfiable")["status"] == "True"
    assert world.nodepool_condition(NODEPOOL)["status"] == "True"
    world.assert_good_resource_served()


def test_an_expire_after_shorter_than_a_node_takes_to_register_is_warned_about_once() -> None:
    """Upstream honours any expireAfter, so this does too; but ``1s`` replaces every node as
    soon as it comes up (33 NodeClaims in five minutes, in issue 24) and the user is told."""
    world = World()
    world.nodepool("fast", {"expireAfter": "1s"})
    world.deploy(node_selector={wellknown.LABEL_NODEPOOL: "fast"})
    world.run(300)

    warnings = [e for e in world.events("ExpireAfterTooShort") if e.name == "fast"]
    assert len(warnings) == 1, "\n".join(map(str, world.events()))
    assert warnings[0].type == "Warning"
    assert "expireAfter 1s" in warnings[0].message
    assert "replaced as soon as" in warnings[0].message
    assert world.nodepool_condition("fast")["status"] == "True"
    assert not [e for e in world.events("ExpireAfterTooShort") if e.name == NODEPOOL]


# (id, NodePool limits, Event type, words) for limits under which no node of the NodePool's
# instance types fits. Upstream users write ``cpu: 0`` to pause a NodePool, so a zero limit is
# said as a Normal Event and the NodePool stays Ready; a non-zero limit below the smallest node
# is almost always a unit slip, a Warning.
NO_ROOM: list[tuple[str, dict[str, str], str, tuple[str, ...]]] = [
    (
        "limits-zero-cpu",
        {"cpu": "0"},
        "Normal",
        ("limits.cpu 0", "smallest instance type (m-2x-amd64-linux) has 2", "paused"),
    ),
    (
        "limits-zero-nodes",
        {"nodes": "0"},
        "Normal",
        ("limits.nodes 0 leaves room for no node", "paused"),
    ),
    (
        "limits-below-one-node",
        {"memory": "1Gi"},
        "Warning",
        ("limits.memory 1Gi", "smallest instance type (m-2x-amd64-linux) has 8Gi", "raise"),
    ),
]


@pytest.mark.parametrize(
    ("limits", "kind", "words"),
    [pytest.param(limits, kind, words, id=case) for case, limits, kind, words in NO_ROOM],
)
def test_limits_that_leave_room_for_no_node_are_said_once_on_the_nodepool_which_stays_ready(
    limits: dict[str, str], kind: str, words: tuple[str, ...]
) -> None:
    world = World()
    world.nodepool("bad", {}, limits=limits)
    _pinned(world)
    world.deploy()
    world.run(300)

    said = [e for e in world.events("NoNodeWithinLimits") if e.name == "bad"]
    assert len(said) == 1, "\n".join(map(str, world.events()))
    assert (said[0].kind, said[0].type) == ("NodePool", kind)
    assert all(word in said[0].message for word in words), said[0].message
    assert world.nodepool_condition("bad")["status"] == "True"
    assert not [e for e in world.events("NoNodeWithinLimits") if e.name == NODEPOOL]
    world.assert_good_resource_served()


def test_limits_are_said_again_when_they_change() -> None:
    world = World()
    world.nodepool("bad", {}, limits={"cpu": "0"})
    world.run()
    world.server.patch(NODEPOOLS, "bad", {"spec": {"limits": {"cpu": "8"}}})
    world.run()
    world.server.patch(NODEPOOLS, "bad", {"spec": {"limits": {"cpu": "1"}}})
    world.run()

    said = [e for e in world.events("NoNodeWithinLimits") if e.name == "bad"]
    assert [(e.type, e.message.split(":")[0]) for e in said] == [
        ("Normal", "limits.cpu 0 leaves room for no node"),
        ("Warning", "limits.cpu 1 leaves room for no node"),
    ], "\n".join(map(str, world.events()))


def test_a_min_values_beyond_the_catalog_makes_the_nodepool_not_ready_naming_it() -> None:
    """Upstream refuses to launch for a pool whose minValues the instance types cannot meet,
    whatever pod comes; the NodePool says so, as for a requirement nothing offers."""
    world = World()
    world.nodepool("bad", {"requirements": [_req(IT, "Exists", minValues=5)]})
    _pinned(world)
    world.deploy()
    world.run()

    found = world.nodepool_condition("bad", "InstanceTypesSatisfiable")
    assert (found["status"], found["reason"]) == ("False", "MinValuesNotMet"), found
    words = (f"minValues 5 for {IT} not met: only 1 value(s) remain", "ClusterAPINodeClass catalog")
    assert all(word in found["message"] for word in words), found["message"]
    assert world.nodepool_condition("bad")["status"] == "False"
    event = world.event_about(*words)
    assert (event.kind, event.name, event.type, event.reason) == (
        "NodePool",
        "bad",
        "Warning",
        "NodePoolNotReady",
    )
    assert world.nodepool_condition(NODEPOOL)["status"] == "True"
    world.assert_good_resource_served()
