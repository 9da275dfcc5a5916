"""The interim packer: cheapest nodes that hold the pods, and honest reasons when none can."""

from __future__ import annotations

from typing import Any

import pytest

from karpenter_capi.core.instancetype import InstanceType, Offering
from karpenter_capi.core.provisioning.greedy import GreedyPacker, PlannedNode, PoolTemplate
from karpenter_capi.core.scheduling.resources import ResourceList
from karpenter_capi.core.scheduling.taints import Taint


def _pod(name: str, cpu: str, memory: str = "1Gi", **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "containers": [
                {"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
            ],
            **spec,
        },
    }


def _type(
    name: str,
    cpu: str,
    memory: str,
    price: float,
    *,
    zone: str = "a",
    arch: str = "amd64",
    taints: tuple[Taint, ...] = (),
    available: bool = True,
) -> InstanceType:
    return InstanceType(
        name=name,
        capacity=ResourceList.parse({"cpu": cpu, "memory": memory, "pods": "110"}),
        offerings=(
            Offering(zone=zone, capacity_type="on-demand", price=price, available=available),
        ),
        requirements={"kubernetes.io/arch": frozenset({arch})},
        taints=taints,
    )


POOL = PoolTemplate(name="default", labels={}, taints=(), requirements=())
SMALL = _type("small", "2", "8Gi", 0.10)
LARGE = _type("large", "8", "32Gi", 0.30)


def test_many_small_pods_go_to_the_cheaper_per_pod_larger_node() -> None:
    pods = [_pod(f"web-{i}", "500m") for i in range(14)]
    result = GreedyPacker(POOL, [SMALL, LARGE]).pack(pods)
    assert [n.instance_type.name for n in result.nodes] == ["large"]
    assert len(result.nodes[0].pods) == 14
    assert not result.unplaced


def test_a_lone_small_pod_gets_the_cheapest_node_that_fits() -> None:
    result = GreedyPacker(POOL, [LARGE, SMALL]).pack([_pod("one", "100m")])
    assert [n.instance_type.name for n in result.nodes] == ["small"]
    assert [it.name for it in result.nodes[0].alternatives] == ["small", "large"]


def test_pod_larger_than_every_type_is_unplaced_with_reason() -> None:
    result = GreedyPacker(POOL, [SMALL, LARGE]).pack([_pod("huge", "64")])
    assert not result.nodes
    assert "requests exceed" in result.unplaced[0].reason


def test_node_selector_restricts_the_instance_types() -> None:
    arm = _type("arm", "4", "16Gi", 0.5, arch="arm64")
    result = GreedyPacker(POOL, [SMALL, arm]).pack(
        [_pod("a", "1", nodeSelector={"kubernetes.io/arch": "arm64"})]
    )
    assert [n.instance_type.name for n in result.nodes] == ["arm"]


def test_instance_type_taints_need_tolerations() -> None:
    gpu = _type("gpu", "8", "32Gi", 0.01, taints=(Taint("nvidia.com/gpu", "NoSchedule"),))
    packer = GreedyPacker(POOL, [gpu, LARGE])
    plain = packer.pack([_pod("plain", "1")])
    assert [n.instance_type.name for n in plain.nodes] == ["large"]
    tolerant = packer.pack(
        [_pod("t", "1", tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}])]
    )
    assert [n.instance_type.name for n in tolerant.nodes] == ["gpu"]


def test_nodepool_requirements_and_unavailable_offerings_are_respected() -> None:
    pool = PoolTemplate(
        "p", {}, (), ({"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]},)
    )
    result = GreedyPacker(pool, [SMALL, LARGE]).pack([_pod("a", "1")])
    assert not result.nodes
    assert result.unplaced[0].reason == "no available offering in the NodePool"
    sold_out = _type("small", "2", "8Gi", 0.01, available=False)
    result = GreedyPacker(POOL, [sold_out, LARGE]).pack([_pod("a", "1")])
    assert [n.instance_type.name for n in result.nodes] == ["large"]


def test_pods_fill_in_flight_claims_before_new_nodes() -> None:
    claim = PlannedNode(LARGE, LARGE.offerings[0], claim_name="default-abcde")
    result = GreedyPacker(POOL, [SMALL, LARGE]).pack(
        [_pod(f"p{i}", "1") for i in range(3)], existing=[claim]
    )
    assert [n.claim_name for n in result.nodes] == ["default-abcde"]
    assert len(result.nodes[0].pods) == 3


def test_a_pod_keeps_the_in_flight_claim_it_was_nominated_to() -> None:
    # Two launching arm64 claims with room for one 3-CPU pod each; the bigger pods come
    # first in the queue and could take both, but the arm-only pod was nominated to the
    # second, so it goes there and only one of the others needs a new node.
    arm = _type("arm", "4", "16Gi", 0.2, arch="arm64")
    first = PlannedNode(arm, arm.offerings[0], claim_name="a-first")
    second = PlannedNode(
        arm, arm.offerings[0], claim_name="b-second", nominated=frozenset({"default/arm-only"})
    )
    pods = [
        _pod("big-1", "3500m"),
        _pod("big-2", "3500m"),
        _pod("arm-only", "3", nodeSelector={"kubernetes.io/arch": "arm64"}),
    ]
    result = GreedyPacker(POOL, [arm, LARGE]).pack(pods, existing=[first, second])
    assert not result.unplaced
    placement = {
        pod["metadata"]["name"]: node.claim_name for node in result.nodes for pod in node.pods
    }
    assert placement["arm-only"] == "b-second"
    assert placement["big-1"] == "a-first"
    assert placement["big-2"] is None  # a new node


@pytest.mark.parametrize(
    ("operator", "values", "placed"),
    [("Gt", ["4"], True), ("Lt", ["4"], False), ("In", ["x"], False), ("DoesNotExist", [], False)],
)
def test_required_node_affinity_operators(operator: str, values: list[str], placed: bool) -> None:
    cores = InstanceType(
        name="big",
        capacity=ResourceList.parse({"cpu": "8", "memory": "8Gi", "pods": "10"}),
        offerings=(Offering("a", "on-demand", 1.0),),
        requirements={"example.com/cores": frozenset({"8"})},
    )
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "example.com/cores", "operator": operator, "values": values}
                        ]
                    }
                ]
            }
        }
    }
    result = GreedyPacker(POOL, [cores]).pack([_pod("a", "1", affinity=affinity)])
    assert bool(result.nodes) is placed
