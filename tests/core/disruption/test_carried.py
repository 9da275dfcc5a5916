"""A pass finds which objects are the very objects of the last one, wherever they moved."""

from __future__ import annotations

import copy

from benchmarks import consolidation as bench
from karpenter_capi.core.disruption import carried
from karpenter_capi.core.disruption.passfacts import PassFacts
from karpenter_capi.core.provisioning.state import ClusterSnapshot


def _objects(count: int) -> list[dict[str, int]]:
    return [{"n": n} for n in range(count)]


def test_updated_objects_in_place_are_new() -> None:
    old = _objects(20)
    new = list(old)
    new[3] = {"n": 3}
    found = carried.positions(old, new)
    assert found == [carried.NEW if i == 3 else i for i in range(20)]
    assert carried.new_ones(found) == [3]


def test_objects_added_removed_and_moved_are_found_by_identity() -> None:
    old = _objects(10)
    added = {"n": 99}
    new = [old[9], old[0], added, *old[2:5]]
    found = carried.positions(old, new)
    assert found == [9, 0, carried.NEW, 2, 3, 4]
    assert carried.carried([f"v{i}" for i in range(10)], found, None) == [
        "v9",
        "v0",
        None,
        "v2",
        "v3",
        "v4",
    ]


def test_many_updates_in_place_are_found_all_the_same() -> None:
    old = _objects(16)
    new = [o if i % 2 else {"n": i} for i, o in enumerate(old)]
    assert carried.positions(old, new) == [carried.NEW if i % 2 == 0 else i for i in range(16)]


def test_a_relist_reads_no_version_again_and_a_change_only_itself() -> None:
    snapshot, _, _ = bench.build(20, seed=3)
    facts = PassFacts()
    facts.begin(snapshot)
    facts.read_all(snapshot, None)
    first = facts.reads
    assert first == len(snapshot.pods) + len(snapshot.nodes) + len(snapshot.nodeclaims)
    # A relist: every object made anew, the same versions (new identities, nothing changed).
    relisted = ClusterSnapshot(
        pods=copy.deepcopy(snapshot.pods),
        nodes=copy.deepcopy(snapshot.nodes),
        nodeclaims=copy.deepcopy(snapshot.nodeclaims),
        daemonsets=[],
    )
    assert facts.begin(relisted)
    # A pod updated, another gone, one added: those alone are read.
    pods = list(relisted.pods)
    updated = copy.deepcopy(pods[0])
    updated["metadata"]["resourceVersion"] = "2"
    added = copy.deepcopy(pods[1])
    added["metadata"].update(name="added", uid="uid-added")
    changed = ClusterSnapshot(
        pods=[updated, *pods[2:], added],
        nodes=relisted.nodes,
        nodeclaims=relisted.nodeclaims,
        daemonsets=[],
    )
    assert not facts.begin(changed)
    facts.read_all(changed, None)
    assert facts.reads == first + 2
    fresh = PassFacts()
    fresh.begin(changed)
    fresh.read_all(changed, None)
    assert list(facts.pods(changed.pods)) == list(fresh.pods(changed.pods))
    assert list(facts.nodes(changed.nodes)) == list(fresh.nodes(changed.nodes))
    assert list(facts.claims(changed.nodeclaims)) == list(fresh.claims(changed.nodeclaims))
    assert facts.versions == fresh.versions
