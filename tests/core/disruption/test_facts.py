"""A disruption pass reads each version of a pod, Node and NodeClaim once, however many passes
look at it, and a pass over an unchanged cluster decides exactly as the first (issue 27)."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import pytest

from benchmarks.consolidation import build
from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.disruption.facts import ClaimFacts, NodeFacts, PodFacts
from karpenter_capi.core.disruption.passfacts import pass_facts
from karpenter_capi.core.disruption.planner import PassReport, PassSettings, plan
from karpenter_capi.core.provisioning.state import ClusterSnapshot, ParsedCluster
from karpenter_capi.core.scheduling.hostports import HostPort, HostPortUsage
from karpenter_capi.core.scheduling.podspec import PodSpec
from karpenter_capi.core.scheduling.podspec_class import class_parts

from .test_parse_once import _scaled_down_and_consolidated


def _counting(monkeypatch: pytest.MonkeyPatch, counts: Counter[tuple[str, str, str]]) -> None:
    for kind, cls in (("pod", PodFacts), ("node", NodeFacts), ("claim", ClaimFacts)):
        real: Callable[[Mapping[str, Any]], Any] = cls.read

        def read(obj: Mapping[str, Any], real: Any = real, kind: str = kind) -> Any:
            meta = obj.get("metadata") or {}
            counts[(kind, str(meta.get("uid")), str(meta.get("resourceVersion")))] += 1
            return real(obj)

        monkeypatch.setattr(cls, "read", staticmethod(read))
    # A pod's facts taken from its parse (one that could not be parsed is read in full).
    real_of = PodFacts.of

    def of(spec: PodSpec, labels: Any = None) -> PodFacts:
        if spec.problem is None:
            counts[("pod", spec.uid, str(spec.raw["metadata"]["resourceVersion"]))] += 1
        return real_of(spec, labels)

    monkeypatch.setattr(PodFacts, "of", staticmethod(of))


def test_each_object_version_is_read_once_across_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    counts: Counter[tuple[str, str, str]] = Counter()
    _counting(monkeypatch, counts)
    world = _scaled_down_and_consolidated()
    assert world.events("DisruptionTerminating")
    kinds = {kind for kind, _, _ in counts}
    assert kinds == {"pod", "node", "claim"}, "the passes read no facts through the cache"
    assert [version for version, count in counts.items() if count > 1] == []


_NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def _cluster() -> tuple[ClusterSnapshot, list[Any]]:
    """The consolidation benchmark's fragmented cluster, small."""
    snapshot, inventories, _ = build(60, seed=3)
    return snapshot, inventories


def _pass(snapshot: ClusterSnapshot, inventories: list[Any], parsed: ParsedCluster | None) -> Any:
    report: PassReport = plan(
        snapshot,
        inventories,
        [],
        now=datetime(2026, 11, 23, 12, 0, tzinfo=UTC),
        clock=FakeClock(),
        settings=PassSettings(evaluate_all=True),
        parsed=parsed,
    )
    return (
        report.summary(),
        sorted(report.excluded.items()),
        sorted(report.kept.items()),
        [(c.name, c.price, c.move_cost, c.disruption_cost) for c in report.candidates],
        {pool: (t.price, t.move_cost) for pool, t in report.totals.items()},
    )


def test_a_pass_over_an_unchanged_cluster_decides_as_a_fresh_one() -> None:
    snapshot, inventories = _cluster()
    fresh = _pass(snapshot, inventories, None)
    parsed = ParsedCluster()
    first = _pass(snapshot, inventories, parsed)
    facts = pass_facts(parsed)
    reads = facts.reads
    later = _pass(snapshot, inventories, parsed)
    assert first == fresh
    assert later == fresh
    assert facts.reads == reads, "an unchanged cluster was read again"
    assert facts.reused >= 4  # pods by node, nodes, claims, move costs, the simulator's reading


def test_a_changed_cluster_is_read_again_where_it_changed() -> None:
    snapshot, inventories = _cluster()
    parsed = ParsedCluster()
    _pass(snapshot, inventories, parsed)
    # One pod gone from its node: a new list of pods, most of them the same versions.
    pods = snapshot.pods[1:]
    changed = ClusterSnapshot(
        pods=pods, nodes=snapshot.nodes, nodeclaims=snapshot.nodeclaims, daemonsets=[]
    )
    facts = pass_facts(parsed)
    reads = facts.reads
    assert _pass(changed, inventories, parsed) == _pass(changed, inventories, None)
    assert facts.reads == reads, "objects whose version did not change were read again"


def test_a_pass_reads_the_new_object_versions_first_and_says_so() -> None:
    snapshot, inventories = _cluster()
    parsed = ParsedCluster()
    first = plan(snapshot, inventories, [], now=_NOW, clock=FakeClock(), parsed=parsed)
    objects = len(snapshot.pods) + len(snapshot.nodes) + len(snapshot.nodeclaims)
    assert first.objects_read == objects
    # Every pod not finished was parsed by the read, before the pass needed it.
    assert parsed.specs.parses == len(snapshot.pods)
    again = plan(snapshot, inventories, [], now=_NOW, clock=FakeClock(), parsed=parsed)
    assert again.objects_read == 0
    # Two pods updated (a new resourceVersion): those two are read, and parsed, again.
    pods = [
        {**p, "metadata": {**p["metadata"], "resourceVersion": "2"}} if i < 2 else p
        for i, p in enumerate(snapshot.pods)
    ]
    changed = ClusterSnapshot(
        pods=pods, nodes=snapshot.nodes, nodeclaims=snapshot.nodeclaims, daemonsets=[]
    )
    later = plan(changed, inventories, [], now=_NOW, clock=FakeClock(), parsed=parsed)
    assert later.objects_read == 2
    assert parsed.specs.parses == len(snapshot.pods) + 2
    assert later.summary() == first.summary()


