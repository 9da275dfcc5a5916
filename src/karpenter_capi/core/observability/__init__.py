"""What an operator watches: Prometheus metrics, health and readiness probes, structured logs.

Karpenter users already have dashboards and alerts written against ``karpenter_*`` and
``controller_runtime_*`` series; this package exposes the same names, labels and buckets so
those keep working when the capacity comes from Cluster API. Every ``Metrics`` owns its own
registry (never the process-global one), so tests, the simulator and two replicas in one
process each count only what they did.
"""

from karpenter_capi.core.observability.endpoint import ObservabilityServer
from karpenter_capi.core.observability.logs import configure_logging
from karpenter_capi.core.observability.metrics import CONTENT_TYPE, Metrics

__all__ = ["CONTENT_TYPE", "Metrics", "ObservabilityServer", "configure_logging"]
