"""Contract: what ``KubeClient.drains_zero_timeout_watch`` promises, for every client declaring it.

A client that declares it must answer ``watch(timeout_seconds=0)`` with the events recorded
after the given resourceVersion and end at once, its last event a bookmark at the server's
current resourceVersion (the generic CAPI plugin's mirrors read the cluster that way instead of
listing). Each transport is checked: the in-memory client in process, and the official client
over HTTP on 127.0.0.1, both polling (``poll_watches``) and as against a real cluster, where it
must not claim to drain. The drain runs on a thread so a client breaking the promise by
blocking fails the test instead of hanging it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from karpenter_capi.core.kube.client import KubeClient, WatchEvent
from karpenter_capi.core.kube.official import OfficialClient
from karpenter_capi.core.kube.resources import PODS
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.apiserver.audit import AuditingClient, AuditLog
from karpenter_capi.sim.apiserver.http import HttpFront

from .objects import pod, summary

# Real time, only as a bound: a drain answers in milliseconds, a blocking watch never does.
SAFETY_SECONDS = 10.0

DECLARED = {"memory": True, "http-poll": True, "http": False}


@pytest.fixture(params=sorted(DECLARED))
def transport(
    request: pytest.FixtureRequest, apiserver: InMemoryAPIServer
) -> Iterator[tuple[str, KubeClient]]:
    if request.param == "memory":
        yield request.param, apiserver
        return
    with HttpFront(apiserver, host="127.0.0.1", port=0) as front:
        client = OfficialClient.from_url(front.url, poll_watches=request.param == "http-poll")
        try:
            yield request.param, client
        finally:
            client.close()


def drain(kube: KubeClient, resource_version: str) -> list[WatchEvent]:
    """One zero-timeout watch read to its end, failing if it does not end by itself."""
    stream = kube.watch(
        PODS, "default", resource_version=resource_version, allow_bookmarks=True, timeout_seconds=0
    )
    events: list[WatchEvent] = []
    reader = threading.Thread(target=lambda: events.extend(stream), daemon=True)
    reader.start()
    reader.join(SAFETY_SECONDS)
    ended = not reader.is_alive()
    stream.close()
    assert ended, "a zero-timeout watch of a client that declares draining kept waiting"
    return events


def test_each_transport_declares_whether_it_drains(transport: tuple[str, KubeClient]) -> None:
    name, kube = transport
    assert kube.drains_zero_timeout_watch is DECLARED[name]


def test_a_draining_watch_delivers_what_was_recorded_and_ends_with_a_bookmark(
    transport: tuple[str, KubeClient],
) -> None:
    _, kube = transport
    if not kube.drains_zero_timeout_watch:
        pytest.skip("a client that does not drain promises nothing for a zero timeout")
    kube.create(PODS, pod("a"))
    start = kube.list(PODS).resource_version
    kube.create(PODS, pod("b"))
    kube.patch(PODS, "b", {"metadata": {"labels": {"x": "1"}}}, "default")
    kube.delete(PODS, "a", "default")
    current = kube.list(PODS).resource_version

    events = drain(kube, start)

    changes = [("ADDED", "b"), ("MODIFIED", "b"), ("DELETED", "a")]
    assert summary(events) == [*changes, ("BOOKMARK", "")]
    assert events[-1].resource_version == current


def test_a_draining_watch_with_nothing_new_ends_with_the_bookmark_alone(
    transport: tuple[str, KubeClient],
) -> None:
    _, kube = transport
    if not kube.drains_zero_timeout_watch:
        pytest.skip("a client that does not drain promises nothing for a zero timeout")
    kube.create(PODS, pod("a"))
    current = kube.list(PODS).resource_version

    events = drain(kube, current)

    assert summary(events) == [("BOOKMARK", "")]
    assert events[0].resource_version == current


def test_a_wrapper_declares_what_the_client_it_wraps_does(
    transport: tuple[str, KubeClient],
) -> None:
    name, kube = transport
    wrapped = AuditingClient(kube, AuditLog())

    assert wrapped.drains_zero_timeout_watch is DECLARED[name]
