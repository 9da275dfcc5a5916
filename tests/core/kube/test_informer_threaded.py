"""The threaded driver: a real blocking watch, a dropped connection, and a prompt stop.

Each test runs in process and through the official client over the HTTP front. Waits are
bounded and event-driven (``queue.get(timeout=...)``, ``Event.wait``): the tests never sleep
and hope.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import Any, cast

import pytest

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube.client import KubeClient
from karpenter_capi.core.kube.informer import Informer
from karpenter_capi.core.kube.resources import PODS
from karpenter_capi.sim.apiserver import InMemoryAPIServer

from .recording import RecordingClient

JsonObject = dict[str, Any]
WAIT = 10.0  # generous upper bound; the tests finish as soon as the event arrives


def pod(name: str) -> JsonObject:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "app", "image": "nginx"}]},
    }


class Running:
    """An informer running in a thread, with its handler events on a queue."""

    def __init__(self, client: KubeClient) -> None:
        self.client = RecordingClient(client)
        self.informer: Informer[JsonObject] = Informer(
            cast(KubeClient, self.client), PODS, clock=FakeClock()
        )
        self.events: queue.Queue[tuple[str, str]] = queue.Queue()
        self.informer.add_handler(
            on_add=lambda o: self.events.put(("add", o["metadata"]["name"])),
            on_update=lambda _, o: self.events.put(("update", o["metadata"]["name"])),
            on_delete=lambda o: self.events.put(("delete", o["metadata"]["name"])),
        )
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.informer.run, args=(self.stop,), daemon=True)

    def next_event(self) -> tuple[str, str]:
        return self.events.get(timeout=WAIT)


@pytest.fixture
def running(kube: KubeClient) -> Iterator[Running]:
    """Runs over both transports: in process, and the official client over HTTP."""
    runner = Running(kube)
    runner.thread.start()
    assert runner.informer.wait_for_sync(WAIT)
    yield runner
    runner.stop.set()
    runner.thread.join(WAIT)
    assert not runner.thread.is_alive()


def test_threaded_informer_syncs_and_delivers_events(
    apiserver: InMemoryAPIServer, running: Running
) -> None:
    apiserver.create(PODS, pod("a"))
    assert running.next_event() == ("add", "a")
    apiserver.delete(PODS, "a", "default")
    assert running.next_event() == ("delete", "a")
    watch = running.client.watches[0]
    # A long server-side timeout (5 to 10 minutes), like client-go.
    assert watch.timeout_seconds is not None
    assert 300 <= watch.timeout_seconds <= 600


def test_dropped_watch_resumes_without_relist_or_lost_events(
    apiserver: InMemoryAPIServer, running: Running
) -> None:
    apiserver.create(PODS, pod("a"))
    assert running.next_event() == ("add", "a")
    resume_from = running.informer.last_sync_resource_version

    apiserver.faults.drop_watches()
    apiserver.create(PODS, pod("b"))
    apiserver.patch(PODS, "a", {"metadata": {"labels": {"x": "1"}}}, "default")
    assert running.next_event() == ("add", "b")
    assert running.next_event() == ("update", "a")
    with pytest.raises(queue.Empty):
        running.events.get_nowait()

    assert len(running.client.lists) == 1
    assert len(running.client.watches) == 2
    assert running.client.watches[1].resource_version == resume_from


def test_stop_interrupts_a_blocked_watch(kube: KubeClient, apiserver: InMemoryAPIServer) -> None:
    runner = Running(kube)
    runner.thread.start()
    assert runner.informer.wait_for_sync(WAIT)
    # The watch is now blocked waiting for events with a timeout of several minutes.
    apiserver.create(PODS, pod("a"))
    assert runner.next_event() == ("add", "a")
    runner.stop.set()
    runner.thread.join(WAIT)
    assert not runner.thread.is_alive()


def test_threaded_relist_after_410_reports_what_was_deleted_during_the_gap(
    kube: KubeClient, apiserver: InMemoryAPIServer
) -> None:
    apiserver.create(PODS, pod("doomed"))
    runner = Running(kube)
    gate = threading.Event()
    gate.set()
    runner.client.before_watch = lambda _call: gate.wait(WAIT) and None
    runner.thread.start()
    try:
        assert runner.informer.wait_for_sync(WAIT)
        assert runner.next_event() == ("add", "doomed")
        apiserver.create(PODS, pod("a"))
        assert runner.next_event() == ("add", "a")

        # Hold the informer's next watch call while the connection is down...
        gate.clear()
        apiserver.faults.drop_watches()
        # ...and meanwhile the server forgets what happened.
        apiserver.delete(PODS, "doomed", "default")
        apiserver.create(PODS, pod("b"))
        apiserver.compact()
        gate.set()

        assert {runner.next_event(), runner.next_event()} == {("delete", "doomed"), ("add", "b")}
        assert runner.informer.relists_total == 1
        assert sorted(o["metadata"]["name"] for o in runner.informer.store.list()) == ["a", "b"]
        assert runner.client.first_page_lists == 2
    finally:
        gate.set()
        runner.stop.set()
        runner.thread.join(WAIT)
    assert not runner.thread.is_alive()
