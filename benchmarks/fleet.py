"""Fleet mode at scale: many workload clusters, one controller, on the real clock.

Why: issue 28's targets. One fleet-mode controller serving ``--clusters`` workload clusters of
``--nodes`` nodes and ``--pods`` pods each, on this machine, must hold (a) at most 1.5 GB of
RSS, 15 MB per cluster; (b) each cluster's scale-up decision latency p99 within twice a lone
cluster's; (c) the others' p99 within 10% when one cluster storms 429s; (d) with 3 replicas
sharing the clusters through Leases and one killed, every cluster served again within the
lease duration + 5 s, with no double launch.

Two modes. ``--mode http`` (the default, ``fleet_http.py``): the controller is what production
runs, ``karpenter-capi run --fleet`` in a process of its own speaking HTTP with the official
client to the management cluster and to each workload cluster (through its kubeconfig Secret);
its CPU, RSS and threads are its own, from ``/proc``, and it times each decision's stages
itself (``controller_stages.py``). ``--mode inprocess``: the real ``Fleet`` on threads in this
process, the emulation in each member's driver; ``_Probe`` times the stages from outside
(batch window, round) on the emulation's GIL, it alone tells a round that decided on a stale
cache, and its RSS counts the servers too (an upper bound).

Both over ``sim.scenario.fleet.FleetWorld``: the management cluster and every workload cluster
are in-memory API servers in this process; what is emulated is Cluster API (Machines and Nodes
from MachineDeployments, ``provision_delay`` 2 s, ``boot_delay`` 1 s), the ReplicaSets making
pods and the scheduler binding them. The clusters are alike: a catalog of 8-CPU
MachineDeployments and one Deployment whose pods fill ``--nodes`` nodes, scaled up in
``--waves`` waves.

- Decision latency: per cluster and wave, from the wave's first pod created to the first
  NodeClaim created after it (wall clock, read on the servers; the batcher's idle time
  included, as a user sees it). A wave reaches the clusters one after another over
  ``--spread`` seconds (tenants deploy independently; 0: every cluster at the same instant).
- Storm: the same fleet again, one more cluster whose every controller request gets 429 with
  ``Retry-After: 1``. Control (``--phases ...,control``): the same shape, the extra cluster
  getting every wave first too, but answering; storm over control is the 429s' own effect,
  without the extra cluster's emulation and controllers.
- Replicas: 3 fleets with shards on, one killed after the first wave (http: SIGKILL); the time
  until its clusters' Leases are all held by the others, then the next waves; double
  launches (http): NodeClaims created for a cluster by a replica not holding its shard Lease
  when the create arrived (``fleet_launches.py``); in process: NodeClaims beyond the lone
  run's count.

Figures, not assertions. ``--json`` prints them as JSON.

With ``--emulators K`` (http mode; ``auto``: one per 10 clusters, at most 4) the workload
clusters' servers, fronts and emulation run in K forked processes (``fleet_emulators.py``), so
the benchmark's own process holds only the management cluster and the emulation no longer
shares one GIL with every front. ``--emulator-nice N`` runs those processes at niceness N: each
workload cluster's control plane stands for machines of its own, and at 100 clusters their
emulation asks more CPU of the two cores than the controller does; niced, it takes what the
controller leaves (it still makes each wave's pods and marks them, so its delays still count).
``--emulator-batch`` runs them under ``SCHED_BATCH`` instead: the same share of the CPU, but
none of their woken threads preempts a running thread (a write no longer hands the core to each
watch reader it wakes, nor an emulator's wake-up the controller's core).
``--emulator-switch-interval S`` (default 0.02; 0: the interpreter's 5 ms) sets the emulator
processes' interpreter switch interval (``sys.setswitchinterval``): how long one of their
threads keeps the interpreter while another asks for it. Each process stands for many
clusters' control planes, which would each have machines of their own; at 5 ms one cluster's
burst of creates and marks is cut into turns with every other cluster's threads, a hand-over
each.
``--emulator-gc-policy NAME`` (default ``unwalked``, as ``run``'s ``--gc-policy``) installs the
controller's collector policy in each emulator process; ``off`` keeps the young threshold of
20,000 they used before, whose middle collections paused a process (25 clusters) for 0.4-0.6 s.

``--controller-arg FLAG`` (http mode, repeatable, as in ``realapi.py``) adds a flag to every
controller's command line: ``--controller-arg=--batch-complete-idle-duration=-1`` runs with
Karpenter's own window (a full idle second after the last new pod) instead of ``run``'s
default, which closes it 0.2 s after the burst once each pod's ReplicaSet has all its replicas.

    .venv/bin/python benchmarks/fleet.py [--mode http|inprocess] [--clusters 20] [--nodes 20]
        [--pods 200] [--waves 2] [--spread 10] [--phases lone,fleet,control,storm,replicas]
        [--emulators 0|K|auto] [--emulator-nice N] [--emulator-batch]
        [--emulator-switch-interval SECONDS] [--emulator-gc-policy NAME]
        [--controller-arg=FLAG ...] [--json]
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import itertools
import json
import logging
import os
import statistics
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from karpenter_capi.core.clock import SystemClock
from karpenter_capi.core.fleet import Fleet, FleetOptions
from karpenter_capi.core.kube.resources import (
    DEPLOYMENTS,
    NODECLAIMS,
    PODS,
    REPLICASETS,
    Resource,
)
from karpenter_capi.core.operator import OperatorOptions
from karpenter_capi.core.runtime.collector import POLICIES
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.apiserver.faulty_client import throttled
from karpenter_capi.sim.footprint import process_memory
from karpenter_capi.sim.scenario.fleet import FleetWorld
from karpenter_capi.sim.scenario.observer import percentile
from karpenter_capi.sim.scenario.schema import Scenario, parse_scenario

NODE_CPU = 8
EMULATION = {"provision_delay": 2.0, "boot_delay": 1.0, "delete_delay": 1.0}


class _TimedServer(InMemoryAPIServer):
    """Remembers when each pod and NodeClaim was created (wall clock, monotonic), and, for each
    NodeClaim, how many NodeClaims made before the round creating it began its controller's
    cache did not show yet (a round deciding on a stale cache)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pods: list[float] = []
        self.claims: list[float] = []
        self.unschedulable: list[float] = []
        """When the kube-scheduler stand-in marked a pod ``Unschedulable`` (provisionable)."""
        self.unseen_at_create: list[int] = []
        self.created_at: dict[str, float] = {}
        self.cache_names: Callable[[], set[str]] | None = None
        """The NodeClaim names the cluster's controller cache shows (set once it is served)."""
        self.round_began: Callable[[], float] = lambda: 0.0
        self.deleted_by: dict[str, int] = {}
        """Who asked for each NodeClaim deletion: the controller package that called."""

    def patch(self, resource: Resource, name: str, body: Any, *a: Any, **kw: Any) -> Any:
        patched = super().patch(resource, name, body, *a, **kw)
        if resource.plural == PODS.plural and kw.get("subresource") == "status":
            conditions = ((body or {}).get("status") or {}).get("conditions") or []
            if any(c.get("reason") == "Unschedulable" for c in conditions):
                self.unschedulable.append(time.monotonic())
        return patched

    def delete_with_result(self, resource: Resource, name: str, *a: Any, **kw: Any) -> Any:
        if resource.plural == NODECLAIMS.plural and resource.group == NODECLAIMS.group:
            caller = "other"
            for frame in reversed(traceback.extract_stack()):
                part = frame.filename.rpartition("/karpenter_capi/core/")[2]
                if part and frame.filename != part and not part.startswith(("kube/", "fleet/")):
                    caller = part.split("/")[0]
                    break
            self.deleted_by[caller] = self.deleted_by.get(caller, 0) + 1
        return super().delete_with_result(resource, name, *a, **kw)

    def create(self, resource: Resource, obj: Any, namespace: str | None = None, **kw: Any) -> Any:
        is_claim = resource.plural == NODECLAIMS.plural and resource.group == NODECLAIMS.group
        unseen = 0
        if is_claim and self.cache_names is not None:
            began = self.round_began()
            before = {name for name, at in self.created_at.items() if at < began}
            existing = {c["metadata"]["name"] for c in self.list(NODECLAIMS).items}
            unseen = len((existing & before) - self.cache_names())
        created = super().create(resource, obj, namespace, **kw)
        if resource.plural == PODS.plural and resource.group == PODS.group:
            self.pods.append(time.monotonic())
        elif is_claim:
            self.claims.append(time.monotonic())
            self.unseen_at_create.append(unseen)
            self.created_at[created["metadata"]["name"]] = self.claims[-1]
        return created


