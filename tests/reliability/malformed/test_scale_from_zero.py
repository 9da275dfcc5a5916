"""Malformed scale-from-zero, price and size annotations on MachineDeployments, MachineSets and
MachinePools, under the real operator next to a good MachineDeployment.

Each case: the NodeClass's Ready condition lists the bad resource as left out, naming it and the
annotation and value at fault, a Warning Event on the NodeClass says the same once, the bad
resource is never scaled, and the pods that fit the good resource run in the same pass.
"""

from __future__ import annotations

import pytest

from .world import CA, KINDS, NODECLASS, PRICE, World

MIN_SIZE = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size"
MAX_SIZE = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size"
GPU = {CA + "gpu-type": "nvidia.com/gpu"}

# (id, annotations merged into the good resource's, words the user reads)
CASES: list[tuple[str, dict[str, str | None], tuple[str, ...]]] = [
    # garbage
    ("cpu-word", {CA + "cpu": "two"}, (CA + "cpu='two'", "not a valid Kubernetes quantity")),
    ("cpu-empty", {CA + "cpu": ""}, (CA + "cpu=''", "at least one digit")),
    ("cpu-spaces", {CA + "cpu": "2 cores"}, ("'2 cores'", "not a valid Kubernetes quantity")),
    ("cpu-json", {CA + "cpu": '{"cores": 2}'}, ("not a valid Kubernetes quantity",)),
    ("memory-word", {CA + "memory": "lots"}, (CA + "memory='lots'", "not a valid")),
    ("disk-word", {CA + "ephemeral-disk": "big"}, (CA + "ephemeral-disk='big'", "not a valid")),
    ("pods-word", {CA + "maxPods": "many"}, (CA + "maxPods='many'", "not a valid")),
    ("gpu-count-word", {CA + "gpu-count": "one", **GPU}, (CA + "gpu-count='one'",)),
    ("price-word", {PRICE: "cheap"}, (PRICE + "='cheap'", "not a decimal number")),
    ("price-currency", {PRICE: "$0.10"}, (PRICE + "='$0.10'", "not a decimal number")),
    ("price-comma", {PRICE: "0,10"}, (PRICE + "='0,10'", "not a decimal number")),
    ("max-size-word", {MAX_SIZE: "ten"}, (MAX_SIZE + "='ten'", "not an integer")),
    ("min-size-word", {MIN_SIZE: "x"}, (MIN_SIZE + "='x'", "not an integer")),
    # negative
    ("cpu-negative", {CA + "cpu": "-2"}, (CA + "cpu='-2'", "must not be negative")),
    ("memory-negative", {CA + "memory": "-1Gi"}, (CA + "memory='-1Gi'", "must not be negative")),
    ("pods-negative", {CA + "maxPods": "-1"}, (CA + "maxPods='-1'", "must not be negative")),
    ("gpu-negative", {CA + "gpu-count": "-1", **GPU}, ("gpu-count='-1'", "must not be negative")),
    ("disk-negative", {CA + "ephemeral-disk": "-5Gi"}, ("'-5Gi'", "must not be negative")),
    ("price-negative", {PRICE: "-0.1"}, (PRICE + "='-0.1'", "finite price >= 0")),
    ("max-size-negative", {MAX_SIZE: "-3"}, (MAX_SIZE + "='-3'", "must not be negative")),
    ("min-above-max", {MIN_SIZE: "5", MAX_SIZE: "2"}, (MIN_SIZE + "=5 is above", "=2")),
    # zero and not a number
    ("cpu-zero", {CA + "cpu": "0"}, (CA + "cpu='0'", "must be greater than zero")),
    ("memory-zero", {CA + "memory": "0Gi"}, (CA + "memory='0Gi'", "must be greater than zero")),
    ("pods-zero", {CA + "maxPods": "0"}, (CA + "maxPods='0'", "holds no pods")),
    ("price-nan", {PRICE: "nan"}, (PRICE + "='nan'", "finite price")),
    ("price-inf", {PRICE: "inf"}, (PRICE + "='inf'", "finite price")),
    # huge
    ("cpu-huge", {CA + "cpu": "1e12"}, (CA + "cpu='1e12'", "more than 16384 cores")),
    ("cpu-exa", {CA + "cpu": "999999Ei"}, (CA + "cpu='999999Ei'", "is not a node")),
    ("memory-huge", {CA + "memory": "1e30"}, (CA + "memory='1e30'", "more than 1Pi")),
    ("pods-huge", {CA + "maxPods": "1e9"}, (CA + "maxPods='1e9'", "more than 100000")),
    ("gpu-huge", {CA + "gpu-count": "1e7", **GPU}, ("gpu-count='1e7'", "more than 100000")),
    ("price-huge", {PRICE: "1e308"}, (PRICE + "='1e308'", "not the price of a node")),
    # wrong units
    ("memory-bytes", {CA + "memory": "8"}, (CA + "memory='8'", "a unit missing")),
    ("memory-gb", {CA + "memory": "8GB"}, (CA + "memory='8GB'", "not a valid")),
    ("memory-lowercase", {CA + "memory": "8gi"}, (CA + "memory='8gi'", "not a valid")),
    ("memory-milli", {CA + "memory": "8000m"}, (CA + "memory='8000m'", "a unit missing")),
    ("pods-fraction", {CA + "maxPods": "1.5"}, (CA + "maxPods='1.5'", "whole number")),
    ("gpu-fraction", {CA + "gpu-count": "500m", **GPU}, ("gpu-count='500m'", "whole number")),
    # missing or inconsistent
    ("memory-missing", {CA + "memory": None}, ("no memory capacity", CA + "memory is required")),
    ("cpu-missing", {CA + "cpu": None}, ("no cpu capacity", CA + "cpu is required")),
    ("gpu-without-type", {CA + "gpu-count": "1"}, ("gpu-count needs", CA + "gpu-type")),
    ("gpu-type-cpu", {CA + "gpu-count": "4", CA + "gpu-type": "cpu"}, ("gpu-type='cpu'",)),
    (
        "gpu-type-reserved",
        {CA + "gpu-count": "1", CA + "gpu-type": "kubernetes.io/gpu"},
        ("gpu-type='kubernetes.io/gpu'", "reserved"),
    ),
    ("gpu-type-garbage", {CA + "gpu-count": "1", CA + "gpu-type": "a gpu!"}, ("not a resource",)),
    # labels
    ("labels-no-value", {CA + "labels": "tier"}, (CA + "labels: 'tier' is not key=value",)),
    ("labels-no-key", {CA + "labels": "=gold"}, ("'=gold' is not key=value",)),
    ("labels-duplicate", {CA + "labels": "tier=1,tier=2"}, ("label tier is given twice",)),
    (
        "labels-duplicate-arch",
        {CA + "labels": "kubernetes.io/arch=amd64,kubernetes.io/arch=arm64"},
        ("label kubernetes.io/arch is given twice", "'amd64' and 'arm64'"),
    ),
    ("labels-bad-key", {CA + "labels": "team name=a"}, ("label 'team name'", "invalid key")),
    ("labels-bad-value", {CA + "labels": "tier=gold!"}, ("label 'tier'", "invalid value")),
    ("labels-long-value", {CA + "labels": "tier=" + "g" * 64}, ("no more than 63 characters",)),
    ("labels-nodepool", {CA + "labels": "karpenter.sh/nodepool=x"}, ("set by Karpenter",)),
    ("labels-restricted", {CA + "labels": "karpenter.sh/team=x"}, ("is not allowed",)),
    (
        "labels-capacity-type",
        {CA + "labels": "karpenter.sh/capacity-type=cheap"},
        ("karpenter.sh/capacity-type='cheap'", "is not one of"),
    ),
    # taints
    ("taints-bad-effect", {CA + "taints": "a=b:Sometimes"}, ("effect 'Sometimes'",)),
    ("taints-no-effect", {CA + "taints": "a=b"}, ("taint 'a=b': expected key[=value]:Effect",)),
    ("taints-no-key", {CA + "taints": "=b:NoSchedule"}, ("a taint needs a key",)),
    ("taints-bad-key", {CA + "taints": "gpu only:NoSchedule"}, ("key 'gpu only'",)),
    ("taints-bad-value", {CA + "taints": "a=b c:NoSchedule"}, ("value 'b c'",)),
    (
        "taints-duplicate",
        {CA + "taints": "a=b:NoSchedule,a=c:NoSchedule"},
        ("taint a:NoSchedule is given twice", "a=b:NoSchedule and a=c:NoSchedule"),
    ),
]

