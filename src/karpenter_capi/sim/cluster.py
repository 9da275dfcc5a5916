"""A ready-to-use in-memory cluster: the API server with every resource this project uses.

The simulator, the demo, the ``apiserver`` command and tests all want the same starting point:
the built-in resources, the project's own CRDs (generated from the API models, exactly what
``deploy/crds/`` holds) and the Cluster API resources. One function builds it.
"""

from __future__ import annotations

from karpenter_capi.core.api.crds import generate_crds
from karpenter_capi.core.clock import Clock
from karpenter_capi.sim.apiserver import InMemoryAPIServer


def new_cluster(clock: Clock | None = None) -> InMemoryAPIServer:
    server = InMemoryAPIServer(clock=clock)
    server.apply_manifests(generate_crds())
    server.register_cluster_api()
    return server
