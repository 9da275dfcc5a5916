"""A disruption pass reads each version of a pod, Node and NodeClaim once, however many passes
look at it, and a pass over an unchanged cluster decides exactly as the first (issue 27)."""

from __future__ import annotations

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
    # Keyed by marshal, a tuple is not a list: pods read from the API hold lists, and parts
    # written apart only cost a full parse (a miss), never a wrong copy.
    assert class_parts({"a": [1, "x"]}) == class_parts({"a": [1, "x"]})


def test_a_copied_host_port_usage_is_independent() -> None:
    seed = HostPortUsage([HostPort("", "TCP", 80)])
    copy = seed.copy()
    copy.add([HostPort("", "TCP", 443)])
    seed.add([HostPort("", "UDP", 53)])
    assert [p.port for p in seed] == [80, 53]
    assert [p.port for p in copy] == [80, 443]
