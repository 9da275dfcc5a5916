"""A day of churn: does the controller stay correct, flat in memory and flat in API load?

An autoprovisioner runs for months; a cache keyed by pod names that is never pruned, or a
request per NodeClaim ever seen, only shows after hours of scale-ups, scale-downs and node
replacements. ``soak`` runs a scenario (``soak-day``: Deployments scaling every few minutes,
drift and expiration rolling through) on the real controllers for a number of virtual hours
and, at every hour mark:

- checks the invariants (``sim.invariants``), all of them: the scenario leaves the last part of
  every hour quiet (a timeline ``window``), so the cluster has settled by the mark (a scenario
  that churns through the mark is checked with ``settled=False``: what holds at any instant);
- counts the requests the controller made during the hour (on its own client, so the emulated
  kubelet, scheduler and Cluster API are left out; the stepped informers' zero-timeout watch
  drains apart, since a real informer holds one watch open instead);
- measures memory: the process's RSS, and, because the controller shares the process with the
  simulated cluster, what the ``Operator`` retains (its controllers, informers' caches, plugin
  state; ``sim.footprint``) apart from what the in-memory API server retains, with the
  controller's containers by place, so a growth names its structure.

Time is virtual (a ``FakeClock``); the hours are the scenario's, not the wall's.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Final

from karpenter_capi.core.clock import parse_timestamp
from karpenter_capi.core.kube.client import KubeClient
from karpenter_capi.core.kube.errors import NotFound
from karpenter_capi.core.kube.resources import EVENTS, NODES, PODS, Resource
from karpenter_capi.core.operator import Operator
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.apiserver.audit import AuditingClient, AuditLog, AuditRecord
from karpenter_capi.sim.footprint import Footprint, footprint, module_roots, process_memory
from karpenter_capi.sim.scenario.result import Sample
from karpenter_capi.sim.scenario.runner import run
from karpenter_capi.sim.scenario.schema import Scenario

HOUR: Final = 3600.0
POLL: Final = "watch/poll"


class RequestTally(AuditLog):
    """Counts requests by ``verb`` or ``verb/subresource`` (``create/eviction``), in constant
    memory: an ``AuditLog`` keeps one entry per distinct object name, which a day of churn
    would grow without bound and blur the measurement."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: dict[str, int] = {}

    def record(self, entry: AuditRecord) -> None:
        key = f"{entry.verb}/{entry.subresource}" if entry.subresource else entry.verb
        self.counts[key] = self.counts.get(key, 0) + 1

    def poll(self) -> None:
        self.counts[POLL] = self.counts.get(POLL, 0) + 1

    def snapshot(self) -> dict[str, int]:
        return dict(self.counts)


class _TallyingClient(AuditingClient):
    """The controller's client, counted; a zero-timeout watch (a stepped informer's drain) is
    a ``watch/poll``, not a ``watch``."""

    def __init__(self, inner: KubeClient, tally: RequestTally) -> None:
        super().__init__(inner, tally)
        self.tally = tally

    def _record_watch(
        self, resource: Resource, namespace: str | None, timeout_seconds: float | None
    ) -> None:
        if timeout_seconds == 0:
            self.tally.poll()
        else:
            super()._record_watch(resource, namespace, timeout_seconds)


@dataclass
class Checkpoint:
    """The cluster and the controller at one hour mark (``hour``), and the hour before it."""

    hour: float
    wall_seconds: float
    """Wall time the hour took to simulate."""
    requests: dict[str, int]
    """The controller's requests during the hour, by verb (``watch/poll`` apart)."""
    violations: list[str]
    pods_bound: int
    pods_pending: int
    nodes: int
    memory: dict[str, Any] = field(default_factory=dict)
    """``rss_bytes`` (and how it was read), ``python_blocks``, ``gc_objects``, and with the
    footprint measured: ``controller_bytes``, ``controller_objects``, ``apiserver_bytes``."""

    @property
    def requests_total(self) -> int:
        return sum(count for verb, count in self.requests.items() if verb != POLL)