def test_class_parts_keep_apart_what_json_keeps_apart() -> None:
    assert class_parts({"a": 1}) != class_parts({"a": 1.0})
    assert class_parts({"a": 1}) != class_parts({"a": True})
    assert class_parts({"a": [1]}) != class_parts({"a": {"1": 1}})
    assert class_parts({"a": None}) != class_parts({"a": "None"})
    # Only a miss, never a wrong hit: the parts are built the same way for every pod.
    assert class_parts({"a": (1, "x")}) != class_parts({"a": [1, "x"]})


def test_class_parts_of_equal_parts_are_equal_however_their_objects_are_shared() -> None:
    # As two pods decoded apart: strings neither shared nor interned, against one shared
    # (marshal's later formats write a shared or interned string differently).
    name = "".join(["app", "-", "0"])
    apart = {"labels": {"app": "".join(["app", "-", "0"])}, "tiers": ["".join(["a", "pp-0"])]}
    shared = {"labels": {"app": name}, "tiers": [name]}
    interned = {"labels": {"app": sys.intern("app-0")}, "tiers": [sys.intern("app-0")]}
    assert class_parts(apart) == class_parts(shared) == class_parts(interned)


def test_class_parts_refuse_what_is_not_json() -> None:
    with pytest.raises(ValueError, match="unmarshallable"):
        class_parts({"a": object()})


def test_a_copied_host_port_usage_is_independent() -> None:
    seed = HostPortUsage([HostPort("", "TCP", 80)])
    copy = seed.copy()
    copy.add([HostPort("", "TCP", 443)])
    seed.add([HostPort("", "UDP", 53)])
    assert [p.port for p in seed] == [80, 53]
    assert [p.port for p in copy] == [80, 443]


def _pod(name: str, *, labels: dict[str, str], **parts: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "default",
        "uid": f"uid-{name}",
        "resourceVersion": "1",
        "labels": labels,
        "creationTimestamp": "2026-11-23T10:00:00Z",
        **parts.pop("meta", {}),
    }
    spec: dict[str, Any] = {
        "nodeName": "node-a",
        "containers": [{"name": "app", "resources": {"requests": {"cpu": "100m"}}}],
        **parts.pop("spec", {}),
    }
    return {"metadata": meta, "spec": spec, "status": {"phase": "Running", **parts}}


def _varied_pods() -> list[dict[str, Any]]:
    """Pods of one class and of others, and every way a pod's facts depart from a plain one."""
    owner = {"kind": "ReplicaSet", "name": "web-1", "controller": True}
    return [
        _pod("web-a", labels={"app": "web", "tier": "a"}, meta={"ownerReferences": [owner]}),
        # The same class, its labels listed in another order.
        _pod("web-b", labels={"tier": "a", "app": "web"}, meta={"ownerReferences": [owner]}),
        _pod("web-c", labels={"app": "web", "tier": "b"}),
        _pod(
            "daemon",
            labels={"app": "daemon"},
            meta={"ownerReferences": [{"kind": "DaemonSet", "name": "d", "controller": True}]},
        ),
        _pod("mirror", labels={}, meta={"annotations": {"kubernetes.io/config.mirror": "x"}}),
        _pod("kept", labels={}, meta={"annotations": {"karpenter.sh/do-not-disrupt": "true"}}),
        _pod("for-a-while", labels={}, meta={"annotations": {"karpenter.sh/do-not-disrupt": "1h"}}),
        _pod(
            "dear",
            labels={},
            meta={"annotations": {"controller.kubernetes.io/pod-deletion-cost": "2000000000"}},
        ),
        _pod("urgent", labels={}, spec={"priority": 1000000000}),
        _pod("leaving", labels={}, meta={"deletionTimestamp": "2026-11-23T11:00:00Z"}),
        _pod("done", labels={}, phase="Succeeded"),
        _pod("pending", labels={"app": "web", "tier": "a"}, spec={"nodeName": None}),
        # A spec the API server would refuse: its parse holds no owners, so read in full.
        _pod("broken", labels={}, spec={"tolerations": "all"}, meta={"ownerReferences": [owner]}),
    ]


def test_facts_taken_from_the_parse_are_the_facts_read_from_the_pod() -> None:
    pods = _varied_pods()
    snapshot = ClusterSnapshot(pods=pods, nodes=[], nodeclaims=[], daemonsets=[])
    parsed = ParsedCluster()
    facts = pass_facts(parsed)
    facts.begin(snapshot)
    facts.read_all(snapshot, parsed)
    assert facts.pod_facts() == [PodFacts.read(pod) for pod in pods]
    # Parsed once each, but the finished one (the read skips it), and a class's sorted labels
    # shared by its pods.
    assert parsed.specs.parses == len(pods) - 1
    web_a, web_b = facts.pod_facts()[:2]
    assert web_a.labels is web_b.labels
    for pod in pods:
        assert PodFacts.of(parsed.specs.get(pod)) == PodFacts.read(pod)
