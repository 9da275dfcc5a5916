"""One served workload cluster: its clients, plugins, Operator and driver, built and torn down
as a unit.

Everything a member holds is its own: the workload client made from its kubeconfig, the
management client scoped to its Cluster (``ScopedClient``), both fenced on the shard Lease,
a ``Plugins`` (so ``PluginContext.state`` is per cluster), and an ``Operator`` with its own
informers, work queues, backoff, budgets and ``Metrics``. Nothing is shared with another
member but the process, so a cluster that is slow, unreachable or full of malformed objects
holds up its own queues only. Leader election is off: the fleet's shard Leases decide which
replica serves a cluster, and fence its writes.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Protocol

from karpenter_capi.core.clock import Clock
from karpenter_capi.core.kube.client import KubeClient
from karpenter_capi.core.operator import Operator, OperatorOptions
from karpenter_capi.core.plugin_host import PluginEnvironment, Plugins
from karpenter_capi.core.runtime.collector import request_whole_walk
from karpenter_capi.core.runtime.stepped import SteppedDriver

log = logging.getLogger(__name__)


class MemberDriver(Protocol):
    """What the fleet needs of a threaded driver (``ThreadedDriver``, or one over a pool)."""

    def start(self) -> None: ...

    def stop(self, timeout: float | None = ...) -> bool: ...


DriverFactory = Callable[[str, Operator], MemberDriver]
"""Builds the threaded driver of cluster ``key``'s Operator (not started)."""

PluginFactory = Callable[[PluginEnvironment], Plugins]
"""Builds one cluster's ``Plugins`` over its environment (clients, clock, options)."""


class Member:
    """One workload cluster being served: built by the fleet, stopped by ``stop``."""

    def __init__(
        self,
        key: str,
        *,
        fingerprint: str,
        workload: KubeClient,
        management: KubeClient,
        plugins: PluginFactory,
        clock: Clock,
        options: OperatorOptions,
        plugin_options: dict[str, dict[str, str]] | None = None,
        on_close: Callable[[], None] | None = None,
    ) -> None:
        self.key = key
        self.fingerprint = fingerprint
        self.workload = workload
        self.management = management
        environment = PluginEnvironment(
            workload=workload,
            management=management,
            clock=clock,
            logger=logging.getLogger("karpenter_capi.plugins"),
            options=plugin_options or {},
            dry_run=options.dry_run,
        )
        self.plugins = plugins(environment)
        self.operator = Operator(
            workload,
            management,
            self.plugins,
            clock,
            dataclasses.replace(options, leader_elect=False, metrics_port=None),
            log_fields={"cluster": key},
        )
        self._on_close = on_close
        self._threaded: MemberDriver | None = None
        self._stepped: SteppedDriver | None = None

    @property
    def stepped_driver(self) -> SteppedDriver | None:
        return self._stepped

    def start_stepped(self) -> SteppedDriver:
        self._stepped = self.operator.stepped()
        return self._stepped

    def start_threaded(self, factory: DriverFactory) -> None:
        self._threaded = factory(self.key, self.operator)
        self._threaded.start()

    def stop(self) -> None:
        """Stop every worker of this cluster (nothing keeps writing), then close its client."""
        if self._threaded is not None:
            if not self._threaded.stop():
                log.warning("cluster %s: workers did not stop in time", self.key)
            self._threaded = None
        self._stepped = None
        if self._on_close is not None:
            try:
                self._on_close()
            except Exception as exc:  # a client that fails to close is no reason to stop
                log.warning("cluster %s: closing its client failed: %s", self.key, exc)
        # Its controllers reference each other (cycles): have the collector walk them, frozen
        # or not, so that they are freed (``core/runtime/collector.py``).
        request_whole_walk()


__all__ = ["DriverFactory", "Member", "MemberDriver", "PluginFactory"]
