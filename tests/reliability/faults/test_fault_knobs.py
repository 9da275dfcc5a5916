"""The fault knobs themselves: windows on the server clock, HTTP-only scope, one client, slow
answers, periodic watch drops and compactions, and the front restarting on its port."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube.errors import (
    Gone,
    InternalError,
    ServiceUnavailable,
    TooManyRequests,
    error_from_status,
)
from karpenter_capi.core.kube.official import OfficialClient
from karpenter_capi.core.kube.resources import CONFIGMAPS
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.apiserver.http import HttpFront


def _configmap(name: str) -> dict[str, object]:
    return {"metadata": {"name": name, "namespace": "default"}, "data": {}}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def api(clock: FakeClock) -> InMemoryAPIServer:
    return InMemoryAPIServer(clock=clock)


@pytest.fixture
def front(api: InMemoryAPIServer) -> Iterator[HttpFront]:
    with HttpFront(api, record_requests=True) as front:
        yield front


def _client(front: HttpFront, agent: str = "test-client") -> OfficialClient:
    client = OfficialClient.from_url(front.url, poll_watches=True)
    client.api_client.user_agent = agent
    return client


def test_storm_hits_http_clients_only_and_only_in_its_window(
    api: InMemoryAPIServer, front: HttpFront, clock: FakeClock
) -> None:
    client = _client(front)
    api.faults.storm("throttle", duration=30, start=clock.monotonic() + 10, retry_after_seconds=7)

    client.create(CONFIGMAPS, _configmap("before"))
    clock.advance(10)
    with pytest.raises(TooManyRequests) as raised:
        client.list(CONFIGMAPS, "default")
    assert raised.value.retry_after_seconds == 7
    # The emulated cluster calls the server in process: the storm is not for it.
    api.create(CONFIGMAPS, _configmap("in-process"))
    clock.advance(29.9)
    with pytest.raises(TooManyRequests):
        client.get(CONFIGMAPS, "before", "default")
    clock.advance(0.1)
    assert len(client.list(CONFIGMAPS, "default").items) == 2
    assert api.faults.injected["TooManyRequests"] == 2
    assert api.faults.rules == []  # an ended storm is forgotten
    assert [r.status for r in front.requests] == [201, 429, 429, 200]


def test_storm_by_agent_cuts_off_one_client(api: InMemoryAPIServer, front: HttpFront) -> None:
    cut, other = _client(front, "replica-a"), _client(front, "replica-b")
    api.faults.storm("internal_error", duration=5, agent="replica-a")

    with pytest.raises(InternalError):
        cut.create(CONFIGMAPS, _configmap("a"))
    other.create(CONFIGMAPS, _configmap("b"))
    assert [c["metadata"]["name"] for c in other.list(CONFIGMAPS, "default").items] == ["b"]


def test_storm_names_a_known_error() -> None:
    with pytest.raises(ValueError, match="unknown storm"):
        InMemoryAPIServer().faults.storm("teapot", duration=1)


def test_slow_answers_take_virtual_time_on_a_fake_clock(
    api: InMemoryAPIServer, front: HttpFront, clock: FakeClock
) -> None:
    client = _client(front)
    api.faults.slow(2.0, verb="create", duration=5)
    before = clock.monotonic()

    client.create(CONFIGMAPS, _configmap("a"))
    assert clock.monotonic() - before == pytest.approx(2.0)
    client.list(CONFIGMAPS, "default")  # another verb: answered at once
    assert clock.monotonic() - before == pytest.approx(2.0)
    client.create(CONFIGMAPS, _configmap("b"))
    client.create(CONFIGMAPS, _configmap("c"))  # 6 s in: the window has closed
    assert clock.monotonic() - before == pytest.approx(6.0)
    assert api.faults.injected["slow"] == 3


def test_slow_answers_wait_real_time_on_a_real_clock() -> None:
    api = InMemoryAPIServer()
    with HttpFront(api) as front:
        client = _client(front)
        api.faults.slow(0.2)
        started = api.clock.monotonic()
        client.list(CONFIGMAPS, "default")
        assert api.clock.monotonic() - started >= 0.2


def test_periodic_compaction_makes_resumes_gone(
    api: InMemoryAPIServer, front: HttpFront, clock: FakeClock
) -> None:
    client = _client(front)
    api.faults.compact_every(5, duration=12)
    start = client.list(CONFIGMAPS, "default").resource_version
    client.create(CONFIGMAPS, _configmap("a"))

    clock.advance(4)
    assert api.faults.tick() == 0
    events = list(client.watch(CONFIGMAPS, "default", resource_version=start, timeout_seconds=0))
    assert [e.type for e in events] == ["ADDED"]
    clock.advance(1)
    assert api.faults.tick() == 1
    events = list(client.watch(CONFIGMAPS, "default", resource_version=start, timeout_seconds=0))
    assert [e.type for e in events] == ["ERROR"]
    assert isinstance(error_from_status(events[0].object), Gone)
    clock.advance(20)  # the 10 s compaction, then the window ends
    assert api.faults.tick() == 1
    assert api.faults.injected["compaction"] == 2
    clock.advance(20)
    assert api.faults.tick() == 0


def test_periodic_watch_drops_end_open_streams_from_the_serve_loop() -> None:
    api = InMemoryAPIServer()  # real clock: the front's serve loop fires the drops
    with HttpFront(api) as front:
        client = OfficialClient.from_url(front.url)
        stream = client.watch(CONFIGMAPS, "default", timeout_seconds=30)
        api.faults.drop_watches_every(0.2, duration=5)
        ended = threading.Event()

        def read() -> None:
            for _ in stream:
                pass
            ended.set()

        threading.Thread(target=read, daemon=True).start()
        assert ended.wait(5)
        assert api.faults.injected["watch_drop"] >= 1


def test_restart_refuses_connections_then_serves_the_same_state_on_the_same_port(
    api: InMemoryAPIServer,
) -> None:
    front = HttpFront(api).start()
    client = _client(front)
    client.create(CONFIGMAPS, _configmap("a"))
    port = front.port

    front.close()
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0
    with pytest.raises(ServiceUnavailable):
        client.list(CONFIGMAPS, "default")
    front.start()
    try:
        assert front.port == port
        assert front.restarts == 1
        assert [c["metadata"]["name"] for c in client.list(CONFIGMAPS, "default").items] == ["a"]
    finally:
        front.close()


def test_a_lost_answer_is_done_but_the_client_sees_a_dropped_connection(
    api: InMemoryAPIServer, front: HttpFront
) -> None:
    client = _client(front)
    api.faults.lose_answers(verb="create", resource="configmaps")

    with pytest.raises(ServiceUnavailable, match="cannot reach the API server"):
        client.create(CONFIGMAPS, _configmap("a"))
    assert [c["metadata"]["name"] for c in client.list(CONFIGMAPS, "default").items] == ["a"]
    assert [(r.method, r.status, r.answered) for r in front.requests] == [
        ("POST", 201, False),
        ("GET", 200, True),
    ]
    assert api.faults.injected["lost_answer"] == 1
