"""The informer against the in-memory API server, driven step by step on a fake clock.

These are the behaviours a controller notices: the cache holds what the cluster holds, every
change reaches the handlers exactly once, a dropped connection costs no relist, a compacted
history costs a relist that still reports what was deleted meanwhile, and an unhealthy server
is retried with growing, jittered delays.
"""

from __future__ import annotations

import logging
from typing import Any, cast

import pytest
from pydantic import BaseModel, ConfigDict

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube.client import KubeClient
from karpenter_capi.core.kube.discovery import capi_resources
from karpenter_capi.core.kube.errors import TooManyRequests
from karpenter_capi.core.kube.indexes import (
    BY_MACHINE_DEPLOYMENT,
    BY_NODE_NAME,
    BY_OWNER_UID,
    BY_PROVIDER_ID,
    MACHINE_INDEXERS,
    POD_INDEXERS,
    index_by,
)
from karpenter_capi.core.kube.informer import Informer
from karpenter_capi.core.kube.resources import NODES, PODS
from karpenter_capi.sim.apiserver import InMemoryAPIServer

from .recording import RecordingClient

JsonObject = dict[str, Any]


def pod(name: str, *, node: str | None = None, labels: dict[str, str] | None = None) -> JsonObject:
    spec: JsonObject = {"containers": [{"name": "app", "image": "nginx"}]}
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels or {}},
        "spec": spec,
    }


class Recorder:
    """Handler callbacks that log what they saw as ``(verb, name)`` tuples."""

    def __init__(self, informer: Informer[JsonObject] | None = None) -> None:
        self.events: list[tuple[str, str]] = []
        self.updates: list[tuple[JsonObject, JsonObject]] = []
        self.synced_during_add: list[bool] = []
        self._informer = informer

    def on_add(self, obj: JsonObject) -> None:
        self.events.append(("add", obj["metadata"]["name"]))
        if self._informer is not None:
            self.synced_during_add.append(self._informer.has_synced())

    def on_update(self, old: JsonObject, new: JsonObject) -> None:
        self.events.append(("update", new["metadata"]["name"]))
        self.updates.append((old, new))

    def on_delete(self, obj: JsonObject) -> None:
        self.events.append(("delete", obj["metadata"]["name"]))

    def attach(self, informer: Informer[Any]) -> None:
        informer.add_handler(self.on_add, self.on_update, self.on_delete)


def settle(informer: Informer[Any], limit: int = 100) -> None:
    """Step until a step reports that nothing happened."""
    for _ in range(limit):
        if not informer.step():
            return
    raise AssertionError("informer never settled")


def names(informer: Informer[JsonObject]) -> list[str]:
    return sorted(obj["metadata"]["name"] for obj in informer.store.list())


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def make_informer(
    server: InMemoryAPIServer, clock: FakeClock, **kwargs: Any
) -> tuple[Informer[JsonObject], RecordingClient]:
    client = RecordingClient(cast(KubeClient, server))
    informer = Informer(cast(KubeClient, client), PODS, clock=clock, rand=lambda: 0.5, **kwargs)
    return informer, client


def test_paginated_initial_list_fills_the_cache_before_has_synced(
    apiserver: InMemoryAPIServer, clock: FakeClock
) -> None:
    for i in range(7):
        apiserver.create(PODS, pod(f"p{i}"))
    informer, client = make_informer(apiserver, clock, page_size=3)
    recorder = Recorder(informer)
    recorder.attach(informer)

    assert not informer.has_synced()
    assert informer.step()  # page 1
    assert informer.step()  # page 2
    assert not informer.has_synced()
    assert len(informer.store) == 0  # pages are not applied piecemeal
    assert informer.step()  # page 3: the list is complete
    assert informer.has_synced()

    assert [(c.limit, c.continue_token is None) for c in client.lists] == [
        (3, True),
        (3, False),
        (3, False),
    ]
    assert names(informer) == [f"p{i}" for i in range(7)]
    assert sorted(recorder.events) == [("add", f"p{i}") for i in range(7)]
    # The initial handlers ran before has_synced turned true.
    assert recorder.synced_during_add == [False] * 7
    assert informer.last_sync_resource_version != ""


