"""The simulator's Azure, at the HTTP transport: the real SDK runs, its requests get canned
answers.

The ``capz`` plugin talks to Azure through azure-core pipelines (``ComputeManagementClient`` for
Resource SKUs, a ``PipelineClient`` for Retail Prices), and both accept a ``transport``. The
simulator injects ``FakeAzureTransport`` there, so ``karpenter-capi simulate azure-vmss`` runs
the plugin's real code path (the SDK's URL building, paging through ``nextLink`` and
``NextPageLink``, deserialisation, error mapping) with no network and no credential, and the
tests use the same transport. ``routes`` map a URL path to a handler returning (status, JSON
body); ``/subscriptions/*/`` in a route matches any subscription; every request is recorded.
``FakeCredential`` hands out a token without asking anybody.

This module imports azure-core at load time: it exists only where the ``azure`` extra is
installed (``karpenter_capi.sim.azure`` says so when it is not).

``FakeResponse`` builds on azure-core's own ``HttpResponseImpl`` (the base of its requests and
aiohttp responses): the SDK reads ``.json()``, ``.text()`` and the backward-compatible
``.body()`` of a response, and only that class provides them all.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlparse

from azure.core.credentials import AccessToken
from azure.core.pipeline.transport import HttpTransport
from azure.core.rest import HttpRequest
from azure.core.rest._http_response_impl import HttpResponseImpl
from azure.core.utils import case_insensitive_dict

Handler = Callable[[HttpRequest], tuple[int, Any]]

SUBSCRIPTION = "00000000-0000-0000-0000-000000000001"
SKUS_SUFFIX = "/providers/Microsoft.Compute/skus"
SKUS_PATH = f"/subscriptions/{SUBSCRIPTION}{SKUS_SUFFIX}"
ANY_SUBSCRIPTION_SKUS_PATH = f"/subscriptions/*{SKUS_SUFFIX}"
PRICES_PATH = "/api/retail/prices"
_SUBSCRIPTION_SEGMENT = re.compile(r"^/subscriptions/[^/]+/")


class FakeResponse(HttpResponseImpl):
    """An azure-core response with its body already in memory."""

    def __init__(self, request: HttpRequest, status: int, body: Any) -> None:
        content = json.dumps(body).encode()
        super().__init__(
            request=request,
            internal_response=None,
            status_code=status,
            reason="OK" if status < 400 else "Error",
            content_type="application/json",
            headers=case_insensitive_dict({"Content-Type": "application/json"}),
            stream_download_generator=None,
        )
        self._content = content

    def close(self) -> None:
        self._is_closed = True


class FakeAzureTransport(HttpTransport[HttpRequest, "FakeResponse"]):
    """Serves ``routes`` (URL path -> handler); an unknown path is a 404."""

    def __init__(self, routes: dict[str, Handler] | None = None) -> None:
        self.routes: dict[str, Handler] = dict(routes or {})
        self.requests: list[HttpRequest] = []

    def send(self, request: HttpRequest, **kwargs: Any) -> FakeResponse:
        self.requests.append(request)
        path = urlparse(request.url).path
        handler = self.routes.get(path) or self.routes.get(
            _SUBSCRIPTION_SEGMENT.sub("/subscriptions/*/", path)
        )
        if handler is None:
            return FakeResponse(request, 404, {"error": {"code": "NotFound", "message": "no"}})
        status, body = handler(request)
        return FakeResponse(request, status, body)

    def open(self) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> FakeAzureTransport:
        return self

    def __exit__(self, *args: object) -> None:
        pass

    def sleep(self, duration: float) -> None:
        """The SDK's retry back-off: virtual time never waits on the wall clock."""

    def paths(self) -> list[str]:
        return [urlparse(r.url).path for r in self.requests]


class FakeCredential:
    """An azure-core ``TokenCredential`` that never talks to Entra ID."""

    def __init__(self) -> None:
        self.scopes: list[tuple[str, ...]] = []

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        self.scopes.append(scopes)
        return AccessToken("fake-token", 4_102_444_800)  # 2100-01-01


def query(request: HttpRequest) -> dict[str, list[str]]:
    return parse_qs(urlparse(request.url).query)
