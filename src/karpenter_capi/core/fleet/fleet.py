"""Fleet mode: one process serving every selected workload cluster of a Cluster API fleet.

Public surface (kept stable: the simulator's ``fleet`` scenario and ``benchmarks/fleet.py``
build on it)::

    fleet = Fleet(
        management,                      # KubeClient of the management cluster (unscoped)
        clock=clock,                     # SystemClock, or a FakeClock for stepped driving
        connect=connect,                 # Callable[[Kubeconfig], KubeClient]: a workload client
        options=FleetOptions(...),       # selector, namespaces, shards, lease timing, plugins
        operator_options=OperatorOptions(...),   # as single-cluster mode; leader election and
                                                 # the endpoint are the fleet's, not each member's
        plugins=None,                    # [(name, plugin)] as Plugins.from_objects takes;
                                         # None: options.plugins' entry points, scanned once
        on_member=None,                  # Callable[[str, Operator], None]: called with each
                                         # new member before its driver takes it (a simulator
                                         # adds its emulated clusters' controllers there)
        driver_factory=None,             # threaded only: Callable[[str, Operator], driver]
                                         # (not started): how a shared WorkerPool is passed
    )
    stepped = fleet.stepped()            # virtual time: stepped.advance(60), run_until_quiet()
    fleet.run(stop)                      # or threaded, until ``stop`` is set

``fleet.members`` maps ``namespace/name`` to each served cluster's ``Member`` (its
``operator``, ``plugins``, clients); ``fleet.metrics`` is the one endpoint's metrics, every
series labelled ``cluster``. ``connect`` receives the parsed kubeconfig (``.document``,
``.server``); a simulator maps ``server`` to an in-memory API server, ``run`` uses
``core.kube.config.connect_kubeconfig``. Sharding (``core.fleet.sharding``'s
``ShardCoordinator`` and ``core.fleet.fencing``'s ``FencedClient``) is found by module name;
without those modules, or with ``FleetOptions(shards=False)``, this replica serves every
Cluster unfenced. A sharded replica joins the shard membership at its first step and takes
Clusters from the next one (``retry_period`` later). Threaded, the coordinator steps on a
thread of its own (``core.fleet.shardloop``) so a slow sync never delays a Lease renewal;
stepped, the sync steps it.

Each sync (every ``retry_period``, and at once on a Cluster or Secret event) reads the
discovered Clusters, asks the shard coordinator which of them this replica serves, and starts,
stops or rebuilds members on the difference: a new Cluster is served, a deleted or paused one
stopped (nothing left running that writes), a rotated kubeconfig (new content) rebuilds its
member. A Cluster that cannot be served (Secret missing or malformed, workload cluster
unreachable) gets one Warning Event on it in the management cluster and one log line per
change, and is retried with backoff; the others are unaffected.
"""

from __future__ import annotations

import importlib
import logging
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from karpenter_capi.core.clock import Clock, FakeClock
from karpenter_capi.core.errors import InvalidInputError
from karpenter_capi.core.fleet.building import Builds
from karpenter_capi.core.fleet.discovery import Discovery, ObservedCluster
from karpenter_capi.core.fleet.guard import GUARD_PLUGIN, ClusterGuard
from karpenter_capi.core.fleet.kubeconfigs import (
    REASON_INVALID,
    Kubeconfig,
    KubeconfigProblem,
    read_kubeconfig,
    secret_name,
)
from karpenter_capi.core.fleet.members import DriverFactory, Member, PluginFactory
from karpenter_capi.core.fleet.metrics import FleetMetrics
from karpenter_capi.core.fleet.options import Coordinator, FleetOptions, ServeEverything
from karpenter_capi.core.fleet.reports import Reports
from karpenter_capi.core.fleet.scoped import ScopedClient
from karpenter_capi.core.fleet.shardloop import ShardLoop
from karpenter_capi.core.kube.backoff import Backoff
from karpenter_capi.core.kube.client import KubeClient
from karpenter_capi.core.kube.errors import ApiError, BadRequest, Invalid
from karpenter_capi.core.kube.events import EventRecorder
from karpenter_capi.core.kube.resources import CLUSTERS
from karpenter_capi.core.observability.endpoint import ObservabilityServer
from karpenter_capi.core.operator import Operator, OperatorOptions
from karpenter_capi.core.plugin_host import Plugins, load_plugins
from karpenter_capi.core.runtime.leader import make_identity
from karpenter_capi.core.runtime.pool import WorkerPool
from karpenter_capi.core.runtime.threaded import ThreadedDriver

