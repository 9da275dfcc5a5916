"""ClusterAPINodeClasses whose selector matches nothing, everything, only broken resources, or
cannot be read, and malformed overhead settings; each behind a NodePool of its own.

The NodeClass's Ready condition (or, when it cannot even be read, its NodePool's
NodeClassReady condition) names the NodeClass and the problem, a Warning Event says it, the
NodePool is not Ready, and the catalog NodePool keeps provisioning in the same round.
"""

from __future__ import annotations

from typing import Any

import pytest

from karpenter_capi.core.api import wellknown

from .world import CA, NODECLASS_REF, NODEPOOL, World

OTHER = "other"

# (id, spec, annotations, Ready reason, words in its message)
NOT_READY: list[tuple[str, dict[str, Any], dict[str, str], str, tuple[str, ...]]] = [
    (
        "matches-nothing",
        {"scalableResourceSelector": {"matchLabels": {"pool": "nope"}}},
        {},
        "NoScalableResources",
        ("spec.scalableResourceSelector matches no MachineDeployment", "karpenter-member"),
    ),
    (
        "matches-only-a-broken-resource",
        {"scalableResourceSelector": {"matchLabels": {"malformed": "yes"}}},
        {},
        "NoUsableScalableResources",
        ("MachineDeployment default/broken", "cpu='x'"),
    ),
    (
        "key-invalid",
        {"scalableResourceSelector": {"matchLabels": {"bad key": "a"}}},
        {},
        "InvalidConfiguration",
        ("spec.scalableResourceSelector: matchLabels[bad key]: key 'bad key'",),
    ),
    (
        "value-invalid",
        {"scalableResourceSelector": {"matchLabels": {"pool": "bad value!"}}},
        {},
        "InvalidConfiguration",
        ("matchLabels[pool]: value 'bad value!'",),
    ),
    (
        "expression-value-invalid",
        {
            "scalableResourceSelector": {
                "matchExpressions": [{"key": "pool", "operator": "In", "values": ["a b"]}]
            }
        },
        {},
        "InvalidConfiguration",
        ("matchExpressions[0]: value 'a b'",),
    ),
    (
        "kube-reserved-garbage",
        {"scalableResourceSelector": {}},
        {"karpenter.cluster.x-k8s.io/kube-reserved": "cpu=lots"},
        "InvalidConfiguration",
        ("annotation karpenter.cluster.x-k8s.io/kube-reserved", "'lots'"),
    ),
    (
        "system-reserved-not-pairs",
        {"scalableResourceSelector": {}},
        {"karpenter.cluster.x-k8s.io/system-reserved": "lots"},
        "InvalidConfiguration",
        ("annotation karpenter.cluster.x-k8s.io/system-reserved",),
    ),
    (
        "eviction-threshold-over-100",
        {"scalableResourceSelector": {}},
        {"karpenter.cluster.x-k8s.io/eviction-threshold": "memory=150%"},
        "InvalidConfiguration",
        ("annotation karpenter.cluster.x-k8s.io/eviction-threshold", "150%"),
    ),
]

# Specs the CRD admits but the NodeClass model refuses: the provisioner cannot read them and
# no plugin ever judges them, so the NodePool says why.
UNREADABLE: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [
    (
        "in-without-values",
        {
            "scalableResourceSelector": {
                "matchExpressions": [{"key": "pool", "operator": "In", "values": []}]
            }
        },
        ("operator 'In' needs values",),
    ),
    (
        "exists-with-values",
        {
            "scalableResourceSelector": {
                "matchExpressions": [{"key": "pool", "operator": "Exists", "values": ["a"]}]
            }
        },
        ("operator 'Exists' takes no values",),
    ),
]


def _world_with(spec: dict[str, Any], annotations: dict[str, str]) -> World:
    world = World()
    world.scalable(
        "MachineDeployment", "broken", annotations={CA + "cpu": "x"}, labels={"malformed": "yes"}
    )
    world.nodeclass(OTHER, spec, annotations)
    world.nodepool("bad", {"nodeClassRef": {**NODECLASS_REF, "name": OTHER}})
    world.deploy("pinned", 2, node_selector={wellknown.LABEL_NODEPOOL: "bad"})
    world.deploy()
    world.run()
    return world


@pytest.mark.parametrize(
    ("spec", "annotations", "reason", "words"),
    [pytest.param(s, a, r, w, id=case) for case, s, a, r, w in NOT_READY],
)
def test_a_nodeclass_that_offers_nothing_says_why_and_the_others_run(
    spec: dict[str, Any], annotations: dict[str, str], reason: str, words: tuple[str, ...]
) -> None:
    world = _world_with(spec, annotations)

    ready = world.nodeclass_ready(OTHER)
    assert (ready["status"], ready["reason"]) == ("False", reason), ready
    assert all(word in ready["message"] for word in words), ready["message"]
    event = [e for e in world.events() if e.kind == "ClusterAPINodeClass" and e.name == OTHER]
    assert event, "\n".join(map(str, world.events()))
    assert event[0].type == "Warning"
    assert all(word in "\n".join(e.message for e in event) for word in words)
    pool = world.nodepool_condition("bad", "NodeClassReady")
    assert pool["status"] == "False"
    assert f"ClusterAPINodeClass {OTHER}" in pool["message"]
    assert world.nodepool_condition(NODEPOOL)["status"] == "True"
    assert world.pending("pinned")
    world.assert_good_resource_served()


@pytest.mark.parametrize(
    ("spec", "words"), [pytest.param(s, w, id=case) for case, s, w in UNREADABLE]
)
def test_a_nodeclass_the_controller_cannot_read_makes_its_nodepool_say_so(
    spec: dict[str, Any], words: tuple[str, ...]
) -> None:
    world = _world_with(spec, {})

    pool = world.nodepool_condition("bad", "NodeClassReady")
    assert (pool["status"], pool["reason"]) == ("False", "NodeClassInvalid"), pool
    assert f"ClusterAPINodeClass {OTHER}" in pool["message"]
    assert all(word in pool["message"] for word in words), pool["message"]
    assert world.nodepool_condition("bad")["status"] == "False"
    event = world.event_about(f"invalid ClusterAPINodeClass {OTHER}", *words)
    assert (event.kind, event.name, event.type) == ("NodePool", "bad", "Warning")
    world.assert_good_resource_served()


@pytest.mark.parametrize(
    "selector",
    [
        pytest.param({}, id="empty-selector"),
        pytest.param(None, id="no-selector"),
        pytest.param(
            {"matchExpressions": [{"key": "pool", "operator": "DoesNotExist"}]}, id="does-not-exist"
        ),
    ],
)
def test_a_nodeclass_selecting_everything_shares_the_resources_without_harm(
    selector: dict[str, Any] | None,
) -> None:
    """Selecting every opted-in resource (the catalog's too, which its own NodeClass selects) is
    allowed: both NodePools launch from the same MachineDeployment, each NodeClaim binding its
    own Machine, and the invariants hold."""
    spec = {} if selector is None else {"scalableResourceSelector": selector}
    world = _world_with(spec, {})
    world.run(300)

    ready = world.nodeclass_ready(OTHER)
    assert ready["status"] == "True", ready
    assert "left out:\n- MachineDeployment default/broken" in ready["message"]
    assert len(world.running("pinned")) == 2
    world.assert_good_resource_served()
    assert world.violations() == []
