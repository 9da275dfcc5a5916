"""In process: fault injection, dropped watches and non-blocking watches of the in-memory API."""

from __future__ import annotations

import threading

import pytest

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube.errors import InternalError, NotFound, Timeout, TooManyRequests
from karpenter_capi.core.kube.resources import CONFIGMAPS, MACHINES, PODS
from karpenter_capi.sim.apiserver import InMemoryAPIServer


def _configmap(name: str) -> dict[str, object]:
    return {"metadata": {"name": name, "namespace": "default"}, "data": {}}


def test_throttle_fails_the_given_number_of_times_with_retry_after(
    apiserver: InMemoryAPIServer,
) -> None:
    rule = apiserver.faults.throttle("create", "configmaps", retry_after_seconds=7, times=2)

    for _ in range(2):
        with pytest.raises(TooManyRequests) as raised:
            apiserver.create(CONFIGMAPS, _configmap("a"))
        assert raised.value.retry_after_seconds == 7
        assert raised.value.to_status()["details"]["retryAfterSeconds"] == 7
    apiserver.create(CONFIGMAPS, _configmap("a"))

    assert rule.hits == 2
    assert apiserver.faults.rules == []


def test_fault_matches_verb_resource_and_name(apiserver: InMemoryAPIServer) -> None:
    apiserver.create(CONFIGMAPS, _configmap("a"))
    apiserver.create(CONFIGMAPS, _configmap("b"))
    apiserver.faults.internal_error("get", "configmaps", name="a", times=None)

    for _ in range(3):
        with pytest.raises(InternalError):
            apiserver.get(CONFIGMAPS, "a", "default")
    assert apiserver.get(CONFIGMAPS, "b", "default")["metadata"]["name"] == "b"
    apiserver.list(CONFIGMAPS)  # other verbs are untouched
    apiserver.faults.clear()
    apiserver.get(CONFIGMAPS, "a", "default")


def test_fault_by_group_resource(apiserver: InMemoryAPIServer) -> None:
    apiserver.register_cluster_api()
    apiserver.faults.timeout("list", "machines.cluster.x-k8s.io")
    with pytest.raises(Timeout):
        apiserver.list(MACHINES)
    assert apiserver.list(MACHINES).items == []


def test_failed_write_changes_nothing(apiserver: InMemoryAPIServer) -> None:
    before = apiserver.resource_version
    apiserver.faults.internal_error("create", "*")
    with pytest.raises(InternalError):
        apiserver.create(CONFIGMAPS, _configmap("a"))
    assert apiserver.resource_version == before
    with pytest.raises(NotFound):
        apiserver.get(CONFIGMAPS, "a", "default")


def test_faults_on_eviction(apiserver: InMemoryAPIServer) -> None:
    apiserver.create(PODS, {"metadata": {"name": "p", "namespace": "default"}, "spec": {}})
    apiserver.faults.throttle("evict", "pods")
    with pytest.raises(TooManyRequests):
        apiserver.evict("p", "default")
    apiserver.evict("p", "default")
    assert apiserver.list(PODS).items == []


def test_unknown_verb_is_a_programming_error(apiserver: InMemoryAPIServer) -> None:
    with pytest.raises(ValueError, match="unknown verb"):
        apiserver.faults.throttle("destroy", "pods")


def test_watch_fault_raises_when_opening(apiserver: InMemoryAPIServer) -> None:
    apiserver.faults.throttle("watch", "pods")
    with pytest.raises(TooManyRequests):
        apiserver.watch(PODS)
    apiserver.watch(PODS, timeout_seconds=0).close()


def test_drop_watches_ends_open_streams_and_resume_loses_nothing(
    apiserver: InMemoryAPIServer,
) -> None:
    start = apiserver.list(CONFIGMAPS).resource_version
    stream = apiserver.watch(CONFIGMAPS, resource_version=start)
    received: list[str] = []
    done = threading.Event()

    def read() -> None:
        received.extend(e.object["metadata"]["name"] for e in stream)
        done.set()

    reader = threading.Thread(target=read)
    reader.start()
    apiserver.create(CONFIGMAPS, _configmap("a"))
    while not received:  # the reader has the first event before the connection drops
        done.wait(0.01)
    assert apiserver.faults.drop_watches() == 1
    reader.join(timeout=5)
    assert done.is_set()

    apiserver.create(CONFIGMAPS, _configmap("b"))
    resumed = apiserver.watch(CONFIGMAPS, resource_version=start, timeout_seconds=0)
    assert [e.object["metadata"]["name"] for e in resumed] == ["a", "b"]


def test_close_unblocks_a_blocked_reader(apiserver: InMemoryAPIServer) -> None:
    stream = apiserver.watch(CONFIGMAPS, resource_version=apiserver.resource_version)
    finished = threading.Event()

    def read() -> None:
        for _ in stream:
            pass
        finished.set()

    reader = threading.Thread(target=read)
    reader.start()
    stream.close()
    reader.join(timeout=5)
    assert finished.is_set()


