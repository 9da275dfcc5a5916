"""Shared fixtures.

``kube`` is the heart of the contract suite: every test that takes it runs twice, once against
the in-memory API in process and once through the official ``kubernetes`` client over the HTTP
front on 127.0.0.1, so both transports are held to one set of Kubernetes semantics.

Every test leaves the root logger as it found it: ``karpenter-capi`` commands run in process
install a handler on the stream of the moment (a capture that is closed after the test) at INFO.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import pytest
from hypothesis import settings

from karpenter_capi.core.kube.client import KubeClient
from karpenter_capi.sim.apiserver import InMemoryAPIServer

# CI must be reproducible: there, property tests draw the same examples on every run (a new
# example found locally is added as an explicit test); locally they keep exploring.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture(autouse=True)
def restore_root_logger() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)


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
