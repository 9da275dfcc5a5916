"""``benchmarks/fleet.py`` as production runs it: ``karpenter-capi run --fleet`` in processes
of their own, reaching every cluster over HTTP with the official client.

Why: in the in-process mode the emulated Cluster API, ReplicaSets and kube-scheduler share the
controller's process and GIL, so under 20 clusters pods become provisionable over seconds and
the fleet's p99 measures the emulation as much as the controller. In production those are
other processes. Here the benchmark's process holds only the control plane: the management
cluster's and every workload cluster's in-memory API server behind its own HTTP front on
127.0.0.1, and, per workload cluster, the emulation (Cluster API making Machines and Nodes,
ReplicaSets making pods, the kube-scheduler stand-in binding them) on its own threaded driver,
calling its servers in process. The controller finds the workload clusters as in a real
management cluster: each Cluster's ``<cluster>-kubeconfig`` Secret (key ``value``) names its
workload front's URL. Its CPU-seconds, RSS and threads are read from ``/proc`` (the
controller's process alone). Decision latency is read as in the in-process mode, on the
servers (the wave's first pod created, the first NodeClaim created after it).

The storm: the storming cluster's workload front answers every request with 429 and
``Retry-After: 1`` (a ``FaultInjector`` storm over HTTP: the emulation, in process, is not
throttled). Replicas: three ``run --fleet`` processes with shards on; one gets SIGKILL.
"""

from __future__ import annotations

import argparse
import base64
import os
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import yaml

from benchmarks.controller_process import (
    ProcessStats,
    ThreadCpu,
    cpu_by_thread,
    free_port,
    provisioning_counts,
    reconcile_seconds,
    start_controller,
    stop_controller,
)
from benchmarks.controller_stages import decision_stages, pool_and_collector, read_recording
from benchmarks.fleet import (
    _claims_report,
    _pending,
    _servers,
    _stage_figures,
    _wait,
    _waves,
    _world,
)
from benchmarks.fleet_emulators import Emulators, default_emulators
from benchmarks.fleet_launches import ClaimCreatesFront, LeaseHistory, double_launches
from benchmarks.fleet_requests import TallyFront, requests_figures, summed
from karpenter_capi.core.fleet import ScopedClient, secret_name
from karpenter_capi.core.fleet.sharding import ANNOTATION_CLUSTER, LABEL_SHARD, ROLE_CLUSTER
from karpenter_capi.core.kube.resources import EVENTS, LEASES, NODECLAIMS, SECRETS
from karpenter_capi.core.runtime.manager import Manager
from karpenter_capi.core.runtime.pool import WorkerPool
from karpenter_capi.core.runtime.threaded import ThreadedDriver
from karpenter_capi.sim.apiserver.kubeconfig import kubeconfig_document, write_kubeconfig
from karpenter_capi.sim.apiserver.shared_reads import SharedReads
from karpenter_capi.sim.capi import add_capi_emulation
from karpenter_capi.sim.scenario.fleet import FleetWorld
from karpenter_capi.sim.scheduler import SimScheduler
from karpenter_capi.sim.workloads import add_workload_emulation

LEASE_NAMESPACE = "kube-system"
EMULATION_WORKERS = 8
STORM_SECONDS = 10**7
"""The storm lasts the whole phase."""


