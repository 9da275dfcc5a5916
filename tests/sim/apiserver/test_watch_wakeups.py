"""A write wakes only the watches of its resource in its namespace (and that resource's
cluster-wide watches), not every open watch of the server. Counted, not timed."""

from __future__ import annotations

import threading

from karpenter_capi.core.kube.resources import CONFIGMAPS, NAMESPACES, NODES, PODS
from karpenter_capi.sim.apiserver import InMemoryAPIServer


def _namespaces(apiserver: InMemoryAPIServer) -> None:
    for name in ("a", "b"):
        apiserver.create(NAMESPACES, {"metadata": {"name": name}})


def _pod(name: str, namespace: str) -> dict[str, object]:
    return {"metadata": {"name": name, "namespace": namespace}, "spec": {}}


def test_a_pod_write_in_one_namespace_wakes_only_its_watches(
    apiserver: InMemoryAPIServer,
) -> None:
    _namespaces(apiserver)
    start = apiserver.resource_version
    pods_a = apiserver.watch(PODS, "a", resource_version=start, timeout_seconds=30)
    pods_b = apiserver.watch(PODS, "b", resource_version=start, timeout_seconds=30)
    pods_all = apiserver.watch(PODS, resource_version=start, timeout_seconds=30)
    nodes = apiserver.watch(NODES, resource_version=start, timeout_seconds=30)
    configmaps_a = apiserver.watch(CONFIGMAPS, "a", resource_version=start, timeout_seconds=30)

    apiserver.create(PODS, _pod("p1", "a"))
    apiserver.create(PODS, _pod("p2", "a"))

    assert pods_a.woken == 2
    assert pods_all.woken == 2
    assert pods_b.woken == 0
    assert nodes.woken == 0
    assert configmaps_a.woken == 0
    for stream in (pods_a, pods_b, pods_all, nodes, configmaps_a):
        stream.close()


def test_a_waiting_watch_still_gets_its_events_and_ends_on_close(
    apiserver: InMemoryAPIServer,
) -> None:
    _namespaces(apiserver)
    start = apiserver.resource_version
    stream = apiserver.watch(PODS, "a", resource_version=start, timeout_seconds=30)
    other = apiserver.watch(NODES, resource_version=start, timeout_seconds=30)
    seen: list[str] = []
    got = threading.Event()

    def read(watch: object, into: list[str]) -> None:
        for event in watch:  # type: ignore[attr-defined]
            into.append(event.object["metadata"]["name"])
            got.set()

    reader = threading.Thread(target=read, args=(stream, seen))
    idle: list[str] = []
    idle_reader = threading.Thread(target=read, args=(other, idle))
    reader.start()
    idle_reader.start()
    apiserver.create(PODS, _pod("elsewhere", "b"))
    apiserver.create(PODS, _pod("here", "a"))
    assert got.wait(10)
    stream.close()
    other.close()  # a stream blocked with nothing to read ends when closed
    reader.join(10)
    idle_reader.join(10)
    assert not reader.is_alive()
    assert not idle_reader.is_alive()
    assert seen == ["here"]
    assert idle == []
    assert other.woken == 0
