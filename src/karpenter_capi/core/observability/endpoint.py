"""The HTTP endpoint Prometheus scrapes and the kubelet probes.

One small server carries ``/metrics``, ``/healthz`` and ``/readyz``, as Karpenter's does on its
metrics port, so the Deployment needs one port for all three. It runs on the standard library
(``ThreadingHTTPServer`` in a daemon thread): a slow scrape never holds up a probe, and nothing
beyond ``prometheus_client`` is needed. Readiness and health are callbacks, so the runtime
decides what they mean (caches synced, leader elected or standing by) and this module only
reports it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import Protocol
from urllib.parse import urlsplit

from karpenter_capi.core.httpserver import QuietThreadingHTTPServer
from karpenter_capi.core.observability.metrics import CONTENT_TYPE

log = logging.getLogger(__name__)

_TEXT = "text/plain; charset=utf-8"


class Renders(Protocol):
    """What ``/metrics`` serves: one ``Metrics``, or fleet mode's view over many."""

    def render(self) -> bytes: ...


class ObservabilityServer:
    """Serve ``metrics``, health and readiness on ``http://host:port`` until ``close()``.

    ``port=0`` picks a free port (read it back from ``.port`` or ``.url`` after ``start()``).
    ``ready`` and ``healthy`` are called on every probe; one that raises counts as ``False``.
    ``ready`` may answer ``(ready, reason)``: the reason is the body of a 503, so whoever looks
    at a failing probe (``kubectl describe pod`` shows it) learns why.
    """

    def __init__(
        self,
        metrics: Renders,
        *,
        host: str = "127.0.0.1",
        port: int = 8080,
        ready: Callable[[], bool | tuple[bool, str]],
        healthy: Callable[[], bool] = lambda: True,
    ) -> None:
        self.metrics = metrics
        self._host = host
        self._requested_port = port
        self._ready = ready
        self._healthy = healthy
        self._httpd: _Httpd | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("ObservabilityServer is not started")
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{self.port}"

    def start(self) -> ObservabilityServer:
        if self._httpd is not None:
            return self
        httpd = _Httpd((self._host, self._requested_port), self)
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.05},  # bounds how long close() waits
            name=f"observability-{self.port}",
            daemon=True,
        )
        self._thread.start()
        log.info("serving metrics and probes", extra={"url": self.url})
        return self

    def close(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.shutdown()
        httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> ObservabilityServer:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def respond(self, path: str) -> tuple[HTTPStatus, str, bytes]:
        """Status, Content-Type and body for a GET of ``path`` (the handler's whole logic)."""
        if path == "/metrics":
            return HTTPStatus.OK, CONTENT_TYPE, self.metrics.render()
        if path == "/healthz":
            ok, reason = _ask(self._healthy, "unhealthy")
            if ok:
                return HTTPStatus.OK, _TEXT, b"ok\n"
            return HTTPStatus.INTERNAL_SERVER_ERROR, _TEXT, f"{reason}\n".encode()
        if path == "/readyz":
            ok, reason = _ask(self._ready, "not ready")
            if ok:
                return HTTPStatus.OK, _TEXT, b"ok\n"
            return HTTPStatus.SERVICE_UNAVAILABLE, _TEXT, f"{reason}\n".encode()
        return HTTPStatus.NOT_FOUND, _TEXT, b"not found\n"


def _ask(check: Callable[[], bool | tuple[bool, str]], negative: str) -> tuple[bool, str]:
    """Run a probe callback; a callback that raises is a failed probe, not a crashed server."""
    try:
        answer = check()
        if isinstance(answer, tuple):
            ok, reason = answer
            return bool(ok), f"{negative}: {reason}" if reason else negative
        return bool(answer), negative
    except Exception as error:
        log.warning("probe callback failed", exc_info=True)
        return False, f"{negative}: {type(error).__name__}: {error}"


class _Httpd(QuietThreadingHTTPServer):
    def __init__(self, address: tuple[str, int], owner: ObservabilityServer) -> None:
        self.owner = owner
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: _Httpd
    protocol_version = "HTTP/1.1"  # keep-alive: Prometheus reuses its scrape connection

    def do_GET(self) -> None:
        self._serve(with_body=True)

    def do_HEAD(self) -> None:
        self._serve(with_body=False)

    def _serve(self, *, with_body: bool) -> None:
        status, content_type, body = self.server.owner.respond(urlsplit(self.path).path)
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if with_body:
            self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        # Scrapes and probes arrive every few seconds; at INFO they would drown the log.
        log.debug("%s %s", self.address_string(), format % args)
