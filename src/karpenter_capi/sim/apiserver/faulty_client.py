"""A client-side fault: the controller's client fails while a fault is on (an outage, a 429 storm).

Isolation in fleet mode is about one workload cluster misbehaving while the others go on. The
simulator and ``benchmarks/fleet.py`` need that misbehaviour on the controller's side of the
wire only: the cluster itself keeps running (its users deploy, its scheduler binds) while the
controller cannot reach it, as a network partition or an overloaded API server's front would
look. ``FaultyClient`` wraps the client the controller is given; every request (reads, watches,
writes, discovery) first asks ``fault`` and raises what it returns. (``server.faults`` makes
the server itself fail, for every in-process caller; this fails one client only.)
"""

from __future__ import annotations

import builtins
from collections.abc import Callable

from karpenter_capi.core.kube.client import JsonObject, KubeClient
from karpenter_capi.core.kube.errors import ApiError, ServiceUnavailable, TooManyRequests
from karpenter_capi.core.kube.resources import Resource
from karpenter_capi.sim.apiserver.audit import AuditingClient, AuditLog

Fault = Callable[[], ApiError | None]
"""The error the next request gets, or ``None`` to let it through."""


class FaultyClient(AuditingClient):
    """``inner``, except that each request raises ``fault()``'s error when it gives one."""

    def __init__(self, inner: KubeClient, fault: Fault, cluster: str = "workload") -> None:
        super().__init__(inner, AuditLog(), cluster)
        self.fault = fault
        self.refused = 0

    def _check(self) -> None:
        error = self.fault()
        if error is not None:
            self.refused += 1
            raise error

    def _record(
        self,
        verb: str,
        resource: Resource,
        namespace: str | None,
        name: str | None = None,
        subresource: str | None = None,
    ) -> None:
        self._check()

    def server_version(self) -> JsonObject:
        self._check()
        return super().server_version()

    def served_versions(self, group: str) -> builtins.list[str]:
        self._check()
        return super().served_versions(group)


def unreachable(server: str) -> ServiceUnavailable:
    """What a client sees of an API server it cannot reach (the dial refused)."""
    return ServiceUnavailable(f"dial tcp {server}: connect: connection refused")


def throttled(retry_after: int = 1) -> TooManyRequests:
    """An API server shedding load: 429 with ``Retry-After``."""
    return TooManyRequests(
        "the server has received too many requests and has asked us to try again later",
        retry_after_seconds=retry_after,
    )


__all__ = ["Fault", "FaultyClient", "throttled", "unreachable"]