def test_watch_events_reach_handlers_in_order(
    apiserver: InMemoryAPIServer, clock: FakeClock
) -> None:
    informer, client = make_informer(apiserver, clock)
    recorder = Recorder()
    recorder.attach(informer)
    settle(informer)
    assert informer.has_synced()
    listed_at = informer.last_sync_resource_version

    apiserver.create(PODS, pod("a"))
    apiserver.patch(PODS, "a", {"metadata": {"labels": {"tier": "web"}}}, "default")
    apiserver.create(PODS, pod("b"))
    apiserver.delete(PODS, "a", "default")
    assert informer.step()
    assert not informer.step()

    assert recorder.events == [("add", "a"), ("update", "a"), ("add", "b"), ("delete", "a")]
    old, new = recorder.updates[0]
    assert old["metadata"]["labels"] == {}
    assert new["metadata"]["labels"] == {"tier": "web"}
    assert names(informer) == ["b"]
    # The watch started at the list's resourceVersion, with bookmarks asked for.
    assert client.watches[0].resource_version == listed_at
    assert all(call.allow_bookmarks for call in client.watches)
    assert len(client.lists) == 1


def test_watch_resumes_after_a_dropped_connection_without_relisting(
    apiserver: InMemoryAPIServer, clock: FakeClock
) -> None:
    informer, client = make_informer(apiserver, clock)
    recorder = Recorder()
    recorder.attach(informer)
    settle(informer)

    apiserver.create(PODS, pod("a"))
    settle(informer)
    resume_from = informer.last_sync_resource_version
    watches_before = len(client.watches)
    apiserver.faults.drop_watches()
    apiserver.create(PODS, pod("b"))
    apiserver.patch(PODS, "a", {"metadata": {"labels": {"x": "1"}}}, "default")
    settle(informer)

    assert recorder.events == [("add", "a"), ("add", "b"), ("update", "a")]
    assert len(client.lists) == 1
    assert client.watches[watches_before].resource_version == resume_from
    assert names(informer) == ["a", "b"]


def test_relist_after_410_converges_and_synthesizes_the_missed_delete(clock: FakeClock) -> None:
    apiserver = InMemoryAPIServer(watch_history=3)
    for name in ("keep", "gone", "changed"):
        apiserver.create(PODS, pod(name))
    informer, client = make_informer(apiserver, clock)
    recorder = Recorder()
    recorder.attach(informer)
    settle(informer)
    recorder.events.clear()

    # While the informer is not watching, more happens than the server remembers.
    apiserver.delete(PODS, "gone", "default")
    apiserver.patch(PODS, "changed", {"metadata": {"labels": {"v": "2"}}}, "default")
    for i in range(5):
        apiserver.create(PODS, pod(f"new{i}"))
    apiserver.compact()

    settle(informer)

    assert informer.relists_total == 1
    assert client.first_page_lists == 2
    assert names(informer) == sorted(["keep", "changed"] + [f"new{i}" for i in range(5)])
    assert ("delete", "gone") in recorder.events
    assert ("update", "changed") in recorder.events
    assert sorted(e for e in recorder.events if e[0] == "add") == [
        ("add", f"new{i}") for i in range(5)
    ]
    # The unchanged object was not reported again.
    assert not any(name == "keep" for _, name in recorder.events)

    # And the informer watches normally afterwards.
    apiserver.create(PODS, pod("after"))
    settle(informer)
    assert recorder.events[-1] == ("add", "after")
    assert informer.relists_total == 1


def test_a_410_right_after_a_relist_backs_off_instead_of_looping(clock: FakeClock) -> None:
    apiserver = InMemoryAPIServer(watch_history=1)
    informer, client = make_informer(apiserver, clock)
    assert informer.step()  # the list
    # History moves past the list's resourceVersion before the first watch ever succeeds.
    apiserver.create(PODS, pod("a"))
    apiserver.create(PODS, pod("b"))
    apiserver.compact()
    assert not informer.step()  # 410 on the first watch: relist, but not in a tight loop
    assert informer.relists_total == 1
    retry_at = informer.next_retry_time
    assert retry_at is not None
    assert not informer.step()
    assert len(client.lists) == 1
    clock.advance(retry_at - clock.monotonic())
    settle(informer)
    assert names(informer) == ["a", "b"]
    assert len(client.lists) == 2


