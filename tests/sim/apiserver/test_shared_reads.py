"""``SharedReads``: in-process informers hold the stored objects, and the emulation only reads
them.

The shortcut is right only while no receiver changes what it got: a change would be a change of
the server's stored state, seen by every later reader and by no watch. So the emulation's own
controllers (Cluster API with Nodes, workloads, the kube-scheduler stand-in) are run over it
through a scale-up and a scale-down, and every version the server stored must still be what
was written; the check itself is shown to catch a receiver that writes into what it got."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube import DEPLOYMENTS, MACHINE_DEPLOYMENTS, NODES, PODS, JsonObject
from karpenter_capi.core.kube.informer import Informer
from karpenter_capi.core.runtime.manager import Manager
from karpenter_capi.core.runtime.stepped import SteppedDriver
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.apiserver.objects import copy_json
from karpenter_capi.sim.apiserver.shared_reads import SharedReads, create_read_only
from karpenter_capi.sim.capi import add_capi_emulation
from karpenter_capi.sim.cluster import new_cluster
from karpenter_capi.sim.scheduler import SimScheduler
from karpenter_capi.sim.workloads import add_workload_emulation
from tests.sim.capi.harness import machine_deployment
from tests.sim.workloads.harness import NS, deployment


class _Versions:
    """Every object version ``api`` stores, with a private copy of it as it was written."""

    def __init__(self, api: InMemoryAPIServer, monkeypatch: pytest.MonkeyPatch) -> None:
        self.written: list[tuple[JsonObject, JsonObject]] = []
        store = api._store
        commit: Callable[..., JsonObject] = store.commit

        def recording(*args: Any, **kwargs: Any) -> JsonObject:
            stored = commit(*args, **kwargs)
            self.written.append((stored, copy_json(stored)))
            return stored

        monkeypatch.setattr(store, "commit", recording)

    def changed(self) -> list[str]:
        return [
            f"{was.get('kind', '')}/{was['metadata']['name']}@{was['metadata']['resourceVersion']}"
            for stored, was in self.written
            if stored != was
        ]


def _pod(name: str) -> JsonObject:
    return {"metadata": {"name": name, "namespace": NS}, "spec": {"containers": []}}


def _events(client: Any) -> tuple[Informer[JsonObject], list[tuple[str, str, JsonObject]]]:
    informer = Informer(client, PODS, clock=FakeClock())
    seen: list[tuple[str, str, JsonObject]] = []

    def on(kind: str) -> Callable[..., None]:
        def record(*objs: JsonObject | None, **_: Any) -> None:
            obj = next(o for o in reversed(objs) if o is not None)
            seen.append((kind, obj["metadata"]["resourceVersion"], copy_json(obj)))

        return record

    informer.add_handler(on_add=on("add"), on_update=on("update"), on_delete=on("delete"))
    return informer, seen


def test_an_informer_over_shared_reads_holds_the_stored_objects_and_sees_the_same_events() -> None:
    api = new_cluster()
    api.create(PODS, _pod("before"), NS)
    plain, plain_seen = _events(api)
    shared, shared_seen = _events(SharedReads(api))
    for informer in (plain, shared):
        informer.step()
    api.create(PODS, _pod("after"), NS)
    api.patch(PODS, "after", {"metadata": {"labels": {"a": "b"}}}, NS)
    api.patch(PODS, "before", {"status": {"phase": "Running"}}, NS, subresource="status")
    api.delete(PODS, "before", NS)
    for informer in (plain, shared):
        informer.step()
    assert shared_seen == plain_seen
    assert [kind for kind, _, _ in shared_seen] == ["add", "add", "update", "update", "delete"]
    stored = api.get(PODS, "after", NS, shared=True)
    assert shared.store.get(f"{NS}/after") is stored  # no copy
    assert plain.store.get(f"{NS}/after") is not stored
    assert plain.store.get(f"{NS}/after") == stored


def test_the_emulation_over_shared_reads_leaves_every_stored_version_as_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = FakeClock()
    api = new_cluster(clock=clock)
    versions = _Versions(api, monkeypatch)
    reads = SharedReads(api)
    manager = Manager(reads, reads, clock=clock)
    add_capi_emulation(manager, provision_delay=1, boot_delay=1, nodes=True)
    add_workload_emulation(manager)
    manager.add(SimScheduler(api, manager, clock))
    driver = SteppedDriver(manager)
    api.create(MACHINE_DEPLOYMENTS, machine_deployment("workers", "v1beta2", replicas=1), NS)
    api.create(DEPLOYMENTS, deployment("app", 6, priority=0), NS)
    driver.advance(5)  # one node: some pods fit, the others are Unschedulable
    api.patch(MACHINE_DEPLOYMENTS, "workers", {"spec": {"replicas": 3}}, NS)
    api.patch(DEPLOYMENTS, "app", {"spec": {"replicas": 12}}, NS)
    driver.advance(30)
    api.patch(DEPLOYMENTS, "app", {"spec": {"replicas": 2}}, NS)
    api.patch(MACHINE_DEPLOYMENTS, "workers", {"spec": {"replicas": 1}}, NS)
    driver.advance(60)
    assert len(api.list(NODES).items) >= 1
    assert any(p["spec"].get("nodeName") for p in api.list(PODS, NS).items)
    assert len(versions.written) > 100
    assert versions.changed() == []


def test_a_receiver_writing_into_what_it_got_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    api = new_cluster()
    versions = _Versions(api, monkeypatch)
    informer = Informer(SharedReads(api), PODS, clock=FakeClock())
    informer.add_handler(on_add=lambda pod: pod["metadata"].update(labels={"mine": "yes"}))
    informer.step()
    api.create(PODS, _pod("p"), NS)
    informer.step()
    assert versions.changed() == ["Pod/p@" + api.get(PODS, "p", NS)["metadata"]["resourceVersion"]]
    assert api.get(PODS, "p", NS)["metadata"]["labels"] == {"mine": "yes"}  # the store changed


def test_a_create_whose_answer_is_only_read_gets_the_stored_object() -> None:
    api = new_cluster()
    body = _pod("p")
    created = create_read_only(SharedReads(api), PODS, body, NS)
    assert created is api.get(PODS, "p", NS, shared=True)  # no copy
    assert body == _pod("p")  # the body given stays the caller's, unchanged
    other = create_read_only(api, PODS, _pod("q"), NS)
    assert other is api.get(PODS, "q", NS, shared=True)
