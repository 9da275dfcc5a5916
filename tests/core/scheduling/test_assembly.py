"""Values written into an open twin and closed (``scheduling.assembly``) are the frozen
class's own: a replica's ``PodSpec`` and a pod's ``PodFacts`` made that way against the ones
their ``__init__`` makes, field for field."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from typing import Any

import pytest

from karpenter_capi.core.disruption.facts import PodFacts
from karpenter_capi.core.scheduling.assembly import open_twin
from karpenter_capi.core.scheduling.podspec import PodSpec, PodSpecs

from .test_podspec import _replica


def _as_made_by_init(value: Any) -> Any:
    """``value`` made again by its class's ``__init__``, from its fields."""
    return type(value)(**{f.name: getattr(value, f.name) for f in fields(value)})


def test_a_replica_read_from_its_class_is_a_podspec_like_any_other() -> None:
    specs = PodSpecs()
    first = specs.get(_replica("a"))
    again = specs.get(_replica("b", ownerReferences=[{"kind": "Job", "name": "j"}]))
    assert again is not first
    assert again.problem is None
    assert again.requests is first.requests  # its class's part, taken from the first
    assert type(again) is PodSpec
    # Every field set (an unset slot would raise here), and equal to what __init__ makes.
    made = _as_made_by_init(again)
    assert [getattr(again, f.name) for f in fields(PodSpec)] == [
        getattr(made, f.name) for f in fields(PodSpec)
    ]
    assert again == made
    with pytest.raises(dataclasses.FrozenInstanceError):
        again.key = "x"  # type: ignore[misc]


def test_facts_taken_from_a_parse_are_podfacts_like_any_other() -> None:
    spec = PodSpecs().get(_replica("a"))
    facts = PodFacts.of(spec)
    assert type(facts) is PodFacts
    assert facts == _as_made_by_init(facts) == PodFacts.read(spec.raw)
    with pytest.raises(dataclasses.FrozenInstanceError):
        facts.cost = 2.0  # type: ignore[misc]


def test_only_a_slotted_dataclass_has_an_open_twin() -> None:
    @dataclass(frozen=True)
    class Unslotted:
        a: int

    with pytest.raises(TypeError):
        open_twin(Unslotted)


def _term(key: str) -> dict[str, Any]:
    return {"topologyKey": key, "labelSelector": {"matchLabels": {"app": key}}}


def _every_class_field_set(name: str) -> dict[str, Any]:
    """A replica whose class part has no empty field, each unlike the others, so a copy that
    wrote one field's value into another could not equal a fresh parse."""
    pod = _replica(name)
    spec = pod["spec"]
    spec["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}]
    spec["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "arch", "operator": "In", "values": ["arm"]}]}
                ]
            },
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 3,
                    "preference": {
                        "matchExpressions": [{"key": "tier", "operator": "In", "values": ["x"]}]
                    },
                }
            ],
        },
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [_term("zone")],
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 5, "podAffinityTerm": _term("rack")}
            ],
        },
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [_term("kubernetes.io/hostname")],
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 7, "podAffinityTerm": _term("region")}
            ],
        },
    }
    return pod


def test_a_copy_writes_each_class_field_into_its_own_slot() -> None:
    specs = PodSpecs()
    specs.get(_every_class_field_set("a"))
    pod = _every_class_field_set("b")
    copied = specs.get(pod)
    fresh = PodSpecs().get(pod)
    assert fresh.problem is None
    for name in (
        "host_ports",
        "tolerations",
        "node_terms",
        "preferred_node_terms",
        "affinity",
        "preferred_affinity",
        "anti_affinity",
        "preferred_anti_affinity",
        "spreads",
    ):
        assert getattr(fresh, name), f"{name} is empty: the test would not see it misplaced"
    assert [getattr(copied, f.name) for f in fields(PodSpec)] == [
        getattr(fresh, f.name) for f in fields(PodSpec)
    ]
