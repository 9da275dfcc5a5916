"""Run a scenario against the real controllers and report outcomes as numbers.

``sim.demo`` shows what happened; a benchmark or a regression check needs figures to compare
between runs: how many pods ended bound, how fast they got bound, what the capacity cost at
its peak and at the end, and whether any controller failed. The wiring is the demo's (the
real ``Operator`` with the ``generic_capi`` plugin, the emulated Cluster API with nodes, the
workload controllers and the scheduler stand-in, all stepped on a ``FakeClock``), so the run is
deterministic; the timeline's actions are applied at their virtual times and the cluster is
sampled every ``sample_every`` virtual seconds.

Cost is the price the solver chose by: each NodeClaim's offering in its NodePool's inventory,
resolved through the run's plugins (AWS, Azure, shape estimates and price annotations alike),
with the price annotation of the scalable resource it was launched through as the fallback
(see ``sim.scenario.observer``). Errors are the ``controller_runtime_reconcile_errors_total``
counts and ERROR log records. API requests are the in-memory server's counts from the start of
the run (after the scenario's objects are loaded), the observer's own sampling left out; the
stepped informers' zero-timeout watch drains are reported apart (``watch_polls``), since a real
informer holds one watch open instead. What is observed lives in
``sim.scenario.observer``, what is reported in ``sim.scenario.result``.

The runner never sleeps and never prints: ``on_sample`` is handed each sample (the CLI's live
progress display), and ``pace`` is called as virtual time advances, at most ``pace_step``
virtual seconds apart, so a caller can hold virtual time to wall time (``simulate --realtime``).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager, suppress
from datetime import datetime
from typing import Any

from karpenter_capi.core.api.crds import generate_crds
from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube.client import KubeClient
from karpenter_capi.core.kube.errors import Conflict, NotFound
from karpenter_capi.core.kube.resources import (
    DEPLOYMENTS,
    MACHINE_DEPLOYMENTS,
    MACHINE_POOLS,
    MACHINE_SETS,
    NODEPOOLS,
    PODS,
)
from karpenter_capi.core.operator import Operator
from karpenter_capi.core.runtime.stepped import SteppedDriver
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.apiserver.audit import AuditingClient, AuditLog
from karpenter_capi.sim.apiserver.request_counts import WATCH_POLL
from karpenter_capi.sim.apiserver.version import SIMULATED_CONTROL_PLANE
from karpenter_capi.sim.invariants import check_invariants
from karpenter_capi.sim.scenario.aws import SimAws, emulated_aws, substitute
from karpenter_capi.sim.scenario.catalog import generate_catalog
from karpenter_capi.sim.scenario.interruptions import RECLAIM, Interruptions, Queue
from karpenter_capi.sim.scenario.launches import LaunchRounds
from karpenter_capi.sim.scenario.observer import Observer, percentile
from karpenter_capi.sim.scenario.process import DEFAULT_PLUGINS, start_controller
from karpenter_capi.sim.scenario.repacking import RepackingRounds
from karpenter_capi.sim.scenario.result import CapacityRow, Sample, ScenarioResult
from karpenter_capi.sim.scenario.schema import DEFAULT_NOTICE, Scenario, TimelineAction, Workload
from karpenter_capi.sim.scenario.writes import controller_writes

__all__ = [
    "CapacityRow",
    "Sample",
    "ScenarioResult",
    "apply_action",
    "deployment",
    "load_objects",
    "run",
]

DEFAULT_SCENARIO = "scale-from-zero"  # what ``simulate`` and ``make run`` run without a name
DEFAULT_SAMPLE_EVERY = 15.0


class _ErrorRecords(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(f"{record.name}: {record.getMessage()}")


@contextmanager
def capture_errors() -> Iterator[_ErrorRecords]:
    handler = _ErrorRecords()
    logger = logging.getLogger("karpenter_capi")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


def deployment(workload: Workload, replicas: int | None = None) -> dict[str, Any]:
    """The ``apps/v1`` Deployment a workload entry stands for."""
    labels = {"app": workload.name, **workload.labels}
    pod_spec: dict[str, Any] = {
        "containers": [
            {
                "name": "main",
                "image": "registry.k8s.io/pause:3.9",
                "resources": {"requests": {"cpu": workload.cpu, "memory": workload.memory}},
            }
        ]
    }
    if workload.node_selector:
        pod_spec["nodeSelector"] = dict(workload.node_selector)
    if workload.topology_spread_constraints:
        pod_spec["topologySpreadConstraints"] = list(workload.topology_spread_constraints)
    if workload.affinity:
        pod_spec["affinity"] = dict(workload.affinity)
    if workload.tolerations:
        pod_spec["tolerations"] = list(workload.tolerations)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": workload.name, "namespace": workload.namespace, "labels": labels},
        "spec": {
            "replicas": workload.replicas if replicas is None else replicas,
            "selector": {"matchLabels": {"app": workload.name}},
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }


def load_objects(
    server: InMemoryAPIServer, scenario: Scenario, aws_values: Mapping[str, str] | None = None
) -> None:
    """The scenario's infrastructure (its catalog or manifests, ``aws_values`` substituted
    into them) and the Deployments of the workloads that exist from the start."""
    infrastructure = scenario.infrastructure
    if infrastructure.catalog is not None:
        server.apply_manifests(generate_catalog(infrastructure.catalog))
    else:
        manifests = [dict(obj) for obj in infrastructure.manifests or []]
        if aws_values is not None:
            manifests = [substitute(obj, aws_values) for obj in manifests]
        server.apply_manifests(manifests)
    deferred = scenario.deferred()
    server.apply_manifests([deployment(w) for w in scenario.workloads if w.name not in deferred])


def _patch(server: InMemoryAPIServer, scenario: Scenario, action: TimelineAction) -> None:
    """A merge patch on one infrastructure object, or on every one of its kind (``*``)."""
    assert action.kind is not None
    assert action.patch is not None
    resource = _PATCHABLE[action.kind]
    namespace = None
    if resource.namespaced:
        catalog = scenario.infrastructure.catalog
        namespace = catalog.namespace if catalog is not None else "default"
    if action.target == "*":
        names = [str(o["metadata"]["name"]) for o in server.list(resource, namespace).items]
    else:
        names = [action.target]
    for name in names:
        with suppress(NotFound):
            server.patch(resource, name, action.patch, namespace)


_PATCHABLE = {
    "MachineDeployment": MACHINE_DEPLOYMENTS,
    "MachineSet": MACHINE_SETS,
    "MachinePool": MACHINE_POOLS,
    "NodePool": NODEPOOLS,
}


def apply_action(server: InMemoryAPIServer, scenario: Scenario, action: TimelineAction) -> None:
    """One timeline action, as the user or a CI job would do it (straight to the server).

    ``interrupt`` is the simulated cloud's, with a deadline to keep: ``run`` does it."""
    if action.action == "interrupt":
        raise ValueError("an interrupt action needs the runner's Interruptions (run does it)")
    if action.action == "patch":
        _patch(server, scenario, action)
        return
    if action.kind == "NodePool":  # kubectl scale nodepool: the scale subresource
        server.patch(
            NODEPOOLS, action.target, {"spec": {"replicas": action.count}}, subresource="scale"
        )
        return
    workload = next(w for w in scenario.workloads if w.name == action.target)
    if action.action == "deploy":
        server.apply_manifests([deployment(workload, action.count)])
    elif action.action == "scale":
        server.patch(
            DEPLOYMENTS,
            workload.name,
            {"spec": {"replicas": action.count}},
            workload.namespace,
        )
    else:
        with suppress(NotFound):
            server.delete(DEPLOYMENTS, workload.name, workload.namespace)


