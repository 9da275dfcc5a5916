"""The official client's answers read back: a watch's chunked stream into ``WatchEvent``s, and an
HTTP or ``ApiException`` failure into the shared ``core.kube.errors`` exceptions.

Why a module of its own: ``official.py`` builds and sends requests; decoding what comes back is
the other half of the wire, and the only place that knows urllib3's and the generated client's
failure shapes.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator, Mapping

import orjson
import urllib3
from kubernetes.client.exceptions import ApiException

from karpenter_capi.core.kube.client import JsonObject, WatchEvent
from karpenter_capi.core.kube.errors import ApiError, ServiceUnavailable, error_from_status

_VALID_EVENT_TYPES = frozenset({"ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"})


class OfficialWatch:
    """One open watch: a chunked HTTP response read line by line into ``WatchEvent``s.

    ``close()`` may be called from any thread; it shuts the socket down so a reader blocked
    waiting for the next event returns at once, and the iteration then simply ends.
    """

    def __init__(self, response: urllib3.BaseHTTPResponse) -> None:
        self._response = response
        self._closed = threading.Event()
        self._lock = threading.Lock()

    def __iter__(self) -> Iterator[WatchEvent]:
        pending = b""
        try:
            for chunk in self._chunks():
                if not pending and chunk.find(b"\n") == len(chunk) - 1:
                    # The usual chunk: one whole event (an API server flushes each), parsed
                    # as it came, without the copy and lists of the split below.
                    event = _parse_event(chunk)
                    if event is not None:
                        yield event
                    continue
                pending += chunk
                # A chunk may hold several events, or end in the middle of one.
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    event = _parse_event(line)
                    if event is not None:
                        yield event
            event = _parse_event(pending)
            if event is not None:
                yield event
        except (urllib3.exceptions.HTTPError, OSError, AttributeError):
            # A closed or reset connection ends the watch (the informer then rewatches); urllib3
            # may also trip over a socket torn down by close() with an AttributeError.
            pass
        finally:
            self.close()

    def _chunks(self) -> Iterator[bytes]:
        response = self._response
        if getattr(response, "chunked", False):
            yield from response.read_chunked(decode_content=True)
            return
        while not self._closed.is_set():
            data = response.read1(65536) if hasattr(response, "read1") else response.read(65536)
            if not data:
                return
            yield data

    def close(self) -> None:
        with self._lock:
            if self._closed.is_set():
                return
            self._closed.set()
        response = self._response
        shutdown = getattr(response, "shutdown", None)
        if shutdown is not None:
            # RuntimeError: the stream already ended and its connection went back to the pool;
            # ValueError (urllib3 >= 2.3, "Cannot shutdown socket"): urllib3 closed the response
            # itself (a server that dropped the connection mid-stream). Closed either way.
            with contextlib.suppress(OSError, RuntimeError, ValueError):
                shutdown()
        # ValueError ("I/O operation on closed file"): the reader, woken by the shutdown, saw
        # the stream end and closed it first; http.client's close then flushes a closed file.
        with contextlib.suppress(OSError, ValueError, urllib3.exceptions.HTTPError):
            response.close()
        response.release_conn()

    def __enter__(self) -> OfficialWatch:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def read_all(response: urllib3.BaseHTTPResponse) -> bytes:
    try:
        return response.data
    finally:
        response.release_conn()


def decode(data: bytes) -> object:
    """JSON bytes from the API server, parsed. orjson, not ``json``: watch events and answers
    are most of what the controller reads, and the standard decoder (with its encoding sniff
    of bytes) was a tenth of the controller's CPU in a 1,000-pod scale-up; orjson takes about
    two fifths of its time. Its errors are ``ValueError``s, as ``json``'s are."""
    return orjson.loads(data)


def _parse_event(line: bytes) -> WatchEvent | None:
    # JSON allows whitespace around a value, so the line goes to orjson unstripped (no copy).
    if not line or line.isspace():
        return None
    raw = orjson.loads(line)
    if not isinstance(raw, dict):
        raise ValueError("a watch event that is not a JSON object")
    event_type = raw.get("type")
    if event_type not in _VALID_EVENT_TYPES:
        raise ValueError(f"unexpected watch event type {event_type!r}")
    return WatchEvent(type=event_type, object=raw.get("object") or {})


def error_from_response(response: urllib3.BaseHTTPResponse, data: bytes) -> ApiError:
    status: JsonObject = {}
    try:
        parsed = json.loads(data) if data else {}
        if isinstance(parsed, dict) and parsed.get("kind") == "Status":
            status = parsed
    except ValueError:
        pass
    if not status:
        text = data.decode("utf-8", "replace").strip()[:200]
        status = {"message": text or f"HTTP {response.status} {response.reason or ''}".strip()}
    return _with_retry_after(error_from_status(status, response.status), response.headers)


def error_from_api_exception(exc: ApiException, method: str, path: str) -> ApiError:
    if not exc.status:
        return ServiceUnavailable(f"{method} {path}: cannot reach the API server: {exc.reason}")
    status: JsonObject = {}
    body = getattr(exc, "body", None)
    if body:
        try:
            parsed = json.loads(body)
            if isinstance(parsed, dict):
                status = parsed
        except ValueError:
            pass
    status.setdefault("message", str(exc.reason or f"HTTP {exc.status}"))
    return _with_retry_after(error_from_status(status, exc.status), exc.headers or {})


def _with_retry_after(error: ApiError, headers: Mapping[str, str]) -> ApiError:
    if error.retry_after_seconds is None:
        value = headers.get("Retry-After")
        if value is not None and value.strip().isdigit():
            error.retry_after_seconds = int(value.strip())
    return error
