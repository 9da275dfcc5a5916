"""In process: the in-memory API under concurrent writers and readers loses no update."""

from __future__ import annotations

import threading
from typing import Any

from karpenter_capi.core.kube.errors import Conflict
from karpenter_capi.core.kube.resources import CONFIGMAPS, PODS
from karpenter_capi.sim.apiserver import InMemoryAPIServer

THREADS = 6
INCREMENTS = 40


def _increment(apiserver: InMemoryAPIServer, conflicts: list[int]) -> None:
    """Read-modify-write with a resourceVersion precondition, retrying on 409."""
    for _ in range(INCREMENTS):
        while True:
            current = apiserver.get(CONFIGMAPS, "counter", "default")
            value = int(current["data"]["value"])
            try:
                apiserver.update(CONFIGMAPS, {**current, "data": {"value": str(value + 1)}})
                break
            except Conflict:
                conflicts.append(1)


def test_optimistic_increments_from_many_threads_lose_nothing(
    apiserver: InMemoryAPIServer,
) -> None:
    apiserver.create(
        CONFIGMAPS,
        {"metadata": {"name": "counter", "namespace": "default"}, "data": {"value": "0"}},
    )
    start = apiserver.resource_version
    conflicts: list[int] = []
    workers = [
        threading.Thread(target=_increment, args=(apiserver, conflicts)) for _ in range(THREADS)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()

    final = apiserver.get(CONFIGMAPS, "counter", "default")
    assert final["data"]["value"] == str(THREADS * INCREMENTS)
    # Every successful write is one event, in resourceVersion order, each one higher.
    events = list(apiserver.watch(CONFIGMAPS, resource_version=start, timeout_seconds=0))
    assert [int(e.object["data"]["value"]) for e in events] == list(
        range(1, THREADS * INCREMENTS + 1)
    )


def test_concurrent_creates_and_a_live_watcher(apiserver: InMemoryAPIServer) -> None:
    start = apiserver.resource_version
    total = THREADS * INCREMENTS
    seen: list[str] = []
    stream = apiserver.watch(PODS, resource_version=start, timeout_seconds=30)

    def watch() -> None:
        for event in stream:
            seen.append(event.object["metadata"]["name"])
            if len(seen) == total:
                break
        stream.close()

    def create(worker: int) -> None:
        for i in range(INCREMENTS):
            apiserver.create(
                PODS, {"metadata": {"name": f"w{worker}-{i}", "namespace": "default"}, "spec": {}}
            )

    watcher = threading.Thread(target=watch)
    watcher.start()
    creators = [threading.Thread(target=create, args=(w,)) for w in range(THREADS)]
    for creator in creators:
        creator.start()
    for creator in creators:
        creator.join()
    watcher.join(timeout=30)

    assert len(apiserver.list(PODS).items) == total
    assert sorted(seen) == sorted(p["metadata"]["name"] for p in apiserver.list(PODS).items)


def test_returned_objects_are_private_copies(apiserver: InMemoryAPIServer) -> None:
    body: dict[str, Any] = {
        "metadata": {"name": "c", "namespace": "default", "labels": {"a": "1"}},
        "data": {},
    }
    created = apiserver.create(CONFIGMAPS, body)
    body["metadata"]["labels"]["a"] = "changed-by-caller"
    created["metadata"]["labels"]["a"] = "changed-too"
    apiserver.list(CONFIGMAPS).items[0]["metadata"]["labels"]["a"] = "and-again"

    assert apiserver.get(CONFIGMAPS, "c", "default")["metadata"]["labels"] == {"a": "1"}