class ReconcileErrors:
    """Counts failed reconciles per controller and error, as the runtime reports them.

    A second observer of the runtime (``Manager.add_observer``), next to the Operator's
    metrics, so the report can tell optimistic-concurrency conflicts (retried at once, normal
    with several writers) from real failures.
    """

    def __init__(self) -> None:
        self.conflicts = 0
        self.failures: dict[tuple[str, str], int] = {}

    def on_reconcile(self, controller: str, seconds: float, error: BaseException | None) -> None:
        if isinstance(error, Conflict):
            self.conflicts += 1
        elif error is not None:
            key = (controller, f"{type(error).__name__}: {error}")
            self.failures[key] = self.failures.get(key, 0) + 1

    def on_queue_depth(self, controller: str, depth: int) -> None:
        """Queue depths are the metrics' concern."""

    def messages(self) -> list[str]:
        return [
            f"controller {controller}: {count}x {what}"
            for (controller, what), count in sorted(self.failures.items())
        ]


_WRITES = ("create", "update", "patch", "delete")


def _start_aws(scenario: Scenario, stack: ExitStack) -> SimAws | None:
    """The emulated AWS of a scenario with ``infrastructure.aws`` (``sim.scenario.aws``)."""
    environment = scenario.infrastructure.aws
    return None if environment is None else stack.enter_context(emulated_aws(environment))


