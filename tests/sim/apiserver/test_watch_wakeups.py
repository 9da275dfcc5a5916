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


def test_a_reader_blocked_in_its_wait_is_woken_by_each_write_and_none_is_lost(
    apiserver: InMemoryAPIServer,
) -> None:
    # A write notifies a stream's condition only while its reader waits on it: each write
    # here lands while the reader is blocked (it would sleep out its 60 s timeout if the
    # write did not wake it), and the last ones while it is busy delivering (found without
    # a notify, by its look at the log before it waits again).
    _namespaces(apiserver)
    stream = apiserver.watch(
        PODS, "a", resource_version=apiserver.resource_version, timeout_seconds=60
    )
    seen: list[str] = []
    arrived = threading.Condition()

    def read() -> None:
        for event in stream:
            with arrived:
                seen.append(event.object["metadata"]["name"])
                arrived.notify_all()

    def blocked() -> bool:
        with apiserver._lock:  # the flag is read and set under the server's lock
            return stream._waiting

    reader = threading.Thread(target=read)
    reader.start()
    for index in range(3):
        waited = 0
        while not blocked() and waited < 10_000:
            waited += 1
            threading.Event().wait(0.001)
        assert blocked()
        apiserver.create(PODS, _pod(f"p{index}", "a"))
        with arrived:
            assert arrived.wait_for(lambda n=index: len(seen) > n, 10)
    for index in range(3, 40):
        apiserver.create(PODS, _pod(f"p{index}", "a"))
    with arrived:
        assert arrived.wait_for(lambda: len(seen) == 40, 10)
    stream.close()
    reader.join(10)
    assert seen == [f"p{index}" for index in range(40)]
    assert stream.woken == 40