@dataclass
class SoakReport:
    scenario: str
    hours: int
    seed: int
    settled: bool
    """Whether the hourly checks included the invariants that hold once things settle."""
    checkpoints: list[Checkpoint]
    controller_growth: list[tuple[str, int, int]]
    """Controller containers holding more items at the last hour than at hour 1:
    ``(place, items at hour 1, items at the last hour)``, largest growth first."""
    disruptions: dict[str, int]
    errors: list[str]
    wall_seconds: float

    def checkpoint(self, hour: int) -> Checkpoint:
        return next(c for c in self.checkpoints if c.hour == hour)

    def violations(self) -> list[str]:
        return [v for c in self.checkpoints for v in c.violations]

    def growth_percent(self, key: str, first: int = 1) -> float | None:
        """How much ``memory[key]`` grew from hour ``first`` to the last hour, in percent."""
        start = self.checkpoint(first).memory.get(key)
        end = self.checkpoints[-1].memory.get(key)
        if not start or end is None:
            return None
        return round(100.0 * (float(end) - float(start)) / float(start), 2)

    def requests_per_hour(self) -> list[int]:
        return [c.requests_total for c in self.checkpoints]

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["requests_per_hour"] = self.requests_per_hour()
        data["rss_growth_percent"] = self.growth_percent("rss_bytes")
        data["controller_growth_percent"] = self.growth_percent("controller_bytes")
        data["violations_total"] = len(self.violations())
        return data


def _check(server: InMemoryAPIServer, operator: Operator, *, settled: bool) -> list[str]:
    from karpenter_capi.sim.invariants import check_invariants

    violations = check_invariants(
        server, clock=operator.clock, plugins=operator.context.plugins, settled=settled
    )
    return [str(violation) for violation in violations]


EVENT_TTL: Final = HOUR
"""kube-apiserver's ``--event-ttl`` default: an Event goes an hour after its last update."""


def expire_events(server: InMemoryAPIServer, now: datetime) -> int:
    """Delete the Events last updated more than ``EVENT_TTL`` before ``now``, as
    kube-apiserver's TTL does (the in-memory server keeps them for good, which in a day of
    churn is the simulator's memory growing, not the controller's); how many went."""
    gone = 0
    for event in server.list(EVENTS).items:
        stamp = event.get("lastTimestamp") or event["metadata"].get("creationTimestamp")
        if stamp and (now - parse_timestamp(str(stamp))).total_seconds() > EVENT_TTL:
            with suppress(NotFound):
                server.delete(EVENTS, event["metadata"]["name"], event["metadata"]["namespace"])
                gone += 1
    return gone


def disrupted(operator: Operator) -> dict[str, int]:
    """NodeClaims disrupted so far by reason, from the controller's own
    ``karpenter_nodeclaims_disrupted_total`` (what its dashboard would show; the scenario
    observer's count follows a watch that a short watch history can cut)."""
    counts: dict[str, int] = {}
    for family in operator.metrics.registry.collect():
        for sample in family.samples:
            if sample.name == "karpenter_nodeclaims_disrupted_total":
                reason = sample.labels.get("reason", "")
                counts[reason] = counts.get(reason, 0) + int(sample.value)
    return dict(sorted(counts.items()))


def _live(server: InMemoryAPIServer, resource: Resource) -> list[dict[str, Any]]:
    return [o for o in server.list(resource).items if not o["metadata"].get("deletionTimestamp")]


def _keep_history(
    server: InMemoryAPIServer, watch_history: int | None, compaction_interval: float | None
) -> None:
    """Bound the server's watch history as asked (see ``soak``)."""
    if watch_history is not None:
        server.set_watch_history(watch_history)
    if compaction_interval is not None:
        server.set_compaction_interval(compaction_interval)


def _footprints(
    operator: Operator, server: InMemoryAPIServer, footprints: list[Footprint]
) -> dict[str, int]:
    """What the controller and the API server hold now; the controller's kept in
    ``footprints`` (the report's growth figures)."""
    controller = footprint([("Operator", operator), *module_roots()])
    footprints.append(controller)
    apiserver = footprint([("InMemoryAPIServer", server)], stop=lambda _: False)
    return {
        "controller_bytes": controller.bytes,
        "controller_objects": controller.objects,
        "apiserver_bytes": apiserver.bytes,
    }


