"""The shortcuts of the per-event path (wire line, ``Informer._apply``, store, handlers) keep
its behaviour: what changes reaches every handler and index, whatever the shortcut skips.

Each watch event of every informer goes through this path, so it reads the common case (a
dict from the wire, index functions returning one value, mappings returning a tuple) straight
off; these tests pin what the general case did and still does.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from types import MappingProxyType
from typing import Any, cast

import pytest

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube._handlers import EventHandler, HandlerSet
from karpenter_capi.core.kube._official_wire import OfficialWatch, _parse_event
from karpenter_capi.core.kube.cache import Store
from karpenter_capi.core.kube.client import KubeClient, WatchEvent
from karpenter_capi.core.kube.indexes import (
    BY_NODE_NAME,
    BY_OWNER_UID,
    MACHINE_INDEXERS,
    by_owner_uid,
    pods_by_node_name,
)
from karpenter_capi.core.kube.informer import Informer
from karpenter_capi.core.kube.resources import NODES, PODS
from karpenter_capi.core.kube.workqueue import WorkQueue
from karpenter_capi.core.runtime._informer_events import enqueue_on_events, wake_on_events
from karpenter_capi.core.runtime.controller import Key, Watch

JsonObject = dict[str, Any]


def pod(
    name: str,
    rv: str,
    *,
    node: str | None = None,
    owners: tuple[str, ...] = (),
    phase: str = "Pending",
) -> JsonObject:
    metadata: JsonObject = {"name": name, "namespace": "default", "resourceVersion": rv}
    if owners:
        metadata["ownerReferences"] = [{"kind": "ReplicaSet", "uid": uid} for uid in owners]
    spec: JsonObject = {"nodeName": node} if node else {}
    return {"metadata": metadata, "spec": spec, "status": {"phase": phase}}


def informer() -> Informer[JsonObject]:
    # Events are applied directly: the client is never called.
    return Informer(
        cast(KubeClient, None),
        PODS,
        clock=FakeClock(),
        indexers={BY_NODE_NAME: pods_by_node_name, BY_OWNER_UID: by_owner_uid},
    )


def apply(target: Informer[JsonObject], kind: str, obj: JsonObject) -> bool:
    return target._apply(WatchEvent(type=kind, object=obj))  # type: ignore[arg-type]


def test_a_status_only_update_reaches_a_handler_that_reads_status() -> None:
    pods = informer()
    phases: list[tuple[str, str]] = []
    pods.add_handler(
        on_update=lambda old, new: phases.append((old["status"]["phase"], new["status"]["phase"]))
    )
    apply(pods, "ADDED", pod("a", "1", node="n1", owners=("rs-1",)))
    apply(pods, "MODIFIED", pod("a", "2", node="n1", owners=("rs-1",), phase="Running"))
    assert phases == [("Pending", "Running")]
    assert pods.store.get("default/a") == pod(
        "a", "2", node="n1", owners=("rs-1",), phase="Running"
    )
    assert pods.store.index_keys(BY_NODE_NAME, "n1") == ["default/a"]
    assert pods.store.index_keys(BY_OWNER_UID, "rs-1") == ["default/a"]
    assert pods.last_sync_resource_version == "2"


def test_index_entries_move_when_owner_references_or_node_name_change() -> None:
    pods = informer()
    apply(pods, "ADDED", pod("a", "1", owners=("rs-1",)))
    apply(pods, "MODIFIED", pod("a", "2", node="n1", owners=("rs-2", "rs-2", "rs-3")))
    assert pods.store.index_values(BY_OWNER_UID) == ["rs-2", "rs-3"]
    assert pods.store.index_keys(BY_NODE_NAME, "n1") == ["default/a"]
    apply(pods, "MODIFIED", pod("a", "3", node="n2"))
    assert pods.store.index_values(BY_OWNER_UID) == []
    assert pods.store.index_values(BY_NODE_NAME) == ["n2"]


def test_an_event_seen_twice_notifies_once_and_a_bookmark_moves_only_the_resume_point() -> None:
    pods = informer()
    seen: list[str] = []
    pods.add_handler(on_add=lambda p: seen.append("add"), on_update=lambda o, n: seen.append("up"))
    assert apply(pods, "ADDED", pod("a", "1"))
    assert apply(pods, "MODIFIED", pod("a", "1"))
    assert not apply(pods, "BOOKMARK", {"metadata": {"resourceVersion": "7"}})
    assert seen == ["add"]
    assert pods.last_sync_resource_version == "7"


def test_unusual_metadata_takes_the_general_path() -> None:
    pods = informer()
    # A resourceVersion that is not a string is kept as its text; a cluster-scoped object is
    # keyed by its name; one without a name is skipped and counted, the resume point moving.
    apply(pods, "ADDED", {"metadata": {"name": "n", "resourceVersion": 5}})
    assert pods.store.keys() == ["n"]
    assert pods.last_sync_resource_version == "5"
    assert apply(pods, "ADDED", {"metadata": {"resourceVersion": "6"}})
    assert pods.skipped_total == 1
    assert pods.last_sync_resource_version == "6"
    assert pods.store.keys() == ["n"]


def test_a_transform_still_runs_for_every_new_version() -> None:
    names = Informer(
        cast(KubeClient, None),
        NODES,
        clock=FakeClock(),
        transform=lambda raw: str(raw["metadata"]["resourceVersion"]),
    )
    apply(
        cast(Informer[JsonObject], names),
        "ADDED",
        {"metadata": {"name": "n", "resourceVersion": "1"}},
    )
    apply(
        cast(Informer[JsonObject], names),
        "MODIFIED",
        {"metadata": {"name": "n", "resourceVersion": "2"}},
    )
    assert names.store.get("n") == "2"


def test_index_values_are_deduplicated_whatever_the_function_returns() -> None:
    def pairs(obj: JsonObject) -> list[str]:
        return cast(list[str], ("a", "b", "a"))  # a tuple, despite the annotation

    def drawn(obj: JsonObject) -> list[str]:
        def values() -> Iterator[str]:
            yield from ("x", "x")

        return cast(list[str], values())

    store: Store[JsonObject] = Store({"pairs": pairs, "drawn": drawn})
    for rv in ("1", "2"):  # the add, then the update path
        store.upsert("k", {"metadata": {"resourceVersion": rv}})
        assert store.index_values("pairs") == ["a", "b"]
        assert store.index_values("drawn") == ["x"]


def test_indexes_read_any_mapping_not_only_dicts() -> None:
    frozen = MappingProxyType(
        {
            "metadata": MappingProxyType(
                {"ownerReferences": [MappingProxyType({"uid": "u1"})], "labels": {}}
            ),
            "spec": MappingProxyType({"nodeName": "n1"}),
        }
    )
    assert by_owner_uid(frozen) == ["u1"]
    assert pods_by_node_name(frozen) == ["n1"]
    for index in MACHINE_INDEXERS.values():
        assert index({"metadata": None, "spec": "x", "status": 3}) == []


def test_handlers_run_in_registration_order_and_a_failure_stops_none(
    caplog: pytest.LogCaptureFixture,
) -> None:
    handlers: HandlerSet[str] = HandlerSet("test")
    calls: list[str] = []

    def boom(_old: str, _new: str) -> None:
        raise RuntimeError("boom")

    handlers.add(EventHandler(on_update=lambda o, n: calls.append(f"first {o}->{n}")))
    handlers.add(EventHandler(on_add=lambda n: calls.append(f"add-only {n}")))
    handlers.add(EventHandler(on_update=boom))
    handlers.add(EventHandler(on_delete=lambda o: calls.append(f"gone {o}")))
    handlers.add(EventHandler(on_update=lambda o, n: calls.append("last")), replay=["already"])
    with caplog.at_level(logging.ERROR):
        handlers.notify("a", "b")
        handlers.notify(None, "c")
        handlers.notify("c", None, final="c-final")
    assert calls == ["first a->b", "last", "add-only c", "gone c-final"]
    assert "on_update handler" in caplog.text


def test_wire_lines_parse_with_surrounding_whitespace() -> None:
    assert _parse_event(b"") is None
    assert _parse_event(b" \r\n") is None
    event = _parse_event(b'  {"type":"ADDED","object":{"metadata":{"name":"a"}}}\r')
    assert event == WatchEvent(type="ADDED", object={"metadata": {"name": "a"}})
    with pytest.raises(ValueError, match="not a JSON object"):
        _parse_event(b"[1]")


def drain(queue: WorkQueue[Key]) -> list[Key]:
    keys = []
    while len(queue):
        key = queue.get(block=False)
        assert key is not None
        queue.done(key)
        keys.append(key)
    return keys


def test_an_update_queues_both_sides_and_a_shared_key_once() -> None:
    pods = informer()
    queue: WorkQueue[Key] = WorkQueue(FakeClock())

    def owners(obj: JsonObject) -> Iterator[Key]:
        # A generator, drawn by the handler: its failure hides nothing of the other side.
        if obj["metadata"].get("labels", {}).get("broken"):
            raise RuntimeError("bad mapping")
        yield from (ref["uid"] for ref in obj["metadata"].get("ownerReferences", []))

    enqueue_on_events(pods, queue, Watch(PODS, to_keys=owners), "test")
    apply(pods, "ADDED", pod("a", "1", owners=("rs-1", "rs-2")))
    apply(pods, "MODIFIED", pod("a", "2", owners=("rs-2", "rs-3")))
    assert sorted(drain(queue)) == ["rs-1", "rs-2", "rs-3"]
    assert queue.adds_total == 3  # rs-2, on both sides, was queued once
    broken = pod("a", "3", owners=("rs-4",))
    broken["metadata"]["labels"] = {"broken": "yes"}
    apply(pods, "MODIFIED", broken)
    assert drain(queue) == ["rs-2", "rs-3"]


def test_a_wake_hears_every_add_and_update_with_the_new_object() -> None:
    pods = informer()
    wakes: list[float] = []

    class Entry:
        name = "periodic"

        @property
        def wake(self) -> Any:
            return wakes.append

    wake_on_events(pods, Entry(), lambda obj: float(obj["metadata"]["resourceVersion"]))
    apply(pods, "ADDED", pod("a", "1"))
    apply(pods, "MODIFIED", pod("a", "2", phase="Running"))
    assert wakes == [1.0, 2.0]


class _Chunked:
    """A chunked response as ``OfficialWatch`` reads it."""

    chunked = True

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = chunks

    def read_chunked(self, decode_content: bool) -> Iterator[bytes]:
        yield from self._chunks

    def close(self) -> None:
        pass

    def release_conn(self) -> None:
        pass


def test_a_watch_reads_whole_event_chunks_and_split_ones_alike() -> None:
    def line(name: str) -> bytes:
        return b'{"type":"ADDED","object":{"metadata":{"name":"%s"}}}\n' % name.encode()

    chunks = [line("a"), b"", line("b") + line("c")[:9], line("c")[9:], line("d"), b"\n"]
    chunks += [line("e")[:-1]]  # the stream ends without the last newline
    watch = OfficialWatch(cast(Any, _Chunked(chunks)))
    assert [event.object["metadata"]["name"] for event in watch] == ["a", "b", "c", "d", "e"]