if TYPE_CHECKING:
    from karpenter_capi.core.fleet.stepped import SteppedFleet

log = logging.getLogger(__name__)

REASON_UNREACHABLE: Final = "WorkloadUnreachable"
REASON_SERVING: Final = "FleetServing"
REASON_START_FAILED: Final = "ControllersFailedToStart"
REASON_PAUSED: Final = "FleetPaused"
PAUSED_MESSAGE: Final = (
    "spec.paused is true: no controller acts for this Cluster (no node launched, scaled or "
    "removed) until it is cleared"
)
BUILD_THREADS: Final = 4
"""Members built at once by the threaded fleet (``core.fleet.building``)."""
_STOP_POLL: Final = 0.25
"""Seconds between looks at the stop flag while the threaded fleet waits for its next sync."""
_FLEET: Final = "fleet"
"""Where the fleet's own messages (not one Cluster's) are remembered in ``Reports``."""

Connect = Callable[[Kubeconfig], KubeClient]
"""Opens a client of a workload cluster from its kubeconfig (nothing need be sent yet)."""


def _sharding_part(name: str) -> Any:
    """``ShardCoordinator`` or ``FencedClient``, written apart (``core.fleet.sharding`` and
    ``.fencing``); ``None`` until they exist, and then the fleet serves everything unfenced."""
    module = "sharding" if name == "ShardCoordinator" else "fencing"
    try:
        found = importlib.import_module(f"karpenter_capi.core.fleet.{module}")
    except ModuleNotFoundError:
        return None
    return getattr(found, name, None)


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}"


def _close(client: KubeClient) -> Callable[[], None] | None:
    close = getattr(client, "close", None)
    return close if callable(close) else None


