"""Contract: what ``KubeClient.drains_zero_timeout_watch`` promises, for every client declaring it.

A client that declares it must answer ``watch(timeout_seconds=0)`` with the events recorded
after the given resourceVersion and end at once, its last event a bookmark at the server's
current resourceVersion (the generic CAPI plugin's mirrors read the cluster that way instead of
listing). Each transport is checked: the in-memory client in process, and the official client
over HTTP on 127.0.0.1, both polling (``poll_watches``) and as against a real cluster, where it
must not claim to drain (it promises nothing for a zero timeout, so only its declaration is
checked). The drain runs on a thread so a client breaking the promise by
blocking fails the test instead of hanging it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

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


@contextmanager
def connected(name: str, apiserver: InMemoryAPIServer) -> Iterator[KubeClient]:
    """The API server through transport ``name`` (a key of ``DECLARED``)."""
    if name == "memory":
        yield apiserver
        return
    with HttpFront(apiserver, host="127.0.0.1", port=0) as front:
        client = OfficialClient.from_url(front.url, poll_watches=name == "http-poll")
        try:
            yield client
        finally:
            client.close()


@pytest.fixture(params=sorted(DECLARED))
def transport(
    request: pytest.FixtureRequest, apiserver: InMemoryAPIServer
) -> Iterator[tuple[str, KubeClient]]:
    with connected(request.param, apiserver) as kube:
        yield request.param, kube


@pytest.fixture(params=sorted(name for name, drains in DECLARED.items() if drains))
def draining(request: pytest.FixtureRequest, apiserver: InMemoryAPIServer) -> Iterator[KubeClient]:
    """Each transport that declares draining: the promise is checked against each."""
    with connected(request.param, apiserver) as kube:
        yield kube


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
    draining: KubeClient,
) -> None:
    draining.create(PODS, pod("a"))
    start = draining.list(PODS).resource_version
    draining.create(PODS, pod("b"))
    draining.patch(PODS, "b", {"metadata": {"labels": {"x": "1"}}}, "default")
    draining.delete(PODS, "a", "default")
    current = draining.list(PODS).resource_version

    events = drain(draining, start)

    changes = [("ADDED", "b"), ("MODIFIED", "b"), ("DELETED", "a")]
    assert summary(events) == [*changes, ("BOOKMARK", "")]
    assert events[-1].resource_version == current
    # From the bookmark there is nothing more: the next drain is the bookmark alone.
    again = drain(draining, events[-1].resource_version)
    assert summary(again) == [("BOOKMARK", "")]
    assert again[0].resource_version == current


def test_a_wrapper_declares_what_the_client_it_wraps_does(
    transport: tuple[str, KubeClient],
) -> None:
    name, kube = transport
    wrapped = AuditingClient(kube, AuditLog())

    assert wrapped.drains_zero_timeout_watch is DECLARED[name]
