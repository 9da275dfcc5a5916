"""The ``KubeClient`` port implemented over the official ``kubernetes`` Python client.

The official client brings what we must not reinvent: kubeconfig and in-cluster loading,
exec/OIDC token refresh, client certificates, proxies and TLS. Its generated per-kind APIs and
models, however, cost about ten times more than the bytes they carry, and the controller reads
everything as plain JSON anyway. So this adapter uses only the client's transport
(``ApiClient.param_serialize`` for auth headers and the base URL, ``ApiClient.call_api`` for the
request), builds every URL from a ``Resource`` descriptor, and decodes the raw bytes (orjson): one
generic implementation serves every resource, built-in or custom.

HTTP failures come back as the shared ``core.kube.errors`` exceptions (``Retry-After`` kept),
so controller code never sees ``ApiException`` or a urllib3 error.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

import urllib3
from kubernetes.client import ApiClient, Configuration
from kubernetes.client.exceptions import ApiException

from karpenter_capi.core.kube._official_credentials import (
    RequestHeaders,
    TokenFile,
    decode_ca_data,
    pace_refresh,
    trim_credentials,
)
from karpenter_capi.core.kube._official_direct import DirectPool
from karpenter_capi.core.kube._official_wire import (
    OfficialWatch,
    decode,
    error_from_api_exception,
    error_from_response,
    read_all,
)
from karpenter_capi.core.kube.client import (
    JsonObject,
    KubeClient,
    ListResult,
    PatchType,
    Preconditions,
    PropagationPolicy,
    WatchStream,
)
from karpenter_capi.core.kube.errors import (
    BadRequest,
    ServiceUnavailable,
    Timeout,
    Unauthorized,
)
from karpenter_capi.core.kube.resources import PODS, Resource
from karpenter_capi.core.kube.writelog import WriteLog

# Connections are held for the whole life of a watch, so the pool must hold one per informer
# plus headroom for ordinary calls; urllib3 otherwise discards (and warns about) the extras.
DEFAULT_POOL_MAXSIZE = 64
DEFAULT_REQUEST_TIMEOUT_SECONDS = 60.0
_CONNECT_TIMEOUT_SECONDS = 10.0
# A watch the server should end after timeoutSeconds gets this much slack before the client
# gives up reading, so a dead connection is noticed without racing the server's own timeout.
_WATCH_READ_SLACK_SECONDS = 30.0
_JSON = "application/json"
DEFAULT_USER_AGENT = "karpenter-capi"
"""The ``User-Agent`` of a client built without one. ``run`` passes its own to every client it
builds, fleet members' included: ``karpenter-capi/VERSION (IDENTITY)``, so a server's audit log,
or the benchmark's request log, tells the replicas of a fleet apart."""


Query = list[tuple[str, str]]
# Spelled out of class scope, where ``list`` names the verb.
_Versions = list[str]
_Patch = JsonObject | list[JsonObject]


