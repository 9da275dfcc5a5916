"""PodSpec: a pod read once into what scheduling needs, and the cache keyed by its version."""

from __future__ import annotations

from typing import Any

import pytest

from karpenter_capi.core.provisioning.state import ParsedCluster, unbound
from karpenter_capi.core.scheduling.podspec import PodSpecs, parse_pod
from karpenter_capi.core.scheduling.podspec_class import class_parts
from karpenter_capi.core.scheduling.preferences import relax
from karpenter_capi.core.values.resources import ResourceList, pod_requests
from karpenter_capi.core.values.taints import Toleration


def _pod(name: str, version: str = "1", *, node: str = "", **requests: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "resources": {"requests": requests or {"cpu": "100m"}}}],
        "tolerations": [{"key": "gpu", "operator": "Exists"}],
        "nodeSelector": {"zone": "a"},
    }
    if node:
        spec["nodeName"] = node
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "resourceVersion": version,
            "labels": {"app": "web"},
            "ownerReferences": [{"kind": "ReplicaSet", "name": "web-1", "controller": True}],
        },
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending"},
    }


def test_a_pod_is_read_into_what_scheduling_needs() -> None:
    spec = parse_pod(_pod("a", node="n1", cpu="250m", memory="1Gi"))

    assert spec.key == "ns/a"
    assert (spec.uid, spec.node_name, spec.phase, spec.deleting) == (
        "uid-a",
        "n1",
        "Running",
        False,
    )
    assert spec.requests == ResourceList.parse({"cpu": "250m", "memory": "1Gi", "pods": "1"})
    assert spec.owners[0].kind == "ReplicaSet"
    assert spec.owners[0].controller
    assert spec.requirements is not None
    assert spec.requirements.label_value("zone") == "a"
    assert spec.tolerations == (Toleration("gpu", "Exists"),)
    assert spec.problem is None
    with pytest.raises(AttributeError):
        spec.key = "x"  # type: ignore[misc]


def test_a_spec_the_api_server_would_refuse_says_why_instead_of_raising() -> None:
    pod = _pod("bad")
    pod["spec"]["tolerations"] = [{"operator": "Maybe"}]

    assert parse_pod(pod).problem == "tolerations[0]: operator 'Maybe' is not Exists or Equal"


def test_one_parse_per_version_and_an_unbound_copy_shares_it() -> None:
    specs = PodSpecs()
    bound = _pod("a", node="n1")
    for _ in range(5):
        specs.new_round()
        assert specs.get(bound).node_name == "n1"
    moving = specs.get(unbound(bound))

    assert specs.parses == 1
    assert moving.node_name == ""
    assert moving.raw is not bound
    specs.get(_pod("a", "2", node="n1"))
    assert specs.parses == 2


def test_a_pod_not_asked_for_during_a_whole_round_is_dropped() -> None:
    specs = PodSpecs()
    specs.get(_pod("gone"))
    specs.new_round()
    specs.new_round()

    assert len(specs) == 0
    specs.get(_pod("gone"))
    assert specs.parses == 2


def test_bound_sums_change_by_the_pods_that_came_went_or_changed() -> None:
    bound = ParsedCluster()
    a, b = _pod("a", node="n"), _pod("b", node="n", cpu="1", **{"nvidia.com/gpu": "1"})
    rounds = [[a], [a, b], [a, _pod("b", "2", node="n", cpu="2")], [a], []]
    for pods in rounds:
        fresh = ResourceList.sum(pod_requests(p, include_pod_count=True) for p in pods)
        assert bound.of("n", pods) == fresh
    # The GPU left with the only pod asking for it: absent, not zero.
    assert "nvidia.com/gpu" not in bound.of("n", [a])
    assert bound.specs.parses == 3


