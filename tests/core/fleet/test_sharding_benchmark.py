"""``benchmarks/sharding.py`` at a small size: its figures hold the properties the issue names."""

from __future__ import annotations

from benchmarks import sharding


def test_the_sharding_benchmark_at_twelve_clusters() -> None:
    figures = sharding.measure(12, 3)

    assert figures["loads"] == [4, 4, 4]
    assert figures["double_held"] == 0
    assert figures["killed_unserved_left"] == 0
    assert figures["killed_served_again_max_s"] <= figures["killed_served_again_bound_s"]
    assert figures["needless_moves_on_kill"] == 0
    assert figures["join_moved"] == figures["join_moved_minimum"] == 4
    assert figures["held_by_new_replica"] == 4
