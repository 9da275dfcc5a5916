"""Run a scenario against the real controllers and report outcomes as numbers.

``sim.demo`` shows what happened; a benchmark or a regression check needs figures to compare
between runs: how many pods ended bound, how fast they got bound, what the capacity cost at
its peak and at the end, and whether any controller failed. The wiring is the demo's (the
real ``Operator`` with the ``generic_capi`` plugin, the emulated Cluster API with nodes, the
workload controllers and the scheduler stand-in, all stepped on a ``FakeClock``), so the run is
deterministic; the timeline's actions are applied at their virtual times and the cluster is
sampled every ``sample_every`` virtual seconds.

Cost comes from the price annotation of the scalable resource each NodeClaim waits on or was
bound through (the NodeClaim's ``karpenter.cluster.x-k8s.io/scalable-resource`` annotation,
written by the plugin at launch), which is the price the solver chose by. Errors are the
``controller_runtime_reconcile_errors_total`` counts and ERROR log records.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from typing import Any

from karpenter_capi.core.api.crds import generate_crds
from karpenter_capi.core.clock import FakeClock, parse_timestamp
from karpenter_capi.core.kube.errors import Conflict, NotFound
from karpenter_capi.core.kube.resources import (
    DEPLOYMENTS,
    MACHINE_DEPLOYMENTS,
    MACHINE_POOLS,
    NODECLAIMS,
    NODES,
    PODS,
)
from karpenter_capi.core.operator import Operator, OperatorOptions
from karpenter_capi.core.plugins import PluginEnvironment, Plugins
from karpenter_capi.plugins.generic_capi.binding import ANNOTATION_SCALABLE_RESOURCE
from karpenter_capi.plugins.generic_capi.shape import PRICE_ANNOTATION
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.capi import add_capi_emulation
from karpenter_capi.sim.scenario.catalog import generate_catalog
from karpenter_capi.sim.scenario.schema import Scenario, TimelineAction, Workload
from karpenter_capi.sim.scheduler import SimScheduler
from karpenter_capi.sim.workloads import add_workload_emulation

DEFAULT_PLUGINS = ("generic_capi",)
DEFAULT_SAMPLE_EVERY = 15.0


@dataclass(frozen=True)
class Sample:
    """The cluster at one virtual time."""

    at: float
    pods_pending: int
    pods_bound: int
    nodes: int
    nodeclaims: int
    cost_per_hour: float


@dataclass
class ScenarioResult:
    scenario: str
    pods_total: int
    pods_bound: int
    pods_pending: int
    nodes: int
    nodeclaims: int
    cost_per_hour: float
    cost_per_hour_peak: float
    pod_bound_seconds: dict[str, float]
    virtual_seconds: float
    wall_seconds: float
    errors: list[str] = field(default_factory=list)
    conflicts: int = 0
    samples: list[Sample] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The result with the field names ``simulate --json`` documents (snake_case)."""
        return {
            "scenario": self.scenario,
            "pods_total": self.pods_total,
            "pods_bound": self.pods_bound,
            "pods_pending": self.pods_pending,
            "nodes": self.nodes,
            "nodeclaims": self.nodeclaims,
            "cost_per_hour": self.cost_per_hour,
            "cost_per_hour_peak": self.cost_per_hour_peak,
            "pod_bound_seconds": dict(self.pod_bound_seconds),
            "virtual_seconds": self.virtual_seconds,
            "wall_seconds": round(self.wall_seconds, 3),
            "errors": list(self.errors),
            "conflicts": self.conflicts,
            "samples": [asdict(sample) for sample in self.samples],
        }

    def summary(self) -> str:
        """A few readable lines: what ``simulate SCENARIO`` prints without ``--json``."""
        bound = self.pod_bound_seconds
        lines = [
            f"scenario {self.scenario}: {self.virtual_seconds:g} s of virtual time in "
            f"{self.wall_seconds:.1f} s",
            f"pods: {self.pods_bound} bound, {self.pods_pending} pending of {self.pods_total}",
            f"nodes: {self.nodes}; NodeClaims: {self.nodeclaims}",
            f"cost: ${self.cost_per_hour:.4f}/h now, ${self.cost_per_hour_peak:.4f}/h at peak",
            "pod creation to bound: " + ", ".join(f"{k} {v:g} s" for k, v in bound.items()),
        ]
        if self.errors:
            lines.append(f"{len(self.errors)} errors:")
            lines.extend(f"  {error}" for error in self.errors[:20])
        else:
            lines.append("no errors")
        return "\n".join(lines) + "\n"

    def to_json_text(self) -> str:
        return json.dumps(self.to_json(), indent=2, sort_keys=True)