def _aws_plugins(aws: SimAws) -> list[tuple[str, object]]:
    """generic_capi and capa, capa over the emulated AWS."""
    from karpenter_capi.plugins.capa.plugin import CapaPlugin
    from karpenter_capi.plugins.generic_capi.plugin import GenericCapiPlugin

    return [
        ("generic_capi", GenericCapiPlugin),
        ("capa", CapaPlugin(aws, background_refresh=False)),
    ]


def _writes(audit: AuditLog) -> int:
    return sum(audit.count(r) for r in audit.records() if r.verb in _WRITES)


def _timeline(
    scenario: Scenario, until: float, sample_every: float
) -> list[tuple[float, int, TimelineAction | str | None]]:
    """The run's events in order: the scenario's actions, the reclaims at the end of each
    interruption's notice (an action of the simulated cloud), and a sample every
    ``sample_every`` seconds and at ``until``.

    Sorted by (time, 0 = action first, 1 = sample), so an action at a sample time is seen by it.
    """
    actions = scenario.actions(until)
    samples = [0.0]
    while samples[-1] + sample_every < until:
        samples.append(samples[-1] + sample_every)
    samples.append(until)
    return sorted(
        [(a.at, 0, a) for a in actions]
        + [
            (a.at + (a.notice or DEFAULT_NOTICE), 0, RECLAIM)
            for a in actions
            if a.action == "interrupt"
        ]
        + [(t, 1, None) for t in samples],
        key=lambda e: (e[0], e[1]),
    )


def _reclaim_due(interruptions: Interruptions, now: datetime) -> None:
    """The cloud takes every interrupted instance whose notice has ended by ``now`` (once)."""
    for due in interruptions.interrupted:
        if due.there_at_deadline is None and due.deadline <= now:
            interruptions.reclaim(due)


def _percentiles(bound: list[float]) -> dict[str, float]:
    """p50, p95 and max of the seconds pods took to bind; empty when no pod bound."""
    if not bound:
        return {}
    return {
        "p50": round(percentile(bound, 0.5), 3),
        "p95": round(percentile(bound, 0.95), 3),
        "max": round(max(bound), 3),
    }


def _over_aws(
    aws: SimAws,
    plugin_objects: Sequence[tuple[str, object]] | None,
    emulation: Mapping[str, Any] | None,
) -> tuple[Sequence[tuple[str, object]], dict[str, Any]]:
    """The plugins and CAPI emulation a scenario on the emulated AWS runs with: capa over it
    unless plugins are given, CAPA's EC2 and Secrets Manager and the kubeadm bootstrap."""
    emulated = {
        "aws_ec2": aws.emulation_ec2,
        "aws_secrets": aws.secretsmanager(aws.region),
        "kubeadm_bootstrap": True,
        **(emulation or {}),
    }
    return (_aws_plugins(aws) if plugin_objects is None else plugin_objects), emulated


