"""The words of the refusals no NodePool can lift: a pod pinned to named nodes, a NodePool no
instance type meets, a claim kube-scheduler says does not exist."""

from __future__ import annotations

from karpenter_capi.core.instancetype import InstanceType, Offering
from karpenter_capi.core.scheduling.nofit import (
    named_node_reason,
    unsatisfiable_reason,
)
from karpenter_capi.core.scheduling.podspec import missing_claim_reason
from karpenter_capi.core.values.requirements import Requirement, Requirements
from karpenter_capi.core.values.resources import ResourceList

HOST = "kubernetes.io/hostname"


def _type(*, available: bool = True) -> InstanceType:
    return InstanceType(
        name="m",
        capacity=ResourceList.parse({"cpu": 2, "memory": "8Gi", "pods": 110}),
        offerings=(Offering("zone-a", "on-demand", 0.1, available=available),),
        requirements={"kubernetes.io/arch": frozenset({"amd64"})},
    )


def test_a_hostname_a_new_node_may_have_is_no_refusal() -> None:
    assert named_node_reason(Requirement.new(HOST, "NotIn", ["a"]), set()) is None
    assert named_node_reason(Requirement.new(HOST, "Exists", []), set()) is None


def test_a_hostname_no_node_has_is_named_with_the_fix() -> None:
    why = named_node_reason(Requirement.new(HOST, "In", ["ghost"]), {"node-1"})
    assert why is not None
    assert why.startswith("kubernetes.io/hostname In [ghost]: no node of that name exists")
    assert "remove the kubernetes.io/hostname selector or affinity" in why


def test_a_hostname_of_an_existing_node_says_only_that_node_can_take_it() -> None:
    why = named_node_reason(Requirement.new(HOST, "In", ["node-1"]), {"node-1"})
    assert why is not None
    assert "only the node(s) it names can take it" in why


def test_a_nodepool_is_unsatisfiable_only_when_no_type_could_ever_meet_it() -> None:
    arm = Requirements.from_dicts(
        [{"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}]
    )
    why = unsatisfiable_reason([_type()], arm)
    assert why is not None
    assert "kubernetes.io/arch In [arm64]" in why
    assert unsatisfiable_reason([_type()], Requirements.from_dicts([])) is None
    # Full for now (a maximum size reached) is not impossible.
    assert unsatisfiable_reason([_type(available=False)], Requirements.from_dicts([])) is None


def test_a_missing_claim_is_read_from_kube_schedulers_words_and_names_the_volume() -> None:
    pod = {
        "spec": {"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]},
        "status": {
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": '0/3 nodes are available: persistentvolumeclaim "data" not found.',
                }
            ]
        },
    }
    why = missing_claim_reason(pod)
    assert why is not None
    assert why.startswith('persistentvolumeclaim "data" not found')
    assert "spec.volumes[0].persistentVolumeClaim.claimName" in why
    assert missing_claim_reason({"spec": {}, "status": {}}) is None