def soak(
    scenario: Scenario,
    *,
    hours: int,
    seed: int = 0,
    settled: bool = True,
    measure_footprint: bool = True,
    check: bool = True,
    watch_history: int | None = None,
    compaction_interval: float | None = None,
    event_ttl: bool = True,
    on_checkpoint: Callable[[Checkpoint], None] | None = None,
) -> SoakReport:
    """Run ``scenario`` for ``hours`` virtual hours with a ``Checkpoint`` at every hour mark
    (see the module docstring); ``settled=False`` for a scenario not quiet before the marks.

    ``watch_history`` sets the in-memory API server's retained watch events per resource
    (kube-apiserver keeps minutes of them; the simulator's default keeps 50,000, which a day of
    churn fills slowly, so the simulator's own memory climbs for hours); ``compaction_interval``
    compacts that history every so many virtual seconds, as kube-apiserver has etcd do every
    5 minutes, so it stays minutes long from the first hour on. ``check=False`` skips
    the invariants; ``measure_footprint=False`` skips the reachability walks (seconds each on a
    large cluster), leaving RSS and Python's own counts. ``event_ttl`` deletes, at every mark,
    the Events an hour old (``expire_events``), as kube-apiserver would have."""
    if hours < 1:
        raise ValueError("a soak runs at least one hour")
    wall_start = time.perf_counter()
    tally = RequestTally()
    wired: dict[str, Any] = {}
    checkpoints: list[Checkpoint] = []
    footprints: list[Footprint] = []
    last_requests = tally.snapshot()
    last_wall = time.perf_counter()

    def on_cluster(server: InMemoryAPIServer) -> None:
        wired["server"] = server
        _keep_history(server, watch_history, compaction_interval)

    def on_operator(operator: Operator) -> None:
        nonlocal last_wall
        wired["operator"] = operator
        last_wall = time.perf_counter()

    def on_sample(sample: Sample) -> None:
        nonlocal last_requests, last_wall
        server: InMemoryAPIServer = wired["server"]
        operator: Operator = wired["operator"]
        if sample.at == 0 or sample.at % HOUR:
            return
        # Before the check: what the check asks of the plugins is not the controller's load.
        now = tally.snapshot()
        if event_ttl:
            expire_events(server, operator.clock.now())
        violations = _check(server, operator, settled=settled) if check else []
        requests = {k: v - last_requests.get(k, 0) for k, v in sorted(now.items())}
        wall = time.perf_counter() - last_wall
        gc.collect()
        memory = process_memory()
        if measure_footprint:
            memory |= _footprints(operator, server, footprints)
        pods = _live(server, PODS)
        bound = sum(1 for p in pods if (p.get("spec") or {}).get("nodeName"))
        checkpoint = Checkpoint(
            hour=sample.at / HOUR,
            wall_seconds=round(wall, 2),
            requests={k: v for k, v in requests.items() if v},
            violations=violations,
            pods_bound=bound,
            pods_pending=len(pods) - bound,
            nodes=len(_live(server, NODES)),
            memory=memory,
        )
        checkpoints.append(checkpoint)
        if on_checkpoint is not None:
            on_checkpoint(checkpoint)
        last_requests = tally.snapshot()
        last_wall = time.perf_counter()

    result = run(
        scenario,
        until=hours * HOUR,
        seed=seed,
        # Hourly samples: each resolves the inventory once through the controller's plugins
        # (and client), the same few requests every hour, which leaves the hours comparable.
        sample_every=HOUR,
        on_cluster=on_cluster,
        on_operator=on_operator,
        on_sample=on_sample,
        controller_client=lambda server: _TallyingClient(server, tally),
    )
    growth = footprints[0].grown(footprints[-1]) if len(footprints) > 1 else []
    return SoakReport(
        scenario=scenario.name,
        hours=hours,
        seed=seed,
        settled=settled,
        checkpoints=checkpoints,
        controller_growth=growth,
        disruptions=disrupted(wired["operator"]),
        errors=result.errors,
        wall_seconds=round(time.perf_counter() - wall_start, 1),
    )