def _advance(
    driver: SteppedDriver,
    now: float,
    at: float,
    pace: Callable[[float], None] | None,
    pace_step: float,
) -> float:
    """Move the clock from ``now`` to ``at``: in one jump, or paced ``pace_step`` at a time."""
    while at > now:
        step_to = at if pace is None else min(at, now + pace_step)
        driver.advance(step_to - now)
        now = step_to
        if pace is not None:
            pace(now)
    return now


def _act(
    action: TimelineAction | str,
    server: InMemoryAPIServer,
    scenario: Scenario,
    interruptions: Interruptions,
    now: datetime,
) -> None:
    """One timeline event: a reclaim that is due, an interruption, or a scenario action."""
    if action == RECLAIM:
        _reclaim_due(interruptions, now)
    elif isinstance(action, TimelineAction) and action.action == "interrupt":
        interruptions.interrupt(action)
    elif isinstance(action, TimelineAction):
        apply_action(server, scenario, action)


def _cluster_requests(server: InMemoryAPIServer, before: Any, observer: Observer) -> dict[str, int]:
    """The run's API requests by verb, less the observer's own reads."""
    api_requests = server.requests.since(before)
    for verb, count in observer.own_requests.items():
        api_requests[verb] = api_requests.get(verb, 0) - count
    return api_requests


