"""The Prometheus metrics, under the names, labels and buckets upstream Karpenter uses.

A Karpenter user's dashboards and alerts (``karpenter_nodeclaims_created_total``,
``karpenter_pods_startup_duration_seconds``, ``controller_runtime_reconcile_errors_total``...)
must keep working when the capacity comes from Cluster API, so every series here mirrors
kubernetes-sigs/karpenter (``pkg/metrics``, ``pkg/controllers/**/metrics.go``,
``pkg/cloudprovider/metrics``) or controller-runtime where the meaning is the same; see
``docs/observability.md`` for the list.

Controllers record through the typed methods of ``Metrics`` rather than touching
``prometheus_client`` objects, so a label can never be misspelt or forgotten at a call site.
Each ``Metrics`` owns a private ``CollectorRegistry``: tests, the simulator and two replicas in
one process never see each other's counts. Durations the class measures itself (cloud provider
calls) come from an injected ``Clock``, so a simulated hour is an hour in the histograms too.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from karpenter_capi.core.clock import Clock, SystemClock
from karpenter_capi.core.errors import (
    InstanceNotFoundError,
    InsufficientCapacityError,
    NodeClassNotReadyError,
)
from karpenter_capi.core.observability._collectors import WindowedSummary
from karpenter_capi.core.observability.exposition import Exposition, TrackedHistogram

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4
"""The Content-Type of ``Metrics.render()``: the text format every Prometheus scrapes."""

# Label names, as upstream spells them.
NODEPOOL = "nodepool"
REASON = "reason"
CAPACITY_TYPE = "capacity_type"
ZONE = "zone"
MIN_VALUES_RELAXED = "min_values_relaxed"
RESOURCE_TYPE = "resource_type"
CONTROLLER = "controller"
METHOD = "method"
PROVIDER = "provider"
ERROR = "error"
RESULT = "result"
SCHEDULING_ID = "scheduling_id"
NAME = "name"

# Values of the ``reason`` label of karpenter_nodeclaims_created_total / _disrupted_total.
REASON_PROVISIONED = "provisioned"
REASON_UNDERUTILIZED = "underutilized"
REASON_EMPTY = "empty"
REASON_DRIFTED = "drifted"
REASON_EXPIRED = "expired"
REASON_UNHEALTHY = "unhealthy"

# The ``controller`` label of the scheduler metrics: which simulation the duration belongs to.
CONTROLLER_PROVISIONER = "provisioner"
CONTROLLER_DISRUPTION = "disruption"

# Values of the ``result`` label of controller_runtime_reconcile_total. controller-runtime
# also has requeue / requeue_after, which our ReconcileObserver protocol does not report.
RESULT_SUCCESS = "success"
RESULT_ERROR = "error"

RECONCILE_BUCKETS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8,
    0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30,
    40, 50, 60,
)  # fmt: skip
"""controller-runtime's buckets for controller_runtime_reconcile_time_seconds."""

DURATION_BUCKETS: tuple[float, ...] = (*RECONCILE_BUCKETS, 120, 150, 300, 450, 600)
"""Karpenter's ``metrics.DurationBuckets()``: controller-runtime's, plus minutes for singletons
(the provisioner's scheduling simulation has no reconcile timeout)."""

DEFAULT_BUCKETS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
)  # fmt: skip
"""client_golang's ``prometheus.DefBuckets``, which upstream's cloud provider histogram uses by
leaving ``Buckets`` unset (Python's default adds a ``+Inf`` only, so spell them out)."""

NODECLAIM_TERMINATION_BUCKETS: tuple[float, ...] = tuple(float(2**i) for i in range(12))
"""``prometheus.ExponentialBuckets(1, 2, 12)``: 1 s to 2048 s, a drain can take a while."""

INSTANCE_TERMINATION_BUCKETS: tuple[float, ...] = tuple(float(2**i) for i in range(11))
"""``prometheus.ExponentialBuckets(1, 2, 11)``: 1 s to 1024 s."""

