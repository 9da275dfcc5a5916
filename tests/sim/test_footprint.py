"""The footprint walk: what a root retains, where it grows, and where the walk stops."""

from __future__ import annotations

from karpenter_capi.core.kube.resources import CONFIGMAPS
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.footprint import footprint, process_memory


class Cache:
    def __init__(self, server: InMemoryAPIServer) -> None:
        self.client = server  # the simulator's: the walk stops there
        self.seen: dict[str, list[str]] = {}


def test_a_growing_dict_is_named_by_its_place_and_the_simulator_is_not_counted() -> None:
    server = InMemoryAPIServer()
    for n in range(500):
        server.create(
            CONFIGMAPS,
            {"metadata": {"name": f"cm-{n}"}, "data": {"k": "v" * 100}},
            "default",
        )
    cache = Cache(server)
    before = footprint([("root", cache)])
    for n in range(100):
        cache.seen[f"pod-{n}"] = ["a", "b"]
    after = footprint([("root", cache)])

    assert before.containers["Cache.seen"] == 0
    # 100 keys, and the two items of each list kept there.
    assert after.containers["Cache.seen"] == 300
    assert after.bytes > before.bytes
    assert before.grown(after) == [("Cache.seen", 0, 300)]
    # The 500 ConfigMaps behind the client are the server's, not the cache's.
    assert after.bytes < 100_000
    served = footprint([("server", server)], stop=lambda _: False)
    assert served.bytes > 500 * 100


def test_process_memory_reads_the_resident_set() -> None:
    memory = process_memory()
    assert memory["rss_bytes"] > 10 * 1024 * 1024
    assert memory["python_blocks"] > 0
    assert memory["gc_objects"] > 0