class _Probe:
    """Times one served cluster's provisioning from outside its logic: each look of the periodic
    controller (start, end, the delay it asked for) and each round it ran (start, end, the
    thread's CPU seconds). Installed on the member's controller objects, nothing changed."""

    def __init__(self, operator: Any) -> None:
        self.looks: list[tuple[float, float, float]] = []
        self.rounds: list[tuple[float, float, float]] = []
        self.round_began = 0.0
        controller = operator.provisioning
        provisioner = controller._provisioner
        run_once, reconcile = controller.run_once, provisioner.reconcile

        self.look_cpu = 0.0

        def timed_look() -> Any:
            began, cpu = time.monotonic(), time.thread_time()
            result = run_once()
            self.looks.append((began, time.monotonic(), result.requeue_after or 0.0))
            self.look_cpu += time.thread_time() - cpu
            return result

        def timed_round(*a: Any, **kw: Any) -> Any:
            began, cpu = time.monotonic(), time.thread_time()
            self.round_began = began
            try:
                return reconcile(*a, **kw)
            finally:
                self.rounds.append((began, time.monotonic(), time.thread_time() - cpu))

        controller.run_once = timed_look
        provisioner.reconcile = timed_round

    def stages(self, first_pod: float, last_pod: float, claim: float) -> dict[str, float]:
        """Where the time from a wave's first pod to its first NodeClaim went (seconds)."""
        looks = [look for look in self.looks if first_pod <= look[0] <= claim]
        rounds = [r for r in self.rounds if r[0] <= claim]
        first_look = looks[0][0] if looks else claim
        round_start, _, round_cpu = rounds[-1] if rounds else (claim, claim, 0.0)
        late = [max(0.0, nxt[0] - (prev[1] + prev[2])) for prev, nxt in itertools.pairwise(looks)]
        return {
            "burst": max(0.0, last_pod - first_pod),
            "to_first_look": first_look - first_pod,
            "window": max(0.0, round_start - first_look),
            "look_late_max": max(late, default=0.0),
            "round_wall": claim - round_start,
            "round_cpu": round_cpu,
        }


