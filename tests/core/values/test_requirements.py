"""The requirements algebra: which nodes a requirement allows, and whether two sets can meet.

Every assertion is phrased as a question a user would ask of a pod and a NodePool: may a node
labelled so-and-so run this pod, can the NodePool launch a node this pod accepts at all.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from karpenter_capi.core.values.requirements import (
    Requirement,
    RequirementError,
    Requirements,
    node_selector_terms,
    preferred_node_terms,
)

ARCH = "kubernetes.io/arch"
ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
TEAM = "example.com/team"
GEN = "example.com/generation"


def req(key: str, operator: str, *values: str, min_values: int | None = None) -> Requirement:
    return Requirement.new(key, operator, values, min_values=min_values)


def reqs(*expressions: tuple[str, ...]) -> Requirements:
    """Requirements from ``(key, operator, *values)`` tuples."""
    return Requirements(req(key, op, *values) for key, op, *values in expressions)


# --- the eight operators ------------------------------------------------------------------------


def test_in_allows_only_the_listed_values() -> None:
    zones = req(ZONE, "In", "zone-a", "zone-b")
    assert zones.has("zone-a")
    assert zones.has("zone-b")
    assert not zones.has("zone-c")
    assert not zones.allows_absence()


def test_not_in_allows_anything_else_and_an_unlabelled_node() -> None:
    not_spot = req("karpenter.sh/capacity-type", "NotIn", "spot")
    assert not_spot.has("on-demand")
    assert not not_spot.has("spot")
    assert not_spot.allows_absence()


def test_exists_allows_any_value_but_requires_the_label() -> None:
    gpu = req("example.com/gpu", "Exists")
    assert gpu.has("a100")
    assert gpu.has("")
    assert not gpu.allows_absence()


def test_does_not_exist_allows_only_an_unlabelled_node() -> None:
    no_gpu = req("example.com/gpu", "DoesNotExist")
    assert not no_gpu.has("a100")
    assert no_gpu.allows_absence()
    assert no_gpu.is_empty()


def test_gt_and_lt_are_exclusive_integer_bounds() -> None:
    newer = req(GEN, "Gt", "5")
    assert newer.has("6")
    assert not newer.has("5")
    older = req(GEN, "Lt", "5")
    assert older.has("4")
    assert not older.has("5")
    assert older.has("-3")


def test_gte_and_lte_include_the_bound() -> None:
    at_least = req(GEN, "Gte", "5")
    assert at_least.has("5")
    assert not at_least.has("4")
    at_most = req(GEN, "Lte", "5")
    assert at_most.has("5")
    assert not at_most.has("6")


def test_a_bounded_requirement_rejects_non_integer_values_and_absence() -> None:
    newer = req(GEN, "Gt", "5")
    assert not newer.has("seven")
    assert not newer.has("6.5")
    assert not newer.allows_absence()


@pytest.mark.parametrize(
    ("operator", "values"),
    [("Gt", ["five"]), ("Lt", []), ("Gte", ["1", "2"]), ("Lte", ["1.5"])],
)
def test_a_bound_needs_exactly_one_integer(operator: str, values: list[str]) -> None:
    with pytest.raises(RequirementError, match=GEN):
        Requirement.new(GEN, operator, values)


def test_an_unknown_operator_is_rejected_by_name() -> None:
    with pytest.raises(RequirementError, match="Equals"):
        Requirement.from_dict({"key": ZONE, "operator": "Equals", "values": ["a"]})
    with pytest.raises(RequirementError, match="needs a key"):
        Requirement.from_dict({"operator": "Exists"})


# --- intersection -------------------------------------------------------------------------------


def test_in_meets_in_on_the_common_values() -> None:
    both = req(ZONE, "In", "a", "b").intersection(req(ZONE, "In", "b", "c"))
    assert both.has("b")
    assert not both.has("a")
    assert not both.has("c")
    assert req(ZONE, "In", "a").intersects(req(ZONE, "In", "b")) is False


def test_in_meets_not_in_on_what_is_not_excluded() -> None:
    left = req(ZONE, "In", "a", "b").intersection(req(ZONE, "NotIn", "a"))
    assert left.operator == "In"
    assert left.values == frozenset({"b"})
    assert req(ZONE, "In", "a").intersects(req(ZONE, "NotIn", "a")) is False


def test_two_complements_exclude_the_union() -> None:
    both = req(ZONE, "NotIn", "a").intersection(req(ZONE, "NotIn", "b"))
    assert not both.has("a")
    assert not both.has("b")
    assert both.has("c")
    assert both.allows_absence()


def test_exists_meets_in_on_the_in_values() -> None:
    assert req(ZONE, "Exists").intersection(req(ZONE, "In", "a")).values == frozenset({"a"})


def test_bounds_narrow_each_other() -> None:
    window = req(GEN, "Gt", "2").intersection(req(GEN, "Lt", "6"))
    assert [v for v in map(str, range(10)) if window.has(v)] == ["3", "4", "5"]
    assert window.count() == 3
    assert window.any_value() == "3"


def test_bounds_that_leave_no_integer_are_empty() -> None:
    assert req(GEN, "Gt", "4").intersection(req(GEN, "Lt", "5")).is_empty()
    assert req(GEN, "Gte", "5").intersection(req(GEN, "Lt", "5")).is_empty()
    assert not req(GEN, "Gte", "5").intersection(req(GEN, "Lte", "5")).is_empty()
    assert req(GEN, "Gt", "7").intersects(req(GEN, "Lt", "3")) is False


def test_bounds_filter_in_values() -> None:
    sizes = req(GEN, "In", "2", "4", "8", "large").intersection(req(GEN, "Gte", "4"))
    assert sorted(v for v in ("2", "4", "8", "large") if sizes.has(v)) == ["4", "8"]


def test_not_in_and_does_not_exist_meet_on_a_node_without_the_label() -> None:
    not_ml = req(TEAM, "NotIn", "ml")
    absent = req(TEAM, "DoesNotExist")
    assert not_ml.intersects(absent)
    assert absent.intersects(not_ml)
    assert absent.intersects(req(TEAM, "DoesNotExist"))


def test_does_not_exist_meets_neither_in_nor_exists() -> None:
    absent = req(TEAM, "DoesNotExist")
    assert not absent.intersects(req(TEAM, "In", "ml"))
    assert not req(TEAM, "Exists").intersects(absent)
    assert not absent.intersects(req(GEN, "Gt", "1"))


def test_min_values_is_the_larger_of_the_two() -> None:
    both = req(INSTANCE_TYPE, "Exists", min_values=2).intersection(
        req(INSTANCE_TYPE, "In", "m5.large", "m5.xlarge", "c5.large", min_values=3)
    )
    assert both.min_values == 3


# --- Requirements: combining, compatibility -----------------------------------------------------


def test_requirements_on_one_key_are_intersected() -> None:
    combined = reqs((ZONE, "In", "a", "b"), (ZONE, "NotIn", "a"))
    assert combined.labels() == {ZONE: "b"}
    assert combined == reqs((ZONE, "In", "b"))


def test_merged_requirements_intersect_shared_keys_and_keep_the_rest() -> None:
    nodepool = reqs((ARCH, "In", "amd64", "arm64"), (ZONE, "In", "a", "b"))
    merged = nodepool.merged(reqs((ARCH, "In", "arm64"), (TEAM, "In", "ml")))
    assert merged.labels() == {ARCH: "arm64", TEAM: "ml"}
    assert merged[ZONE].values == frozenset({"a", "b"})
    # The original is untouched: one NodePool's requirements are shared by many NodeClaims.
    assert nodepool[ARCH].values == frozenset({"amd64", "arm64"})


def test_conflict_with_names_the_conflicting_key() -> None:
    nodepool = reqs((ARCH, "In", "amd64"))
    refusal = nodepool.conflict_with(reqs((ARCH, "In", "arm64")))
    assert refusal is not None
    assert refusal.reason == f"{ARCH} In [amd64] conflicts with {ARCH} In [arm64]"
    # A key only one side mentions is no conflict for conflict_with().
    assert nodepool.conflict_with(reqs((TEAM, "In", "ml"))) is None


def test_a_pod_may_require_a_well_known_label_the_nodepool_leaves_open() -> None:
    nodepool = reqs((ARCH, "In", "amd64"))
    for key in (ZONE, REGION, INSTANCE_TYPE, "karpenter.sh/capacity-type", "kubernetes.io/os"):
        assert nodepool.incompatibility(reqs((key, "In", "anything"))) is None


def test_a_pod_may_not_require_a_custom_label_the_nodepool_does_not_promise() -> None:
    nodepool = reqs((ARCH, "In", "amd64"))
    refusal = nodepool.incompatibility(reqs((TEAM, "In", "ml")))
    assert refusal is not None
    assert refusal.reason == f"label {TEAM} is not defined by the NodePool ({TEAM} In [ml])"
    assert nodepool.incompatibility(reqs((TEAM, "Exists"))) is not None
    assert nodepool.incompatibility(reqs((GEN, "Gt", "3"))) is not None


def test_a_pod_may_exclude_a_custom_label_the_nodepool_does_not_mention() -> None:
    nodepool = reqs((ARCH, "In", "amd64"))
    assert nodepool.incompatibility(reqs((TEAM, "NotIn", "ml"))) is None
    assert nodepool.incompatibility(reqs((TEAM, "DoesNotExist"))) is None


def test_a_custom_label_the_nodepool_defines_must_intersect() -> None:
    nodepool = reqs((TEAM, "In", "ml", "web"))
    assert nodepool.incompatibility(reqs((TEAM, "In", "ml"))) is None
    assert nodepool.incompatibility(reqs((TEAM, "In", "batch"))) is not None


def test_the_undefined_allowance_can_be_narrowed() -> None:
    nodepool = reqs((ARCH, "In", "amd64"))
    assert nodepool.incompatibility(reqs((ZONE, "In", "a")), undefined=frozenset()) is not None


def test_a_well_known_label_the_nodepool_pins_must_still_intersect() -> None:
    nodepool = reqs((ZONE, "In", "zone-a"))
    assert nodepool.incompatibility(reqs((ZONE, "In", "zone-b"))) is not None


def test_satisfied_by_checks_a_node_label_set() -> None:
    pod = reqs((ARCH, "In", "amd64"), (TEAM, "NotIn", "ml"), (GEN, "Gte", "5"))
    assert pod.satisfied_by({ARCH: "amd64", GEN: "5"})
    assert pod.satisfied_by({ARCH: "amd64", GEN: "6", TEAM: "web"})
    assert not pod.satisfied_by({ARCH: "amd64", GEN: "6", TEAM: "ml"})
    assert not pod.satisfied_by({ARCH: "amd64"})
    assert not pod.satisfied_by({ARCH: "arm64", GEN: "9"})


# --- minValues ----------------------------------------------------------------------------------


def test_min_values_fails_when_too_few_values_remain() -> None:
    nodepool = Requirements([req(INSTANCE_TYPE, "Exists", min_values=3)])
    offered = {INSTANCE_TYPE: ["m5.large", "m5.xlarge", "c5.large"]}
    assert nodepool.min_values_problem(offered) is None

    narrowed = nodepool.merged(reqs((INSTANCE_TYPE, "NotIn", "c5.large")))
    problem = narrowed.min_values_problem(offered)
    assert problem is not None
    assert "minValues 3" in problem.reason
    assert "2 value(s)" in problem.reason


def test_min_values_counts_only_values_the_requirement_allows() -> None:
    nodepool = Requirements([req(INSTANCE_TYPE, "In", "m5.large", "m5.xlarge", min_values=2)])
    assert nodepool.min_values_problem({INSTANCE_TYPE: ["m5.large", "c5.large"]}) is not None
    assert nodepool.min_values_problem({}) is not None


def test_min_values_survives_from_dict() -> None:
    parsed = Requirement.from_dict({"key": INSTANCE_TYPE, "operator": "Exists", "minValues": 10})
    assert parsed.min_values == 10


# --- deprecated beta labels ---------------------------------------------------------------------


def test_beta_arch_is_the_arch_label() -> None:
    pod = Requirements.from_labels({"beta.kubernetes.io/arch": "arm64"})
    assert set(pod) == {ARCH}
    nodepool = reqs((ARCH, "In", "amd64"))
    assert nodepool.incompatibility(pod) is not None
    assert reqs((ARCH, "In", "arm64")).incompatibility(pod) is None


def test_failure_domain_zone_is_the_topology_zone_label() -> None:
    pod = Requirements.from_dicts(
        [
            {
                "key": "failure-domain.beta.kubernetes.io/zone",
                "operator": "In",
                "values": ["zone-a"],
            }
        ]
    )
    assert pod.labels() == {ZONE: "zone-a"}
    both = pod.merged(reqs((ZONE, "In", "zone-a", "zone-b")))
    assert both.labels() == {ZONE: "zone-a"}
    assert reqs((ZONE, "In", "zone-b")).incompatibility(pod) is not None


# --- a pod's node selector terms ----------------------------------------------------------------


def node_affinity_pod(
    terms: list[dict[str, Any]], node_selector: dict[str, str] | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
            }
        }
    }
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {"spec": spec}


def term(*expressions: tuple[str, ...]) -> dict[str, Any]:
    return {
        "matchExpressions": [
            {"key": key, "operator": op, "values": list(values)} for key, op, *values in expressions
        ]
    }


def test_a_pod_without_constraints_has_one_unconstrained_alternative() -> None:
    assert node_selector_terms({"spec": {}}) == [Requirements()]
    assert node_selector_terms({}) == [Requirements()]


def test_terms_are_alternatives_each_anded_with_the_node_selector() -> None:
    pod = node_affinity_pod(
        [term((ZONE, "In", "zone-a")), term((ZONE, "In", "zone-b"), (ARCH, "In", "arm64"))],
        node_selector={TEAM: "ml"},
    )
    alternatives = node_selector_terms(pod)
    assert [a.labels() for a in alternatives] == [
        {TEAM: "ml", ZONE: "zone-a"},
        {TEAM: "ml", ZONE: "zone-b", ARCH: "arm64"},
    ]
    # A node in zone-b on amd64 satisfies neither alternative; one in zone-a does.
    assert not any(
        a.satisfied_by({TEAM: "ml", ZONE: "zone-b", ARCH: "amd64"}) for a in alternatives
    )
    assert any(a.satisfied_by({TEAM: "ml", ZONE: "zone-a", ARCH: "amd64"}) for a in alternatives)


def test_a_term_that_names_a_node_is_dropped() -> None:
    by_name = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}
    pod = node_affinity_pod([by_name, term((ZONE, "In", "zone-a"))])
    assert [a.labels() for a in node_selector_terms(pod)] == [{ZONE: "zone-a"}]
    # Only a named node will do: no new node can take the pod.
    assert node_selector_terms(node_affinity_pod([by_name])) == []


def test_a_node_selector_conflicting_with_a_term_leaves_an_empty_alternative() -> None:
    pod = node_affinity_pod([term((ARCH, "In", "arm64"))], node_selector={ARCH: "amd64"})
    [alternative] = node_selector_terms(pod)
    assert alternative[ARCH].is_empty()
    assert reqs((ARCH, "In", "amd64", "arm64")).incompatibility(alternative) is not None


def test_an_empty_term_selects_no_node() -> None:
    assert node_selector_terms(node_affinity_pod([{}])) == []
    only_real = node_selector_terms(node_affinity_pod([{"matchExpressions": []}, term()]))
    assert only_real == []


def test_preferred_terms_come_heaviest_first() -> None:
    pod = {
        "spec": {
            "affinity": {
                "nodeAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 1, "preference": term((ZONE, "In", "zone-c"))},
                        {"weight": 80, "preference": term((ZONE, "In", "zone-a"))},
                        {"weight": 20, "preference": term((ZONE, "In", "zone-b"))},
                    ]
                }
            }
        }
    }
    assert [(w, r.labels()) for w, r in preferred_node_terms(pod)] == [
        (80, {ZONE: "zone-a"}),
        (20, {ZONE: "zone-b"}),
        (1, {ZONE: "zone-c"}),
    ]


# --- round trip ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "expressions",
    [
        [{"key": ZONE, "operator": "In", "values": ["a", "b"]}],
        [{"key": ZONE, "operator": "NotIn", "values": ["a"]}],
        [{"key": TEAM, "operator": "Exists"}],
        [{"key": TEAM, "operator": "DoesNotExist"}],
        [{"key": GEN, "operator": "Gt", "values": ["3"]}],
        [{"key": GEN, "operator": "Lt", "values": ["9"]}],
        [
            {"key": GEN, "operator": "Gt", "values": ["3"]},
            {"key": GEN, "operator": "Lt", "values": ["9"]},
            {"key": GEN, "operator": "NotIn", "values": ["5"]},
        ],
        [{"key": INSTANCE_TYPE, "operator": "In", "values": ["m5.large"], "minValues": 1}],
        [{"key": INSTANCE_TYPE, "operator": "Exists", "minValues": 4}],
    ],
)
def test_to_dicts_round_trips(expressions: list[dict[str, Any]]) -> None:
    original = Requirements.from_dicts(expressions)
    again = Requirements.from_dicts(original.to_dicts())
    assert again == original
    assert hash(again) == hash(original)


def test_to_dicts_writes_gte_and_lte_as_gt_and_lt_with_the_same_meaning() -> None:
    original = reqs((GEN, "Gte", "3"), (GEN, "Lte", "5"))
    assert original.to_dicts() == [
        {"key": GEN, "operator": "Gt", "values": ["2"]},
        {"key": GEN, "operator": "Lt", "values": ["6"]},
    ]
    assert Requirements.from_dicts(original.to_dicts()) == original


def test_to_dicts_is_sorted_by_key() -> None:
    dicts = reqs((ZONE, "In", "a"), (ARCH, "In", "amd64")).to_dicts()
    assert [d["key"] for d in dicts] == [ARCH, ZONE]


# --- properties ---------------------------------------------------------------------------------

_VALUES = ["a", "b", "c", "-1", "0", "1", "2", "3", "5", "8"]


@st.composite
def requirements(draw: st.DrawFn) -> Requirement:
    operator = draw(st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Gte"]))
    if operator in ("Gt", "Lt", "Gte"):
        values = [str(draw(st.integers(-2, 9)))]
    elif operator in ("In", "NotIn"):
        values = draw(st.lists(st.sampled_from(_VALUES), min_size=1, max_size=4))
    else:
        values = []
    return Requirement.new("k", operator, values)


@given(requirements(), requirements(), requirements(), st.sampled_from(_VALUES))
def test_intersection_allows_exactly_what_both_allow(
    a: Requirement, b: Requirement, c: Requirement, value: str
) -> None:
    both = a.intersection(b).has(value)
    assert both == b.intersection(a).has(value) == (a.has(value) and b.has(value))
    # And it stays true as intersections chain, as when a NodeClaim narrows pod by pod.
    all_three = a.intersection(b).intersection(c).has(value)
    assert all_three == (a.has(value) and b.has(value) and c.has(value))


@given(requirements(), requirements())
def test_intersects_is_symmetric(a: Requirement, b: Requirement) -> None:
    assert a.intersects(b) == b.intersects(a)


def test_a_window_with_every_integer_excluded_is_empty() -> None:
    nothing = (
        req(GEN, "Gt", "1").intersection(req(GEN, "Lt", "3")).intersection(req(GEN, "NotIn", "2"))
    )
    assert nothing.count() == 0
    assert nothing.is_empty()
    assert not nothing.intersects(req(GEN, "Exists"))