class HttpFleetWorld:
    """``world``'s servers behind HTTP fronts, its emulation on threads, its Secrets naming
    the fronts; ``controller()`` starts a ``run --fleet`` against it."""

    def __init__(self, world: FleetWorld, tmp: Path, emulators: int = 0) -> None:
        self.world = world
        self.tmp = tmp
        self.emulator_count = emulators
        self.emulators: Emulators | None = None
        self._stack = ExitStack()
        self.fronts: dict[str, ClaimCreatesFront] = {}
        self.drivers: list[ThreadedDriver] = []
        # The emulation's controllers share one pool, as the controller's do: unpooled, a
        # hundred clusters' emulation would start some 6,000 threads in this process.
        self.pool = WorkerPool(EMULATION_WORKERS, name="emulation")
        self.kubeconfig = tmp / "management.kubeconfig"

    def __enter__(self) -> HttpFleetWorld:
        world = self.world
        if self.emulator_count:
            # Forked first, before this process starts the management front's threads.
            self.emulators = Emulators(world, self.emulator_count, EMULATION_WORKERS)
        front = self._stack.enter_context(TallyFront(world.management))
        self.management_front = front
        write_kubeconfig(front.url, self.kubeconfig)
        if self.emulators is not None:
            self.emulators.start(self.kubeconfig)
            return self
        for cluster in world.clusters.values():
            workload = self._stack.enter_context(ClaimCreatesFront(cluster.server))
            self.fronts[cluster.name] = workload
            document = kubeconfig_document(workload.url, cluster.name)
            value = base64.b64encode(yaml.safe_dump(document).encode()).decode()
            world.management.patch(
                SECRETS, secret_name(cluster.name), {"data": {"value": value}}, cluster.namespace
            )
            # The cluster around the controller, in this process: Cluster API in the
            # management cluster (scoped as its controllers are), Nodes, ReplicaSets and
            # the scheduler in the workload cluster.
            scoped = ScopedClient(world.management, cluster.namespace, cluster.name)
            manager = Manager(SharedReads(cluster.server), scoped, clock=world.clock)
            add_capi_emulation(manager, **{"nodes": True, **world.emulation})
            add_workload_emulation(manager)
            manager.add(SimScheduler(cluster.server, manager, world.clock, seed=world.seed))
            driver = ThreadedDriver(manager, pool=self.pool, name=f"emulation-{cluster.name}")
            driver.start()
            self.drivers.append(driver)
        return self

    def __exit__(self, *_exc: object) -> None:
        # All at once: one by one, a hundred clusters' drivers take minutes to stop.
        stopping = [threading.Thread(target=driver.stop, daemon=True) for driver in self.drivers]
        for thread in stopping:
            thread.start()
        for thread in stopping:
            thread.join(60)
        self.pool.close()
        if self.emulators is not None:
            self.emulators.close()
        self._stack.close()

    def controller(
        self,
        extra: Sequence[str],
        log: str,
        thread_cpu: Path | None = None,
        stages: Path | None = None,
    ) -> subprocess.Popen[bytes]:
        return start_controller(
            self.kubeconfig,
            self.tmp / log,
            ["--fleet", *extra],
            log_level="WARNING",
            thread_cpu=thread_cpu,
            stages=stages,
        )

    def storm(self, name: str) -> Any:
        """Every request of the controller to ``name``'s workload cluster gets a 429 (the
        rule counts them: ``hits``). The server restarts into the storm, so the controller's
        open watches end and their re-lists meet it too, as its writes will."""
        if self.emulators is not None:
            return _RemoteHits(self.emulators.storm(name, STORM_SECONDS))
        rule = self.world.cluster(name).server.faults.storm(
            "throttle", duration=STORM_SECONDS, retry_after_seconds=1
        )
        front = self.fronts[name]
        front.close()
        front.start()
        return rule

    def claim_creates(self, name: str) -> list[tuple[float, str]]:
        """(arrival, User-Agent) of each NodeClaim created through ``name``'s workload front."""
        if self.emulators is not None:
            return self.emulators.claim_creates(name)
        return self.fronts[name].creates()

    def requests(self) -> dict[str, int]:
        """The controller's requests so far, all fronts summed (``fleet_requests``)."""
        fronts = [f.tally.snapshot() for f in self.fronts.values()]
        if self.emulators is not None:
            fronts += self.emulators.requests()
        return summed([self.management_front.tally.snapshot(), *fronts])

    def serving(self) -> int:
        """Clusters the controller has said it serves (its ``FleetServing`` Events)."""
        events = self.world.management.list(EVENTS).items
        return len(
            {
                (e["involvedObject"].get("namespace"), e["involvedObject"]["name"])
                for e in events
                if e.get("reason") == "FleetServing"
            }
        )

    def holders(self) -> dict[str, str]:
        """Each cluster key -> the replica holding its shard Lease (``""``: released)."""
        leases = self.world.management.list(
            LEASES, LEASE_NAMESPACE, label_selector=f"{LABEL_SHARD}={ROLE_CLUSTER}"
        ).items
        return {
            lease["metadata"]["annotations"][ANNOTATION_CLUSTER]: (lease.get("spec") or {}).get(
                "holderIdentity"
            )
            or ""
            for lease in leases
        }


class _RemoteHits:
    """A storm's 429 count, kept by the emulator serving its cluster."""

    def __init__(self, read: Callable[[], int]) -> None:
        self._read = read

    @property
    def hits(self) -> int:
        return self._read()


def _emulators(args: argparse.Namespace, clusters: int) -> int:
    if str(args.emulators) == "auto":
        return default_emulators(clusters)
    return int(args.emulators)