def _probe(world: FleetWorld, names: list[str], fleets: list[Fleet]) -> dict[str, _Probe]:
    """A ``_Probe`` on every served cluster, and each server told its controller's cache."""
    probes: dict[str, _Probe] = {}
    for name in names:
        cluster = world.cluster(name)
        member = next((f.members[cluster.key] for f in fleets if cluster.key in f.members), None)
        if member is None:
            continue
        operator = member.operator
        probes[name] = _Probe(operator)
        store = operator.context.caches.store(NODECLAIMS)
        server = cluster.server
        assert isinstance(server, _TimedServer)
        server.cache_names = lambda store=store: {c["metadata"]["name"] for c in store.list()}
        server.round_began = lambda probe=probes[name]: probe.round_began
    return probes


def _claims_report(world: FleetWorld, args: argparse.Namespace, names: list[str]) -> dict[str, Any]:
    """Every NodeClaim beyond what the pods need, classified: ``deleted`` (created, then gone:
    a replacement after a timeout, a consolidation), ``empty`` (no pod ever bound to its node at
    the end: launched for pods already provided for), ``underfilled`` (the rest: a packing
    difference, e.g. a batch cut in two); and ``created_on_stale_cache``: NodeClaims created
    while the controller's cache did not yet show one this cluster already had."""
    servers = _servers(world)
    per_node = max(1, args.pods // args.nodes)
    needed = -(-args.pods // per_node)
    totals = {"created": 0, "existing": 0, "needed": 0, "deleted": 0, "empty": 0}
    totals |= {"underfilled": 0, "created_on_stale_cache": 0, "pods_pending": 0}
    clusters_with_extra: dict[str, dict[str, int]] = {}
    deleted_by: dict[str, int] = {}
    for name in names:
        server = servers[name]
        claims = server.list(NODECLAIMS).items
        bound: dict[str, int] = {}
        for pod in server.list(PODS).items:
            node = (pod.get("spec") or {}).get("nodeName")
            if node:
                bound[node] = bound.get(node, 0) + 1
        empty = sum(1 for c in claims if not bound.get((c.get("status") or {}).get("nodeName", "")))
        created = len(server.claims)
        row = {
            "created": created,
            "existing": len(claims),
            "needed": needed,
            "deleted": created - len(claims),
            "empty": empty,
            "underfilled": max(0, len(claims) - empty - needed),
            "created_on_stale_cache": sum(1 for n in server.unseen_at_create if n),
            "pods_pending": _pending(server),
        }
        for caller, count in server.deleted_by.items():
            deleted_by[caller] = deleted_by.get(caller, 0) + count
        for field_name, value in row.items():
            totals[field_name] += value
        if created > needed or row["pods_pending"]:
            clusters_with_extra[name] = row
    return {
        **totals,
        "extra": totals["created"] - totals["needed"],
        "deleted_by": deleted_by,
        "clusters": clusters_with_extra,
    }


def _scenario(args: argparse.Namespace, clusters: int) -> Scenario:
    per_node = max(1, args.pods // args.nodes)
    cpu = int(NODE_CPU * 1000 * 0.95 / per_node)
    return parse_scenario(
        {
            "name": "fleet-benchmark",
            "description": "alike workload clusters, one Deployment each",
            "infrastructure": {
                "catalog": {
                    "cpus": [NODE_CPU],
                    "families": {"c": 2},
                    "zones": ["zone-a"],
                    "maxSize": args.nodes * 2 + 10,
                }
            },
            "fleet": {
                "groups": [
                    {
                        "name": "c",
                        "count": clusters,
                        "workloads": [
                            {"name": "app", "replicas": 0, "cpu": f"{cpu}m", "memory": "256Mi"}
                        ],
                    }
                ]
            },
        }
    )


def _world(args: argparse.Namespace, clusters: int) -> FleetWorld:
    world = FleetWorld(
        _scenario(args, clusters),
        clock=SystemClock(),
        server_class=_TimedServer,
        # What `run --fleet` sets by default (cli/run.py): pods' events open the batch window,
        # a complete ReplicaSet's burst closes it 0.2 s after its last pod, and a round's
        # NodeClaims are created 8 at a time.
        operator_options=OperatorOptions(
            leader_elect=False,
            metrics_port=None,
            workers=args.workers,
            wake_on_pods=True,
            batch_complete_idle=0.2,
            create_concurrency=8,
        ),
    )
    world.emulation = dict(EMULATION)
    return world


def _servers(world: FleetWorld) -> dict[str, _TimedServer]:
    """Each workload cluster's server (with ``--emulators``, a ``RemoteServer`` standing for
    it: the same records and calls, answered by its emulator process)."""
    return {cluster.name: cluster.server for cluster in world.clusters.values()}  # type: ignore[misc]


def _pending(server: InMemoryAPIServer) -> int:
    counted = getattr(server, "pending_count", None)
    if counted is not None:
        return int(counted())
    return len(server.list(PODS, field_selector="spec.nodeName=").items)


def _wait(done: Callable[[], bool], timeout: float, poll: float = 0.5) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if done():
            return True
        time.sleep(poll)
    return done()


def _settled(
    servers: dict[str, _TimedServer], clusters: list[str], count: int
) -> Callable[[], bool]:
    """Whether every cluster has its ``count`` pods and none pending. A poll asks only the
    clusters not yet seen settled (listing a hundred clusters' pods twice a second is the
    benchmark's own load, on the emulation's GIL), then, once all were, every one again."""
    seen: set[str] = set()

    def settled(name: str) -> bool:
        return len(servers[name].pods) >= count and _pending(servers[name]) == 0

    def all_settled() -> bool:
        for name in clusters:
            if name not in seen:
                if not settled(name):
                    return False
                seen.add(name)
        if all(settled(name) for name in clusters):
            return True
        seen.clear()
        return False

    return all_settled


def _unsettled(
    servers: dict[str, _TimedServer], clusters: list[str], count: int
) -> dict[str, dict[str, Any]]:
    """Where each cluster that did not settle stands: the pods made and pending, its
    Deployment's and ReplicaSets' replicas, its NodeClaims: which part of the emulation or the
    controller stopped short."""
    out: dict[str, dict[str, Any]] = {}
    for name in clusters:
        server = servers[name]
        pending = _pending(server)
        if len(server.pods) >= count and pending == 0:
            continue
        try:
            deployments = server.list(DEPLOYMENTS).items
            replicasets = server.list(REPLICASETS).items
            claims = len(server.list(NODECLAIMS).items)
        except Exception as exc:  # the figure must still come out: say what failed
            out[name] = {"error": repr(exc)}
            continue
        out[name] = {
            "pods_made": len(server.pods),
            "pending": pending,
            "deployments": [
                [d["metadata"]["name"], d["spec"].get("replicas"), d.get("status") or {}]
                for d in deployments
            ],
            "replicasets": [
                [
                    r["metadata"]["name"],
                    r["spec"].get("replicas"),
                    (r.get("status") or {}).get("replicas"),
                ]
                for r in replicasets
            ],
            "nodeclaims": claims,
        }
    return out


def _waves(
    world: FleetWorld,
    args: argparse.Namespace,
    clusters: list[str],
    timeout: float,
    waves: range | None = None,
    *,
    fleets: list[Fleet] | None = None,
    storming: list[str] | None = None,
    decisions: list[tuple[str, float, float]] | None = None,
) -> dict[str, Any]:
    """Scale every cluster's Deployment up in ``args.waves`` steps (``waves``: only those);
    each wave's decision latency per cluster. ``storming`` clusters get each wave first (so
    their controllers keep asking while the storm answers 429) and are not measured. Each
    decision is added to ``decisions`` as (cluster, first pod created, first NodeClaim
    created), for the http mode to split by the controller's recording."""
    servers = _servers(world)
    probes = _probe(world, clusters, fleets or [world.fleet])
    latencies: dict[str, list[float]] = {name: [] for name in clusters}
    shares: dict[str, list[float | None]] = {name: [] for name in clusters}
    stages: list[tuple[float, dict[str, float]]] = []
    # The emulation's share (its ReplicaSet making the wave's pods) and the controller's own
    # (from the wave's last pod to the first NodeClaim; negative: it decided before the end).
    bursts: list[float] = []
    after_last: list[float] = []
    after_marked: list[float] = []
    unsettled = 0
    stuck: list[dict[str, Any]] = []
    cpu_began = time.process_time()
    for wave in waves if waves is not None else range(1, args.waves + 1):
        replicas = args.pods * wave // args.waves
        marks = {
            name: (
                len(servers[name].pods),
                len(servers[name].claims),
                len(servers[name].unschedulable),
            )
            for name in clusters
        }
        # The clusters' waves arrive spread over ``--spread`` seconds, as a fleet's tenants
        # deploy independently (0: all at the same instant).
        for name in storming or []:
            _scale(world, name, wave, replicas)
        began = time.monotonic()
        for index, name in enumerate(clusters):
            delay = began + args.spread * index / len(clusters) - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            _scale(world, name, wave, replicas)

        settled = _wait(_settled(servers, clusters, replicas), timeout)
        unsettled += 0 if settled else 1
        if not settled:
            stuck.append({"wave": wave, "clusters": _unsettled(servers, clusters, replicas)})
        for name in clusters:
            pods_mark, claims_mark, marked_mark = marks[name]
            server = servers[name]
            if len(server.pods) > pods_mark and len(server.claims) > claims_mark:
                first_pod, claim = server.pods[pods_mark], server.claims[claims_mark]
                latencies[name].append(claim - first_pod)
                if decisions is not None:
                    decisions.append((name, first_pod, claim))
                last_pod = server.pods[-1]
                bursts.append(last_pod - first_pod)
                after_last.append(claim - last_pod)
                marked = [m for m in server.unschedulable[marked_mark:] if m <= claim]
                if marked:
                    after_marked.append(claim - marked[-1])
                    shares[name].append(round((claim - marked[-1]) * 1000, 1))
                else:
                    shares[name].append(None)
                if name in probes:
                    stages.append(
                        (claim - first_pod, probes[name].stages(first_pod, last_pod, claim))
                    )
    values = [v for name in clusters for v in latencies[name]]
    process_cpu = time.process_time() - cpu_began
    looks_cpu = sum(p.look_cpu for p in probes.values())
    rounds_cpu = sum(r[2] for p in probes.values() for r in p.rounds)
    return {
        "samples": len(values),
        "p50_ms": round(percentile(values, 0.5) * 1000, 1) if values else None,
        "p99_ms": round(percentile(values, 0.99) * 1000, 1) if values else None,
        "max_ms": round(max(values) * 1000, 1) if values else None,
        "waves_not_settled": unsettled,
        "not_settled": stuck,
        "burst_p99_ms": _ms(bursts, 0.99),
        "last_pod_to_claim_p50_ms": _ms(after_last, 0.5),
        "last_pod_to_claim_p99_ms": _ms(after_last, 0.99),
        # From the last pod the scheduler marked Unschedulable before the claim: the
        # controller's share alone (its batch window and round).
        "last_mark_to_claim_p50_ms": _ms(after_marked, 0.5),
        "last_mark_to_claim_p99_ms": _ms(after_marked, 0.99),
        "stages": _stage_figures(stages),
        # Every sample, per cluster and wave (ms): pooled over ``--repeat`` runs and paired
        # cluster by cluster between phases (``_pooled``, ``_paired``).
        "per_cluster_ms": {
            name: [round(v * 1000, 1) for v in latencies[name]] for name in clusters
        },
        "share_per_cluster_ms": shares,
        # The whole process (controllers, emulation, in-memory servers) over the waves, and
        # the provisioner's share: its looks, the rounds among them.
        "cpu_seconds": {
            "process": round(process_cpu, 1),
            "provisioner_looks": round(looks_cpu, 1),
            "provisioner_rounds": round(rounds_cpu, 1),
        },
    }


def _ms(values: list[float], q: float) -> float | None:
    return round(percentile(values, q) * 1000, 1) if values else None


def _scale(world: FleetWorld, name: str, wave: int, replicas: int) -> None:
    server = world.cluster(name).server
    if wave == 1:
        server.apply_manifests([_deployment(world, name, replicas)])
    else:
        server.patch(DEPLOYMENTS, "app", {"spec": {"replicas": replicas}}, "default")


def _stage_figures(stages: list[tuple[float, dict[str, float]]]) -> dict[str, Any]:
    """Each stage's p50, p90, p99 and max over the samples, and the stages of the slowest
    samples."""
    if not stages:
        return {}
    names = list(stages[0][1])
    out: dict[str, Any] = {
        name: {
            f"p{round(q * 100)}_ms": _ms([s[name] for _, s in stages], q) for q in (0.5, 0.9, 0.99)
        }
        | {"max_ms": round(max(s[name] for _, s in stages) * 1000, 1)}
        for name in names
    }
    slowest = sorted(stages, key=lambda item: -item[0])[:3]
    out["slowest"] = [
        {"total_ms": round(total * 1000, 1)} | {k: round(v * 1000, 1) for k, v in s.items()}
        for total, s in slowest
    ]
    return out


def _deployment(world: FleetWorld, name: str, replicas: int) -> dict[str, Any]:
    from karpenter_capi.sim.scenario.runner import deployment

    cluster = world.cluster(name)
    [workload] = cluster.group.workloads
    return deployment(workload, replicas)


def _rss_mib() -> float:
    gc.collect()
    return round(process_memory()["rss_bytes"] / 2**20, 1)


def _serve(fleet: Fleet) -> tuple[threading.Event, threading.Thread]:
    stop = threading.Event()
    thread = threading.Thread(target=fleet.run, args=(stop,), name="fleet", daemon=True)
    thread.start()
    return stop, thread


def _stop(stop: threading.Event, thread: threading.Thread) -> None:
    stop.set()
    thread.join(60)


def _run_phase(
    args: argparse.Namespace, clusters: int, storm: bool = False, control: bool = False
) -> dict[str, Any]:
    extra = storm or control
    world = _world(args, clusters + (1 if extra else 0))
    names = [c.name for c in world.clusters.values()]
    before = _rss_mib()
    stop, thread = _serve(world.fleet)
    started = time.monotonic()
    served = _wait(lambda: len(world.fleet.members) == len(world.clusters), 120, 0.1)
    serve_seconds = round(time.monotonic() - started, 2)
    if storm:
        # A served cluster starts storming: every request of its controllers gets a 429.
        world.cluster(names[-1]).storm = lambda: throttled(1)
    if extra:
        names = names[:-1]
    storming = [c.name for c in world.clusters.values()][len(names) :]
    figures = _waves(world, args, names, args.timeout, storming=storming)
    after = _rss_mib()
    threads = threading.active_count()
    claims = sum(len(s.list(NODECLAIMS).items) for s in _servers(world).values())
    report = _claims_report(world, args, names)
    _stop(stop, thread)
    return {
        "clusters": len(names),
        "storming": 1 if storm else 0,
        "control": 1 if control else 0,
        "all_served": served,
        "serve_all_seconds": serve_seconds,
        "latency": figures,
        "rss_before_mib": before,
        "rss_mib": after,
        "rss_added_mib": round(after - before, 1),
        "rss_added_per_cluster_mib": round((after - before) / len(world.clusters), 2),
        "threads": threads,
        "nodeclaims": claims,
        "nodeclaims_classified": report,
    }


def _run_replicas(args: argparse.Namespace, clusters: int, lone_claims: int) -> dict[str, Any]:
    if importlib.util.find_spec("karpenter_capi.core.fleet.sharding") is None:
        return {"skipped": "core.fleet.sharding is not in this tree (branch h-shard)"}
    world = _world(args, clusters)
    names = [c.name for c in world.clusters.values()]
    killed = threading.Event()
    options: dict[str, Any] = {
        "shards": True,
        "lease_namespace": "kube-system",
        "lease_duration": args.lease_duration,
        "renew_deadline": args.lease_duration * 2 / 3,
        "retry_period": 2.0,
    }
    fleets = [world.fleet] + [
        world.new_fleet(
            FleetOptions(identity=f"replica-{i}", **options),
            dead=killed.is_set if i == 0 else None,
        )
        for i in range(3)
    ]
    fleets = fleets[1:]  # world.fleet (unsharded) is not started
    running = [_serve(fleet) for fleet in fleets]

    def served_by(alive: list[Fleet]) -> set[str]:
        return {key for fleet in alive for key in fleet.members}

    keys = {c.key for c in world.clusters.values()}

    def balanced() -> bool:
        counts = [len(f.members) for f in fleets]
        return served_by(fleets) >= keys and max(counts) - min(counts) <= 1

    _wait(balanced, 120, 0.1)
    balance = [len(f.members) for f in fleets]
    first = _waves(world, args, names, args.timeout, range(1, 2), fleets=fleets)
    victim = set(fleets[0].members)
    killed.set()
    killed_at = time.monotonic()
    taken = _wait(lambda: victim <= served_by(fleets[1:]), args.lease_duration * 4, 0.1)
    takeover = round(time.monotonic() - killed_at, 2)
    # No later wave with --waves 1 (an empty range once ran wave 1 again).
    later = (
        _waves(world, args, names, args.timeout, range(2, args.waves + 1), fleets=fleets[1:])
        if args.waves > 1
        else {}
    )
    servers = _servers(world)
    pending = sum(_pending(servers[n]) for n in names)
    claims = {n: len(servers[n].list(NODECLAIMS).items) for n in names}
    extra = sum(max(0, count - lone_claims) for count in claims.values())
    classified = _claims_report(world, args, names)
    for stop, thread in running:
        _stop(stop, thread)
    return {
        "clusters": len(names),
        "replicas": 3,
        "balance": balance,
        "killed_served": len(victim),
        "taken_over": taken,
        "takeover_seconds": takeover,
        "lease_duration": args.lease_duration,
        "first_wave": first,
        "after_kill": later,
        "pods_pending": pending,
        "nodeclaims_beyond_lone": extra,
        "nodeclaims_classified": classified,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--clusters", type=int, default=20)
    parser.add_argument("--nodes", type=int, default=20, help="nodes per cluster at the end")
    parser.add_argument("--pods", type=int, default=200, help="pods per cluster at the end")
    parser.add_argument("--waves", type=int, default=2)
    parser.add_argument("--mode", choices=("http", "inprocess"), default="http")
    parser.add_argument("--workers", type=int, default=2, help="reconcile workers per cluster")
    parser.add_argument(
        "--fleet-workers", type=int, default=8, help="http: the shared pool (run's default)"
    )
    parser.add_argument(
        "--spread", type=float, default=10.0, help="seconds over which a wave reaches the clusters"
    )
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds a wave may take")
    parser.add_argument("--lease-duration", type=float, default=15.0)
    parser.add_argument(
        "--idle-seconds",
        type=float,
        default=30.0,
        help="http: after the waves, measure the controller's CPU this long with nothing to do",
    )
    parser.add_argument(
        "--emulators",
        default="0",
        help="http: processes holding the workload clusters' servers and emulation "
        "(0: the benchmark's own; auto: one per 10 clusters, at most 4)",
    )
    parser.add_argument(
        "--emulator-nice",
        type=int,
        default=0,
        help="http with --emulators: the emulator processes' niceness (0: as the controller)",
    )
    parser.add_argument(
        "--emulator-batch",
        action="store_true",
        help="http with --emulators: the emulator processes under SCHED_BATCH (their woken "
        "threads do not preempt a running one; same share of the CPU)",
    )
    parser.add_argument(
        "--emulator-switch-interval",
        type=float,
        default=0.02,
        help="http with --emulators: the emulator processes' interpreter switch interval in "
        "seconds (sys.setswitchinterval; 0: the interpreter's default, 0.005)",
    )
    parser.add_argument(
        "--emulator-gc-policy",
        choices=POLICIES,
        default="unwalked",
        help="http with --emulators: the emulator processes' collector policy, as run's "
        "--gc-policy (off: the thresholds they used before, 20000/20/20)",
    )
    parser.add_argument("--phases", default="lone,fleet,storm,replicas")
    parser.add_argument(
        "--repeat", type=int, default=1, help="run the phases this many times; medians of ratios"
    )
    parser.add_argument(
        "--controller-arg",
        action="append",
        default=[],
        help="http: an extra flag for the controller (repeatable), e.g. "
        "--controller-arg=--batch-complete-idle-duration=-1",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.controller_arg and args.mode != "http":
        parser.error("--controller-arg: only http mode runs the controller as a command")
    if args.emulator_nice:
        # Read by each forked emulator (``fleet_emulators._child``).
        os.environ["FLEET_EMULATOR_NICE"] = str(args.emulator_nice)
    if args.emulator_batch:
        os.environ["FLEET_EMULATOR_BATCH"] = "1"
    os.environ["FLEET_EMULATOR_GC_POLICY"] = args.emulator_gc_policy
    if args.emulator_switch_interval:
        os.environ["FLEET_EMULATOR_SWITCH_INTERVAL"] = str(args.emulator_switch_interval)
    # Imported here: as a script, the repository root is on the path only once main runs.
    from benchmarks.controller_process import stop_on_sigterm

    stop_on_sigterm()
    logging.basicConfig(level=logging.ERROR)
    phases = set(args.phases.split(","))
    result: dict[str, Any] = {
        "clusters": args.clusters,
        "nodes": args.nodes,
        "pods": args.pods,
        "waves": args.waves,
        "spread_seconds": args.spread,
        "workers": args.workers,
        "emulation": EMULATION,
        "emulators": args.emulators,
        "emulator_batch": args.emulator_batch,
        "emulator_switch_interval": args.emulator_switch_interval or sys.getswitchinterval(),
        "emulator_gc_policy": args.emulator_gc_policy,
        "mode": args.mode,
    }
    if args.controller_arg:
        result["controller_args"] = list(args.controller_arg)
    # Every other run takes the phases in the reverse order, so that a machine getting busier
    # (or quieter) through a run does not always land on the same phase.
    runs = [_run_phases(args, phases, reverse=index % 2 == 1) for index in range(args.repeat)]
    if len(runs) == 1:
        result |= runs[0]
    else:
        # One p99 of a few dozen samples moves by more than the targets between runs on a
        # shared machine: each run's figures, the median of each ratio over the runs, and the
        # runs' samples pooled and paired cluster by cluster (``fleet_stats``).
        result["runs"] = runs
        result["median"] = {
            key: round(statistics.median(values), 3)
            for key in RATIOS
            if (values := [run[key] for run in runs if key in run])
        }
    from benchmarks import fleet_stats  # the repository root is on the path (``__main__``)

    result["pooled"] = fleet_stats.pooled(runs)
    result["paired"] = fleet_stats.paired(runs)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for run in runs:
            _print(result | run)
        if "median" in result:
            print(f"  median over {len(runs)} runs: {json.dumps(result['median'])}")
        print(f"  pooled over {len(runs)} runs: {json.dumps(result['pooled'])}")
        print(f"  paired, cluster by cluster: {json.dumps(result['paired'])}")
    return 0


def _run_phases(
    args: argparse.Namespace, phases: set[str], reverse: bool = False
) -> dict[str, Any]:
    """One run of the ``--phases`` asked for (lone, fleet, control, storm in that order, or
    the reverse), then replicas, and their ratios (``RATIOS``)."""
    phase, replicas = _run_phase, _run_replicas
    if args.mode == "http":
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root
        from benchmarks import fleet_http

        phase, replicas = fleet_http.run_phase, fleet_http.run_replicas
    result: dict[str, Any] = {}
    lone_args = argparse.Namespace(**{**vars(args), "waves": max(args.waves, 4)})
    runs: dict[str, Callable[[], dict[str, Any]]] = {
        "lone": lambda: phase(lone_args, 1),
        "fleet": lambda: phase(args, args.clusters),
        "control": lambda: phase(args, args.clusters, control=True),
        "storm": lambda: phase(args, args.clusters, storm=True),
    }
    order = [name for name in runs if name in phases]
    for name in reversed(order) if reverse else order:
        result[name] = runs[name]()
        print(f"{name}: {result[name]}", file=sys.stderr)
    if "replicas" in phases:
        lone_claims = result.get("lone", {}).get("nodeclaims", args.nodes)
        result["replicas"] = replicas(args, args.clusters, lone_claims)
        print(f"replicas: {result['replicas']}", file=sys.stderr)
    _ratios(result)
    return result


RATIOS = (
    "fleet_p99_over_lone",
    "storm_p99_change",
    "fleet_share_p99_over_lone",
    "storm_share_p99_change",
    "storm_p99_over_control",
    "storm_share_p99_over_control",
)
"""The ratios a run reports: the decision p99 (a wave's first pod to its first NodeClaim) and
the controller's share of it (the scheduler's last ``Unschedulable`` mark to that NodeClaim),
the fleet's over the lone cluster's, the storm's change from the fleet's, and the storm's over
the control's (the same shape, the extra cluster answering: the 429s' own effect)."""


def _ratios(result: dict[str, Any]) -> None:
    for suffix, field in (("", "p99_ms"), ("_share", "last_mark_to_claim_p99_ms")):
        lone, fleet, control, storm = (
            (result.get(phase) or {}).get("latency", {}).get(field)
            for phase in ("lone", "fleet", "control", "storm")
        )
        if lone and fleet:
            result[f"fleet{suffix}_p99_over_lone"] = round(fleet / lone, 2)
        if fleet and storm:
            result[f"storm{suffix}_p99_change"] = round(storm / fleet - 1, 3)
        if control and storm:
            result[f"storm{suffix}_p99_over_control"] = round(storm / control, 3)
    lone_rss = (result.get("lone") or {}).get("controller_rss_mib")
    fleet_phase = result.get("fleet") or {}
    if lone_rss and fleet_phase.get("controller_rss_mib") and fleet_phase["clusters"] > 1:
        # What each cluster beyond the first adds to the controller's process (http mode).
        added = fleet_phase["controller_rss_mib"] - lone_rss
        result["controller_rss_per_added_cluster_mib"] = round(
            added / (fleet_phase["clusters"] - 1), 2
        )


def _print(result: dict[str, Any]) -> None:
    print(
        f"fleet benchmark: {result['clusters']} clusters x {result['nodes']} nodes x "
        f"{result['pods']} pods, {result['waves']} waves"
    )
    for phase in ("lone", "fleet", "control", "storm"):
        figures = result.get(phase)
        if not figures:
            continue
        latency = figures["latency"]
        print(
            f"  {phase:<6} clusters {figures['clusters']:>4}  decision p50 "
            f"{latency['p50_ms']} ms p99 {latency['p99_ms']} ms max {latency['max_ms']} ms "
            f"({latency['samples']} samples)  RSS {figures['rss_mib']} MiB "
            f"(+{figures['rss_added_mib']}, {figures['rss_added_per_cluster_mib']} per cluster)"
            f"  threads {figures['threads']}"
        )
    for phase in ("lone", "fleet", "control", "storm"):
        stages = ((result.get(phase) or {}).get("latency") or {}).get("stages") or {}
        shown = [
            f"{k} {v['p50_ms']}/{v['p99_ms']}"
            for k, v in stages.items()
            if isinstance(v, dict) and "p50_ms" in v
        ]
        if "collector" in stages:  # http: timed inside the controller's process
            pauses = stages["collector"]
            shown.append(f"collector {pauses['pauses']} pauses, longest {pauses['longest_ms']}")
        if shown:
            print(f"  {phase:<6} stages p50/p99 ms: {', '.join(shown)}")
    if "fleet_p99_over_lone" in result:
        print(f"  fleet p99 / lone p99: {result['fleet_p99_over_lone']} (target <= 2)")
    if "controller_rss_per_added_cluster_mib" in result:
        added = result["controller_rss_per_added_cluster_mib"]
        print(f"  controller RSS per added cluster: {added} MiB")
    if "fleet_share_p99_over_lone" in result:
        share = result["fleet_share_p99_over_lone"]
        print(f"  the controller's share, fleet p99 / lone p99: {share}")
    if "storm_p99_change" in result:
        print(f"  others' p99 change under a 429 storm: {result['storm_p99_change']:+.1%}")
    if "storm_share_p99_change" in result:
        change = result["storm_share_p99_change"]
        print(f"  the controller's share of it: {change:+.1%}")
    if "storm_p99_over_control" in result:
        over, share = result["storm_p99_over_control"], result.get("storm_share_p99_over_control")
        print(f"  storm p99 / control p99 (the 429s alone): {over}, the controller's share {share}")
    replicas = result.get("replicas")
    if replicas:
        print(f"  replicas: {json.dumps(replicas)}")


if __name__ == "__main__":
    # Run as ``benchmarks.fleet``, the module ``fleet_http`` imports, not a second copy of it.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from benchmarks import fleet as _fleet

    sys.exit(_fleet.main())