def test_timeout_zero_delivers_what_is_there_and_ends(apiserver: InMemoryAPIServer) -> None:
    start = apiserver.resource_version
    apiserver.create(CONFIGMAPS, _configmap("a"))
    apiserver.create(CONFIGMAPS, _configmap("b"))

    events = list(apiserver.watch(CONFIGMAPS, resource_version=start, timeout_seconds=0))
    assert [(e.type, e.object["metadata"]["name"]) for e in events] == [
        ("ADDED", "a"),
        ("ADDED", "b"),
    ]
    assert (
        list(
            apiserver.watch(
                CONFIGMAPS, resource_version=apiserver.resource_version, timeout_seconds=0
            )
        )
        == []
    )


def test_timeout_zero_with_bookmarks_ends_with_the_resume_point(
    apiserver: InMemoryAPIServer,
) -> None:
    start = apiserver.resource_version
    apiserver.create(PODS, {"metadata": {"name": "p", "namespace": "default"}, "spec": {}})
    events = list(
        apiserver.watch(CONFIGMAPS, resource_version=start, allow_bookmarks=True, timeout_seconds=0)
    )
    assert [e.type for e in events] == ["BOOKMARK"]
    assert events[0].resource_version == apiserver.resource_version


def test_send_bookmarks_reaches_open_streams(apiserver: InMemoryAPIServer) -> None:
    stream = apiserver.watch(
        CONFIGMAPS, resource_version=apiserver.resource_version, allow_bookmarks=True
    )
    apiserver.create(PODS, {"metadata": {"name": "p", "namespace": "default"}, "spec": {}})
    apiserver.send_bookmarks()
    event = next(iter(stream))
    stream.close()
    assert event.type == "BOOKMARK"
    assert event.resource_version == apiserver.resource_version


def test_slow_reader_past_the_window_gets_410(apiserver: InMemoryAPIServer) -> None:
    apiserver.set_watch_history(2)
    stream = apiserver.watch(
        CONFIGMAPS, resource_version=apiserver.resource_version, timeout_seconds=5
    )
    iterator = iter(stream)
    apiserver.create(CONFIGMAPS, _configmap("a"))
    assert next(iterator).type == "ADDED"
    for name in ("b", "c", "d", "e"):
        apiserver.create(CONFIGMAPS, _configmap(name))
    # The reader asked for more only after its resume point fell out of the window.
    remaining = list(iterator)
    assert [e.type for e in remaining] == ["ERROR"]
    assert remaining[0].object["code"] == 410


def test_periodic_compaction_keeps_minutes_of_history_and_410s_older_resumes() -> None:
    clock = FakeClock()
    apiserver = InMemoryAPIServer(clock=clock)
    apiserver.set_compaction_interval(300)  # kube-apiserver's etcd compaction interval
    apiserver.create(CONFIGMAPS, _configmap("a"))
    at_a = apiserver.resource_version
    clock.advance(301)
    apiserver.create(CONFIGMAPS, _configmap("b"))  # compacts what came before the interval
    at_b = apiserver.resource_version
    clock.advance(301)
    apiserver.create(CONFIGMAPS, _configmap("c"))  # compacts up to ``b``'s revision

    def replay(since: str) -> list[str]:
        events = apiserver.watch(CONFIGMAPS, resource_version=since, timeout_seconds=0)
        return ["410" if e.type == "ERROR" else e.object["metadata"]["name"] for e in events]

    assert replay(at_a) == ["410"]
    assert replay(at_b) == ["c"]
    # Without compaction, history is kept by count alone.
    apiserver.set_compaction_interval(None)
    clock.advance(3600)
    apiserver.create(CONFIGMAPS, _configmap("d"))
    assert replay(at_b) == ["c", "d"]


def test_deleting_a_crd_ends_watches_of_its_resource(apiserver: InMemoryAPIServer) -> None:
    apiserver.register_cluster_api()
    stream = apiserver.watch(MACHINES, resource_version=apiserver.resource_version)
    crds = apiserver.resource("apiextensions.k8s.io", "v1", "customresourcedefinitions")
    apiserver.delete(crds, "machines.cluster.x-k8s.io")
    assert list(stream) == []
    with pytest.raises(NotFound):
        apiserver.watch(MACHINES)


def test_idle_watch_gets_periodic_bookmarks(apiserver: InMemoryAPIServer) -> None:
    apiserver.bookmark_interval_seconds = 0.01
    stream = apiserver.watch(
        CONFIGMAPS, resource_version=apiserver.resource_version, allow_bookmarks=True
    )
    iterator = iter(stream)
    first, second = next(iterator), next(iterator)
    stream.close()
    assert [first.type, second.type] == ["BOOKMARK", "BOOKMARK"]
