"""Any string in any scale-from-zero, price or size annotation: the inventory never fails, the
good resource next to it is always offered, and the bad one is either a node shape a real node
could have or left out with a message that names it and an annotation it carries.

The operator-level cases (``test_scale_from_zero``) pin the exact words for the malformed
values people write; this explores the values nobody thought of, through the same inventory
and Ready condition the operator writes (``build_inventory``, ``ready_condition``).
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.kube.resources import MACHINE_DEPLOYMENTS
from karpenter_capi.plugins.generic_capi.inventory import build_inventory
from karpenter_capi.plugins.generic_capi.nodeclass_status import ready_condition
from karpenter_capi.plugins.generic_capi.shape import (
    MAX_CPU_CORES,
    MAX_MEMORY_BYTES,
    MIN_MEMORY_BYTES,
    PRICE_ANNOTATION,
)

CA = wellknown.CAPACITY_ANNOTATION_PREFIX
KEYS = [
    CA + "cpu",
    CA + "memory",
    CA + "ephemeral-disk",
    CA + "maxPods",
    CA + "gpu-count",
    CA + "gpu-type",
    CA + "labels",
    CA + "taints",
    PRICE_ANNOTATION,
    wellknown.ANNOTATION_AUTOSCALER_MIN_SIZE,
    wellknown.ANNOTATION_AUTOSCALER_MAX_SIZE,
]
GOOD = {CA + "cpu": "2", CA + "memory": "8Gi", PRICE_ANNOTATION: "0.1"}
EXAMPLES = 300

# Strings that look like what people type, and strings that do not.
_number = st.one_of(
    st.integers(-(10**30), 10**30).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.decimals(allow_nan=False, allow_infinity=False).map(str),
)
_unit = st.sampled_from(
    [
        "",
        "m",
        "k",
        "M",
        "G",
        "T",
        "P",
        "E",
        "Ki",
        "Mi",
        "Gi",
        "Ti",
        "Pi",
        "Ei",
        "GB",
        "gi",
        "e3",
        " ",
    ]
)
_quantityish = st.builds(lambda n, u: f"{n}{u}", _number, _unit)
_pairs = st.lists(st.tuples(st.text(max_size=12), st.text(max_size=12)), max_size=4).map(
    lambda items: ",".join(f"{k}={v}" for k, v in items)
)
_taints = st.lists(
    st.tuples(
        st.text(max_size=8),
        st.text(max_size=8),
        st.sampled_from(["NoSchedule", "NoExecute", "PreferNoSchedule", "Maybe", ""]),
    ),
    max_size=4,
).map(lambda items: ",".join(f"{k}={v}:{e}" for k, v, e in items))
VALUES = st.one_of(_quantityish, _pairs, _taints, st.text(max_size=30))


def _deployment(name: str, annotations: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "MachineDeployment",
        "metadata": {"name": name, "namespace": "default", "annotations": annotations},
        "spec": {"replicas": 0, "template": {"metadata": {}, "spec": {}}},
    }


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.dictionaries(st.sampled_from(KEYS), VALUES, min_size=1, max_size=4))
def test_any_annotation_value_is_either_a_plausible_node_or_named(
    garbage: dict[str, str],
) -> None:
    resource = MACHINE_DEPLOYMENTS.with_version("v1beta2")
    bad_annotations = {**GOOD, CA + "labels": "node.kubernetes.io/instance-type=bad"}
    bad_annotations.update(garbage)
    inventory = build_inventory(
        [
            (
                resource,
                _deployment(
                    "good", {**GOOD, CA + "labels": "node.kubernetes.io/instance-type=good"}
                ),
            ),
            (resource, _deployment("bad", bad_annotations)),
        ]
    )

    assert "good" in [r.name for r in inventory.resources]
    status, _, message = ready_condition(inventory)
    assert status == "True"
    bad = [r for r in inventory.resources if r.name == "bad"]
    if bad:
        capacity = bad[0].shape.capacity
        assert 0 < capacity.milli("cpu") <= MAX_CPU_CORES * 1000
        assert MIN_MEMORY_BYTES * 1000 <= capacity.milli("memory") <= MAX_MEMORY_BYTES * 1000
        assert capacity.milli("pods") >= 1000
        assert 0 <= bad[0].price < float("inf")
        return
    [problem] = [p for p in inventory.problems if p.name == "bad"]
    assert f"- MachineDeployment default/bad: {problem.message}" in message
    assert problem.reason in ("InvalidShape", "NoShape", "ShapeMismatch")
    # The message points at what to fix: an annotation the resource carries, or (for a shape
    # that repeats another type's name differently) the type.
    named = [key for key in bad_annotations if key in problem.message]
    assert named or "instance type bad" in problem.message, problem.message