def _controller_flags(args: argparse.Namespace) -> list[str]:
    """The controller's flags of every phase: the benchmark's, then ``--controller-arg``'s
    (last, so that one of them overrides the benchmark's)."""
    extra = list(getattr(args, "controller_arg", None) or [])
    return ["--workers", str(args.workers), "--fleet-workers", str(args.fleet_workers), *extra]


def _memory(stats: ProcessStats, clusters: int) -> dict[str, Any]:
    rss = stats.rss_mb()
    return {
        "controller_rss_mib": round(rss, 1),
        "controller_peak_rss_mib": round(stats.peak_rss_mb(), 1),
        "controller_rss_per_cluster_mib": round(rss / clusters, 2),
        "controller_threads": stats.threads(),
    }


def run_phase(
    args: argparse.Namespace, clusters: int, storm: bool = False, control: bool = False
) -> dict[str, Any]:
    """One ``run --fleet --no-fleet-shards`` serving ``clusters`` (one more, storming, with
    ``storm``; one more answering as the others do, with ``control``: the storm phase without
    the storm): its decision latency, CPU and memory over the waves."""
    extra = storm or control
    world = _world(args, clusters + (1 if extra else 0))
    names = [c.name for c in world.clusters.values()]
    emulators = _emulators(args, len(world.clusters))
    with (
        tempfile.TemporaryDirectory() as tmp,
        HttpFleetWorld(world, Path(tmp), emulators) as http,
    ):
        started = time.monotonic()
        port = free_port()
        flags = ["--no-fleet-shards", "--metrics-port", str(port), *_controller_flags(args)]
        threads_file, stages_file = Path(tmp) / "threads.json", Path(tmp) / "stages.json"
        proc = http.controller(flags, "controller.log", thread_cpu=threads_file, stages=stages_file)
        stats = ProcessStats(proc.pid)
        threads = ThreadCpu(proc.pid, threads_file)
        try:
            served = _wait(
                lambda: http.serving() >= len(names) or proc.poll() is not None, 180, 0.1
            )
            serve_seconds = round(time.monotonic() - started, 2)
            if proc.poll() is not None:
                raise RuntimeError(f"the controller exited ({proc.returncode}); see its log")
            time.sleep(2.0)  # its informers list once it serves; let them sync
            rule = None
            if storm:
                rule = http.storm(names[-1])
            if extra:
                names = names[:-1]
            storming = [c.name for c in world.clusters.values()][len(names) :]
            idle = _memory(stats, len(world.clusters))
            cpu = stats.cpu_seconds()
            waited = stats.runqueue_wait_seconds()
            own = ProcessStats(os.getpid())
            own_waited = own.runqueue_wait_seconds()
            waves_began = time.monotonic()
            emulation_cpu = http.emulators.cpu_seconds() if http.emulators else 0.0
            counted = provisioning_counts(port)
            requested = http.requests()
            held = reconcile_seconds(port)
            # Each read also has the controller write its stages' recording (just before).
            threads_began = threads.read()
            stages_began = read_recording(stages_file)
            decisions: list[tuple[str, float, float]] = []
            figures = _waves(
                world, args, names, args.timeout, fleets=[], storming=storming, decisions=decisions
            )
            cpu = stats.cpu_seconds() - cpu
            threads_waves = threads.read()
            keys = {c.name: c.key for c in world.clusters.values()}
            figures["stages"] = _stages(
                stages_began, read_recording(stages_file), decisions, keys, waves_began
            )
            _keep_profiles("waves")
            # Provisioning rounds that solved pending pods over the waves, and NodeClaims made.
            after = provisioning_counts(port)
            figures["provisioning"] = {k: after[k] - counted.get(k, 0.0) for k in after}
            made = int(figures["provisioning"].get("nodeclaims_created", 0) or 0)
            figures["requests"] = requests_figures(
                requested, http.requests(), made, args.pods * len(names)
            )
            figures["reconcile_seconds"] = _held(held, reconcile_seconds(port), storming)
            # Time runnable but without a core over the waves: the controller's and the
            # benchmark's (the emulated control plane's); what the machine's load took from
            # the wall-clock figures, which CPU-seconds do not show.
            figures["runqueue_wait_seconds"] = {
                "waves_wall": round(time.monotonic() - waves_began, 1),
                "controller": round(stats.runqueue_wait_seconds() - waited, 1),
                "benchmark": round(own.runqueue_wait_seconds() - own_waited, 1),
            }
            if http.emulators is not None:
                emulation_cpu = http.emulators.cpu_seconds() - emulation_cpu
                figures["cpu_seconds"]["emulators"] = round(emulation_cpu, 1)
            memory = _memory(stats, len(world.clusters))
            figures["cpu_seconds"]["controller_by_thread"] = cpu_by_thread(
                threads_began, threads_waves
            )
            settled_idle = _idle_cpu(stats, threads, args.idle_seconds, len(world.clusters))
        finally:
            stop_controller(proc)
        # Read while the emulators (``--emulators``), which hold the servers, still run.
        report = _claims_report(world, args, names)
        nodeclaims = sum(len(s.list(NODECLAIMS).items) for s in _servers(world).values())
        hits = rule.hits if rule is not None else None
    figures["cpu_seconds"]["controller"] = round(cpu, 1)
    return {
        "mode": "http",
        "emulators": emulators,
        "clusters": len(names),
        "storming": 1 if storm else 0,
        "control": 1 if control else 0,
        "storm_429s": hits,
        "all_served": served,
        "serve_all_seconds": serve_seconds,
        "latency": figures,
        "idle": idle,
        "settled_idle": settled_idle,
        **memory,
        # Comparable keys with the in-process mode's table.
        "rss_mib": memory["controller_rss_mib"],
        "rss_added_per_cluster_mib": memory["controller_rss_per_cluster_mib"],
        "rss_added_mib": memory["controller_rss_mib"],
        "threads": memory["controller_threads"],
        "nodeclaims": nodeclaims,
        "nodeclaims_classified": report,
    }