def test_an_expired_continue_token_restarts_the_list(
    apiserver: InMemoryAPIServer, clock: FakeClock
) -> None:
    for i in range(5):
        apiserver.create(PODS, pod(f"p{i}"))
    informer, client = make_informer(apiserver, clock, page_size=2)
    assert informer.step()  # page 1 of the snapshot
    # Meanwhile the snapshot behind the continue token changes and is compacted away.
    apiserver.delete(PODS, "p4", "default")
    apiserver.create(PODS, pod("p5"))
    apiserver.compact()
    settle(informer)

    assert informer.has_synced()
    # One consistent state, not page 1 of the old snapshot glued to the rest of the new one.
    assert names(informer) == ["p0", "p1", "p2", "p3", "p5"]
    assert client.first_page_lists == 2
    assert informer.consecutive_failures == 0
    assert informer.relists_total == 0


def test_bookmarks_advance_the_resume_point(clock: FakeClock) -> None:
    apiserver = InMemoryAPIServer(watch_history=3)
    informer, client = make_informer(apiserver, clock, label_selector="app=web")
    settle(informer)
    synced_at = informer.last_sync_resource_version

    # Changes the informer does not select still move the server's resourceVersion (and push
    # older events out of its small history); bookmarks carry the informer's resume point
    # forward although no event it selects arrives.
    for i in range(6):
        apiserver.create(PODS, pod(f"other{i}", labels={"app": "db"}))
        assert not informer.step()  # nothing for the cache
    assert informer.last_sync_resource_version == apiserver.resource_version
    assert informer.last_sync_resource_version != synced_at
    apiserver.compact()
    apiserver.create(PODS, pod("web", labels={"app": "web"}))
    settle(informer)

    assert names(informer) == ["web"]
    assert informer.relists_total == 0
    assert len(client.lists) == 1


class PodView(BaseModel):
    model_config = ConfigDict(frozen=True)
    name: str
    node_name: str | None = None
    priority: int = 0


def to_view(obj: JsonObject) -> PodView:
    return PodView(
        name=obj["metadata"]["name"],
        node_name=obj["spec"].get("nodeName"),
        priority=obj["metadata"].get("annotations", {}).get("priority", 0),
    )


def node_of(view: PodView) -> str | None:
    return view.node_name