class OfficialClient:
    """A ``KubeClient`` over one ``kubernetes.client.ApiClient`` (one cluster, one identity)."""

    def __init__(
        self,
        api_client: ApiClient,
        *,
        request_timeout_seconds: float = DEFAULT_REQUEST_TIMEOUT_SECONDS,
        poll_watches: bool = False,
    ) -> None:
        """``poll_watches``: a watch asked with ``timeout_seconds=0`` is sent as
        ``timeoutSeconds=0``, which the simulated API server answers with the events it has and
        ends at once (the stepped runtime's poll). Off by default because a real kube-apiserver
        reads 0 as "its default timeout", so a poll would hang for minutes there."""
        self._api = api_client
        self._direct = DirectPool.of(api_client)
        self._headers = RequestHeaders(api_client)
        self._timeout = (_CONNECT_TIMEOUT_SECONDS, request_timeout_seconds)
        self._closed = False
        self._poll_watches = poll_watches
        self.write_log = WriteLog()
        """Every write that succeeded, for readers of watch-fed copies (``core.kube.writelog``)."""
        self.blocking: AbstractContextManager[object] = nullcontext()
        """Entered around each request's wait for the server (its answer's headers): a fleet's
        worker pool counts the thread as not running Python meanwhile (``core.runtime.gate``)."""

    # ---------------------------------------------------------------- constructors

    @classmethod
    def from_configuration(
        cls,
        configuration: Configuration,
        *,
        pool_maxsize: int = DEFAULT_POOL_MAXSIZE,
        poll_watches: bool = False,
        user_agent: str = DEFAULT_USER_AGENT,
    ) -> OfficialClient:
        """A client over ``configuration``, sending ``user_agent`` as its ``User-Agent`` (on the
        direct HTTP path too: both send the headers ``param_serialize`` builds)."""
        configuration.connection_pool_maxsize = max(
            pool_maxsize, configuration.connection_pool_maxsize or 0
        )
        trim_credentials(configuration)
        pace_refresh(configuration)
        if configuration.retries is None:
            # urllib3's default would quietly sleep out a 429's Retry-After and resend GETs;
            # the caller's work queue owns that decision (the error carries Retry-After), so
            # only failures to connect, where nothing reached the server, are retried here.
            configuration.retries = urllib3.Retry(
                total=3,
                connect=3,
                read=0,
                redirect=0,
                status=0,
                other=0,
                respect_retry_after_header=False,
            )
        api_client = ApiClient(configuration)
        api_client.user_agent = user_agent
        return cls(api_client, poll_watches=poll_watches)

    @classmethod
    def from_url(
        cls,
        url: str,
        token: str | None = None,
        ca_data: str | None = None,
        insecure_skip_tls_verify: bool = False,
        *,
        token_file: str | None = None,
        pool_maxsize: int = DEFAULT_POOL_MAXSIZE,
        poll_watches: bool = False,
        user_agent: str = DEFAULT_USER_AGENT,
    ) -> OfficialClient:
        """Connect to ``url`` with an optional bearer token (or a file holding one, re-read
        whenever it changes) and CA bundle.

        ``ca_data`` is the base64-encoded PEM bundle as kubeconfig's
        ``certificate-authority-data`` carries it (plain PEM text is accepted too).
        """
        configuration = Configuration(host=url.rstrip("/"))
        if token:
            configuration.api_key = {"BearerToken": token}
            configuration.api_key_prefix = {"BearerToken": "Bearer"}
        elif token_file:
            configuration.api_key_prefix = {"BearerToken": "Bearer"}
            hook = TokenFile(token_file)
            hook(configuration)
            configuration.refresh_api_key_hook = hook  # type: ignore[assignment]
        if ca_data:
            configuration.ca_cert_data = decode_ca_data(ca_data)
        configuration.verify_ssl = not insecure_skip_tls_verify
        return cls.from_configuration(
            configuration,
            pool_maxsize=pool_maxsize,
            poll_watches=poll_watches,
            user_agent=user_agent,
        )

    @classmethod
    def from_kubeconfig(
        cls,
        path: str | None = None,
        context: str | None = None,
        *,
        pool_maxsize: int = DEFAULT_POOL_MAXSIZE,
        user_agent: str = DEFAULT_USER_AGENT,
    ) -> OfficialClient:
        """Load a kubeconfig (``None``: ``$KUBECONFIG`` or ``~/.kube/config``) into a fresh
        ``Configuration``; the library's global default configuration is left untouched."""
        from kubernetes.config import load_kube_config

        configuration = type.__call__(Configuration)
        load_kube_config(
            config_file=path,
            context=context,
            client_configuration=configuration,
            persist_config=False,
        )  # type: ignore[no-untyped-call]
        return cls.from_configuration(
            configuration, pool_maxsize=pool_maxsize, user_agent=user_agent
        )

    @classmethod
    def in_cluster(
        cls, *, pool_maxsize: int = DEFAULT_POOL_MAXSIZE, user_agent: str = DEFAULT_USER_AGENT
    ) -> OfficialClient:
        """Use the pod's service account (token file re-read as it rotates)."""
        from kubernetes.config import load_incluster_config

        configuration = type.__call__(Configuration)
        load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        return cls.from_configuration(
            configuration, pool_maxsize=pool_maxsize, user_agent=user_agent
        )

    @property
    def api_client(self) -> ApiClient:
        """The underlying official client, e.g. to call a generated API for comparison."""
        return self._api

    @property
    def drains_zero_timeout_watch(self) -> bool:
        """Only with ``poll_watches``: then a zero timeout is sent as ``timeoutSeconds=0``,
        which the simulated API server answers by draining (see ``KubeClient``)."""
        return self._poll_watches

    @property
    def host(self) -> str:
        return str(self._api.configuration.host)

    def close(self) -> None:
        """Drop pooled connections. Open watches should be closed by their owners first."""
        if not self._closed:
            self._closed = True
            self._api.close()  # type: ignore[no-untyped-call]

    def __enter__(self) -> OfficialClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- KubeClient verbs

    def get(
        self,
        resource: Resource,
        name: str,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
    ) -> JsonObject:
        path = self._item_path(resource, name, namespace, subresource)
        return self._call("GET", path)

    def list(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
        resource_version: str | None = None,
    ) -> ListResult:
        query: Query = []
        _add(query, "labelSelector", label_selector)
        _add(query, "fieldSelector", field_selector)
        _add(query, "limit", str(limit) if limit is not None else None)
        _add(query, "continue", continue_token)
        _add(query, "resourceVersion", resource_version)
        body = self._call("GET", _collection_path(resource, namespace), query=query)
        items = body.get("items") or []
        for item in items:
            # The API server leaves these out of list items; callers handle objects alike.
            item.setdefault("apiVersion", resource.api_version)
            item.setdefault("kind", resource.kind)
        metadata = body.get("metadata") or {}
        remaining = metadata.get("remainingItemCount")
        return ListResult(
            items=items,
            resource_version=str(metadata.get("resourceVersion", "")),
            continue_token=metadata.get("continue") or None,
            remaining_item_count=int(remaining) if remaining is not None else None,
        )

    def watch(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        allow_bookmarks: bool = False,
        timeout_seconds: float | None = None,
    ) -> WatchStream:
        query: Query = [("watch", "1")]
        _add(query, "resourceVersion", resource_version)
        _add(query, "labelSelector", label_selector)
        _add(query, "fieldSelector", field_selector)
        if allow_bookmarks:
            query.append(("allowWatchBookmarks", "true"))
        read_timeout: float | None = None
        if timeout_seconds == 0 and self._poll_watches:
            query.append(("timeoutSeconds", "0"))
            read_timeout = self._timeout[1]
        elif timeout_seconds is not None:
            # The API takes whole seconds; round up so the server never ends early.
            query.append(("timeoutSeconds", str(max(1, int(-(-timeout_seconds // 1))))))
            read_timeout = timeout_seconds + _WATCH_READ_SLACK_SECONDS
        response = self._send(
            "GET",
            _collection_path(resource, namespace),
            query=query,
            timeout=(_CONNECT_TIMEOUT_SECONDS, read_timeout),
        )
        if not 200 <= response.status < 300:
            raise error_from_response(response, read_all(response))
        return OfficialWatch(response)

    def create(
        self,
        resource: Resource,
        obj: JsonObject,
        namespace: str | None = None,
    ) -> JsonObject:
        namespace = namespace or obj.get("metadata", {}).get("namespace")
        if resource.namespaced and not namespace:
            raise BadRequest(f"creating {resource.group_resource} needs a namespace")
        return self._logged(
            resource, self._call("POST", _collection_path(resource, namespace), body=obj), None
        )

    def update(
        self,
        resource: Resource,
        obj: JsonObject,
        *,
        subresource: str | None = None,
    ) -> JsonObject:
        metadata = obj.get("metadata") or {}
        name = metadata.get("name")
        if not name:
            raise BadRequest(f"updating {resource.group_resource} needs metadata.name")
        path = self._item_path(resource, name, metadata.get("namespace"), subresource)
        return self._logged(resource, self._call("PUT", path, body=obj), subresource)

    def patch(
        self,
        resource: Resource,
        name: str,
        patch: _Patch,
        namespace: str | None = None,
        *,
        patch_type: PatchType = PatchType.MERGE,
        subresource: str | None = None,
    ) -> JsonObject:
        path = self._item_path(resource, name, namespace, subresource)
        # The REST layer keys JSON serialisation off the Content-Type and would turn a JSON
        # patch whose body is not a list into a strategic merge patch, so the type is set here
        # explicitly and the body passed as-is.
        answer = self._call("PATCH", path, body=patch, content_type=str(patch_type))
        return self._logged(resource, answer, subresource)

    def delete(
        self,
        resource: Resource,
        name: str,
        namespace: str | None = None,
        *,
        preconditions: Preconditions | None = None,
        propagation_policy: PropagationPolicy | None = None,
        grace_period_seconds: int | None = None,
    ) -> JsonObject:
        options: JsonObject = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if propagation_policy is not None:
            options["propagationPolicy"] = str(propagation_policy)
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        if preconditions is not None:
            wanted: JsonObject = {}
            if preconditions.uid is not None:
                wanted["uid"] = preconditions.uid
            if preconditions.resource_version is not None:
                wanted["resourceVersion"] = preconditions.resource_version
            options["preconditions"] = wanted
        path = self._item_path(resource, name, namespace, None)
        return self._logged(resource, self._call("DELETE", path, body=options), None)

    def evict(self, name: str, namespace: str, *, grace_period_seconds: int | None = None) -> None:
        eviction: JsonObject = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        if grace_period_seconds is not None:
            eviction["deleteOptions"] = {"gracePeriodSeconds": grace_period_seconds}
        self._call("POST", PODS.path(namespace, _segment(name), "eviction"), body=eviction)

    def server_version(self) -> JsonObject:
        return self._call("GET", "/version")

    def served_versions(self, group: str) -> _Versions:
        if not group:
            return [str(v) for v in self._call("GET", "/api").get("versions", [])]
        for entry in self._call("GET", "/apis").get("groups", []):
            if entry.get("name") != group:
                continue
            versions = [str(v.get("version")) for v in entry.get("versions", [])]
            preferred = (entry.get("preferredVersion") or {}).get("version")
            if preferred in versions:
                versions.remove(preferred)
                versions.insert(0, preferred)
            return versions
        return []

    # ---------------------------------------------------------------- transport

    def _redact(self, text: str) -> str:
        """``text`` with this client's bearer token (if one shows up in it) replaced."""
        for value in (self._api.configuration.api_key or {}).values():
            if not isinstance(value, str):
                continue
            for secret in (value.strip(), value.strip().removeprefix("Bearer ").strip()):
                if len(secret) >= 8:
                    text = text.replace(secret, "<redacted>")
        return text

    def request_json(
        self, method: str, path: str, *, query: Query | None = None, body: Any = None
    ) -> JsonObject:
        """Any other call (discovery documents, ``/version``), answered as parsed JSON."""
        return self._call(method, path, query=query, body=body)

    def _item_path(
        self, resource: Resource, name: str, namespace: str | None, subresource: str | None
    ) -> str:
        if resource.namespaced and not namespace:
            raise BadRequest(f"{resource.group_resource} {name!r} needs a namespace")
        return resource.path(namespace, _segment(name), subresource)

    def _logged(
        self, resource: Resource, answer: JsonObject, subresource: str | None
    ) -> JsonObject:
        # A status write's answer is the whole object; a scale write's is a Scale.
        self.write_log.record(resource, answer, whole=subresource in (None, "status"))
        return answer

    def _call(
        self,
        method: str,
        path: str,
        *,
        query: Query | None = None,
        body: Any = None,
        content_type: str = _JSON,
    ) -> JsonObject:
        response = self._send(method, path, query=query, body=body, content_type=content_type)
        data = read_all(response)
        if not 200 <= response.status < 300:
            raise error_from_response(response, data)
        try:
            parsed = decode(data) if data else {}
        except ValueError as exc:
            raise ServiceUnavailable(
                f"{method} {path}: the server answered with a body that is not JSON"
            ) from exc
        if not isinstance(parsed, dict):
            raise ServiceUnavailable(f"{method} {path}: expected a JSON object")
        return parsed

    def _send(
        self,
        method: str,
        path: str,
        *,
        query: Query | None = None,
        body: Any = None,
        content_type: str = _JSON,
        timeout: tuple[float, float | None] | None = None,
    ) -> urllib3.BaseHTTPResponse:
        # The headers param_serialize would add (the defaults, the possibly refreshed bearer
        # token), kept between requests (``RequestHeaders``); the URL is the configured host's.
        # The body is passed on untouched: the direct path serializes it, or the REST layer
        # json.dumps it, which is all the generic path needs.
        header_params = self._headers(_JSON, content_type if body is not None else None)
        if header_params is not None:
            url = str(self._api.configuration.host) + path
        else:
            headers = {"Accept": _JSON}
            if body is not None:
                headers["Content-Type"] = content_type
            _method, url, header_params, _body, _post = self._api.param_serialize(
                method=method,
                resource_path=path,
                header_params=headers,
                auth_settings=["BearerToken"],
            )
        if query:
            url += "?" + urlencode(query)
        try:
            with self.blocking:
                direct = self._direct
                if direct is not None:
                    sent = direct.send(method, url, header_params, body, timeout or self._timeout)
                    if sent is not None:
                        return sent
                rest_response = self._api.call_api(
                    method,
                    url,
                    header_params=header_params,
                    body=body,
                    _request_timeout=timeout or self._timeout,
                )
        except ApiException as exc:  # TLS failures and client-side retries end up here
            raise error_from_api_exception(exc, method, path) from exc
        except urllib3.exceptions.ReadTimeoutError as exc:
            raise Timeout(f"{method} {path}: timed out waiting for the API server") from exc
        except urllib3.exceptions.HTTPError as exc:
            raise ServiceUnavailable(
                f"{method} {path}: cannot reach the API server: {self._redact(str(exc))}"
            ) from exc
        except ValueError:
            # http.client refuses a header with a control character in it and quotes the whole
            # value in its message: with a bearer token, that is the token. Neither the message
            # nor the exception (a traceback would print it) may travel on.
            raise Unauthorized(
                f"{method} {path}: the credentials cannot be sent: the token is not a valid "
                "HTTP header value (it contains a line break or another control character)"
            ) from None
        response: urllib3.BaseHTTPResponse = rest_response.response
        return response


def _add(query: Query, key: str, value: str | None) -> None:
    if value:
        query.append((key, value))


def _segment(name: str) -> str:
    return quote(name, safe="")


def _collection_path(resource: Resource, namespace: str | None) -> str:
    return resource.path(namespace if resource.namespaced else None)


if TYPE_CHECKING:
    # mypy proves the adapter satisfies the port it is written for.
    def _satisfies_port(client: OfficialClient) -> KubeClient:
        return client
