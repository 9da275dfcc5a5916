"""The simulated cluster's Kubernetes API: a stateful API server in memory.

``InMemoryAPIServer`` implements the ``KubeClient`` protocol in process (tests, the simulator);
``http.HttpFront`` serves the same object on 127.0.0.1 to the official client and kubectl.
``ResourceDefinition`` describes what is served; ``FaultInjector`` (``server.faults``) makes it
fail on purpose.
"""

from karpenter_capi.sim.apiserver.definitions import ResourceDefinition
from karpenter_capi.sim.apiserver.faults import FaultInjector, FaultRule
from karpenter_capi.sim.apiserver.server import DeleteResult, InMemoryAPIServer
from karpenter_capi.sim.apiserver.watch import InMemoryWatch

__all__ = [
    "DeleteResult",
    "FaultInjector",
    "FaultRule",
    "InMemoryAPIServer",
    "InMemoryWatch",
    "ResourceDefinition",
]
