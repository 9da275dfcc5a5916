"""The running controller: every control loop, its caches, leadership and endpoint, wired.

``karpenter-capi run`` builds one :class:`Operator` from the clusters, the enabled plugins and
its flags; the simulator and the tests build the same object with a virtual clock. Nothing
here decides anything: it only connects the controllers (provisioning, NodeClaim lifecycle,
static NodePools, termination, garbage collection, disruption) to the runtime, the metrics to
the endpoint, and the drivers to the leader elector, so that exactly one replica acts and it
stops acting the moment it loses the Lease.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from karpenter_capi.core.clock import Clock, FakeClock
from karpenter_capi.core.disruption import (
    DisruptionController,
    DisruptionSettings,
    disruption_controllers,
)
from karpenter_capi.core.interruption import InterruptionController
from karpenter_capi.core.kube.client import KubeClient
from karpenter_capi.core.kube.events import EventRecorder
from karpenter_capi.core.kube.indexes import BY_OWNER_UID, by_owner_uid
from karpenter_capi.core.kube.resources import PODS
from karpenter_capi.core.lifecycle import lifecycle_controllers
from karpenter_capi.core.observability.endpoint import ObservabilityServer
from karpenter_capi.core.observability.metrics import Metrics
from karpenter_capi.core.plugin_host import Plugins
from karpenter_capi.core.provisioning.batcher import (
    DEFAULT_IDLE_SECONDS,
    DEFAULT_MAX_SECONDS,
    Batcher,
)
from karpenter_capi.core.provisioning.controller import ProvisioningController
from karpenter_capi.core.provisioning.nominations import (
    NominationController,
    log_mode,
    nomination_mode,
)
from karpenter_capi.core.runtime.leader import LeaderElector, make_identity
from karpenter_capi.core.runtime.manager import Manager
from karpenter_capi.core.runtime.pool import WorkerPool
from karpenter_capi.core.runtime.stepped import SteppedDriver
from karpenter_capi.core.runtime.threaded import ThreadedDriver
from karpenter_capi.core.scheduling import highs
from karpenter_capi.core.scheduling.packing import DEFAULT_BUDGET_SECONDS as DEFAULT_PACKING_BUDGET
from karpenter_capi.core.static import static_controllers
from karpenter_capi.core.termination import termination_controllers

log = logging.getLogger(__name__)

LEASE_NAME: Final = "karpenter-leader-election"
"""Upstream Karpenter's Lease name, so one never runs beside the other by accident."""


@dataclass(frozen=True)
class OperatorOptions:
    """What ``karpenter-capi run`` exposes as flags (each with an environment variable)."""

    dry_run: bool = False
    leader_elect: bool = True
    lease_name: str = LEASE_NAME
    lease_namespace: str = "kube-system"
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    identity: str | None = None
    metrics_host: str = "0.0.0.0"
    metrics_port: int | None = 8080  # None: no endpoint
    batch_idle: float = DEFAULT_IDLE_SECONDS
    batch_max: float = DEFAULT_MAX_SECONDS
    batch_complete_idle: float | None = None
    """Close the batch window this soon after the last new pod when every new pod's ReplicaSet
    has all its replicas (``run`` sets 0.2 s; None: always wait ``batch_idle``, as upstream)."""
    workers: int = 4
    create_concurrency: int = 1
    """NodeClaims of a provisioning round created at once; ``run`` sets 8, a simulation keeps
    1 so the server names them in the same order every run."""
    wake_on_pods: bool = False
    """Pending pods' events open the batch window at once (``run``); a simulation keeps its
    rounds on the provisioner's schedule, so they fall on the same virtual instants."""
    packing_budget: float = DEFAULT_PACKING_BUDGET  # seconds; 0 disables re-packing
    unready_after: float = 30.0  # seconds a cache may fail to follow the API before /readyz fails
    disruption: DisruptionSettings = field(default_factory=DisruptionSettings)
    nominations: bool | None = None
    """``--feature-gates NominatedNodeNameForExpectation``; None: from the server's release."""