def run(
    scenario: Scenario,
    *,
    until: float,
    seed: int = 0,
    sample_every: float = DEFAULT_SAMPLE_EVERY,
    plugins: tuple[str, ...] = DEFAULT_PLUGINS,
    on_cluster: Callable[[InMemoryAPIServer], None] | None = None,
    on_sample: Callable[[Sample], None] | None = None,
    pace: Callable[[float], None] | None = None,
    pace_step: float = 1.0,
    plugin_objects: Sequence[tuple[str, object]] | None = None,
    controller_client: Callable[[InMemoryAPIServer], KubeClient] | None = None,
    emulation: Mapping[str, Any] | None = None,
    check: bool = False,
    on_operator: Callable[[Operator], None] | None = None,
) -> ScenarioResult:
    """Run ``scenario`` for ``until`` virtual seconds and return its outcome.

    ``plugin_objects`` (``(name, module or object)`` pairs) replaces loading ``plugins`` by
    name, to run plugins built with test doubles (``capa`` over moto and Stubber clients).
    ``controller_client`` wraps the server for the controller alone (its Operator and plugins),
    e.g. to audit its requests (``sim.apiserver.audit``); the emulated cluster around it keeps
    calling the server itself.
    ``emulation`` overrides ``EmulationSettings`` fields of the CAPI emulation (VM sizes a
    simulated Azure has no capacity for, ``azure_unavailable_sizes``), over what the scenario
    sets. ``check`` checks ``sim.invariants`` on the cluster the run ends with (its
    ``violations``). A scenario with ``azure:`` enables ``capz`` (besides ``plugins``) over
    the simulated Azure of ``sim.azure``, unless ``plugin_objects`` is given.

    A scenario with ``infrastructure.aws`` runs against an emulated AWS (moto; see
    ``sim.scenario.aws``) with the ``generic_capi`` and ``capa`` plugins over it (unless
    ``plugin_objects`` says otherwise), stock CAPA and the kubeadm bootstrap step emulated, and
    reports the fleet and write figures in ``native_launch``.

    ``seed`` seeds the API server's generated names and uids, the scheduler stand-in's choice
    between equally scored nodes (and ``random``), so two runs of a scenario match.
    ``on_cluster`` is handed the in-memory API server before anything runs (``simulate
    --serve`` puts its HTTP front on it); ``on_operator`` the wired ``Operator`` (its clock,
    plugins, controllers and caches) before the first step, for a harness that inspects the
    controller during the run (``sim.soak``). ``on_sample`` is called with each
    sample as it is taken; ``pace`` with 0 once setup is done (the CRDs, plugins and first
    settle, so a pacer can start its wall clock there), then with the virtual seconds elapsed,
    at most ``pace_step`` apart, after the clock has moved there (without it the clock jumps
    from event to event).
    """
    if until <= 0 or sample_every <= 0 or pace_step <= 0:
        raise ValueError("until, sample_every and pace_step must be positive")
    with ExitStack() as stack:
        random.seed(seed)
        aws = _start_aws(scenario, stack)
        wall_start = time.perf_counter()
        clock = FakeClock()
        server = InMemoryAPIServer(clock=clock, random_seed=seed)
        server.version_info = dict(SIMULATED_CONTROL_PLANE)  # the stand-in is v1.35's
        server.apply_manifests(generate_crds())
        server.register_cluster_api()
        if on_cluster is not None:
            on_cluster(server)
        load_objects(server, scenario, None if aws is None else aws.values)
        requests_before = server.requests.snapshot()
        # The controller's own requests, told apart from the emulated cluster's, for the writes
        # per launched node (``writes``).
        audit = AuditLog()
        client: KubeClient = AuditingClient(
            server if controller_client is None else controller_client(server), audit
        )
        if aws is not None:
            plugin_objects, emulation = _over_aws(aws, plugin_objects, emulation)
        with capture_errors() as records:
            process = start_controller(
                scenario,
                server,
                clock,
                client,
                seed=seed,
                plugins=plugins,
                plugin_objects=plugin_objects,
                emulation=emulation,
            )
            operator, loaded = process.operator, process.plugins
            reconcile_errors = ReconcileErrors()
            operator.manager.add_observer(reconcile_errors)
            launch_rounds = LaunchRounds(clock)
            launch_rounds.attach(operator.manager)
            repacking = RepackingRounds(operator.provisioning)
            operator.manager.add_observer(repacking)
            driver = operator.stepped()
            if on_operator is not None:
                on_operator(operator)
            observer = Observer(server, clock, loaded)
            interruptions = Interruptions(
                server,
                clock,
                None if aws is None else Queue(aws.send_spot_warning, aws.queue_depth),
            )
            events = _timeline(scenario, until, sample_every)
            driver.run_until_quiet()
            now = 0.0
            if pace is not None:
                pace(now)  # setup is done: a pacer's wall clock starts here
            for at, _, action in events:
                now = _advance(driver, now, at, pace, pace_step)
                if action is None:
                    interruptions.observe()
                    sample = observer.sample()
                    if on_sample is not None:
                        on_sample(sample)
                else:
                    _act(action, server, scenario, interruptions, clock.now())
                    driver.run_until_quiet()
            violations = (
                [str(v) for v in check_invariants(server, clock=clock, plugins=loaded)]
                if check
                else None
            )
        api_requests = _cluster_requests(server, requests_before, observer)
        watch_polls = api_requests.pop(WATCH_POLL, 0)
        final = observer.samples[-1]
        return ScenarioResult(
            scenario=scenario.name,
            pods_total=final.pods_bound + final.pods_pending,
            pods_bound=final.pods_bound,
            pods_pending=final.pods_pending,
            nodes=final.nodes,
            nodeclaims=final.nodeclaims,
            cost_per_hour=final.cost_per_hour,
            cost_per_hour_peak=max(s.cost_per_hour for s in observer.samples),
            pod_bound_seconds=_percentiles(list(observer.bound_seconds.values())),
            virtual_seconds=now,
            wall_seconds=time.perf_counter() - wall_start,
            errors=reconcile_errors.messages() + records.messages,
            conflicts=reconcile_errors.conflicts,
            samples=observer.samples,
            disruptions=observer.disruptions(),
            api_requests={verb: count for verb, count in api_requests.items() if count > 0},
            watch_polls=max(0, watch_polls),
            capacity=observer.capacity(),
            beyond_plan=observer.plans.result(),
            launch_rounds=launch_rounds.figures(),
            repacking=repacking.figures(),
            controller_writes=controller_writes(audit, launch_rounds.launched()),
            native_launch={} if aws is None else aws.figures(_writes(audit)),
            spot_interruption=interruptions.figures(
                observer.bound_seconds, list(server.list(PODS).items)
            ),
            violations=violations,
        )
