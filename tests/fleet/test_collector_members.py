"""A served cluster's controllers reference each other, so once dropped they are freed only by
a collection that walks them: with the collector policy (``core/runtime/collector.py``) freezing
the heap, a member's stop asks for the whole walk that frees it."""

from __future__ import annotations

import gc
import weakref

import pytest

from karpenter_capi.core.kube import CLUSTERS
from karpenter_capi.core.runtime.collector import CollectorPolicy
from tests.fleet.world import FleetWorld


@pytest.mark.parametrize("asks", [True, False])
def test_a_dropped_member_is_freed_by_the_whole_walk_its_stop_asks_for(
    world: FleetWorld, monkeypatch: pytest.MonkeyPatch, asks: bool
) -> None:
    world.add_cluster("alpha")
    world.add_cluster("beta")
    world.start()
    assert world.fleet is not None
    operator = weakref.ref(world.fleet.members[world.key("alpha")].operator)
    if not asks:
        monkeypatch.setattr("karpenter_capi.core.fleet.members.request_whole_walk", lambda: None)
    with CollectorPolicy(world.clock, min_whole_walk_gap=0.0).applied() as policy:
        assert operator() is not None
        world.management.delete(CLUSTERS, "alpha", world.namespace("alpha"))
        world.advance(3)
        assert world.served() == [world.key("beta")]
        gc.collect()
        if asks:
            assert operator() is None
            assert policy.whole_walks == 1
        else:
            # Frozen, its cycles outlive it: what the stop's request is for.
            assert operator() is not None
            policy.request_whole_walk()
            gc.collect()
            assert operator() is None
