"""Preference relaxation: what a pod gives up, in which order, when it fits nowhere."""

from __future__ import annotations

import copy
from typing import Any

from karpenter_capi.core.scheduling.preferences import (
    relax,
    relax_step,
    relaxations,
    strictest,
    strictly_untolerated,
)
from karpenter_capi.core.values.requirements import node_selector_terms
from karpenter_capi.core.values.taints import Taint, untolerated

ZONE = "topology.kubernetes.io/zone"
ARCH = "kubernetes.io/arch"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def expr(key: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": "In", "values": list(values)}


def node_term(*expressions: dict[str, Any]) -> dict[str, Any]:
    return {"matchExpressions": list(expressions)}


def preferred_node(weight: int, *expressions: dict[str, Any]) -> dict[str, Any]:
    return {"weight": weight, "preference": node_term(*expressions)}


def pod_term(app: str, key: str = ZONE) -> dict[str, Any]:
    return {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}


def preferred_pod(weight: int, app: str) -> dict[str, Any]:
    return {"weight": weight, "podAffinityTerm": pod_term(app)}


def spread(when: str, key: str = ZONE) -> dict[str, Any]:
    return {
        "maxSkew": 1,
        "topologyKey": key,
        "whenUnsatisfiable": when,
        "labelSelector": {"matchLabels": {"app": "web"}},
    }


def everything_pod() -> dict[str, Any]:
    """A pod with one of every kind of soft constraint, and two required node terms."""
    return {
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "containers": [{"name": "web"}],
            "affinity": {
                "nodeAffinity": {
                    REQUIRED: {
                        "nodeSelectorTerms": [
                            node_term(expr(ARCH, "arm64")),
                            node_term(expr(ARCH, "amd64")),
                        ]
                    },
                    PREFERRED: [preferred_node(10, expr(ZONE, "zone-a"))],
                },
                "podAffinity": {PREFERRED: [preferred_pod(5, "cache")]},
                "podAntiAffinity": {PREFERRED: [preferred_pod(5, "web")]},
            },
            "topologySpreadConstraints": [spread("ScheduleAnyway")],
        },
    }


def test_relaxation_order_follows_karpenter() -> None:
    reasons = [reason for _, reason in relaxations(everything_pod())]
    assert len(reasons) == 6
    assert reasons[0].startswith("removing required node affinity term")
    assert reasons[1].startswith("removing preferred pod affinity term")
    assert reasons[2].startswith("removing preferred pod anti-affinity term")
    assert reasons[3].startswith("removing preferred node affinity term")
    assert reasons[4].startswith("removing topology spread constraint")
    assert reasons[5] == "adding a toleration for PreferNoSchedule taints"


def test_fully_relaxed_pod_keeps_its_requirements_and_gains_the_toleration() -> None:
    *_, (last, _) = relaxations(everything_pod())
    affinity = last["spec"]["affinity"]
    assert affinity["nodeAffinity"][REQUIRED]["nodeSelectorTerms"] == [
        node_term(expr(ARCH, "amd64"))
    ]
    assert affinity["nodeAffinity"][PREFERRED] == []
    assert affinity["podAffinity"][PREFERRED] == []
    assert affinity["podAntiAffinity"][PREFERRED] == []
    assert last["spec"]["topologySpreadConstraints"] == []
    assert last["spec"]["tolerations"] == [{"operator": "Exists", "effect": "PreferNoSchedule"}]
    assert relax(last) is None


def test_the_last_required_node_affinity_term_is_never_relaxed() -> None:
    only_arm = {
        "spec": {
            "affinity": {
                "nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [node_term(expr(ARCH, "arm64"))]}}
            }
        }
    }
    assert relax(only_arm, tolerate_prefer_no_schedule=False) is None
    relaxed = relax(only_arm)
    assert relaxed is not None
    assert node_selector_terms(relaxed) == node_selector_terms(only_arm)