def _stages(
    before: dict[str, Any],
    after: dict[str, Any],
    decisions: list[tuple[str, float, float]],
    keys: dict[str, str],
    waves_began: float,
) -> dict[str, Any]:
    """The decisions' stages as the controller timed them (``controller_stages``): each
    stage's spread over clusters and waves, the slowest decisions, and what the waves cost
    the pool's controllers and the collector. Empty without a recording."""
    if not after:
        return {}
    split = [
        (claim - first_pod, stages)
        for name, first_pod, claim in decisions
        if (stages := decision_stages(after, keys[name], first_pod, claim)) is not None
    ]
    return {
        **_stage_figures(split),
        "decisions": len(split),
        "unmatched": len(decisions) - len(split),
        **pool_and_collector(before, after, waves_began, after.get("written_at", 0.0)),
    }


def _idle_cpu(
    stats: ProcessStats, threads: ThreadCpu, seconds: float, clusters: int
) -> dict[str, Any]:
    """The controller's CPU over ``seconds`` after the last wave settled, with nothing to do
    (every pod bound, no change coming): what serving a quiet cluster costs, per cluster and
    minute, and by thread."""
    if seconds <= 0:
        return {}
    # The last NodeClaims' Nodes turn Ready and their pods bind as the wave settles: let the
    # lifecycle and the relooks that follow finish before measuring.
    time.sleep(min(10.0, seconds))
    before, by_thread = stats.cpu_seconds(), threads.read()
    time.sleep(seconds)
    cpu = stats.cpu_seconds() - before
    return {
        "seconds": seconds,
        "controller_cpu_seconds": round(cpu, 2),
        "per_cluster_per_minute": round(cpu / clusters * 60 / seconds, 3),
        "by_thread": cpu_by_thread(by_thread, threads.read()),
    }


def _keep_profiles(suffix: str) -> None:
    """With ``KARPENTER_CAPI_PROFILE`` (``controller_threads.py``), a copy of the profiles
    written so far, in ``DIR-SUFFIX``: the later reads overwrite them."""
    import shutil

    directory = os.environ.get("KARPENTER_CAPI_PROFILE")
    if directory and Path(directory).is_dir():
        shutil.copytree(directory, f"{directory}-{suffix}", dirs_exist_ok=True)