class _ErrorRecords(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(f"{record.name}: {record.getMessage()}")


@contextmanager
def _capture_errors() -> Iterator[_ErrorRecords]:
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


def _apply(server: InMemoryAPIServer, scenario: Scenario, action: TimelineAction) -> None:
    workload = next(w for w in scenario.workloads if w.name == action.target)
    if action.action == "deploy":
        server.apply_manifests([deployment(workload, action.replicas)])
    elif action.action == "scale":
        server.patch(
            DEPLOYMENTS,
            workload.name,
            {"spec": {"replicas": action.replicas}},
            workload.namespace,
        )
    else:
        with suppress(NotFound):
            server.delete(DEPLOYMENTS, workload.name, workload.namespace)


def _prices(server: InMemoryAPIServer) -> dict[str, float]:
    """``Kind/namespace/name`` of each scalable resource to its annotated hourly price."""
    prices: dict[str, float] = {}
    for resource in (MACHINE_DEPLOYMENTS, MACHINE_POOLS):
        for obj in server.list(resource).items:
            meta = obj["metadata"]
            value = (meta.get("annotations") or {}).get(PRICE_ANNOTATION)
            if value is None:
                continue
            try:
                prices[f"{resource.kind}/{meta['namespace']}/{meta['name']}"] = float(value)
            except ValueError:
                continue
    return prices


def _bound_at(pod: Mapping[str, Any]) -> float | None:
    """Seconds from creation to ``PodScheduled=True``, or ``None`` while unbound."""
    if not (pod.get("spec") or {}).get("nodeName"):
        return None
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "True":
            created = pod["metadata"].get("creationTimestamp")
            moved = condition.get("lastTransitionTime")
            if created and moved:
                delta = parse_timestamp(moved) - parse_timestamp(created)
                return max(0.0, delta.total_seconds())
    return None


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


class _Observer:
    """Samples the cluster and remembers each pod's time to bind (pods may be deleted later)."""

    def __init__(self, server: InMemoryAPIServer, clock: FakeClock) -> None:
        self.server = server
        self.clock = clock
        self.start = clock.monotonic()
        self.samples: list[Sample] = []
        self.bound_seconds: dict[str, float] = {}

    def sample(self) -> Sample:
        pods = [
            p
            for p in self.server.list(PODS).items
            if not p["metadata"].get("deletionTimestamp")
            and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        ]
        bound = 0
        for pod in pods:
            seconds = _bound_at(pod)
            if seconds is not None:
                bound += 1
                self.bound_seconds.setdefault(str(pod["metadata"]["uid"]), seconds)
        prices = _prices(self.server)
        claims = [
            c
            for c in self.server.list(NODECLAIMS).items
            if not c["metadata"].get("deletionTimestamp")
        ]
        cost = sum(
            prices.get(
                (c["metadata"].get("annotations") or {}).get(ANNOTATION_SCALABLE_RESOURCE, ""), 0.0
            )
            for c in claims
        )
        sample = Sample(
            at=round(self.clock.monotonic() - self.start, 3),
            pods_pending=len(pods) - bound,
            pods_bound=bound,
            nodes=len(self.server.list(NODES).items),
            nodeclaims=len(claims),
            cost_per_hour=round(cost, 6),
        )
        self.samples.append(sample)
        return sample


class _ReconcileErrors:
    """Counts failed reconciles per controller and error, as the runtime reports them.

    Wraps the Operator's ``Metrics.on_reconcile`` (the runtime's observer), so the
    ``controller_runtime_reconcile_errors_total`` series stays exact while the report can tell
    optimistic-concurrency conflicts (retried at once, normal with several writers) from
    real failures.
    """

    def __init__(self, operator: Operator) -> None:
        self.conflicts = 0
        self.failures: dict[tuple[str, str], int] = {}
        metrics = operator.metrics
        forward = metrics.on_reconcile

        def observe(controller: str, seconds: float, error: BaseException | bool | None) -> None:
            if isinstance(error, Conflict):
                self.conflicts += 1
            elif error is not None and error is not False:
                what = "failed" if error is True else f"{type(error).__name__}: {error}"
                key = (controller, what)
                self.failures[key] = self.failures.get(key, 0) + 1
            forward(controller, seconds, error)

        metrics.on_reconcile = observe  # type: ignore[method-assign]

    def messages(self) -> list[str]:
        return [
            f"controller {controller}: {count}x {what}"
            for (controller, what), count in sorted(self.failures.items())
        ]


def run(
    scenario: Scenario,
    *,
    until: float,
    seed: int = 0,
    sample_every: float = DEFAULT_SAMPLE_EVERY,
    plugins: tuple[str, ...] = DEFAULT_PLUGINS,
    on_cluster: Callable[[InMemoryAPIServer], None] | None = None,
) -> ScenarioResult:
    """Run ``scenario`` for ``until`` virtual seconds and return its outcome.

    ``seed`` seeds the API server's generated names and uids (and ``random``), so two runs of
    a scenario match. ``on_cluster`` is handed the in-memory API server before anything runs
    (``simulate --serve`` puts its HTTP front on it).
    """
    if until <= 0 or sample_every <= 0:
        raise ValueError("until and sample_every must be positive")
    random.seed(seed)
    wall_start = time.perf_counter()
    clock = FakeClock()
    server = InMemoryAPIServer(clock=clock, random_seed=seed)
    server.apply_manifests(generate_crds())
    server.register_cluster_api()
    if on_cluster is not None:
        on_cluster(server)
    infrastructure = scenario.infrastructure
    if infrastructure.catalog is not None:
        server.apply_manifests(generate_catalog(infrastructure.catalog))
    else:
        server.apply_manifests([dict(obj) for obj in infrastructure.manifests or []])
    deferred = scenario.deferred()
    server.apply_manifests([deployment(w) for w in scenario.workloads if w.name not in deferred])
    with _capture_errors() as records:
        environment = PluginEnvironment(
            workload=server,
            management=server,
            clock=clock,
            logger=logging.getLogger("karpenter_capi.plugins"),
        )
        operator = Operator(
            server,
            server,
            Plugins.load(list(plugins), environment),
            clock,
            OperatorOptions(leader_elect=False, metrics_port=None),
        )
        reconcile_errors = _ReconcileErrors(operator)
        add_capi_emulation(operator.manager, nodes=True)
        add_workload_emulation(operator.manager)
        operator.manager.add(SimScheduler(server, operator.manager, clock))
        driver = operator.stepped()
        observer = _Observer(server, clock)
        actions = sorted((a for a in scenario.timeline if a.at <= until), key=lambda a: a.at)
        samples = [0.0]
        while samples[-1] + sample_every < until:
            samples.append(samples[-1] + sample_every)
        samples.append(until)
        # (time, 0 = action first, 1 = sample) so an action at a sample time is seen by it.
        events: list[tuple[float, int, TimelineAction | None]] = sorted(
            [(a.at, 0, a) for a in actions] + [(t, 1, None) for t in samples],
            key=lambda e: (e[0], e[1]),
        )
        driver.run_until_quiet()
        now = 0.0
        for at, _, action in events:
            if at > now:
                driver.advance(at - now)
                now = at
            if action is not None:
                _apply(server, scenario, action)
                driver.run_until_quiet()
            else:
                observer.sample()
    final = observer.samples[-1]
    bound = list(observer.bound_seconds.values())
    pod_bound_seconds = (
        {
            "p50": round(_percentile(bound, 0.5), 3),
            "p95": round(_percentile(bound, 0.95), 3),
            "max": round(max(bound), 3),
        }
        if bound
        else {}
    )
    return ScenarioResult(
        scenario=scenario.name,
        pods_total=final.pods_bound + final.pods_pending,
        pods_bound=final.pods_bound,
        pods_pending=final.pods_pending,
        nodes=final.nodes,
        nodeclaims=final.nodeclaims,
        cost_per_hour=final.cost_per_hour,
        cost_per_hour_peak=max(s.cost_per_hour for s in observer.samples),
        pod_bound_seconds=pod_bound_seconds,
        virtual_seconds=now,
        wall_seconds=time.perf_counter() - wall_start,
        errors=reconcile_errors.messages() + records.messages,
        conflicts=reconcile_errors.conflicts,
        samples=observer.samples,
    )