def test_a_malformed_object_is_logged_and_skipped(
    apiserver: InMemoryAPIServer, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    apiserver.create(PODS, pod("good"))
    bad = pod("bad")
    bad["metadata"]["annotations"] = {"priority": "not-a-number"}
    apiserver.create(PODS, bad)
    client = RecordingClient(cast(KubeClient, apiserver))
    informer = Informer(
        cast(KubeClient, client),
        PODS,
        clock=clock,
        transform=to_view,
        indexers={BY_NODE_NAME: index_by(node_of)},
    )
    added: list[str] = []
    informer.add_handler(on_add=lambda view: added.append(view.name))

    with caplog.at_level(logging.WARNING):
        settle(informer)
        worse = pod("worse", node="n1")
        worse["metadata"]["annotations"] = {"priority": "high"}
        apiserver.create(PODS, worse)
        apiserver.create(PODS, pod("fine", node="n1"))
        settle(informer)

    assert informer.has_synced()
    assert added == ["good", "fine"]
    assert [p.name for p in informer.store.by_index(BY_NODE_NAME, "n1")] == ["fine"]
    assert informer.skipped_total == 2
    good = informer.store.get_by_name("good", "default")
    assert good is not None
    assert good.priority == 0
    assert "default/bad" in caplog.text
    assert "default/worse" in caplog.text


def test_errors_back_off_with_jitter_and_reset_after_success(
    apiserver: InMemoryAPIServer, clock: FakeClock
) -> None:
    apiserver.create(PODS, pod("a"))
    # Throttled (a 429 without Retry-After): the server answers, so the backoff grows.
    apiserver.faults.fail("list", "pods", TooManyRequests("slow down"), times=3)
    client = RecordingClient(cast(KubeClient, apiserver))
    jitter = iter([0.0, 1.0, 0.5, 0.0, 0.0])
    informer = Informer(cast(KubeClient, client), PODS, clock=clock, rand=lambda: next(jitter))

    waits = []
    for _ in range(3):
        assert not informer.step()
        retry_at = informer.next_retry_time
        assert retry_at is not None
        waits.append(retry_at - clock.monotonic())
        # Until then, stepping does not touch the server.
        calls = len(client.lists)
        assert not informer.step()
        assert len(client.lists) == calls
        clock.advance(retry_at - clock.monotonic())
    assert waits == pytest.approx([1.0, 1.5, 3.5])  # 1s, 2s and 4s, less up to 25% jitter

    settle(informer)
    assert informer.has_synced()
    assert informer.consecutive_failures == 0
    assert informer.next_retry_time is None

    # After the reset the next failure starts again from one second.
    apiserver.faults.internal_error("watch", "pods")
    assert not informer.step()
    retry_at = informer.next_retry_time
    assert retry_at is not None
    assert retry_at - clock.monotonic() == pytest.approx(1.0)
    clock.advance(1.0)
    apiserver.create(PODS, pod("b"))
    settle(informer)
    assert names(informer) == ["a", "b"]
    assert len(client.lists) == 4  # a failed watch resumes, it does not relist


def test_a_throttled_list_waits_at_least_as_long_as_retry_after(
    apiserver: InMemoryAPIServer, clock: FakeClock
) -> None:
    apiserver.faults.throttle("list", "pods", retry_after_seconds=7)
    informer, client = make_informer(apiserver, clock)
    assert not informer.step()
    retry_at = informer.next_retry_time
    assert retry_at is not None
    assert retry_at - clock.monotonic() == pytest.approx(7.0)
    clock.advance(6.9)
    assert not informer.step()
    assert len(client.lists) == 1
    clock.advance(0.1)
    settle(informer)
    assert informer.has_synced()


def test_a_watch_error_other_than_410_backs_off_and_resumes_without_relist(
    apiserver: InMemoryAPIServer, clock: FakeClock
) -> None:
    informer, client = make_informer(apiserver, clock)
    settle(informer)
    apiserver.faults.timeout("watch", "pods")
    apiserver.create(PODS, pod("a"))
    assert not informer.step()
    assert informer.next_retry_time is not None
    clock.advance(30)
    settle(informer)
    assert names(informer) == ["a"]
    assert len(client.lists) == 1
    assert informer.relists_total == 0


def test_indexes_follow_updates_and_deletes_through_the_api(
    apiserver: InMemoryAPIServer, clock: FakeClock
) -> None:
    informer, _ = make_informer(apiserver, clock, indexers=POD_INDEXERS)
    apiserver.create(PODS, pod("a", node="n1"))
    settle(informer)
    apiserver.create(PODS, pod("b", node="n1"))
    apiserver.create(PODS, pod("c", node="n2"))
    settle(informer)
    assert [p["metadata"]["name"] for p in informer.store.by_index(BY_NODE_NAME, "n1")] == [
        "a",
        "b",
    ]
    apiserver.delete(PODS, "a", "default")
    apiserver.delete(PODS, "c", "default")
    settle(informer)
    assert [p["metadata"]["name"] for p in informer.store.by_index(BY_NODE_NAME, "n1")] == ["b"]
    assert informer.store.by_index(BY_NODE_NAME, "n2") == []


def test_resync_redelivers_cached_objects_as_updates(
    apiserver: InMemoryAPIServer, clock: FakeClock
) -> None:
    apiserver.create(PODS, pod("a"))
    informer, client = make_informer(apiserver, clock, resync_period=60)
    recorder = Recorder()
    recorder.attach(informer)
    settle(informer)
    assert informer.next_resync_time == pytest.approx(clock.monotonic() + 60)
    assert informer.next_wakeup_time == informer.next_resync_time
    assert not informer.step()
    clock.advance(60)
    assert informer.step()
    assert recorder.events == [("add", "a"), ("update", "a")]
    old, new = recorder.updates[0]
    assert old is new
    assert len(client.lists) == 1


def test_a_handler_added_after_sync_gets_the_current_objects(
    apiserver: InMemoryAPIServer, clock: FakeClock
) -> None:
    apiserver.create(PODS, pod("a"))
    informer, _ = make_informer(apiserver, clock)
    settle(informer)
    late = Recorder()
    late.attach(informer)
    assert late.events == [("add", "a")]


def test_a_raising_handler_does_not_stop_the_others(
    apiserver: InMemoryAPIServer, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    informer, _ = make_informer(apiserver, clock)

    def broken(obj: JsonObject) -> None:
        raise RuntimeError("handler bug")

    informer.add_handler(on_add=broken)
    recorder = Recorder()
    recorder.attach(informer)
    settle(informer)
    apiserver.create(PODS, pod("a"))
    with caplog.at_level(logging.ERROR):
        settle(informer)
    assert recorder.events == [("add", "a")]
    assert "handler bug" in caplog.text


def test_cluster_scoped_resources_are_keyed_by_name(
    apiserver: InMemoryAPIServer, clock: FakeClock
) -> None:
    apiserver.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
    informer = Informer(cast(KubeClient, apiserver), NODES, clock=clock)
    settle(informer)
    assert informer.store.keys() == ["n1"]


def test_selectors_narrow_what_is_cached(apiserver: InMemoryAPIServer, clock: FakeClock) -> None:
    apiserver.create(PODS, pod("web", labels={"app": "web"}))
    apiserver.create(PODS, pod("db", labels={"app": "db"}))
    informer, client = make_informer(apiserver, clock, label_selector="app=web")
    settle(informer)
    apiserver.patch(PODS, "db", {"metadata": {"labels": {"app": "web"}}}, "default")
    settle(informer)
    assert names(informer) == ["db", "web"]
    assert client.lists[0].label_selector == "app=web"


def test_the_informer_behaves_the_same_over_both_transports(
    kube: KubeClient, apiserver: InMemoryAPIServer, clock: FakeClock
) -> None:
    for i in range(5):
        apiserver.create(PODS, pod(f"p{i}", node="n1"))
    informer = Informer(kube, PODS, clock=clock, page_size=2, indexers=POD_INDEXERS)
    recorder = Recorder()
    recorder.attach(informer)
    for _ in range(3):  # three pages (each watch poll costs a second over HTTP: keep them few)
        assert informer.step()
    assert informer.has_synced()

    apiserver.delete(PODS, "p0", "default")
    apiserver.patch(PODS, "p1", {"metadata": {"labels": {"x": "1"}}}, "default")
    apiserver.create(PODS, pod("p5", node="n2"))
    assert informer.step()

    assert recorder.events[5:] == [("delete", "p0"), ("update", "p1"), ("add", "p5")]
    assert [p["metadata"]["name"] for p in informer.store.by_index(BY_NODE_NAME, "n1")] == [
        "p1",
        "p2",
        "p3",
        "p4",
    ]
    assert informer.last_sync_resource_version == apiserver.resource_version


def test_machine_indexes_follow_capi_changes_through_discovery_and_informer(
    apiserver: InMemoryAPIServer, clock: FakeClock
) -> None:
    apiserver.register_cluster_api()
    capi = capi_resources(cast(KubeClient, apiserver), {})
    informer = Informer(
        cast(KubeClient, apiserver), capi.machines, clock=clock, indexers=MACHINE_INDEXERS
    )

    def machine(name: str, owner_uid: str, provider_id: str | None = None) -> JsonObject:
        spec: JsonObject = {"clusterName": "c1", "bootstrap": {"dataSecretName": "b"}}
        if provider_id:
            spec["providerID"] = provider_id
        return {
            "apiVersion": capi.api_version,
            "kind": "Machine",
            "metadata": {
                "name": name,
                "namespace": "default",
                "labels": {"cluster.x-k8s.io/deployment-name": "workers"},
                "ownerReferences": [
                    {
                        "apiVersion": capi.api_version,
                        "kind": "MachineSet",
                        "name": "workers-abc",
                        "uid": owner_uid,
                    }
                ],
            },
            "spec": spec,
        }

    apiserver.create(capi.machines, machine("m1", "set-1", "aws:///a/i-1"))
    apiserver.create(capi.machines, machine("m2", "set-1"))
    settle(informer)
    assert informer.store.index_keys(BY_OWNER_UID, "set-1") == ["default/m1", "default/m2"]
    assert informer.store.index_keys(BY_MACHINE_DEPLOYMENT, "default/workers") == [
        "default/m1",
        "default/m2",
    ]

    # The infrastructure provider reports m2's instance; m1 is deleted.
    apiserver.patch(capi.machines, "m2", {"spec": {"providerID": "aws:///a/i-2"}}, "default")
    apiserver.delete(capi.machines, "m1", "default")
    settle(informer)
    assert informer.store.by_index(BY_PROVIDER_ID, "aws:///a/i-1") == []
    assert informer.store.index_keys(BY_PROVIDER_ID, "aws:///a/i-2") == ["default/m2"]
    assert informer.store.index_keys(BY_OWNER_UID, "set-1") == ["default/m2"]
