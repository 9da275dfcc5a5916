"""The threaded driver: a real blocking watch, a dropped connection, and a prompt stop.

Waits are bounded and event-driven (``queue.get(timeout=...)``, ``Event.wait``): the tests never
sleep and hope.
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
from tests.kube.conftest import RecordingClient

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

    def __init__(self, server: InMemoryAPIServer) -> None:
        self.client = RecordingClient(cast(KubeClient, server))
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
def running(apiserver: InMemoryAPIServer) -> Iterator[Running]:
    runner = Running(apiserver)
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


def test_stop_interrupts_a_blocked_watch(apiserver: InMemoryAPIServer) -> None:
    runner = Running(apiserver)
    runner.thread.start()
    assert runner.informer.wait_for_sync(WAIT)
    # The watch is now blocked waiting for events with a timeout of several minutes.
    apiserver.create(PODS, pod("a"))
    assert runner.next_event() == ("add", "a")
    runner.stop.set()
    runner.thread.join(WAIT)
    assert not runner.thread.is_alive()