def test_relaxing_gives_a_new_spec_and_leaves_the_pod_and_its_parse_alone() -> None:
    pod = _pod("soft")
    pod["spec"]["affinity"] = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 10,
                    "preference": {
                        "matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]
                    },
                }
            ]
        }
    }
    spec = parse_pod(pod)
    relaxed = relax(spec)

    assert relaxed is not None
    assert spec.requirements is not None
    assert spec.requirements.label_value("disk") == "ssd"
    assert relaxed.requirements is not None
    assert "disk" not in relaxed.requirements
    assert relaxed.class_key != spec.class_key
    # What relaxation does not touch is shared, not copied.
    assert relaxed.requests is spec.requests
    assert relaxed.raw is pod  # the object to bind and report is the pod as given
    assert relaxed.preferred_node_terms == ()
    assert spec.preferred_node_terms != ()
    # The pod given is untouched.
    node_affinity = pod["spec"]["affinity"]["nodeAffinity"]
    assert len(node_affinity["preferredDuringSchedulingIgnoredDuringExecution"]) == 1


def _replica(name: str, **meta: Any) -> dict[str, Any]:
    """A replica of ``_pod``'s Deployment: another name, uid and owner, the same spec."""
    pod = _pod(name)
    pod["metadata"].update(meta)
    pod["spec"]["affinity"] = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname", "labelSelector": {}}
            ]
        }
    }
    pod["spec"]["topologySpreadConstraints"] = [
        {"topologyKey": "zone", "maxSkew": 1, "whenUnsatisfiable": "DoNotSchedule"}
    ]
    return pod


def test_the_next_replica_of_a_class_is_read_as_a_fresh_parse_would() -> None:
    specs = PodSpecs()
    first = specs.get(_replica("a"))
    others = [
        _replica("b", ownerReferences=[{"kind": "Job", "name": "j"}]),
        _replica("c", deletionTimestamp="2026-01-01T00:00:00Z", labels={"app": "web"}),
        {**_replica("d"), "status": {"phase": "Succeeded"}},
    ]
    others[0]["spec"]["nodeName"] = "n2"

    for pod in others:
        again = specs.get(pod)
        assert again == parse_pod(pod)
        assert again.raw is pod
        # Its class's part was not read again: the values are the first replica's.
        assert again.spreads is first.spreads
        assert again.anti_affinity is first.anti_affinity
    assert [specs.get(p).key for p in others] == ["ns/b", "ns/c", "ns/d"]


def test_the_replicas_of_a_class_share_one_label_set() -> None:
    # Equal labels in the same order are part of the class: its replicas read the first one's
    # dict (the topology index reads one label set per class), equal to their own.
    specs = PodSpecs()
    first = specs.get(_replica("a", labels={"app": "web", "tier": "1"}))
    again = _replica("b", labels={"app": "web", "tier": "1"})
    assert specs.get(again).labels is first.labels
    assert specs.get(again).labels == again["metadata"]["labels"]
    # The same labels in another order are another class, read with their own.
    other = _replica("c", labels={"tier": "1", "app": "web"})
    assert specs.get(other).labels is other["metadata"]["labels"]


def test_a_replica_whose_own_fields_are_unreadable_says_why() -> None:
    specs = PodSpecs()
    specs.get(_replica("a"))
    broken = _replica("b", ownerReferences=["not an object"])

    assert specs.get(broken).problem == parse_pod(broken).problem
    assert specs.get(broken).problem is not None


def test_a_class_key_tells_apart_values_that_read_alike() -> None:
    # The memo copies a class's parsed part on a hit, so equal keys must mean equal parts: a
    # number, its text, a bool and a float of it are different specs.
    values: list[object] = ["1", 1, 1.0, True, None, [1], {"1": 1}]
    keys = [class_parts(("ns", {"a": value})) for value in values]
    assert len(set(keys)) == len(values)
    # Equal parts built apart (not the same objects) share a key.
    assert class_parts(("ns", {"a": ["x", {"y": 2}]})) == class_parts(
        ("ns", {"a": ["x", {"y": 2}]})
    )
