"""What the lifecycle controllers report, in one place.

The calls are spread over launch, registration, initialization, liveness and garbage
collection; funnelling them through :class:`LifecycleReporter` keeps the "no registry
configured" case (tests, ``--once``) out of every call site and names the controller once for
the ``karpenter_cloudprovider_*`` series.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from karpenter_capi.core.observability.metrics import Metrics


class LifecycleReporter:
    """Reports to ``metrics`` when there is a registry; does nothing otherwise."""

    def __init__(self, metrics: Metrics | None, controller: str) -> None:
        self.controller = controller
        self._metrics = metrics

    def launched(self, nodepool: str) -> None:
        if self._metrics is not None:
            self._metrics.nodeclaim_launched(nodepool)

    def registered(self, nodepool: str, zone: str) -> None:
        if self._metrics is not None:
            self._metrics.nodeclaim_registered(nodepool)
            self._metrics.node_created(nodepool, zone=zone)

    def initialized(self, nodepool: str) -> None:
        if self._metrics is not None:
            self._metrics.nodeclaim_initialized(nodepool)

    def disrupted(self, reason: str, nodepool: str, capacity_type: str) -> None:
        if self._metrics is not None:
            self._metrics.nodeclaim_disrupted(nodepool, reason=reason, capacity_type=capacity_type)

    @contextmanager
    def provider_call(self, method: str, provider: str) -> Iterator[None]:
        if self._metrics is None:
            yield
            return
        with self._metrics.cloudprovider_call(
            method, provider=provider, controller=self.controller
        ):
            yield
