"""The in-memory API server, reachable over HTTP on loopback at the real Kubernetes URL paths.

Why a second front on one store: the controller ships with the official ``kubernetes`` client
as its transport, and ``kubectl`` is how a user looks at a cluster. Serving the in-memory API at
``/api/v1/...`` and ``/apis/<group>/<version>/...`` lets the same contract tests run through the
official client (URL building, JSON patch content types, chunked watch parsing, error mapping)
and lets a person point ``kubectl`` at a simulated cluster. Only the wire lives here: every
semantic (resourceVersion, selectors, patches, finalizers) is the in-memory server's.

Plain ``http.server`` is enough: HTTP/1.1 with keep-alive for ordinary calls, chunked transfer
encoding for watches, one daemon thread per connection.
"""

from __future__ import annotations

import contextlib
import functools
import hmac
import json
import socket
import threading
import time
from dataclasses import dataclass
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote, urlsplit

import orjson

from karpenter_capi.core.httpserver import QuietThreadingHTTPServer
from karpenter_capi.core.kube.client import JsonObject
from karpenter_capi.core.kube.errors import (
    ApiError,
    BadRequest,
    InternalError,
    MethodNotAllowed,
    NotFound,
    Unauthorized,
)
from karpenter_capi.core.kube.resources import Resource
from karpenter_capi.sim.apiserver.http_discovery import (
    api_group,
    api_group_list,
    api_resource_list,
    api_versions,
    host_port,
    lookup,
)
from karpenter_capi.sim.apiserver.http_hangups import HangupMonitor
from karpenter_capi.sim.apiserver.http_openapi import openapi_group_version, openapi_root
from karpenter_capi.sim.apiserver.http_resources import (
    JSON_TYPE,
    Reply,
    ResourceRequest,
    refuse_dry_run,
)
from karpenter_capi.sim.apiserver.http_tables import TableRenderer

if TYPE_CHECKING:
    from collections.abc import Callable

    from karpenter_capi.core.kube.client import WatchEvent, WatchStream
    from karpenter_capi.sim.apiserver import InMemoryAPIServer
    from karpenter_capi.sim.apiserver.definitions import ResourceDefinition


# The verb a fault rule names, for a request on one object (GET of a collection is list/watch).
_VERB_OF_METHOD = {
    "GET": "get",
    "POST": "create",
    "PUT": "update",
    "PATCH": "patch",
    "DELETE": "delete",
}


@dataclass(frozen=True, slots=True)
class ServedRequest:
    """One request as the front received it (``HttpFront(record_requests=True)``)."""

    at: float  # the server clock's monotonic time on arrival
    method: str
    path: str  # without the query
    query: str
    status: int  # 200 for a watch that started streaming
    agent: str
    answered: bool = True  # False: done, then the connection dropped (``lose_answers``)


class HttpFront:
    """Serve ``server`` on ``http://host:port`` until ``close()`` (port 0 picks a free one).

    ``start()`` after ``close()`` listens again on the same port with the same store: an API
    server restarting, as clients see it (connections refused while it is down, watches ended).
    With ``record_requests`` every request is kept in ``requests`` (tests count retries).
    """

    def __init__(
        self,
        server: InMemoryAPIServer,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        record_requests: bool = False,
        token: str | None = None,
    ) -> None:
        self.api = server
        # With a token, requests without ``Authorization: Bearer <token>`` are 401, so a test
        # can tell which credentials reached which cluster; without one, anything goes.
        self.token = token
        self._host = host
        self._requested_port = port
        self._httpd: _Httpd | None = None
        self._thread: threading.Thread | None = None
        self._record = record_requests
        self._requests_lock = threading.Lock()
        self._requests: list[ServedRequest] = []
        self.restarts = 0
        """Times ``start()`` listened again after a ``close()``."""
        self._closed_once = False

    @property
    def requests(self) -> list[ServedRequest]:
        with self._requests_lock:
            return list(self._requests)

    def record(self, request: ServedRequest) -> None:
        if self._record:
            with self._requests_lock:
                self._requests.append(request)

    @property
    def serving(self) -> bool:
        return self._httpd is not None

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("HttpFront is not started")
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{host_port(self._host, self.port)}"

    @property
    def open_watches(self) -> int:
        """Watches currently streaming to clients (ended ones, hung-up clients included, leave)."""
        return 0 if self._httpd is None else self._httpd.watch_count()

    def start(self) -> HttpFront:
        if self._httpd is not None:
            return self
        self._httpd = _Httpd((self._host, self._requested_port), self)
        if self._closed_once:
            self.restarts += 1
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},  # bounds how long close() waits
            name=f"http-front-{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop accepting, end open watches and drop kept-alive connections."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        # A restart comes back where clients expect it.
        self._requested_port = int(httpd.server_address[1])
        self._closed_once = True
        httpd.shutdown()
        httpd.end_all_connections()
        httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> HttpFront:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.close()


