"""A request sent straight to the API server's urllib3 connection pool, as the official client
would send it, without the layers between.

Why: every call of the controller went through ``ApiClient.call_api``, the REST layer's
content-type matching (regular expressions) and ``PoolManager.urlopen`` (a URL parse and a pool
key built from about twenty fields), about a quarter of the client's CPU for each request
(issue 25 item 5: 2,500 requests in a 1,000-pod scale-up, each some 0.25 ms cheaper this way).
The request is the same: the same headers (those ``param_serialize`` makes, with the
credentials: ``_official_credentials.RequestHeaders``), the same JSON body, the same pool, retries
and timeouts. The body is serialized by orjson (compact, UTF-8) where the REST layer's
``json.dumps`` spends five to ten times the CPU on the same document; an object orjson refuses
(an integer past 64 bits, a key that is not a string) goes through ``json.dumps`` as before.
The ``urllib3.Timeout`` of each timeout is made once (urllib3 clones it per request anyway).
Only the plain case is taken: a proxy, client-go-style read retries, a content type the REST
layer would treat otherwise, or a redirect (which kube-apiserver does not send) go the official
client's way.
"""

from __future__ import annotations

import json
from typing import Any, Final

import orjson
import urllib3
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException
from urllib3.util import parse_url

_JSON_TYPES: Final = frozenset(
    {
        "application/json",
        "application/merge-patch+json",
        "application/strategic-merge-patch+json",
        "application/json-patch+json",
    }
)
"""Content types this client sends; the REST layer ``json.dumps`` a body under each of them."""
_BODY_METHODS: Final = frozenset({"POST", "PUT", "PATCH", "OPTIONS", "DELETE"})
_TIMEOUTS_KEPT: Final = 32
"""``urllib3.Timeout`` objects kept for reuse (requests share one; a watch's depends on its
``timeoutSeconds``)."""


class DirectPool:
    """Sends requests for URLs under ``configuration.host`` to its pool; ``send`` answers
    ``None`` for a request it leaves to the official client."""

    def __init__(self, api_client: ApiClient, origin: str, host: str, port: int | None) -> None:
        self._manager: urllib3.PoolManager = api_client.rest_client.pool_manager
        self._origin, self._host, self._port = origin, host, port
        self._scheme = origin.split("://", 1)[0]
        self._pool: Any = None
        self._timeouts: dict[object, urllib3.Timeout | None] = {}

    @classmethod
    def of(cls, api_client: ApiClient) -> DirectPool | None:
        """For a client that talks to its API server directly (no proxy), else ``None``."""
        configuration = api_client.configuration
        manager = getattr(api_client.rest_client, "pool_manager", None)
        if type(manager) is not urllib3.PoolManager:
            return None  # a proxy: its manager decides how to address the server
        if getattr(configuration, "client_go_retries", False):
            return None  # the REST layer retries reads itself
        host = str(configuration.host or "")
        try:
            url = parse_url(host)
        except ValueError:
            return None
        if url.scheme not in ("http", "https") or not url.host or url.auth or url.query:
            return None
        if url.fragment or not host.endswith(url.path or ""):
            return None
        origin = host[: len(host) - len(url.path or "")]
        return cls(api_client, origin, url.host, url.port)

    def send(
        self,
        method: str,
        url: str,
        headers: dict[str, str],
        body: Any,
        timeout: float | tuple[float, float | None] | None,
    ) -> urllib3.BaseHTTPResponse | None:
        """The response (unread), or ``None``: the official client's path must send it."""
        target = url[len(self._origin) :]
        if not url.startswith(self._origin) or not target.startswith("/"):
            return None
        request_body: bytes | str | None = None
        if method in _BODY_METHODS:
            content_type = headers.get("Content-Type")
            if content_type is not None and content_type not in _JSON_TYPES:
                return None
            if content_type == "application/json-patch+json" and not isinstance(body, list):
                return None  # the REST layer would turn it into a strategic merge patch
            if body is not None:
                request_body = _serialize(body)
        elif body is not None:
            return None
        try:
            response: urllib3.BaseHTTPResponse = self._connection_pool().urlopen(
                method,
                target,
                body=request_body,
                headers=headers,
                timeout=self._timeout(timeout),
                preload_content=False,
                assert_same_host=False,
                redirect=False,
            )
        except urllib3.exceptions.SSLError as exc:  # as the REST layer reports it
            raise ApiException(status=0, reason=f"{type(exc).__name__}\n{exc}") from exc
        if response.get_redirect_location():
            # PoolManager would follow it; kube-apiserver never redirects an API call, and a
            # redirected request was not acted on, so the official client may send it again.
            response.drain_conn()
            response.release_conn()
            return None
        return response

    def _timeout(self, value: float | tuple[float, float | None] | None) -> urllib3.Timeout | None:
        try:
            return self._timeouts[value]
        except KeyError:
            if len(self._timeouts) >= _TIMEOUTS_KEPT:
                self._timeouts.clear()  # watches' read timeouts vary: keep only the recent
            made = self._timeouts[value] = _timeout(value)
            return made
        except TypeError:  # not hashable: made each time
            return _timeout(value)

    def _connection_pool(self) -> Any:
        pool = self._pool
        if pool is None or pool.pool is None:  # not made yet, or closed by the manager
            pool = self._pool = self._manager.connection_from_host(
                self._host, port=self._port, scheme=self._scheme
            )
        return pool


def _serialize(body: Any) -> bytes | str:
    """The JSON of a request body: orjson's, or ``json.dumps``'s for what orjson refuses."""
    try:
        return orjson.dumps(body)
    except TypeError:  # orjson.JSONEncodeError: past 64-bit integers, non-string keys
        return json.dumps(body)


def _timeout(value: float | tuple[float, float | None] | None) -> urllib3.Timeout | None:
    """What the REST layer makes of ``_request_timeout``."""
    if not value:
        return None
    if isinstance(value, (int, float)):
        return urllib3.Timeout(total=value)
    if isinstance(value, tuple) and len(value) == 2:
        return urllib3.Timeout(connect=value[0], read=value[1])
    return None