class Operator:
    """Every controller of the autoprovisioner over one workload and one management cluster."""

    def __init__(
        self,
        workload: KubeClient,
        management: KubeClient,
        plugins: Plugins,
        clock: Clock,
        options: OperatorOptions | None = None,
        *,
        pool: WorkerPool | None = None,
        name: str = "operator",
        log_fields: Mapping[str, str] | None = None,
    ) -> None:
        # In fleet mode many operators share one ``pool`` of worker threads; ``name`` (the
        # workload cluster's) names this one among the pool's members.
        self.pool = pool
        self.name = name
        self.options = options or OperatorOptions()
        self.clock = clock
        self.metrics = Metrics(clock)
        plugins.use_metrics(self.metrics)
        # ``log_fields``: what every line of this operator's controllers carries (a fleet
        # member's ``cluster``).
        self.manager = Manager(
            workload, management, clock=clock, observer=self.metrics, log_fields=log_fields
        )
        self.context = self.manager.context(
            plugins,
            recorder=EventRecorder(workload, clock),
            metrics=self.metrics,
            dry_run=self.options.dry_run,
        )
        batcher = Batcher(clock, idle=self.options.batch_idle, max_duration=self.options.batch_max)
        if self.options.batch_complete_idle is not None:
            self.manager.add_indexer(PODS, BY_OWNER_UID, by_owner_uid)
        self.nomination_mode = nomination_mode(workload, self.options.nominations)
        log_mode(self.nomination_mode)
        self.provisioning = ProvisioningController(
            self.context,
            batcher=batcher,
            packing_budget=self.options.packing_budget,
            plans_nominated=self.nomination_mode.enabled,
            create_concurrency=self.options.create_concurrency,
            wake_on_pods=self.options.wake_on_pods,
            complete_idle=self.options.batch_complete_idle,
        )
        if self.options.packing_budget > 0:
            # Pay SciPy's import (about a second) at start, not in the first scale-up's round.
            highs.warm_up()
        controllers: list[Any] = [
            self.provisioning,
            *(
                [
                    NominationController(
                        self.context,
                        self.provisioning.planned,
                        write_concurrency=self.options.create_concurrency,
                    )
                ]
                if self.nomination_mode.enabled
                else []
            ),
            *lifecycle_controllers(self.context),
            *static_controllers(self.context),
            *termination_controllers(self.context),
            InterruptionController(self.context, planned=self.provisioning.planned),
            *disruption_controllers(
                self.context,
                nominated=self.provisioning.nominated_within,
                nominations=self.provisioning.nominations,
                is_leader=self.is_leader,
                settings=self.options.disruption,
            ),
        ]
        self.disruption = next(c for c in controllers if isinstance(c, DisruptionController))
        self.manager.add(*controllers)
        self.elector: LeaderElector | None = None
        if self.options.leader_elect:
            self.elector = LeaderElector(
                workload,
                clock,
                name=self.options.lease_name,
                namespace=self.options.lease_namespace,
                identity=self.options.identity or make_identity(),
                lease_duration=self.options.lease_duration,
                renew_deadline=self.options.renew_deadline,
                retry_period=self.options.retry_period,
                on_started_leading=self._leadership_gained,
                on_stopped_leading=self._leadership_lost,
            )
        self.server: ObservabilityServer | None = None
        self._driver: ThreadedDriver | None = None

    def _leadership_gained(self) -> None:
        log.info("leading: controllers start acting")
        # Another leader may have acted while this one was not leading.
        self.disruption.reset()
        if self._driver is not None:
            self._driver.on_leadership_gained()

    def _leadership_lost(self) -> None:
        log.warning("lost leadership: controllers stop acting")
        if self._driver is not None:
            self._driver.on_leadership_lost(30)

    @property
    def controller_names(self) -> Sequence[str]:
        return [entry.name for entry in self.manager.entries]

    def is_leader(self) -> bool:
        return self.elector is None or self.elector.is_leader

    def ready(self) -> bool:
        return self.readiness()[0]

    def readiness(self) -> tuple[bool, str]:
        """``(ready, why not)``: what ``/readyz`` answers.

        Ready once every cache has synced, and for as long as none has been failing to list or
        watch for ``unready_after`` seconds in a row: a controller whose caches cannot follow
        the API server (unreachable, throttling everything, answering 500) acts on a stale
        view or not at all, and the probe should say so rather than report the start-up sync.
        It turns ready again with the first list or watch that works. A standby replica is
        ready too: it waits, and its caches stay warm.
        """
        informers = self.manager.informers
        unsynced = [i.name for i in informers if not i.has_synced()]
        now = self.clock.monotonic()
        failing = [
            (now - since, informer)
            for informer in informers
            if (since := informer.failing_since) is not None
            and now - since >= self.options.unready_after
        ]
        if failing:
            seconds, worst = max(failing, key=lambda f: f[0])
            return False, (
                f"{len(failing)} of {len(informers)} caches cannot follow the API server, "
                f"{worst.name} for {seconds:.0f}s: {worst.last_error}"
            )
        if unsynced:
            return False, f"caches not synced yet: {', '.join(unsynced)}"
        return True, ""

    def stepped(self) -> SteppedDriver:
        """A deterministic driver for the simulator and tests (needs a ``FakeClock``)."""
        if not isinstance(self.clock, FakeClock):
            raise TypeError("the stepped driver needs a FakeClock")
        return SteppedDriver(self.manager, is_leader=self.is_leader)

    def run(self, stop: threading.Event, *, on_started: Callable[[], None] | None = None) -> int:
        """Run threaded until ``stop`` is set; returns the exit status."""
        driver = ThreadedDriver(
            self.manager,
            workers=self.options.workers,
            is_leader=self.is_leader,
            pool=self.pool,
            name=self.name,
        )
        self._driver = driver
        if self.options.metrics_port is not None:
            self.server = ObservabilityServer(
                self.metrics,
                host=self.options.metrics_host,
                port=self.options.metrics_port,
                ready=self.readiness,
            ).start()
            log.info("metrics and probes on %s", self.server.url)
        elector_thread = None
        elector_stop = threading.Event()
        if self.elector is not None:
            elector_thread = threading.Thread(
                target=self.elector.run,
                args=(elector_stop,),
                name="leader-election",
                daemon=True,
            )
        driver.start()
        if elector_thread is not None:
            elector_thread.start()
        if on_started is not None:
            on_started()
        try:
            stop.wait()
        finally:
            log.info("stopping")
            elector_stop.set()
            if elector_thread is not None:
                elector_thread.join(timeout=self.options.lease_duration)
            driver.stop()
            if self.server is not None:
                self.server.close()
        return 0