class _Httpd(QuietThreadingHTTPServer):
    # Benchmarks open many connections at once; the default backlog of 5 refuses some.
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], front: HttpFront) -> None:
        self.front = front
        # Ages are measured on the server's clock, which a simulation may be running fast.
        clock = getattr(front.api, "clock", None)
        self.tables = TableRenderer(clock.now if clock is not None else None)
        self._lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        self._watches: set[WatchStream] = set()
        self.hangups = HangupMonitor(f"watch-hangups-{address[1]}")
        super().__init__(address, _Handler)

    def server_close(self) -> None:
        super().server_close()
        self.hangups.close()

    def service_actions(self) -> None:
        # Called by serve_forever between polls: periodic watch drops and compactions happen
        # on the server's clock even when no request arrives.
        self.front.api.faults.tick()

    def track_connection(self, conn: socket.socket, active: bool) -> None:
        with self._lock:
            if active:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)

    def track_watch(self, stream: WatchStream, active: bool) -> None:
        with self._lock:
            if active:
                self._watches.add(stream)
            else:
                self._watches.discard(stream)

    def watch_count(self) -> int:
        with self._lock:
            return len(self._watches)

    def end_all_connections(self) -> None:
        with self._lock:
            watches, self._watches = list(self._watches), set()
            connections, self._connections = list(self._connections), set()
        for stream in watches:
            stream.close()
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Httpd
    server_version = "karpenter-capi-sim"
    lost_reply: Reply | None = None  # the answer a lose_answers fault kept from the client
    _header_values: dict[str, str] = {}  # replaced, never mutated (``header``)
    _header_source: object = None  # the ``headers`` that ``_header_values`` was read from
    # A buffered ``wfile``: an answer's headers and body go out in one write (the standard
    # library's default, unbuffered, writes each part); every write here is flushed at once.
    wbufsize = 64 * 1024

    def setup(self) -> None:
        super().setup()
        # A watch's headers and its events go out in separate writes; without NODELAY, Nagle
        # plus the client's delayed ACK would add ~40 ms to each of them.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.track_connection(self.connection, True)

    def finish(self) -> None:
        self.server.track_connection(self.connection, False)
        with contextlib.suppress(OSError):
            super().finish()

    def header(self, name: str, default: str = "") -> str:
        """The request's first ``name`` header (any case), as ``self.headers.get`` answers it.

        ``email.message.Message.get`` walks every header, lower-casing and sanitizing each, at
        each look; a request looks up six. Read into a dict once a request instead (the values
        as parsed: ``http.client`` decodes them as Latin-1, which the sanitizing leaves as is).
        """
        if self._header_source is not self.headers:
            values: dict[str, str] = {}
            for key, value in self.headers.raw_items():
                values.setdefault(key.lower(), value)
            self._header_values, self._header_source = values, self.headers
        return self._header_values.get(name.lower(), default)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: a simulated cluster serving kubectl should not flood the terminal."""

    def handle_expect_100(self) -> bool:
        """``100 Continue`` goes out at once: the client waits for it before the body."""
        answered = super().handle_expect_100()
        self.wfile.flush()
        return answered

    def date_time_string(self, timestamp: float | None = None) -> str:
        """The ``Date`` header, formatted once a second (not once an answer)."""
        if timestamp is not None:
            return super().date_time_string(timestamp)
        return _http_date(int(time.time()))

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    # ---------------------------------------------------------------- plumbing

    def _dispatch(self, method: str) -> None:
        front = self.server.front
        arrived = front.api.clock.monotonic()
        try:
            body = self._read_body()
            self._authenticate()
            reply = _Router(self, method, body).route()
        except ApiError as exc:
            reply = _error_reply(exc)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
            return
        except Exception as exc:  # a bug in the store must still answer like an API server
            reply = _error_reply(InternalError(f"{type(exc).__name__}: {exc}"))
        path, _, query = self.path.partition("?")
        lost, self.lost_reply = self.lost_reply, None
        answer = reply or lost
        status = 200 if answer is None else answer.code
        agent = self.header("User-Agent")
        front.record(ServedRequest(arrived, method, path, query, status, agent, lost is None))
        if reply is not None:
            self._send(reply)

    def _authenticate(self) -> None:
        expected = self.server.front.token
        if expected is None:
            return
        given = self.header("Authorization")
        if not hmac.compare_digest(given.encode(), f"Bearer {expected}".encode()):
            raise Unauthorized("Unauthorized")

    def _read_body(self) -> bytes:
        if self.header("Transfer-Encoding").lower() == "chunked":
            parts: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.header("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(self, reply: Reply) -> None:
        if isinstance(reply.body, bytes | str):
            data = reply.body.encode() if isinstance(reply.body, str) else reply.body
        else:
            data = _dumps(reply.body)
        try:
            self.send_response(reply.code)
            self.send_header("Content-Type", reply.content_type)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-cache, private")
            for key, value in reply.headers.items():
                self.send_header(key, value)
            for warning in reply.warnings:
                self.send_header("Warning", warning_header(warning))
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()  # headers and body in one write (``wbufsize``)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def stream_watch(self, stream: WatchStream, encode: Callable[[WatchEvent], JsonObject]) -> None:
        """Write each event as one chunk until the stream ends or the client hangs up."""
        self.server.track_watch(stream, True)
        hangups = self.server.hangups
        try:
            self.send_response(200)
            self.send_header("Content-Type", JSON_TYPE)
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Cache-Control", "no-cache, private")
            self.end_headers()
            self.wfile.flush()
            hangups.watch(self.connection, stream)
            # An in-memory stream hands out what is there at once: one write for all of it.
            batches = getattr(stream, "batches", None)
            for batch in batches() if batches is not None else ([e] for e in stream):
                self.wfile.write(b"".join(_watch_chunk(encode(event)) for event in batch))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True
        finally:
            hangups.forget(self.connection)
            stream.close()
            self.server.track_watch(stream, False)


@functools.lru_cache(maxsize=2)
def _http_date(second: int) -> str:
    return formatdate(second, usegmt=True)


def _watch_chunk(obj: JsonObject) -> bytes:
    """One watch event as one HTTP chunk: a JSON line."""
    line = _dumps(obj) + b"\n"
    return b"%x\r\n%s\r\n" % (len(line), line)


class _Router:
    """One request: path and query parsing, then the matching store call."""

    def __init__(self, handler: _Handler, method: str, body: bytes) -> None:
        self.handler = handler
        self.method = method
        self.body = body
        self.api = handler.server.front.api
        parts = urlsplit(handler.path)
        self.segments = [unquote(s) for s in parts.path.split("/") if s]
        self.query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        self.accept = handler.header("Accept")
        self.content_type = handler.header("Content-Type").split(";")[0].strip()
        self.tables = handler.server.tables

    def stream_watch(self, stream: WatchStream, encode: Callable[[WatchEvent], JsonObject]) -> None:
        self.handler.stream_watch(stream, encode)

    def route(self) -> Reply | None:
        segs = self.segments
        if not segs:
            return Reply(200, {"paths": ["/api", "/api/v1", "/apis", "/healthz", "/version"]})
        head = segs[0]
        if head in ("healthz", "readyz", "livez") and len(segs) == 1:
            return Reply(200, "ok", content_type="text/plain; charset=utf-8")
        if head == "version" and len(segs) == 1:
            return Reply(200, self.api.server_version())
        if head == "openapi":
            return self._openapi(segs[1:])
        if head == "api":
            if len(segs) == 1:
                host, port = self.handler.server.server_address[:2]
                return self._get_only(lambda: api_versions(str(host), int(port)))
            return self._under_group_version("", segs[1], segs[2:])
        if head == "apis":
            if len(segs) == 1:
                return self._get_only(lambda: api_group_list(self.api))
            if len(segs) == 2:
                return self._get_only(lambda: api_group(self.api, segs[1]))
            return self._under_group_version(segs[1], segs[2], segs[3:])
        raise NotFound("the server could not find the requested resource")

    # ---------------------------------------------------------------- discovery

    def _openapi(self, rest: list[str]) -> Reply:
        not_found = NotFound("the server could not find the requested resource")
        if not rest or rest[0] != "v3":
            raise not_found  # v2 is not served; kubectl only needs v3 (see http_openapi)
        definitions = self.api.definitions()
        if len(rest) == 1:
            return self._get_only(lambda: openapi_root(definitions))
        group, version = ("", rest[2]) if rest[1] == "api" and len(rest) == 3 else ("", "")
        if rest[1] == "apis" and len(rest) == 4:
            group, version = rest[2], rest[3]
        document = openapi_group_version(
            definitions, group, version, str(self.api.server_version()["gitVersion"])
        )
        if not version or document is None:
            raise not_found
        return self._get_only(lambda: document)

    def _get_only(self, build: Any) -> Reply:
        if self.method != "GET":
            raise MethodNotAllowed(f"{self.method} is not allowed on discovery documents")
        return Reply(200, build())

    # ---------------------------------------------------------------- resources

    def _under_group_version(self, group: str, version: str, rest: list[str]) -> Reply | None:
        if not rest:
            return self._get_only(lambda: api_resource_list(self.api, group, version))
        namespace: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            inner = lookup(self.api, group, version, rest[2])
            if inner is not None and inner.namespaced:
                namespace, rest = rest[1], rest[2:]
        if len(rest) > 3:
            raise NotFound("the server could not find the requested resource")
        definition = lookup(self.api, group, version, rest[0])
        if definition is None:
            gv = f"{group}/{version}" if group else version
            raise NotFound(f"the server could not find the requested resource ({rest[0]} in {gv})")
        if namespace is not None and not definition.namespaced:
            raise NotFound(f"{definition.plural} is not namespaced")
        resource = Resource(
            group, version, definition.plural, definition.kind, definition.namespaced
        )
        name = rest[1] if len(rest) > 1 else None
        subresource = rest[2] if len(rest) > 2 else None
        if subresource is not None and subresource not in definition.subresources:
            raise NotFound(f"{definition.plural} has no subresource {subresource!r}")
        lose_answer = self._inject_faults(definition, name, subresource)
        if self.method != "GET":
            refuse_dry_run(self.query)  # a body's DeleteOptions are checked by the request
        request = ResourceRequest(
            self,
            definition,
            resource=resource,
            namespace=namespace,
            name=name,
            subresource=subresource,
        )
        reply = request.handle()
        if lose_answer and reply is not None:
            # Done, but the client never hears of it: the connection drops instead.
            self.handler.close_connection = True
            self.handler.lost_reply = reply
            return None
        return reply

    def _inject_faults(
        self, definition: ResourceDefinition, name: str | None, subresource: str | None
    ) -> bool:
        """The faults meant for HTTP clients only (``FaultInjector`` rules with ``over_http``)."""
        verb = _VERB_OF_METHOD.get(self.method, self.method.lower())
        if self.method == "GET" and name is None:
            verb = "watch" if self.truthy("watch") else "list"
        agent = self.handler.header("User-Agent")
        faults = self.api.faults
        args = (verb, definition.plural, definition.group_resource, name, subresource)
        faults.delay(*args, agent=agent)
        faults.check(*args, over_http=True, agent=agent)
        return verb != "watch" and faults.answer_lost(*args, agent=agent)

    def truthy(self, key: str) -> bool:
        return self.query.get(key, "").lower() in ("1", "true")

    def json_body(self) -> Any:
        if not self.body:
            return None
        try:
            return _loads(self.body)
        except ValueError as exc:
            raise BadRequest(f"the request body is not valid JSON: {exc}") from None


def warning_header(text: str) -> str:
    """An RFC 7234 ``Warning`` value as kube-apiserver writes it: ``299 - "text"``."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'299 - "{escaped}"'


def _error_reply(exc: ApiError) -> Reply:
    headers = {}
    if exc.retry_after_seconds is not None:
        headers["Retry-After"] = str(exc.retry_after_seconds)
    return Reply(exc.code, exc.to_status(), headers)


def _dumps(obj: Any) -> bytes:
    """Compact JSON. orjson first (every watch event and answer goes through here: with the
    ``json`` module, encoding was the largest share of a fleet emulator's HTTP fronts); what
    orjson refuses (keys that are not strings, integers past 64 bits) goes to ``json``."""
    try:
        return orjson.dumps(obj)
    except TypeError:
        return json.dumps(obj, separators=(",", ":")).encode()


def _loads(data: bytes) -> Any:
    """A request body, parsed. orjson first; a body it refuses is left to ``json``, which
    accepts what it did before (``NaN``, integers past 64 bits) and words the error."""
    try:
        return orjson.loads(data)
    except ValueError:
        return json.loads(data)