# The other kinds go through the same code; a sample of the categories proves it.
OTHER_KINDS = {
    "cpu-word",
    "memory-negative",
    "cpu-huge",
    "memory-bytes",
    "labels-duplicate",
    "taints-duplicate",
    "price-word",
    "gpu-type-cpu",
}


def _params() -> list[object]:
    params: list[object] = []
    for kind in KINDS:
        for case_id, merged, words in CASES:
            if kind == "MachineDeployment" or case_id in OTHER_KINDS:
                params.append(pytest.param(kind, merged, words, id=f"{kind}-{case_id}"))
    return params


@pytest.mark.parametrize(("kind", "annotations", "words"), _params())
def test_a_malformed_annotation_is_named_and_the_good_resource_still_launches(
    kind: str, annotations: dict[str, str | None], words: tuple[str, ...]
) -> None:
    world = World()
    world.scalable(kind, "bad", annotations=annotations)
    world.deploy()
    world.run()

    subject = f"{kind} default/bad"
    ready = world.nodeclass_ready()
    assert ready["status"] == "True", ready
    listed = ready["message"].split("left out:\n", 1)[-1]
    line = next((x for x in listed.splitlines() if subject in x), None)
    assert line is not None, ready["message"]
    assert all(word in line for word in words), line
    event = world.event_about(subject, *words)
    assert (event.kind, event.name, event.type) == ("ClusterAPINodeClass", NODECLASS, "Warning")
    assert event.reason in ("InvalidShape", "NoShape")
    assert world.replicas("bad", kind) == 0
    world.assert_good_resource_served()