def _held(before: dict[str, float], after: dict[str, float], storming: list[str]) -> Any:
    """Seconds each cluster's reconciles and periodic runs held a worker over the waves: the
    extra (storming or control) cluster's, and the median and largest of the others'."""
    spent = {c: round(after[c] - before.get(c, 0.0), 2) for c in after if c}
    extra = [c for c in spent if c.rsplit("/", 1)[-1] in storming]
    others = sorted(v for c, v in spent.items() if c not in extra)
    if not others:
        return {}
    return {
        "extra_cluster": spent[extra[0]] if extra else None,
        "others_median": others[len(others) // 2],
        "others_max": others[-1],
    }


def run_replicas(args: argparse.Namespace, clusters: int, lone_claims: int) -> dict[str, Any]:
    """Three ``run --fleet`` replicas with shards on; after the first wave one gets SIGKILL."""
    world = _world(args, clusters)
    names = [c.name for c in world.clusters.values()]
    keys = {c.key for c in world.clusters.values()}
    identities = [f"replica-{i}" for i in range(3)]
    lease = args.lease_duration
    flags = [
        *_controller_flags(args),
        "--leader-election-namespace",
        LEASE_NAMESPACE,
        "--leader-election-lease-duration",
        str(lease),
        "--leader-election-renew-deadline",
        str(lease * 2 / 3),
        "--leader-election-retry-period",
        "2",
    ]
    emulators = _emulators(args, len(world.clusters))
    # Every shard Lease write the management server accepts, timed: who held each cluster
    # when each NodeClaim create arrived (``fleet_launches``).
    history = LeaseHistory(world.management, time.monotonic)
    with (
        tempfile.TemporaryDirectory() as tmp,
        HttpFleetWorld(world, Path(tmp), emulators) as http,
    ):
        procs = [
            http.controller([*flags, "--leader-election-identity", who], f"{who}.log")
            for who in identities
        ]
        try:

            def balanced() -> bool:
                held = http.holders()
                counts = [sum(1 for h in held.values() if h == who) for who in identities]
                return set(held) >= keys and all(held.values()) and max(counts) - min(counts) <= 1

            _wait(balanced, 180, 0.1)
            held = http.holders()
            balance = [sum(1 for h in held.values() if h == who) for who in identities]
            time.sleep(2.0)
            first = _waves(world, args, names, args.timeout, range(1, 2), fleets=[])
            victim = {key for key, who in http.holders().items() if who == identities[0]}
            procs[0].kill()  # SIGKILL: no release, its Leases expire
            killed_at = time.monotonic()

            def taken() -> bool:
                held = http.holders()
                return all(held.get(key) in identities[1:] for key in victim)

            took = _wait(taken, lease * 4, 0.1)
            takeover = round(time.monotonic() - killed_at, 2)
            # Per cluster: the victim's last renewal and the survivor's first write, from the
            # kill. A survivor may take a Lease once it has seen it unchanged for the lease
            # duration, so takeover = expiry wait (last renewal + lease) + what is ours.
            per_cluster = [history.takeover(key, identities[0], killed_at) for key in victim]
            split = _takeover_split([t for t in per_cluster if t is not None], lease)
            # No later wave with --waves 1 (an empty range once ran wave 1 again).
            later = (
                _waves(world, args, names, args.timeout, range(2, args.waves + 1), fleets=[])
                if args.waves > 1
                else {}
            )
        finally:
            for proc in procs:
                stop_controller(proc)
        # Read while the emulators (``--emulators``), which hold the servers, still run.
        servers = _servers(world)
        claims = {n: len(servers[n].list(NODECLAIMS).items) for n in names}
        classified = _claims_report(world, args, names)
        pending = sum(_pending(servers[n]) for n in names)
        launches = double_launches(
            {c.key: http.claim_creates(c.name) for c in world.clusters.values()}, history
        )
    return {
        "mode": "http",
        "clusters": len(names),
        "replicas": 3,
        "balance": balance,
        "killed_served": len(victim),
        "taken_over": took,
        "takeover_seconds": takeover,
        "takeover_split": split,
        "lease_duration": lease,
        "first_wave": first,
        "after_kill": later,
        "pods_pending": pending,
        # NodeClaims created by a replica not holding the cluster's Lease when they arrived.
        "double_launches": launches.pop("double_launches"),
        "launches": launches,
        "nodeclaims_beyond_lone": sum(max(0, c - lone_claims) for c in claims.values()),
        "nodeclaims_classified": classified,
    }


def _takeover_split(clusters: list[dict[str, float]], lease: float) -> dict[str, Any]:
    """The takeover of the killed replica's clusters, split: when their Leases expired (the
    victim's last renewal + the lease duration, from the kill) and how long after expiry a
    survivor wrote itself in (the part the controller answers for)."""
    if not clusters:
        return {}
    expired = sorted(c["last_renewal"] + lease for c in clusters)
    after = sorted(c["taken"] - (c["last_renewal"] + lease) for c in clusters)
    taken = sorted(c["taken"] for c in clusters)

    def spread(values: list[float]) -> dict[str, float]:
        return {
            "min": round(values[0], 2),
            "median": round(statistics.median(values), 2),
            "max": round(values[-1], 2),
        }

    return {
        "clusters": len(clusters),
        "lease_expired_after_kill": spread(expired),
        "taken_after_expiry": spread(after),
        "taken_after_kill": spread(taken),
    }
