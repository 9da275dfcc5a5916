"""The simulator's set-up takes each node's pods' parses from the pass's read.

Why: a first pass over 10,000 nodes parses its 70,000 pods in ``PassFacts.read_all``; summing
each node's requests (``state.existing_nodes``) and indexing its pods for the solver view
(``ExistingView``) looked each parse up again by version. They now take the read's, which
must be the very parses a lookup gives, handed only for the very pod objects read, and
forgotten once the simulator is set up (kept, they were references for the collector to walk).
"""

from __future__ import annotations

import copy
import gc
from datetime import UTC, datetime

from benchmarks.consolidation import build, touched
from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.disruption.passfacts import PassFacts, pass_facts
from karpenter_capi.core.disruption.planner import PassSettings, plan
from karpenter_capi.core.provisioning.inventory import NodePoolInventory
from karpenter_capi.core.provisioning.state import (
    ClusterSnapshot,
    ParsedCluster,
    bound_by_node,
    existing_nodes,
)
from karpenter_capi.core.scheduling.existing_view import ExistingView
from karpenter_capi.core.scheduling.podspec import PodSpecs, version_of


def _read_cluster() -> tuple[ClusterSnapshot, list[NodePoolInventory], ParsedCluster, PassFacts]:
    """A 40-node benchmark cluster, and a pass's read of it (every object, as a first pass)."""
    snapshot, inventories, _ = build(40, seed=3)
    parsed = ParsedCluster()
    facts = pass_facts(parsed)
    facts.begin(snapshot)
    facts.read_all(snapshot, parsed)
    return snapshot, inventories, parsed, facts


def test_the_read_hands_each_node_s_parses_for_its_very_pods_only() -> None:
    snapshot, _, parsed, facts = _read_cluster()
    bound = bound_by_node(snapshot.pods)
    assert bound
    for pods in bound.values():
        found = facts.parses(pods)
        assert found is not None
        versions, specs = found
        assert versions == [version_of(pod) for pod in pods]
        assert specs == [parsed.specs.get(pod) for pod in pods]
        assert all(spec.raw is pod for spec, pod in zip(specs, pods, strict=True))
        # Equal pods that are not the objects read: looked up, not handed.
        assert facts.parses([copy.deepcopy(pod) for pod in pods]) is None
    facts.done_reading()
    assert all(facts.parses(pods) is None for pods in bound.values())


def _plan(snapshot: object, inventories: list[object], parsed: ParsedCluster) -> object:
    report = plan(
        snapshot,  # type: ignore[arg-type]
        inventories,  # type: ignore[arg-type]
        [],
        now=datetime(2026, 11, 23, 12, 0, tzinfo=UTC),
        clock=FakeClock(),
        settings=PassSettings(evaluate_all=True),
        parsed=parsed,
    )
    return (report.summary(), [(c.name, c.price) for c in report.candidates])


def test_a_pass_forgets_the_read_s_parses_and_decides_as_without_them() -> None:
    snapshot, inventories, _ = build(40, seed=3)
    parsed = ParsedCluster()
    first = _plan(snapshot, inventories, parsed)
    facts = pass_facts(parsed)
    bound = bound_by_node(snapshot.pods)
    assert all(facts.parses(pods) is None for pods in bound.values())
    # A changed cluster: the carried pods are not read again, so the changed nodes' pods are
    # looked up; the pass decides as one over the same cluster from scratch.
    changed = touched(snapshot, 0.2, seed=5)
    again = _plan(changed, inventories, parsed)
    assert again == _plan(changed, inventories, ParsedCluster())
    assert first == _plan(snapshot, inventories, ParsedCluster())


def test_a_view_from_the_read_s_parses_is_the_view_from_lookups() -> None:
    snapshot, inventories, parsed, facts = _read_cluster()
    nodes = existing_nodes(
        snapshot, inventories, {}, parsed, parses=lambda _, pods: facts.parses(pods)
    )
    unused = PodSpecs()
    given = ExistingView(nodes, unused, parses=lambda n: facts.specs_of(n.pods))
    assert unused.parses == 0, "a node's pods were looked up though the read handed them"
    looked_up = ExistingView(nodes, PodSpecs())
    assert given.pods.buckets == looked_up.pods.buckets
    assert given.pods.where == looked_up.pods.where
    assert given.pods.shapes == looked_up.pods.shapes
    assert [n.name for n in given.pods.nodes] == [n.name for n in looked_up.pods.nodes]
    assert [e.specs for e in given._entries] == [e.specs for e in looked_up._entries]
    # The sums made from the read's parses are those made by looking each pod up.
    summed = existing_nodes(snapshot, inventories, {}, ParsedCluster())
    assert [(n.name, n.requested) for n in nodes] == [(n.name, n.requested) for n in summed]


def test_what_is_kept_per_node_leaves_the_collector_nothing_to_walk_but_the_values() -> None:
    # A pass over 10,000 nodes kept a (version, value) pair per node and cache, and each
    # ExistingNode's key held the empty nomination set: objects the collector walked twice
    # after the read. The versions and keys are now strings alone, untracked once collected,
    # and a node read again with nothing changed is still the one kept.
    snapshot, inventories, _ = build(40, seed=3)
    parsed = ParsedCluster()
    nodes = existing_nodes(snapshot, inventories, {}, parsed)
    # A tuple holding a tuple still tracked stays tracked until a later collection.
    gc.collect()
    gc.collect()
    kept = (parsed._labels, parsed._allocatable, parsed._existing)
    assert all(by_node.versions for by_node in kept)
    assert not any(gc.is_tracked(v) for by_node in kept for v in by_node.versions.values())
    again = existing_nodes(snapshot, inventories, {}, parsed)
    assert all(a is b for a, b in zip(again, nodes, strict=True))
    # A nomination is part of the key: the node nominated to is made again, the others kept.
    claim = str(snapshot.nodeclaims[0]["metadata"]["name"])
    nominated = existing_nodes(snapshot, inventories, {claim: frozenset({"ns/p"})}, parsed)
    assert sum(a is not b for a, b in zip(nominated, nodes, strict=True)) == 1