class Fleet:
    """Every selected workload cluster's controllers, from one management cluster."""

    def __init__(
        self,
        management: KubeClient,
        *,
        clock: Clock,
        connect: Connect,
        options: FleetOptions | None = None,
        operator_options: OperatorOptions | None = None,
        plugins: Sequence[tuple[str, object]] | None = None,
        on_member: Callable[[str, Operator], None] | None = None,
        driver_factory: DriverFactory | None = None,
    ) -> None:
        self.options = options or FleetOptions()
        self.operator_options = operator_options or OperatorOptions()
        self.management = management
        self.clock = clock
        self._connect = connect
        # The entry-point scan (stevedore, importlib.metadata) costs tens of milliseconds: done
        # once for the fleet; each cluster then makes its own plugin objects from it.
        self._plugin_sources = (
            list(plugins) if plugins is not None else load_plugins(self.options.plugins)
        )
        self._on_member = on_member
        self._driver_factory = driver_factory or self._threaded_driver
        self.identity = self.options.identity or make_identity()
        self.coordinator = self._coordinator()
        self.discovery = Discovery(
            management,
            clock,
            namespaces=self.options.namespaces,
            cluster_selector=self.options.cluster_selector,
        )
        self.recorder = EventRecorder(management, clock)
        self.members: dict[str, Member] = {}
        self.metrics = FleetMetrics()
        self._backoff: dict[str, Backoff] = {}
        self._failed_fingerprint: dict[str, str] = {}
        self._reports = Reports(self.recorder, (REASON_SERVING, REASON_PAUSED))
        self._servers: dict[str, str] = {}
        self._mode: str | None = None
        self._lock = threading.RLock()
        self.next_sync: float | None = None
        self.server: ObservabilityServer | None = None
        self._builds = Builds(self._build)
        self._pool: WorkerPool | None = None
        self._served: frozenset[str] = frozenset()
        self._next_shard_step = -math.inf
        self._shard_loop: ShardLoop | None = None  # threaded: steps the coordinator apart

    def check_selector(self) -> None:
        """Ask the management cluster once whether it takes ``--fleet-cluster-selector``: a
        malformed one is an ``InvalidInputError`` at start, not a list failing forever."""
        selector = self.options.cluster_selector
        if not selector:
            return
        try:
            self.management.list(
                CLUSTERS,
                self.options.namespaces[0] if self.options.namespaces else None,
                label_selector=selector,
                limit=1,
            )
        except (BadRequest, Invalid) as exc:
            raise InvalidInputError(
                f"--fleet-cluster-selector {selector!r}: {exc.message}"
            ) from None
        except ApiError as exc:
            # Unreachable or forbidden: discovery retries and reports; nothing to refuse yet.
            log.warning("could not check --fleet-cluster-selector: %s", exc)

    # Building blocks.

    def _plugins_of(self, cluster: ObservedCluster) -> PluginFactory:
        guard = ClusterGuard(cluster.namespace, cluster.name)
        sources = [(GUARD_PLUGIN, guard), *self._plugin_sources]
        return lambda environment: Plugins.from_objects(sources, environment)

    def _coordinator(self) -> Coordinator:
        shard_class = _sharding_part("ShardCoordinator") if self.options.shards else None
        if shard_class is None:
            return ServeEverything()
        coordinator: Coordinator = shard_class(
            self.management,
            self.clock,
            namespace=self.options.lease_namespace,
            identity=self.identity,
            lease_duration=self.options.lease_duration,
            renew_deadline=self.options.renew_deadline,
            retry_period=self.options.retry_period,
        )
        return coordinator

    def _fenced(self, client: KubeClient, key: str) -> KubeClient:
        fenced_class = _sharding_part("FencedClient")
        if fenced_class is None or isinstance(self.coordinator, ServeEverything):
            return client
        wrapped: KubeClient = fenced_class(client, lambda: self.coordinator.holds(key), key)
        return wrapped

    def _threaded_driver(self, key: str, operator: Operator) -> ThreadedDriver:
        # Every member's controllers share the fleet's worker pool (fair across clusters,
        # a bounded number of threads) when there is one.
        return ThreadedDriver(
            operator.manager,
            workers=self.operator_options.workers,
            is_leader=operator.is_leader,
            pool=self._pool,
            name=key,
        )

    # The sync: discovered Clusters -> served members.

    def sync(self) -> bool:
        """Start, stop and rebuild members to match the Clusters this replica serves now.

        Returns whether any member started or stopped.
        """
        with self._lock:
            now = self.clock.monotonic()
            self.next_sync = now + self.options.retry_period
            observed = self.discovery.clusters()
            served = self._shards(observed, now)
            changed = False
            for key in list(self.members):
                cluster = observed.get(key)
                if cluster is None or key not in served or cluster.paused:
                    why = (
                        "deleted or no longer selected"
                        if cluster is None
                        else ("paused" if cluster.paused else "served by another replica")
                    )
                    self._stop(key, why)
                    changed = True
            for key, cluster in observed.items():
                if key in served and cluster.paused:
                    self._reports.report(cluster, REASON_PAUSED, PAUSED_MESSAGE)
                if key in served and not cluster.paused:
                    changed = self._serve(cluster) or changed
                    member = self.members.get(key)
                    if member is not None:
                        self._check_health(cluster, member)
            self._builds.keep_only([k for k in served if k in observed and not observed[k].paused])
            for key in list(self._backoff):
                if key not in observed:
                    self._forget(key)
            self._reports.keep_only(observed, also=(_FLEET,))
            return changed

    def _shards(self, observed: Mapping[str, ObservedCluster], now: float) -> frozenset[str]:
        """The Clusters this replica serves: the coordinator is stepped every
        ``retry_period`` (its contract), however often discovery events wake the sync;
        threaded, on a thread of its own (``core.fleet.shardloop``), so a slow sync cannot
        delay the Lease renewals."""
        if self._shard_loop is not None:
            return self._shard_loop.served()
        if not isinstance(self.coordinator, ServeEverything) and now < self._next_shard_step:
            return self._served
        self._next_shard_step = now + self.options.retry_period
        try:
            self._served = self.coordinator.step(list(observed))
        except Exception as exc:
            # The fence stops writes once the Leases lapse; members stay as they are.
            self._reports.say(_FLEET, "ShardsUnavailable", f"cannot renew shard Leases: {exc}")
            self._served = frozenset(self.members)
        return self._served

    def _shards_failed(self, exc: Exception) -> None:
        with self._lock:
            self._reports.say(_FLEET, "ShardsUnavailable", f"cannot renew shard Leases: {exc}")

    def _serve(self, cluster: ObservedCluster) -> bool:
        key = cluster.key
        try:
            kubeconfig = read_kubeconfig(cluster.secret, cluster.namespace, cluster.name)
        except KubeconfigProblem as problem:
            changed = key in self.members
            if changed:
                self._stop(key, "its kubeconfig Secret is no longer usable")
            self._reports.report(cluster, problem.reason, problem.message)
            return changed
        member = self.members.get(key)
        if member is not None and member.fingerprint == kubeconfig.fingerprint:
            return False
        changed = False
        if member is not None:
            self._stop(key, "its kubeconfig Secret was rotated")
            changed = True
        backoff = self._backoff.get(key)
        if (
            backoff is not None
            and not backoff.ready()
            and self._failed_fingerprint.get(key) == kubeconfig.fingerprint
        ):
            return changed
        try:
            built = self._builds.obtain(cluster, kubeconfig)
        except Exception as exc:
            self._failed(cluster, kubeconfig, exc)
            return changed
        if built is None:
            return changed
        member = built
        self.members[key] = member
        self.metrics.add(key, member.operator.metrics)
        self._servers[key] = kubeconfig.server
        self._forget(key)
        self._start(member)
        self._reports.report(
            cluster, REASON_SERVING, f"serving workload cluster {kubeconfig.server}"
        )
        return True

    def _failed(self, cluster: ObservedCluster, kubeconfig: Kubeconfig, exc: Exception) -> None:
        """A build failed: say why on the Cluster and retry with backoff (sooner on a new
        kubeconfig)."""
        key = cluster.key
        backoff = self._backoff.setdefault(
            key, Backoff(self.clock, initial=1.0, cap=60.0, jitter=0.0)
        )
        delay = backoff.fail()
        self._failed_fingerprint[key] = kubeconfig.fingerprint
        retrying = f" (retrying in {delay:.0f}s)"
        if isinstance(exc, KubeconfigProblem):
            self._reports.report(cluster, exc.reason, exc.message)
            return
        if isinstance(exc, ApiError | OSError):
            cause = f"cannot reach the workload cluster at {kubeconfig.server}: {_one_line(exc)}"
            self._reports.report(cluster, REASON_UNREACHABLE, cause + retrying, news=cause)
            return
        # Anything else is a bug: its traceback, once, and a word on the Cluster.
        cause = f"its controllers failed to start: {_one_line(exc)}"
        if self._reports.last(key) != (REASON_START_FAILED, cause):
            log.error("Cluster %s: %s", key, cause, exc_info=exc)
        self._reports.report(cluster, REASON_START_FAILED, cause + retrying, news=cause)

    def _check_health(self, cluster: ObservedCluster, member: Member) -> None:
        """A served workload cluster that stops answering is told on its Cluster, once per
        outage; so is its recovery. Its controllers retry on their own meanwhile."""
        now = self.clock.monotonic()
        patience = self.operator_options.unready_after
        failing = [
            informer
            for informer in member.operator.manager.informers
            if (since := informer.failing_since) is not None and now - since >= patience
        ]
        server = self._servers.get(cluster.key, "?")
        if failing:
            cause = f"the workload cluster at {server} has not answered for {patience:.0f}s"
            self._reports.report(
                cluster,
                REASON_UNREACHABLE,
                f"{cause}: {failing[0].last_error}; its controllers retry until it does",
                news=cause,
            )
        elif self._reports.last_reason(cluster.key) == REASON_UNREACHABLE:
            self._reports.report(
                cluster, REASON_SERVING, f"serving workload cluster {server} again"
            )

    def _build(self, cluster: ObservedCluster, kubeconfig: Kubeconfig) -> Member:
        key = cluster.key
        try:
            workload = self._connect(kubeconfig)
        except (ApiError, OSError):
            raise
        except Exception as exc:
            # The client library refused the document (no such context, an auth it cannot
            # use): the Secret's content is what to fix, not the network.
            where = f"Secret {cluster.namespace}/{secret_name(cluster.name)}"
            raise KubeconfigProblem(
                REASON_INVALID, f"{where}: the client cannot use its kubeconfig: {_one_line(exc)}"
            ) from None
        try:
            # One request before anything is built: an unreachable cluster is reported here,
            # with its server's URL, not as caches that never sync.
            workload.server_version()
            scoped = ScopedClient(self.management, cluster.namespace, cluster.name)
            member = Member(
                key,
                fingerprint=kubeconfig.fingerprint,
                workload=self._fenced(workload, key),
                management=self._fenced(scoped, key),
                plugins=self._plugins_of(cluster),
                clock=self.clock,
                options=self.operator_options,
                plugin_options={k: dict(v) for k, v in self.options.plugin_options.items()},
                on_close=_close(workload),
            )
            if self._on_member is not None:
                self._on_member(key, member.operator)
        except BaseException:
            closer = _close(workload)
            if closer is not None:
                closer()
            raise
        return member

    def _start(self, member: Member) -> None:
        if self._mode == "threaded":
            member.start_threaded(self._driver_factory)
        else:
            member.start_stepped()

    def _stop(self, key: str, why: str) -> None:
        member = self.members.pop(key)
        # Serving it again (resumed, rotated, taken back) is news again.
        self._reports.forget(key)
        self.metrics.remove(key)
        self._servers.pop(key, None)
        member.stop()
        log.info("cluster %s: stopped serving it (%s)", key, why)

    def _forget(self, key: str) -> None:
        self._backoff.pop(key, None)
        self._failed_fingerprint.pop(key, None)

    # Driving.

    def _wait(self, wake: threading.Event, stop: threading.Event) -> None:
        """Until the next sync: ``retry_period``, a discovery event, or ``stop``."""
        deadline = self.clock.monotonic() + self.options.retry_period
        while not stop.is_set() and not wake.is_set():
            left = deadline - self.clock.monotonic()
            if left <= 0:
                break
            wake.wait(min(left, _STOP_POLL))
        wake.clear()

    def stepped(self) -> SteppedFleet:
        """Drive the fleet and every member in virtual time (needs a ``FakeClock``)."""
        from karpenter_capi.core.fleet.stepped import SteppedFleet

        if not isinstance(self.clock, FakeClock):
            raise TypeError("the stepped fleet needs a FakeClock")
        if self._mode is not None:
            raise RuntimeError(f"this fleet is already driven ({self._mode})")
        self._mode = "stepped"
        return SteppedFleet(self)

    def readiness(self) -> tuple[bool, str]:
        """``/readyz``: ready once the Clusters and Secrets are listed, and for as long as the
        management cluster answers. One workload cluster's trouble is its own Event, not the
        fleet's readiness: the others are still served."""
        now = self.clock.monotonic()
        for informer in self.discovery.informers:
            since = informer.failing_since
            if since is not None and now - since >= self.operator_options.unready_after:
                return False, (
                    f"{informer.name} cannot follow the management cluster for "
                    f"{now - since:.0f}s: {informer.last_error}"
                )
        if not self.discovery.has_synced():
            return False, "the Clusters and kubeconfig Secrets are not listed yet"
        return True, ""

    def run(self, stop: threading.Event, *, on_started: Callable[[], None] | None = None) -> int:
        """Serve on threads until ``stop`` is set; returns the exit status."""
        if self._mode is not None:
            raise RuntimeError(f"this fleet is already driven ({self._mode})")
        self._mode = "threaded"
        wake = threading.Event()
        self._builds = Builds(self._build, threads=BUILD_THREADS, on_done=wake.set)
        if self.options.pool_workers > 0:
            self._pool = WorkerPool(
                self.options.pool_workers,
                urgent_workers=self.options.decision_workers,
                name="fleet",
                gate=self.options.gate,
            ).start()
        self.discovery.on_change(wake.set)
        informer_stop = threading.Event()
        threads = self.discovery.start(informer_stop)
        if not isinstance(self.coordinator, ServeEverything):
            self._shard_loop = ShardLoop(
                self.coordinator,
                self.clock,
                self.options.retry_period,
                clusters=lambda: (
                    list(self.discovery.clusters()) if self.discovery.has_synced() else None
                ),
                on_change=wake.set,
                on_error=self._shards_failed,
                on_step=self.metrics.observe_shard_step,
                next_expiry=self.coordinator.next_expiry,
            ).start()
        options = self.operator_options
        if options.metrics_port is not None:
            self.server = ObservabilityServer(
                self.metrics,
                host=options.metrics_host,
                port=options.metrics_port,
                ready=self.readiness,
            ).start()
            log.info("metrics and probes on %s", self.server.url)
        if on_started is not None:
            on_started()
        try:
            while not stop.is_set():
                if self.discovery.has_synced():
                    self.sync()
                self._wait(wake, stop)
        finally:
            log.info("stopping every cluster's controllers")
            if self._shard_loop is not None:
                self._shard_loop.stop()  # before release_all: no step may write a Lease back
            self._builds.close()
            with self._lock:
                for key in list(self.members):
                    self._stop(key, "shutting down")
            if self._pool is not None:
                self._pool.close()
            try:
                self.coordinator.release_all()
            except Exception as exc:
                log.warning("could not release the shard Leases: %s", exc)
            informer_stop.set()
            for thread in threads:
                thread.join(timeout=5)
            if self.server is not None:
                self.server.close()
        return 0


__all__ = ["Connect", "Coordinator", "Fleet", "FleetOptions", "ServeEverything"]
