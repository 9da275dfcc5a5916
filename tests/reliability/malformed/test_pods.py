"""Pods no node can hold, or whose spec cannot be read, next to pods that fit.

Each bad pod gets a FailedScheduling Event naming what it asks for that no instance type has
(the resource, how much, and the most any type allocates) or the field of its spec that cannot
be read; the good Deployment's pods are provisioned for in the same round and run. Specs the
API server would refuse (a malformed quantity, an unknown operator) can still reach the
controller from clusters without validation; one of them must not stop provisioning.
"""

from __future__ import annotations

from typing import Any

import pytest

from karpenter_capi.core.kube.resources import PODS

from .world import NAMESPACE, World


def _pod(requests: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    resources = {"requests": requests} if requests is not None else {}
    return {"containers": [{"name": "app", "image": "pause", "resources": resources}], **spec}


def _required(*expressions: dict[str, Any]) -> dict[str, Any]:
    terms = [{"matchExpressions": list(expressions)}]
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
        }
    }


def _spread(**constraint: Any) -> list[dict[str, Any]]:
    return [
        {
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "bad"}},
            **constraint,
        }
    ]


SMALL = {"cpu": "100m"}

UNSCHEDULABLE: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [
    # extended resources no type has
    (
        "fpga",
        _pod({**SMALL, "example.com/fpga": "1"}),
        ("example.com/fpga 1", "no instance type has example.com/fpga"),
    ),
    (
        "gpu",
        _pod({**SMALL, "nvidia.com/gpu": "1"}),
        ("nvidia.com/gpu 1", "no instance type has nvidia.com/gpu"),
    ),
    (
        "hugepages",
        _pod({**SMALL, "hugepages-2Mi": "1Gi"}),
        ("hugepages-2Mi 1Gi", "no instance type has"),
    ),
    # enormous requests
    ("cpu-huge", _pod({"cpu": "10000"}), ("cpu 10k", "the most any allocates is 2")),
    ("memory-huge", _pod({"memory": "1Pi"}), ("memory 1Pi", "the most any allocates is")),
    ("cpu-just-over", _pod({"cpu": "2100m"}), ("cpu 2100m", "the most any allocates is 2")),
    ("storage-huge", _pod({**SMALL, "ephemeral-storage": "100Ti"}), ("ephemeral-storage 100Ti",)),
    # constraints no node meets
    (
        "selector-unknown-label",
        _pod(SMALL, nodeSelector={"example.com/team": "x"}),
        ("label example.com/team is not defined by the NodePool",),
    ),
    (
        "selector-arm",
        _pod(SMALL, nodeSelector={"kubernetes.io/arch": "arm64"}),
        ("kubernetes.io/arch In [arm64]",),
    ),
    (
        "affinity-in-nothing",
        _pod(
            SMALL, affinity=_required({"key": "kubernetes.io/arch", "operator": "In", "values": []})
        ),
        ("kubernetes.io/arch DoesNotExist conflicts",),
    ),
    # a node that does not exist: a new node cannot be given that name (issue 24)
    (
        "selector-hostname-missing",
        _pod(SMALL, nodeSelector={"kubernetes.io/hostname": "no-such-node"}),
        ("kubernetes.io/hostname In [no-such-node]", "no node of that name exists"),
    ),
    (
        "affinity-hostname-missing",
        _pod(
            SMALL,
            affinity=_required(
                {"key": "kubernetes.io/hostname", "operator": "In", "values": ["gone-1", "gone-2"]}
            ),
        ),
        ("kubernetes.io/hostname In [gone-1, gone-2]", "no node of that name exists"),
    ),
    (
        "affinity-arch-nowhere",
        _pod(
            SMALL,
            affinity=_required(
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["s390x"]}
            ),
        ),
        ("kubernetes.io/arch In [s390x]",),
    ),
    (
        "zone-nowhere",
        _pod(SMALL, nodeSelector={"topology.kubernetes.io/zone": "zone-z"}),
        ("zone-z",),
    ),
    # specs the API server would refuse
    ("quantity-garbage", _pod({"cpu": "lots"}), ("cannot read its spec", "'lots'")),
    ("quantity-negative", _pod({"cpu": "-1"}), ("requests of cpu must not be negative",)),
    (
        "toleration-effect",
        _pod(SMALL, tolerations=[{"key": "a", "operator": "Exists", "effect": "Sometimes"}]),
        ("tolerations[0]: effect 'Sometimes'",),
    ),
    (
        "toleration-operator",
        _pod(SMALL, tolerations=[{"key": "a", "operator": "Maybe", "value": "x"}]),
        ("tolerations[0]: operator 'Maybe' is not Exists or Equal",),
    ),
    (
        "tolerations-not-a-list",
        _pod(SMALL, tolerations={"key": "a"}),
        ("tolerations is not a list",),
    ),
    ("tolerations-of-strings", _pod(SMALL, tolerations=["a"]), ("tolerations is not a list",)),
    (
        "affinity-gt-word",
        _pod(
            SMALL, affinity=_required({"key": "example.com/n", "operator": "Gt", "values": ["abc"]})
        ),
        ("cannot read its spec", "Gt 'abc': value must be an integer"),
    ),
    (
        "affinity-operator",
        _pod(SMALL, affinity=_required({"key": "a", "operator": "Like", "values": ["x"]})),
        ("cannot read its spec", "operator 'Like'"),
    ),
    (
        "affinity-terms-not-a-list",
        _pod(
            SMALL,
            affinity={
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": "all"}
                }
            },
        ),
        ("cannot read its spec",),
    ),
    (
        "spread-skew-zero",
        _pod(SMALL, topologySpreadConstraints=_spread(maxSkew=0)),
        ("maxSkew must be at least 1",),
    ),
    (
        "spread-when-unknown",
        _pod(SMALL, topologySpreadConstraints=_spread(whenUnsatisfiable="Sometimes")),
        ("whenUnsatisfiable 'Sometimes' is unknown",),
    ),
    (
        "spread-no-key",
        _pod(SMALL, topologySpreadConstraints=_spread(topologyKey="")),
        ("topologyKey is required",),
    ),
    (
        "spread-skew-word",
        _pod(SMALL, topologySpreadConstraints=_spread(maxSkew="one")),
        ("cannot read its spec",),
    ),
]