def test_required_terms_are_dropped_from_the_front_one_at_a_time() -> None:
    terms = [node_term(expr(ZONE, z)) for z in ("zone-a", "zone-b", "zone-c")]
    pod = {"spec": {"affinity": {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": terms}}}}}
    once = relax(pod, tolerate_prefer_no_schedule=False)
    assert once is not None
    assert once["spec"]["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"] == terms[1:]
    twice = relax(once, tolerate_prefer_no_schedule=False)
    assert twice is not None
    assert twice["spec"]["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"] == terms[2:]
    assert relax(twice, tolerate_prefer_no_schedule=False) is None


def test_the_heaviest_preference_is_given_up_first() -> None:
    pod = {
        "spec": {
            "affinity": {
                "nodeAffinity": {
                    PREFERRED: [
                        preferred_node(1, expr(ZONE, "zone-light")),
                        preferred_node(50, expr(ZONE, "zone-heavy")),
                        preferred_node(20, expr(ZONE, "zone-middle")),
                    ]
                }
            }
        }
    }
    zones = []
    current: dict[str, Any] | None = pod
    while current is not None:
        remaining = current["spec"]["affinity"]["nodeAffinity"][PREFERRED]
        zones.append([t["preference"]["matchExpressions"][0]["values"][0] for t in remaining])
        current = relax(current, tolerate_prefer_no_schedule=False)
    assert zones == [
        ["zone-light", "zone-heavy", "zone-middle"],
        ["zone-middle", "zone-light"],
        ["zone-light"],
        [],
    ]


def test_equal_weights_give_up_the_first_written() -> None:
    pod = {
        "spec": {
            "affinity": {
                "podAffinity": {PREFERRED: [preferred_pod(5, "first"), preferred_pod(5, "second")]}
            }
        }
    }
    relaxed = relax(pod)
    assert relaxed is not None
    remaining = relaxed["spec"]["affinity"]["podAffinity"][PREFERRED]
    assert [t["podAffinityTerm"]["labelSelector"]["matchLabels"]["app"] for t in remaining] == [
        "second"
    ]


def test_only_schedule_anyway_spread_constraints_are_relaxed() -> None:
    pod = {
        "spec": {
            "topologySpreadConstraints": [
                spread("DoNotSchedule"),
                spread("ScheduleAnyway", "kubernetes.io/hostname"),
            ]
        }
    }
    relaxed = relax(pod, tolerate_prefer_no_schedule=False)
    assert relaxed is not None
    assert relaxed["spec"]["topologySpreadConstraints"] == [spread("DoNotSchedule")]
    assert relax(relaxed, tolerate_prefer_no_schedule=False) is None


def test_relaxing_leaves_the_original_pod_untouched() -> None:
    pod = everything_pod()
    before = copy.deepcopy(pod)
    for _ in relaxations(pod):
        pass
    strictest(pod)
    assert pod == before


def test_prefer_no_schedule_toleration_comes_last_and_only_once() -> None:
    pod = {"spec": {"tolerations": [{"key": "team", "operator": "Exists"}]}}
    relaxed, reason = relax_step(pod) or ({}, "")
    assert reason == "adding a toleration for PreferNoSchedule taints"
    assert relaxed["spec"]["tolerations"] == [
        {"key": "team", "operator": "Exists"},
        {"operator": "Exists", "effect": "PreferNoSchedule"},
    ]
    assert relax(relaxed) is None


def test_a_pod_that_already_tolerates_prefer_no_schedule_has_nothing_to_relax() -> None:
    pod = {"spec": {"tolerations": [{"operator": "Exists", "effect": "PreferNoSchedule"}]}}
    assert relax(pod) is None


def test_without_prefer_no_schedule_node_pools_the_toleration_step_is_skipped() -> None:
    pod = {"spec": {"containers": [{"name": "a"}]}}
    assert relax(pod, tolerate_prefer_no_schedule=False) is None


def test_prefer_no_schedule_taints_block_until_relaxed_away() -> None:
    spot = (Taint("spot", "PreferNoSchedule"),)
    pod: dict[str, Any] = {"spec": {"containers": [{"name": "a"}]}}
    # kube-scheduler would place it; Karpenter's first attempt avoids the tainted NodePool.
    assert untolerated([], spot) is None
    assert strictly_untolerated(pod["spec"].get("tolerations") or [], spot) == spot[0]
    relaxed = relax(pod)
    assert relaxed is not None
    assert strictly_untolerated(relaxed["spec"]["tolerations"], spot) is None


def test_strictest_treats_the_heaviest_node_preference_as_required() -> None:
    pod = {
        "spec": {
            "nodeSelector": {ARCH: "amd64"},
            "affinity": {
                "nodeAffinity": {
                    PREFERRED: [
                        preferred_node(1, expr(ZONE, "zone-b")),
                        preferred_node(9, expr(ZONE, "zone-a")),
                    ]
                }
            },
        }
    }
    [alternative] = node_selector_terms(strictest(pod))
    assert alternative.labels() == {ARCH: "amd64", ZONE: "zone-a"}

    # Once relaxed away, the next heaviest takes its place.
    relaxed = relax(pod)
    assert relaxed is not None
    [alternative] = node_selector_terms(strictest(relaxed))
    assert alternative.labels() == {ARCH: "amd64", ZONE: "zone-b"}


def test_strictest_tries_the_first_required_term_with_the_preference() -> None:
    pod = everything_pod()
    [alternative] = node_selector_terms(strictest(pod))
    assert alternative.labels() == {ARCH: "arm64", ZONE: "zone-a"}
    relaxed = relax(pod)
    assert relaxed is not None
    [alternative] = node_selector_terms(strictest(relaxed))
    assert alternative.labels() == {ARCH: "amd64", ZONE: "zone-a"}


def test_strictest_never_turns_an_empty_required_term_into_one_that_selects() -> None:
    # Kubernetes: an empty node selector term selects no node; a preference cannot change that.
    pod = {
        "spec": {
            "affinity": {
                "nodeAffinity": {
                    REQUIRED: {"nodeSelectorTerms": [node_term()]},
                    PREFERRED: [preferred_node(1, expr(ZONE, "zone-a"))],
                }
            }
        }
    }
    terms = strictest(pod)["spec"]["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"]
    assert terms == [node_term()]


def test_strictest_makes_preferred_pod_terms_and_soft_spreads_required() -> None:
    strict = strictest(everything_pod())
    affinity = strict["spec"]["affinity"]
    assert affinity["podAffinity"][REQUIRED] == [pod_term("cache")]
    assert affinity["podAntiAffinity"][REQUIRED] == [pod_term("web")]
    assert affinity["podAffinity"][PREFERRED] == []
    assert affinity["podAntiAffinity"][PREFERRED] == []
    assert strict["spec"]["topologySpreadConstraints"] == [spread("DoNotSchedule")]


def test_strictest_of_a_pod_without_preferences_changes_nothing() -> None:
    pod = {
        "spec": {
            "containers": [{"name": "a"}],
            "affinity": {
                "nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [node_term(expr(ARCH, "arm64"))]}}
            },
            "topologySpreadConstraints": [spread("DoNotSchedule")],
        }
    }
    assert strictest(pod) == {
        "spec": {
            **pod["spec"],
            "affinity": {
                "nodeAffinity": {
                    REQUIRED: {"nodeSelectorTerms": [node_term(expr(ARCH, "arm64"))]},
                    PREFERRED: [],
                }
            },
        }
    }
