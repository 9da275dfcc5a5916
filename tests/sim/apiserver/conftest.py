"""Fixtures shared by the in-memory API server's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes.client import ApiClient, Configuration, CoreV1Api

from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.apiserver.http import HttpFront


@pytest.fixture
def core(api: InMemoryAPIServer) -> Iterator[CoreV1Api]:
    """The official client's core API over HTTP to the module's ``api`` server."""
    with HttpFront(api) as front:
        configuration = Configuration()
        configuration.host = front.url
        with ApiClient(configuration) as client:
            yield CoreV1Api(client)