def _pending(world: World, name: str, spec: dict[str, Any]) -> None:
    """A pod as kube-scheduler leaves one it could not place: Unschedulable."""
    world.pod(name, spec)
    world.server.patch(
        PODS,
        name,
        {
            "status": {
                "phase": "Pending",
                "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
                ],
            }
        },
        NAMESPACE,
        subresource="status",
    )


@pytest.mark.parametrize(
    ("spec", "words"), [pytest.param(spec, words, id=case) for case, spec, words in UNSCHEDULABLE]
)
def test_a_pod_no_node_can_hold_is_told_why_and_the_others_still_get_nodes(
    spec: dict[str, Any], words: tuple[str, ...]
) -> None:
    world = World()
    _pending(world, "bad", spec)
    world.deploy()
    world.run()

    events = [e for e in world.events("FailedScheduling") if e.kind == "Pod" and e.name == "bad"]
    assert events, "\n".join(map(str, world.events()))
    assert all(word in events[-1].message for word in words), events[-1].message
    assert events[-1].type == "Warning"
    assert not [c for c in world.nodeclaims() if "bad" in str(c["spec"])]
    # One NodeClaim for the good pods, none launched (and launched again) for the bad one.
    assert len(world.nodeclaims()) == 1, [c["metadata"]["name"] for c in world.nodeclaims()]
    world.assert_good_resource_served()


@pytest.mark.parametrize(
    "requests",
    [
        pytest.param({"cpu": "0", "memory": "0"}, id="zero"),
        pytest.param(None, id="none"),
        pytest.param({}, id="empty"),
        pytest.param({"cpu": "1m"}, id="one-millicore"),
    ],
)
def test_a_pod_asking_for_nothing_gets_a_node_like_any_other(
    requests: dict[str, str] | None,
) -> None:
    world = World()
    _pending(world, "tiny", _pod(requests))
    world.deploy()
    world.run()

    assert world.running("tiny") == ["tiny"]
    assert not world.events("FailedScheduling")
    world.assert_good_resource_served()


def test_a_pod_whose_volume_claim_does_not_exist_is_told_so_and_gets_no_node() -> None:
    """kube-scheduler leaves it pending (``persistentvolumeclaim "data" not found``) whatever
    nodes exist; a node launched for it would stay empty and be launched again (issue 24)."""
    world = World()
    volumes = [
        {"name": "cache", "emptyDir": {}},
        {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
    ]
    _pending(world, "bad", _pod(SMALL, volumes=volumes))
    world.deploy()
    world.run()

    assert world.pending("bad") == ["bad"]
    events = [e for e in world.events("FailedScheduling") if e.kind == "Pod" and e.name == "bad"]
    assert events, "\n".join(map(str, world.events()))
    message = events[-1].message
    assert 'persistentvolumeclaim "data" not found' in message, message
    assert "spec.volumes[1].persistentVolumeClaim.claimName" in message, message
    assert not [e for e in world.events("Nominated") if e.name == "bad"]
    assert len(world.nodeclaims()) == 1
    world.assert_good_resource_served()


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param(_pod(SMALL, nodeSelector={"kubernetes.io/arch": "arm64"}), id="selector"),
        pytest.param(
            _pod(
                SMALL,
                affinity=_required(
                    {"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64", "s390x"]}
                ),
            ),
            id="affinity",
        ),
    ],
)
def test_an_architecture_no_nodepool_offers_is_named_for_every_nodepool(
    spec: dict[str, Any],
) -> None:
    """Several NodePools (one weighted, one pinned to amd64 itself): the Event names each."""
    world = World()
    world.nodepool(
        "amd",
        {"requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]},
        weight=10,
    )
    world.nodepool("spare", {})
    _pending(world, "bad", spec)
    world.deploy()
    world.run()

    events = [e for e in world.events("FailedScheduling") if e.name == "bad"]
    assert events, "\n".join(map(str, world.events()))
    message = events[-1].message
    for pool in ("amd", "catalog", "spare"):
        assert f"NodePool {pool}: " in message, message
    assert "kubernetes.io/arch In [" in message, message
    assert "arm64" in message, message
    assert len(world.nodeclaims()) == 1
    world.assert_good_resource_served()
