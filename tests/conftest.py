"""Shared fixtures.

``kube`` is the heart of the contract suite: every test that takes it runs twice, once against
the in-memory API in process and once through the official ``kubernetes`` client over the HTTP
front on 127.0.0.1, so both transports are held to one set of Kubernetes semantics.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from karpenter_capi.core.kube.client import KubeClient
from karpenter_capi.sim.apiserver import InMemoryAPIServer


@pytest.fixture
def apiserver() -> InMemoryAPIServer:
    """A fresh in-memory API server with the built-in resources registered."""
    return InMemoryAPIServer()


@pytest.fixture(params=["memory", "http"])
def kube(request: pytest.FixtureRequest, apiserver: InMemoryAPIServer) -> Iterator[KubeClient]:
    """The same API server, reached in process or through the official client over HTTP."""
    if request.param == "memory":
        yield apiserver
        return
    from karpenter_capi.core.kube.official import OfficialClient
    from karpenter_capi.sim.apiserver.http import HttpFront

    with HttpFront(apiserver, host="127.0.0.1", port=0) as front:
        client = OfficialClient.from_url(front.url)
        try:
            yield client
        finally:
            client.close()
