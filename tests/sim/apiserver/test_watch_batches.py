"""``InMemoryWatch.batches``: the events a stream has at once, handed out together, so the HTTP
front sends them in one write (one system call, one wakeup of the reader) instead of one write
per event. What a client reads must not change: the same events, in order, one JSON line each.
"""

from __future__ import annotations

import http.client
import json
from typing import Any

import pytest

from karpenter_capi.core.kube.resources import PODS
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.apiserver.http import HttpFront
from karpenter_capi.sim.apiserver.watch import InMemoryWatch


def _pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "app", "image": "app:1"}]},
    }


def _names(events: Any) -> list[tuple[str, str]]:
    return [(e.type, e.object["metadata"]["name"]) for e in events]


def test_what_is_there_at_once_is_one_batch_and_iteration_sees_the_same_events() -> None:
    api = InMemoryAPIServer()
    rv = api.list(PODS, "default").resource_version
    for i in range(5):
        api.create(PODS, _pod(f"p{i}"))
    api.patch(PODS, "p1", {"metadata": {"labels": {"a": "b"}}}, "default")
    stream = api.watch(PODS, "default", resource_version=rv, timeout_seconds=0)
    assert isinstance(stream, InMemoryWatch)
    batches = list(stream.batches())
    expected = [("ADDED", f"p{i}") for i in range(5)] + [("MODIFIED", "p1")]
    assert [_names(b) for b in batches] == [expected]
    again = api.watch(PODS, "default", resource_version=rv, timeout_seconds=0)
    assert _names(again) == expected
    with pytest.raises(RuntimeError):
        stream.batches()  # once, either way
    iterated = api.watch(PODS, "default", resource_version=rv, timeout_seconds=0)
    iter(iterated)
    with pytest.raises(RuntimeError):
        iterated.batches()


def test_a_closed_stream_hands_out_no_more_batches() -> None:
    api = InMemoryAPIServer()
    api.create(PODS, _pod("a"))
    stream = api.watch(PODS, "default", resource_version="0", timeout_seconds=0)
    assert isinstance(stream, InMemoryWatch)
    stream.close()
    assert list(stream.batches()) == []


def test_the_front_writes_a_batch_as_one_json_line_per_event() -> None:
    api = InMemoryAPIServer()
    rv = api.list(PODS, "default").resource_version
    for i in range(40):
        api.create(PODS, _pod(f"p{i:02}"))
    with HttpFront(api) as front:
        conn = http.client.HTTPConnection("127.0.0.1", front.port, timeout=10)
        path = f"/api/v1/namespaces/default/pods?watch=1&resourceVersion={rv}&timeoutSeconds=1"
        conn.request("GET", path)
        response = conn.getresponse()
        assert response.headers["Transfer-Encoding"] == "chunked"
        lines = response.read().splitlines()
        conn.close()
    events = [json.loads(line) for line in lines]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", f"p{i:02}") for i in range(40)
    ]


def test_a_client_expecting_100_continue_gets_it_before_sending_the_body() -> None:
    """The front's ``wfile`` is buffered (an answer's headers and body in one write): the
    interim ``100 Continue`` must still leave at once, or such a client would wait forever."""
    api = InMemoryAPIServer()
    with HttpFront(api) as front:
        conn = http.client.HTTPConnection("127.0.0.1", front.port, timeout=10)
        body = json.dumps(_pod("late")).encode()
        conn.putrequest("POST", "/api/v1/namespaces/default/pods")
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", str(len(body)))
        conn.putheader("Expect", "100-continue")
        conn.endheaders()
        assert conn.sock is not None
        interim = conn.sock.recv(64)  # blocks until the front answers (timeout: 10 s)
        assert interim.startswith(b"HTTP/1.1 100")
        conn.sock.sendall(body)
        response = conn.getresponse()
        assert response.status == 201
        conn.close()
    assert api.get(PODS, "late", "default")["metadata"]["name"] == "late"
