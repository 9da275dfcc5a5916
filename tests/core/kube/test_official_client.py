"""The official-client adapter against a scripted HTTP server: requests it sends, errors it maps.

A scripted server (not the in-memory API) lets these tests send exactly the awkward answers a
real API server or proxy can produce: a 429 with only a ``Retry-After`` header, a non-Status
error body, a watch event split across chunks, a watch that never sends anything.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from karpenter_capi.core.kube import errors
from karpenter_capi.core.kube.client import PatchType, Preconditions, PropagationPolicy
from karpenter_capi.core.kube.config import connect_kubeconfig
from karpenter_capi.core.kube.official import DEFAULT_USER_AGENT, OfficialClient
from karpenter_capi.core.kube.resources import MACHINE_DEPLOYMENTS, NODES, PODS
from karpenter_capi.sim.apiserver.kubeconfig import write_kubeconfig


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]  # lower-cased names
    body: Any


@dataclass
class Script:
    """What the stub answers: a function of the request, returning (code, headers, body)."""

    answer: Callable[[Seen, BaseHTTPRequestHandler], tuple[int, dict[str, str], Any] | None]
    seen: list[Seen] = field(default_factory=list)


class _Stub(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Any

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        seen = Seen(self.command, self.path, headers, json.loads(raw) if raw else None)
        script: Script = self.server.script
        script.seen.append(seen)
        answer = script.answer(seen, self)
        if answer is None:  # the answer streamed itself
            return
        code, headers, body = answer
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", headers.pop("Content-Type", "application/json"))
        self.send_header("Content-Length", str(len(data)))
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle


@pytest.fixture
def stub() -> Iterator[tuple[Script, OfficialClient]]:
    script = Script(answer=lambda seen, _h: (200, {}, {"kind": "Pod", "metadata": {}}))
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
    server.daemon_threads = True
    server.script = script  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    client = OfficialClient.from_url(f"http://127.0.0.1:{server.server_address[1]}", token="tok")
    try:
        yield script, client
    finally:
        client.close()
        server.shutdown()
        server.server_close()


def test_requests_carry_bearer_token_and_real_paths(stub: tuple[Script, OfficialClient]) -> None:
    script, client = stub
    client.get(PODS, "web", "default")
    client.get(MACHINE_DEPLOYMENTS, "md", "capi", subresource="scale")
    client.list(NODES, label_selector="a=b", limit=10, continue_token="next")
    first, scale, listing = script.seen
    assert first.headers["authorization"] == "Bearer tok"
    assert first.path == "/api/v1/namespaces/default/pods/web"
    assert (
        scale.path == "/apis/cluster.x-k8s.io/v1beta2/namespaces/capi/machinedeployments/md/scale"
    )
    assert listing.path == "/api/v1/nodes?labelSelector=a%3Db&limit=10&continue=next"


def test_each_client_sends_the_user_agent_it_was_built_with(
    stub: tuple[Script, OfficialClient],
) -> None:
    """A fleet's replicas are told apart in a server's request log by their User-Agent. The
    name is given to each client (``run`` gives it to every client it builds, fleet members'
    too), not set for the process: two clients with different names, built in either order,
    each keep their own, on the direct HTTP path as on the official client's."""
    script, default = stub
    replica = OfficialClient.from_url(
        default.host, token="tok", user_agent="karpenter-capi/0.1.0 (replica-2)"
    )
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": default.host}}],
        "users": [{"name": "u", "user": {"token": "tok"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    member = connect_kubeconfig(document, user_agent="karpenter-capi/0.1.0 (replica-3)")
    try:
        for client in (replica, default, member):
            assert client._direct is not None  # the direct path sends these
            client.get(PODS, "web", "default")
        replica._direct = None  # as for a proxy: the official client's REST layer sends it
        replica.get(PODS, "web", "default")
    finally:
        replica.close()
        member.close()
    agents = [seen.headers["user-agent"] for seen in script.seen]
    assert agents == [
        "karpenter-capi/0.1.0 (replica-2)",
        DEFAULT_USER_AGENT,
        "karpenter-capi/0.1.0 (replica-3)",
        "karpenter-capi/0.1.0 (replica-2)",
    ]


def test_patch_content_types_and_bodies(stub: tuple[Script, OfficialClient]) -> None:
    script, client = stub
    ops = [{"op": "replace", "path": "/spec/replicas", "value": 3}]
    client.patch(PODS, "web", {"metadata": {"labels": {"a": "b"}}}, "default")
    client.patch(PODS, "web", ops, "default", patch_type=PatchType.JSON)
    client.patch(PODS, "web", {"spec": {}}, "default", patch_type=PatchType.STRATEGIC)
    merge, json_patch, strategic = script.seen
    assert merge.headers["content-type"] == "application/merge-patch+json"
    assert merge.body == {"metadata": {"labels": {"a": "b"}}}
    assert json_patch.headers["content-type"] == "application/json-patch+json"
    assert json_patch.body == ops
    assert strategic.headers["content-type"] == "application/strategic-merge-patch+json"


def test_delete_sends_delete_options(stub: tuple[Script, OfficialClient]) -> None:
    script, client = stub
    client.delete(
        PODS,
        "web",
        "default",
        preconditions=Preconditions(uid="u1", resource_version="7"),
        propagation_policy=PropagationPolicy.FOREGROUND,
        grace_period_seconds=0,
    )
    (seen,) = script.seen
    assert seen.method == "DELETE"
    assert seen.body == {
        "kind": "DeleteOptions",
        "apiVersion": "v1",
        "propagationPolicy": "Foreground",
        "gracePeriodSeconds": 0,
        "preconditions": {"uid": "u1", "resourceVersion": "7"},
    }


def test_evict_posts_a_policy_v1_eviction(stub: tuple[Script, OfficialClient]) -> None:
    script, client = stub
    script.answer = lambda seen, _h: (201, {}, {"kind": "Status", "status": "Success"})
    client.evict("web", "default", grace_period_seconds=30)
    (seen,) = script.seen
    assert (seen.method, seen.path) == ("POST", "/api/v1/namespaces/default/pods/web/eviction")
    assert seen.body["apiVersion"] == "policy/v1"
    assert seen.body["kind"] == "Eviction"
    assert seen.body["deleteOptions"] == {"gracePeriodSeconds": 30}


@pytest.mark.parametrize(
    ("code", "reason", "expected"),
    [
        (404, "NotFound", errors.NotFound),
        (409, "AlreadyExists", errors.AlreadyExists),
        (409, "Conflict", errors.Conflict),
        (410, "Expired", errors.Gone),
        (422, "Invalid", errors.Invalid),
        (500, "InternalError", errors.InternalError),
    ],
)
def test_status_bodies_map_to_api_errors(
    stub: tuple[Script, OfficialClient], code: int, reason: str, expected: type[errors.ApiError]
) -> None:
    script, client = stub
    status = {"kind": "Status", "status": "Failure", "reason": reason, "code": code, "message": "m"}
    script.answer = lambda seen, _h: (code, {}, status)
    with pytest.raises(expected) as info:
        client.get(PODS, "web", "default")
    assert info.value.code == code
    assert info.value.message == "m"


def test_retry_after_header_is_kept_on_429(stub: tuple[Script, OfficialClient]) -> None:
    script, client = stub
    script.answer = lambda seen, _h: (
        429,
        {"Retry-After": "3", "Content-Type": "text/plain"},
        b"slow down",
    )
    with pytest.raises(errors.TooManyRequests) as info:
        client.evict("web", "default")
    assert info.value.retry_after_seconds == 3
    assert "slow down" in info.value.message


def test_a_429_is_raised_at_its_first_answer_never_slept_out(
    stub: tuple[Script, OfficialClient],
) -> None:
    """A throttled request costs its caller one round trip: the client neither retries it
    nor sleeps out ``Retry-After`` (urllib3's default would, on the caller's thread: in fleet
    mode a worker shared by every cluster). The caller's queue honours it instead."""
    script, client = stub
    script.answer = lambda seen, _h: (429, {"Retry-After": "3600"}, b"busy")
    for call in (
        lambda: client.get(PODS, "web", "default"),
        lambda: client.list(NODES),
        lambda: client.create(PODS, {"metadata": {"name": "web"}}, "default"),
    ):
        before = len(script.seen)
        with pytest.raises(errors.TooManyRequests) as info:
            call()
        assert len(script.seen) == before + 1
        assert info.value.retry_after_seconds == 3600


def test_unreachable_server_is_service_unavailable() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = OfficialClient.from_url(f"http://127.0.0.1:{port}")
    with pytest.raises(errors.ServiceUnavailable, match="cannot reach"):
        client.get(NODES, "n1")
    client.close()


def test_served_versions_come_from_discovery(stub: tuple[Script, OfficialClient]) -> None:
    script, client = stub

    def answer(seen: Seen, _h: BaseHTTPRequestHandler) -> tuple[int, dict[str, str], Any]:
        if seen.path == "/api":
            return 200, {}, {"kind": "APIVersions", "versions": ["v1"]}
        group = {
            "name": "cluster.x-k8s.io",
            "versions": [
                {"groupVersion": "cluster.x-k8s.io/v1beta1", "version": "v1beta1"},
                {"groupVersion": "cluster.x-k8s.io/v1beta2", "version": "v1beta2"},
            ],
            "preferredVersion": {"groupVersion": "cluster.x-k8s.io/v1beta2", "version": "v1beta2"},
        }
        return 200, {}, {"kind": "APIGroupList", "groups": [group]}

    script.answer = answer
    assert client.served_versions("") == ["v1"]
    assert client.served_versions("cluster.x-k8s.io") == ["v1beta2", "v1beta1"]
    assert client.served_versions("karpenter.sh") == []


def _chunked_watch(events: list[bytes], hold: threading.Event | None = None) -> Any:
    """An answer that streams ``events`` as raw chunks, then (optionally) blocks on ``hold``."""

    def answer(seen: Seen, handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        try:
            for chunk in events:
                handler.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                handler.wfile.flush()
            if hold is not None:
                hold.wait(30)
            handler.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass
        handler.close_connection = True

    return answer


def test_watch_reassembles_events_split_across_chunks(stub: tuple[Script, OfficialClient]) -> None:
    script, client = stub
    first = json.dumps({"type": "ADDED", "object": {"metadata": {"name": "a"}}}).encode()
    second = json.dumps({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}})
    chunks = [first[:10], first[10:] + b"\n" + second.encode()[:5], second.encode()[5:] + b"\n"]
    script.answer = _chunked_watch(chunks)
    stream = client.watch(
        PODS, "default", resource_version="5", allow_bookmarks=True, timeout_seconds=2.5
    )
    events = list(stream)
    assert [(e.type, e.resource_version) for e in events] == [("ADDED", ""), ("BOOKMARK", "9")]
    assert events[0].object["metadata"]["name"] == "a"
    (seen,) = script.seen
    assert seen.path == (
        "/api/v1/namespaces/default/pods?watch=1&resourceVersion=5"
        "&allowWatchBookmarks=true&timeoutSeconds=3"
    )


def test_a_watch_line_that_is_not_an_event_object_fails_the_watch(
    stub: tuple[Script, OfficialClient],
) -> None:
    # The informer backs off and reports it; before, a list swallowed as the stream's end
    # made the informer rewatch in silence.
    script, client = stub
    script.answer = _chunked_watch([b'{"type":"ADDED","object":{"metadata":{"name":"a"}}}\n[1]\n'])
    events = iter(client.watch(PODS, "default"))
    assert next(events).type == "ADDED"
    with pytest.raises(ValueError, match="not a JSON object"):
        next(events)


def test_watch_error_status_is_raised_before_streaming(stub: tuple[Script, OfficialClient]) -> None:
    script, client = stub
    gone = {
        "kind": "Status",
        "status": "Failure",
        "reason": "Expired",
        "code": 410,
        "message": "old",
    }
    script.answer = lambda seen, _h: (410, {}, gone)
    with pytest.raises(errors.Gone):
        client.watch(PODS, resource_version="1")


def test_closing_a_watch_unblocks_its_reader(stub: tuple[Script, OfficialClient]) -> None:
    script, client = stub
    hold = threading.Event()
    script.answer = _chunked_watch([b'{"type":"ADDED","object":{"metadata":{"name":"a"}}}\n'], hold)
    stream = client.watch(PODS, "default")
    received: list[str] = []
    first_seen = threading.Event()

    def read() -> None:
        for event in stream:
            received.append(event.type)
            first_seen.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert first_seen.wait(10)
    stream.close()  # the server still holds the stream open; the reader must end anyway
    reader.join(10)
    hold.set()
    assert not reader.is_alive()
    assert received == ["ADDED"]
    # The client remains usable for ordinary calls afterwards.
    script.answer = lambda seen, _h: (200, {}, {"kind": "Node", "metadata": {"name": "n1"}})
    assert client.get(NODES, "n1")["metadata"]["name"] == "n1"


def test_a_watch_whose_server_drops_the_connection_just_ends() -> None:
    """A real socket closed mid-stream (no final chunk): urllib3 2.8 closes the response itself,
    and shutting it down again raises ``ValueError: Cannot shutdown socket``. That is a dropped
    watch, which the informer resumes; it must not surface as "watching failed"."""
    listener = socket.create_server(("127.0.0.1", 0))
    event = b'{"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"2"}}}\n'

    def serve_once() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n%s\r\n" % (len(event), event)
            )
            conn.shutdown(socket.SHUT_RDWR)

    server = threading.Thread(target=serve_once, daemon=True)
    server.start()
    client = OfficialClient.from_url(f"http://127.0.0.1:{listener.getsockname()[1]}", token="t")
    try:
        stream = client.watch(PODS, "default")
        assert [e.type for e in stream] == ["ADDED"]
        stream.close()  # closing again is a no-op too
    finally:
        client.close()
        server.join(10)
        listener.close()


def test_from_kubeconfig_reaches_the_url_with_the_token(
    stub: tuple[Script, OfficialClient], tmp_path: Path
) -> None:
    script, client = stub
    path = write_kubeconfig(client.host, tmp_path / "kubeconfig")
    from_file = OfficialClient.from_kubeconfig(str(path))
    try:
        from_file.get(NODES, "n1")
    finally:
        from_file.close()
    (seen,) = script.seen
    assert seen.path == "/api/v1/nodes/n1"
    assert seen.headers["authorization"].startswith("Bearer ")


def test_namespaced_calls_without_namespace_fail_before_sending(
    stub: tuple[Script, OfficialClient],
) -> None:
    script, client = stub
    with pytest.raises(errors.BadRequest, match="needs a namespace"):
        client.get(PODS, "web")
    assert script.seen == []


def test_kubeconfig_credentials_are_not_reloaded_on_every_request(
    stub: tuple[Script, OfficialClient], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kubeconfig loader's refresh hook re-applies the whole cluster config (host, proxy
    from the environment) before every request: a twentieth of the controller's CPU in a
    1,000-pod scale-up (issue 25). Its tokens expire minutes ahead, so once a second is plenty."""
    import kubernetes.client.configuration as configuration_module

    script, client = stub
    path = write_kubeconfig(client.host, tmp_path / "kubeconfig")
    from_file = OfficialClient.from_kubeconfig(str(path))
    reloads: list[int] = []
    real = configuration_module.getproxies
    monkeypatch.setattr(configuration_module, "getproxies", lambda: reloads.append(1) or real())
    started = time.monotonic()
    try:
        for _ in range(20):
            from_file.get(NODES, "n1")
    finally:
        from_file.close()
    seconds = time.monotonic() - started
    assert len(script.seen) == 20
    assert all(seen.headers["authorization"].startswith("Bearer ") for seen in script.seen)
    # At most once a second, however long a loaded machine takes over the twenty requests.
    assert len(reloads) <= 1 + int(seconds)
    assert len(reloads) < 20


def test_a_paced_refresh_hook_still_renews_the_token_once_the_interval_passes() -> None:
    from kubernetes.client import Configuration

    from karpenter_capi.core.kube._official_credentials import RefreshAtMostEvery

    now = [0.0]
    tokens = iter(["one", "two", "three"])

    def loader_hook(configuration: Configuration) -> None:
        # As the kubeconfig loader does: set the token, then install its hook again.
        configuration.api_key["BearerToken"] = next(tokens)
        configuration.refresh_api_key_hook = loader_hook  # type: ignore[assignment]

    configuration = Configuration(host="http://127.0.0.1:1")
    configuration.api_key = {"BearerToken": "zero"}
    configuration.refresh_api_key_hook = RefreshAtMostEvery(loader_hook, 1.0, lambda: now[0])  # type: ignore[assignment]
    for _ in range(5):
        configuration.auth_settings()
    assert configuration.api_key["BearerToken"] == "one"
    now[0] = 1.5
    configuration.auth_settings()
    configuration.auth_settings()
    assert configuration.api_key["BearerToken"] == "two"
    assert isinstance(configuration.refresh_api_key_hook, RefreshAtMostEvery)


class _Waits:
    """A ``blocking`` hook that records whether the request was on the wire while entered."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.log: list[str] = []

    def __enter__(self) -> None:
        self.log.append(f"enter, {len(self.script.seen)} seen")

    def __exit__(self, *exc_info: object) -> None:
        self.log.append(f"exit, {len(self.script.seen)} seen")


def test_the_wait_for_each_answer_is_inside_the_blocking_hook(
    stub: tuple[Script, OfficialClient],
) -> None:
    # A fleet's worker pool counts a worker waiting on its API server as not running Python
    # (core.runtime.gate): the client enters its hook around the request, answer or error.
    script, client = stub
    waits = client.blocking = _Waits(script)
    client.get(PODS, "web-1", "default")
    script.answer = lambda seen, _h: (503, {}, {"kind": "Status", "code": 503})
    with pytest.raises(errors.ApiError):
        client.get(PODS, "web-1", "default")
    assert waits.log == ["enter, 0 seen", "exit, 1 seen", "enter, 1 seen", "exit, 2 seen"]


def test_a_watch_whose_server_goes_silent_ends_at_the_read_timeout(
    stub: tuple[Script, OfficialClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that stops sending, with the connection open, ends the watch after the read
    timeout (the informer then resumes it), and the event before it was delivered."""
    monkeypatch.setattr("karpenter_capi.core.kube.official._WATCH_READ_SLACK_SECONDS", 0.0)
    script, client = stub
    hold = threading.Event()
    script.answer = _chunked_watch([b'{"type":"ADDED","object":{"metadata":{"name":"a"}}}\n'], hold)
    try:
        stream = client.watch(PODS, "default", timeout_seconds=1)
        assert [e.type for e in stream] == ["ADDED"]
    finally:
        hold.set()
    # The connection's next user gets its own timeout back from urllib3.
    script.answer = lambda seen, _h: (200, {}, {"kind": "Node", "metadata": {"name": "n1"}})
    assert client.get(NODES, "n1")["metadata"]["name"] == "n1"