# Upstream's well-known cloud provider error categories, for our exceptions that mean the same.
# Anything else is labelled with its class name: the set of classes is fixed by the code, so the
# label's cardinality stays bounded, and the name says more than upstream's "unknown".
_ERROR_CATEGORIES: Mapping[type[BaseException], str] = {
    InsufficientCapacityError: "InsufficientCapacityError",
    NodeClassNotReadyError: "NodeClassNotReadyError",
    InstanceNotFoundError: "NodeClaimNotFoundError",
}


def error_category(error: BaseException) -> str:
    """The ``error`` label of karpenter_cloudprovider_errors_total for ``error``.

    A plugin's subclass of a well-known core error (say, an EC2 fleet ICE) is reported under the
    upstream category, so alerts on ``error="InsufficientCapacityError"`` see it.
    """
    for cls in type(error).__mro__:
        category = _ERROR_CATEGORIES.get(cls)
        if category is not None:
            return category
    return type(error).__name__


def resource_type_label(resource: str) -> str:
    """The ``resource_type`` label of a resource name, normalised as upstream does it."""
    return resource.lower().replace("-", "_")


class Metrics:
    """Every metric this controller exposes, in a registry of its own.

    Satisfies ``core.runtime``'s ``ReconcileObserver`` (``on_reconcile``, ``on_queue_depth``),
    so the runtime feeds the controller-runtime metrics without knowing about Prometheus.
    Thread-safe: controllers on worker threads record while the endpoint renders.
    """

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock: Clock = clock or SystemClock()
        self._lock = threading.Lock()
        self.registry = CollectorRegistry()
        self._exposition = Exposition()
        r = self.registry

        self._nodeclaims_created = Counter(
            "karpenter_nodeclaims_created_total",
            "Number of nodeclaims created in total by Karpenter. Labeled by reason the nodeclaim "
            "was created, the owning nodepool, and if min values was relaxed for this nodeclaim.",
            [REASON, NODEPOOL, MIN_VALUES_RELAXED],
            registry=r,
        )
        self._nodeclaims_terminated = Counter(
            "karpenter_nodeclaims_terminated_total",
            "Number of nodeclaims terminated in total by Karpenter. Labeled by the owning "
            "nodepool, capacity type, and zone.",
            [NODEPOOL, CAPACITY_TYPE, ZONE],
            registry=r,
        )
        self._nodeclaims_disrupted = Counter(
            "karpenter_nodeclaims_disrupted_total",
            "Number of nodeclaims disrupted in total by Karpenter. Labeled by reason the "
            "nodeclaim was disrupted, the owning nodepool and the capacity type.",
            [REASON, NODEPOOL, CAPACITY_TYPE],
            registry=r,
        )
        self._interruption_received = Counter(
            "karpenter_interruption_received_messages_total",
            "Count of interruption notices received (a queue's messages, Nodes' handler "
            "taints). Labeled by message type.",
            ["message_type"],
            registry=r,
        )
        self._interruption_deleted = Counter(
            "karpenter_interruption_deleted_messages_total",
            "Count of interruption messages handed back to their plugin (deleted from the queue).",
            [],
            registry=r,
        )
        self._nodeclaims_termination_duration = TrackedHistogram(
            "karpenter_nodeclaims_termination_duration_seconds",
            "Duration of NodeClaim termination in seconds.",
            [NODEPOOL],
            buckets=NODECLAIM_TERMINATION_BUCKETS,
            registry=r,
        )
        self._nodeclaims_instance_termination_duration = TrackedHistogram(
            "karpenter_nodeclaims_instance_termination_duration_seconds",
            "Duration of CloudProvider Instance termination in seconds.",
            [NODEPOOL],
            buckets=INSTANCE_TERMINATION_BUCKETS,
            registry=r,
        )
        self._nodes_created = Counter(
            "karpenter_nodes_created_total",
            "Number of nodes created in total by Karpenter. Labeled by owning nodepool and zone.",
            [NODEPOOL, ZONE],
            registry=r,
        )
        self._nodeclaims_launched = Counter(
            "karpenter_nodeclaims_launched_total",
            "Number of nodeclaims launched in total by Karpenter. Labeled by the owning nodepool.",
            [NODEPOOL],
            registry=r,
        )
        self._nodeclaims_registered = Counter(
            "karpenter_nodeclaims_registered_total",
            "Number of nodeclaims registered in total by Karpenter. Labeled by the owning "
            "nodepool.",
            [NODEPOOL],
            registry=r,
        )
        self._nodeclaims_initialized = Counter(
            "karpenter_nodeclaims_initialized_total",
            "Number of nodeclaims initialized in total by Karpenter. Labeled by the owning "
            "nodepool.",
            [NODEPOOL],
            registry=r,
        )
        self._nodes_eviction_requests = Counter(
            "karpenter_nodes_eviction_requests_total",
            "The total number of eviction requests made by Karpenter",
            ["code"],
            registry=r,
        )
        self._pods_drained = Counter(
            "karpenter_pods_drained_total",
            "Number of pods drained during node termination, by the disruption reason",
            ["reason"],
            registry=r,
        )
        self._nodes_drained = Counter(
            "karpenter_nodes_drained_total",
            "The total number of nodes drained by Karpenter",
            [NODEPOOL],
            registry=r,
        )
        self._nodes_lifetime_duration = TrackedHistogram(
            "karpenter_nodes_lifetime_duration_seconds",
            "The lifetime duration of the nodes since creation.",
            [NODEPOOL],
            buckets=(60, 300, 900, 1800, 3600, 7200, 14400, 43200, 86400, 259200, 604800, 2592000),
            registry=r,
        )
        self._nodes_terminated = Counter(
            "karpenter_nodes_terminated_total",
            "Number of nodes terminated in total by Karpenter. Labeled by owning nodepool and "
            "zone.",
            [NODEPOOL, ZONE],
            registry=r,
        )
        self._nodes_termination_duration = WindowedSummary(
            "karpenter_nodes_termination_duration_seconds",
            "The time taken between a node's deletion request and the removal of its finalizer",
            [NODEPOOL],
            self._clock,
        )
        r.register(self._nodes_termination_duration)
        self._pods_startup_duration = WindowedSummary(
            "karpenter_pods_startup_duration_seconds",
            "The time from pod creation until the pod is running.",
            [],
            self._clock,
        )
        r.register(self._pods_startup_duration)
        self._disruption_decisions = Counter(
            "karpenter_voluntary_disruption_decisions_total",
            "Number of disruption decisions performed. Labeled by disruption decision, reason "
            "and consolidation type.",
            ["decision", REASON, "consolidation_type"],
            registry=r,
        )
        self._disruption_eligible = Gauge(
            "karpenter_voluntary_disruption_eligible_nodes",
            "Number of nodes eligible for disruption by Karpenter. Labeled by disruption reason.",
            [REASON],
            registry=r,
        )
        self._disruption_evaluation = TrackedHistogram(
            "karpenter_voluntary_disruption_decision_evaluation_duration_seconds",
            "Duration of the disruption decision evaluation process in seconds. Labeled by "
            "method and consolidation type.",
            [METHOD, "consolidation_type"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self._nodepool_allowed_disruptions = Gauge(
            "karpenter_nodepools_allowed_disruptions",
            "The number of nodes for a given NodePool that can be concurrently disrupting at "
            "a point in time. Labeled by NodePool and reason.",
            [NODEPOOL, REASON],
            registry=r,
        )
        self._scheduling_duration = TrackedHistogram(
            "karpenter_scheduler_scheduling_duration_seconds",
            "Duration of scheduling simulations used for deprovisioning and provisioning in "
            "seconds.",
            [CONTROLLER],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self._scheduler_queue_depth = Gauge(
            "karpenter_scheduler_queue_depth",
            "The number of pods currently waiting to be scheduled.",
            [CONTROLLER, SCHEDULING_ID],
            registry=r,
        )
        self._nodepools_usage = Gauge(
            "karpenter_nodepools_usage",
            "The amount of resources that have been provisioned for a nodepool. Labeled by "
            "nodepool name and resource type.",
            [RESOURCE_TYPE, NODEPOOL],
            registry=r,
        )
        self._nodepools_limit = Gauge(
            "karpenter_nodepools_limit",
            "Limits specified on the nodepool that restrict the quantity of resources "
            "provisioned. Labeled by nodepool name and resource type.",
            [RESOURCE_TYPE, NODEPOOL],
            registry=r,
        )
        # Which resource types each nodepool gauge currently has, so a resource that leaves
        # the status (or a deleted NodePool) stops being reported instead of going stale.
        self._nodepool_resources: dict[tuple[str, str], set[str]] = {}
        self._cloudprovider_duration = TrackedHistogram(
            "karpenter_cloudprovider_duration_seconds",
            "Duration of cloud provider method calls. Labeled by the controller, method name "
            "and provider.",
            [CONTROLLER, METHOD, PROVIDER],
            buckets=DEFAULT_BUCKETS,
            registry=r,
        )
        self._cloudprovider_errors = Counter(
            "karpenter_cloudprovider_errors_total",
            "Total number of errors returned from CloudProvider calls.",
            [CONTROLLER, METHOD, PROVIDER, ERROR],
            registry=r,
        )
        self._reconcile_total = Counter(
            "controller_runtime_reconcile_total",
            "Total number of reconciliations per controller",
            [CONTROLLER, RESULT],
            registry=r,
        )
        self._reconcile_errors = Counter(
            "controller_runtime_reconcile_errors_total",
            "Total number of reconciliation errors per controller",
            [CONTROLLER],
            registry=r,
        )
        self._reconcile_time = TrackedHistogram(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            [CONTROLLER],
            buckets=RECONCILE_BUCKETS,
            registry=r,
        )
        self._reconcile_children: dict[
            tuple[str, bool], tuple[Counter, Counter | None, TrackedHistogram]
        ] = {}
        self._workqueue_depth = Gauge(
            "workqueue_depth",
            "Current depth of workqueue",
            [NAME, CONTROLLER],
            registry=r,
        )
        self._plugin_gauges: dict[str, tuple[Gauge, tuple[str, ...]]] = {}

    def plugin_gauge(self, name: str, documentation: str, labelnames: Sequence[str]) -> Gauge:
        """A gauge a plugin adds to this registry, registered on first use.

        Every plugin asking for ``name`` gets the same gauge (``capa`` and ``capz`` share the
        price age), and it lives as long as this ``Metrics``; registering a name twice on one
        registry is an error, so plugins never register their own. Raises ``ValueError`` when
        ``name`` was registered with other label names.
        """
        labels = tuple(labelnames)
        with self._lock:
            found = self._plugin_gauges.get(name)
            if found is None:
                found = (Gauge(name, documentation, labels, registry=self.registry), labels)
                self._plugin_gauges[name] = found
            gauge, registered = found
            if registered != labels:
                raise ValueError(f"gauge {name} has labels {', '.join(registered)}")
            return gauge

    # -- NodeClaims and Nodes -----------------------------------------------------------------

    def nodeclaim_created(
        self, nodepool: str, *, reason: str = REASON_PROVISIONED, min_values_relaxed: bool = False
    ) -> None:
        """A NodeClaim was created (``reason``: provisioned, or the disruption it replaces)."""
        relaxed = "true" if min_values_relaxed else "false"
        self._nodeclaims_created.labels(reason, nodepool, relaxed).inc()

    def nodeclaim_terminated(
        self,
        nodepool: str,
        *,
        capacity_type: str = "",
        zone: str = "",
        duration_seconds: float | None = None,
    ) -> None:
        """A NodeClaim's finalizer was removed; ``duration_seconds`` since its deletion request.

        ``capacity_type`` and ``zone`` are empty for a NodeClaim that never launched, as
        upstream reports them.
        """
        self._nodeclaims_terminated.labels(nodepool, capacity_type, zone).inc()
        if duration_seconds is not None:
            self._nodeclaims_termination_duration.labels(nodepool).observe(duration_seconds)

    def observe_instance_termination(self, nodepool: str, seconds: float) -> None:
        """How long the provider took to delete a NodeClaim's instance (its Machine)."""
        self._nodeclaims_instance_termination_duration.labels(nodepool).observe(seconds)

    def nodeclaim_disrupted(self, nodepool: str, *, reason: str, capacity_type: str = "") -> None:
        """A NodeClaim was disrupted (``reason``: empty, underutilized, drifted, expired...)."""
        self._nodeclaims_disrupted.labels(reason, nodepool, capacity_type).inc()

    def interruption_received(self, message_type: str) -> None:
        """An interruption notice arrived (``message_type``: spot_interrupted, ...)."""
        self._interruption_received.labels(message_type).inc()

    def interruption_deleted(self, count: int) -> None:
        """``count`` handled notices were handed back to their plugin."""
        self._interruption_deleted.inc(count)

    def disruption_decision(self, decision: str, *, reason: str, consolidation_type: str) -> None:
        """A disruption command was carried out (``decision``: delete or replace)."""
        self._disruption_decisions.labels(decision, reason, consolidation_type).inc()

    def set_disruption_eligible(self, reason: str, count: int) -> None:
        self._disruption_eligible.labels(reason).set(count)

    def observe_disruption_evaluation(
        self, method: str, consolidation_type: str, seconds: float
    ) -> None:
        self._disruption_evaluation.labels(method, consolidation_type).observe(seconds)

    def set_allowed_disruptions(self, nodepool: str, reason: str, allowed: int) -> None:
        self._nodepool_allowed_disruptions.labels(nodepool, reason).set(allowed)

    def node_created(self, nodepool: str, *, zone: str = "") -> None:
        """A Node registered for one of our NodeClaims."""
        self._nodes_created.labels(nodepool, zone).inc()

    def node_terminated(
        self,
        nodepool: str,
        *,
        zone: str = "",
        duration_seconds: float | None = None,
        lifetime_seconds: float | None = None,
    ) -> None:
        """A Node's termination finalizer was removed; ``duration_seconds`` since deletion,
        ``lifetime_seconds`` since the Node was created."""
        self._nodes_terminated.labels(nodepool, zone).inc()
        if duration_seconds is not None:
            self._nodes_termination_duration.observe(duration_seconds, (nodepool,))
        if lifetime_seconds is not None:
            self._nodes_lifetime_duration.labels(nodepool).observe(lifetime_seconds)

    def nodeclaim_launched(self, nodepool: str) -> None:
        """A NodeClaim's instance got a provider ID (``Launched=True``)."""
        self._nodeclaims_launched.labels(nodepool).inc()

    def nodeclaim_registered(self, nodepool: str) -> None:
        """A NodeClaim's Node registered."""
        self._nodeclaims_registered.labels(nodepool).inc()

    def nodeclaim_initialized(self, nodepool: str) -> None:
        """A NodeClaim's Node became initialized (ready, startup taints gone)."""
        self._nodeclaims_initialized.labels(nodepool).inc()

    def eviction_request(self, code: int) -> None:
        """One Eviction API call and its HTTP status (200, 404, 409, 429, ...)."""
        self._nodes_eviction_requests.labels(str(code)).inc()

    def pod_drained(self, reason: str) -> None:
        """A pod was evicted by a drain; ``reason`` is the NodeClaim's disruption reason."""
        self._pods_drained.labels(reason).inc()

    def node_drained(self, nodepool: str) -> None:
        """A node's drain completed."""
        self._nodes_drained.labels(nodepool).inc()

    # -- Pods and scheduling ------------------------------------------------------------------

    def observe_pod_startup(self, seconds: float) -> None:
        """A pod went from creation to Running in ``seconds``."""
        self._pods_startup_duration.observe(seconds, ())

    def observe_scheduling(
        self, seconds: float, *, controller: str = CONTROLLER_PROVISIONER
    ) -> None:
        """A scheduling simulation (a provisioning round, a disruption check) took ``seconds``."""
        self._scheduling_duration.labels(controller).observe(seconds)

    def set_scheduler_queue_depth(
        self, depth: int, *, scheduling_id: str, controller: str = CONTROLLER_PROVISIONER
    ) -> None:
        """Pods still waiting in the simulation ``scheduling_id``; clear it when it ends."""
        self._scheduler_queue_depth.labels(controller, scheduling_id).set(depth)

    def clear_scheduler_queue_depth(
        self, *, scheduling_id: str, controller: str = CONTROLLER_PROVISIONER
    ) -> None:
        """The simulation ``scheduling_id`` ended: drop its series, as upstream does."""
        self._scheduler_queue_depth.remove(controller, scheduling_id)

    # -- NodePools ----------------------------------------------------------------------------

    def set_nodepool_usage(self, nodepool: str, usage: Mapping[str, float]) -> None:
        """The resources a NodePool has provisioned (its ``status.resources``).

        Values are in base units: cores for cpu, bytes for memory, a count for pods. The
        mapping replaces what was reported before for this NodePool.
        """
        self._replace(self._nodepools_usage, "usage", nodepool, usage)

    def set_nodepool_limits(self, nodepool: str, limits: Mapping[str, float]) -> None:
        """A NodePool's ``spec.limits`` (an empty mapping when it has none)."""
        self._replace(self._nodepools_limit, "limit", nodepool, limits)

    def forget_nodepool(self, nodepool: str) -> None:
        """The NodePool is gone: stop reporting its usage and limits."""
        self._replace(self._nodepools_usage, "usage", nodepool, {})
        self._replace(self._nodepools_limit, "limit", nodepool, {})

    def _replace(self, gauge: Gauge, kind: str, nodepool: str, values: Mapping[str, float]) -> None:
        fresh = {resource_type_label(name): float(value) for name, value in values.items()}
        with self._lock:
            previous = self._nodepool_resources.pop((kind, nodepool), set())
            for resource in previous - fresh.keys():
                gauge.remove(resource, nodepool)
            for resource, value in fresh.items():
                gauge.labels(resource, nodepool).set(value)
            if fresh:
                self._nodepool_resources[(kind, nodepool)] = set(fresh)

    # -- Cloud provider -----------------------------------------------------------------------

    @contextmanager
    def cloudprovider_call(self, method: str, *, provider: str, controller: str) -> Iterator[None]:
        """Time a provider call and count its failure; the exception propagates unchanged.

        ``method`` uses upstream's names where they apply (``Create``, ``Delete``, ``Get``,
        ``List``, ``GetInstanceTypes``, ``IsDrifted``), so dashboards line up.
        """
        start = self._clock.monotonic()
        try:
            yield
        except Exception as error:
            self._cloudprovider_errors.labels(
                controller, method, provider, error_category(error)
            ).inc()
            raise
        finally:
            elapsed = max(0.0, self._clock.monotonic() - start)
            self._cloudprovider_duration.labels(controller, method, provider).observe(elapsed)

    # -- ReconcileObserver --------------------------------------------------------------------

    def on_reconcile(
        self, controller: str, seconds: float, error: BaseException | bool | None
    ) -> None:
        """One reconcile of ``controller`` finished after ``seconds``; ``error`` if it failed."""
        failed = error is not None and error is not False
        children = self._reconcile_children.get((controller, failed))
        if children is None:
            # ``labels`` takes a lock and checks its values at each call, and this is called
            # for every reconcile and periodic run (a fleet's idle members look four times a
            # second each): the series are looked up once per controller and outcome.
            children = (
                self._reconcile_total.labels(
                    controller, RESULT_ERROR if failed else RESULT_SUCCESS
                ),
                self._reconcile_errors.labels(controller) if failed else None,
                self._reconcile_time.labels(controller),
            )
            self._reconcile_children[(controller, failed)] = children
        total, errors, time = children
        total.inc()
        if errors is not None:
            errors.inc()
        time.observe(seconds)

    def on_queue_depth(self, controller: str, depth: int) -> None:
        """``controller``'s work queue now holds ``depth`` keys."""
        # controller-runtime names the queue after its controller and sets both labels.
        self._workqueue_depth.labels(controller, controller).set(depth)

    # -- Exposition ---------------------------------------------------------------------------

    def render(self) -> bytes:
        """Every metric in the Prometheus text format (``CONTENT_TYPE``), ``*_created`` left
        out; the bytes of ``generate_latest`` (``exposition.py``), cheaper."""
        return self._exposition.render([(None, self.registry)])
