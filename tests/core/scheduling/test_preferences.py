"""Preference relaxation: what a pod gives up, in which order, when it fits nowhere."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from karpenter_capi.core.scheduling.podspec import PodSpec, parse_pod
from karpenter_capi.core.scheduling.preferences import (
    PREFER_NO_SCHEDULE_TOLERATION,
    relax,
    relax_step,
    relaxations,
    strictly_untolerated,
)
from karpenter_capi.core.values.requirements import Requirements
from karpenter_capi.core.values.taints import Taint, Toleration, untolerated

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


def parsed(pod: dict[str, Any]) -> PodSpec:
    spec = parse_pod(pod)
    assert spec.problem is None, spec.problem
    return spec


def zones_of(terms: tuple[tuple[int, Requirements], ...]) -> list[str]:
    return [min(requirements[ZONE].values) for _, requirements in terms]


def test_relaxation_order_follows_karpenter() -> None:
    reasons = [reason for _, reason in relaxations(parsed(everything_pod()))]
    assert len(reasons) == 6
    assert reasons[0].startswith("removing required node affinity term")
    assert reasons[1].startswith("removing preferred pod affinity term")
    assert reasons[2].startswith("removing preferred pod anti-affinity term")
    assert reasons[3].startswith("removing preferred node affinity term")
    assert reasons[4].startswith("removing topology spread constraint")
    assert reasons[5] == "adding a toleration for PreferNoSchedule taints"


def test_fully_relaxed_pod_keeps_its_requirements_and_gains_the_toleration() -> None:
    *_, (last, _) = relaxations(parsed(everything_pod()))
    assert [term.requirements.labels() for term in last.node_terms] == [{ARCH: "amd64"}]
    assert last.preferred_node_terms == ()
    assert last.preferred_affinity == ()
    assert last.preferred_anti_affinity == ()
    assert last.strict_affinity == ()
    assert last.spreads == ()
    assert last.tolerations == (Toleration(operator="Exists", effect="PreferNoSchedule"),)
    assert last.requirements is not None
    assert last.requirements.labels() == {ARCH: "amd64"}
    assert relax(last) is None


def test_the_last_required_node_affinity_term_is_never_relaxed() -> None:
    only_arm = parsed(
        {
            "spec": {
                "affinity": {
                    "nodeAffinity": {
                        REQUIRED: {"nodeSelectorTerms": [node_term(expr(ARCH, "arm64"))]}
                    }
                }
            }
        }
    )
    assert relax(only_arm, tolerate_prefer_no_schedule=False) is None
    relaxed = relax(only_arm)
    assert relaxed is not None
    assert relaxed.node_terms == only_arm.node_terms
    assert relaxed.requirements == only_arm.requirements


def test_required_terms_are_dropped_from_the_front_one_at_a_time() -> None:
    terms = [node_term(expr(ZONE, z)) for z in ("zone-a", "zone-b", "zone-c")]
    pod = parsed({"spec": {"affinity": {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": terms}}}}})
    assert pod.requirements is not None
    assert pod.requirements.labels() == {ZONE: "zone-a"}
    once = relax(pod, tolerate_prefer_no_schedule=False)
    assert once is not None
    assert once.node_terms == pod.node_terms[1:]
    assert once.requirements is not None
    assert once.requirements.labels() == {ZONE: "zone-b"}
    twice = relax(once, tolerate_prefer_no_schedule=False)
    assert twice is not None
    assert twice.node_terms == pod.node_terms[2:]
    assert relax(twice, tolerate_prefer_no_schedule=False) is None


def test_the_heaviest_preference_is_given_up_first() -> None:
    pod = parsed(
        {
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
    )
    zones = []
    current: PodSpec | None = pod
    while current is not None:
        zones.append(zones_of(current.preferred_node_terms))
        current = relax(current, tolerate_prefer_no_schedule=False)
    assert zones == [
        ["zone-heavy", "zone-middle", "zone-light"],
        ["zone-middle", "zone-light"],
        ["zone-light"],
        [],
    ]


def test_equal_weights_give_up_the_first_written() -> None:
    pod = parsed(
        {
            "metadata": {"name": "p", "namespace": "default", "labels": {"app": "second"}},
            "spec": {
                "affinity": {
                    "podAffinity": {
                        PREFERRED: [preferred_pod(5, "first"), preferred_pod(5, "second")]
                    }
                }
            },
        }
    )
    relaxed = relax(pod)
    assert relaxed is not None
    [(_, remaining)] = relaxed.preferred_affinity
    assert remaining is not None
    assert remaining.selector.matches({"app": "second"})
    assert not remaining.selector.matches({"app": "first"})


def test_only_schedule_anyway_spread_constraints_are_relaxed() -> None:
    pod = parsed(
        {
            "spec": {
                "topologySpreadConstraints": [
                    spread("DoNotSchedule"),
                    spread("ScheduleAnyway", "kubernetes.io/hostname"),
                ]
            }
        }
    )
    relaxed = relax(pod, tolerate_prefer_no_schedule=False)
    assert relaxed is not None
    assert relaxed.spreads == pod.spreads[:1]
    assert relaxed.spreads[0].topology_key == ZONE
    assert relax(relaxed, tolerate_prefer_no_schedule=False) is None


def test_relaxing_leaves_the_original_pod_and_spec_untouched() -> None:
    pod = everything_pod()
    before = copy.deepcopy(pod)
    spec = parsed(pod)
    fields = {name: getattr(spec, name) for name in spec.__slots__}
    relaxed = list(relaxations(spec))
    assert pod == before
    assert {name: getattr(spec, name) for name in spec.__slots__} == fields
    # Every step is a new spec sharing what it did not change, and the object it came from.
    assert all(step.raw is pod and step.requests is spec.requests for step, _ in relaxed)


def test_prefer_no_schedule_toleration_comes_last_and_only_once() -> None:
    pod = parsed({"spec": {"tolerations": [{"key": "team", "operator": "Exists"}]}})
    result = relax_step(pod)
    assert result is not None
    relaxed, reason = result
    assert reason == "adding a toleration for PreferNoSchedule taints"
    assert relaxed.tolerations == (Toleration("team", "Exists"), PREFER_NO_SCHEDULE_TOLERATION)
    assert relax(relaxed) is None


def test_a_pod_that_already_tolerates_prefer_no_schedule_has_nothing_to_relax() -> None:
    pod = parsed({"spec": {"tolerations": [{"operator": "Exists", "effect": "PreferNoSchedule"}]}})
    assert relax(pod) is None


def test_without_prefer_no_schedule_node_pools_the_toleration_step_is_skipped() -> None:
    pod = parsed({"spec": {"containers": [{"name": "a"}]}})
    assert relax(pod, tolerate_prefer_no_schedule=False) is None


def test_prefer_no_schedule_taints_block_until_relaxed_away() -> None:
    spot = (Taint("spot", "PreferNoSchedule"),)
    pod = parsed({"spec": {"containers": [{"name": "a"}]}})
    # kube-scheduler would place it; Karpenter's first attempt avoids the tainted NodePool.
    assert untolerated([], spot) is None
    assert strictly_untolerated(pod.tolerations, spot) == spot[0]
    relaxed = relax(pod)
    assert relaxed is not None
    assert strictly_untolerated(relaxed.tolerations, spot) is None


def test_the_heaviest_node_preference_is_a_requirement_until_relaxed() -> None:
    pod = parsed(
        {
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
    )
    assert pod.requirements is not None
    assert pod.requirements.labels() == {ARCH: "amd64", ZONE: "zone-a"}
    assert pod.required.labels() == {ARCH: "amd64"}

    # Once relaxed away, the next heaviest takes its place.
    relaxed = relax(pod)
    assert relaxed is not None
    assert relaxed.requirements is not None
    assert relaxed.requirements.labels() == {ARCH: "amd64", ZONE: "zone-b"}


def test_the_first_required_term_is_tried_with_the_preference() -> None:
    pod = parsed(everything_pod())
    assert pod.requirements is not None
    assert pod.requirements.labels() == {ARCH: "arm64", ZONE: "zone-a"}
    relaxed = relax(pod)
    assert relaxed is not None
    assert relaxed.requirements is not None
    assert relaxed.requirements.labels() == {ARCH: "amd64", ZONE: "zone-a"}


def test_an_empty_required_term_selects_no_new_node_whatever_the_preference() -> None:
    # Kubernetes: an empty node selector term selects no node; a preference cannot change that.
    pod = parsed(
        {
            "spec": {
                "affinity": {
                    "nodeAffinity": {
                        REQUIRED: {"nodeSelectorTerms": [node_term()]},
                        PREFERRED: [preferred_node(1, expr(ZONE, "zone-a"))],
                    }
                }
            }
        }
    )
    assert pod.requirements is None
    relaxed = relax(pod, tolerate_prefer_no_schedule=False)
    assert relaxed is not None
    assert relaxed.requirements is None


def test_the_topology_counts_preferred_pod_terms_and_soft_spreads_as_required() -> None:
    pod = parsed(everything_pod())
    assert [t.topology_key for t in pod.strict_affinity] == [ZONE]
    assert pod.strict_affinity[0].selector.matches({"app": "cache"})
    assert [t.topology_key for t in pod.strict_anti_affinity] == [ZONE]
    assert pod.strict_anti_affinity[0].selector.matches({"app": "web"})
    assert pod.affinity == pod.anti_affinity == ()
    [soft] = pod.spreads
    assert soft.schedule_anyway


def test_relaxation_reads_only_the_parsed_spec_never_the_pod_json() -> None:
    spec = parsed(everything_pod())
    # Without its JSON the spec relaxes exactly as with it: nothing is read again.
    blind = dataclasses.replace(spec, raw={})
    steps = [(s.requirements, s.topology_signature, s.tolerations) for s, _ in relaxations(spec)]
    blind_steps = [
        (s.requirements, s.topology_signature, s.tolerations) for s, _ in relaxations(blind)
    ]
    assert blind_steps == steps
    assert len(steps) == 6
