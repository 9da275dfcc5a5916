"""``benchmarks/fleet.py --emulators K``: the emulated control plane in K processes of its own.

Why: over HTTP the controller has a process of its own, but the benchmark's process held every
workload cluster's in-memory API server, its HTTP front and its emulation (Cluster API making
Machines and Nodes, ReplicaSets making pods, the kube-scheduler stand-in) on one GIL. At 20
clusters that process marked a wave's pods ``Unschedulable`` up to seconds late, and the
fleet's decision p99 measured it as much as the controller. In production each workload
cluster's control plane is machines of its own; here K forked processes share the clusters
(cluster i in process i mod K), each holding its clusters' servers, fronts and emulation. The
management cluster stays in the benchmark's process behind its HTTP front; the emulated
Cluster API controllers reach it over HTTP with the official client, as the controller does.

The benchmark's process drives the children through a pipe each (``RemoteServer``): a wave's
scale-up, the timestamps ``_TimedServer`` records (``time.monotonic`` is the same clock in
every process), the count of pending pods, a storm, the final lists. The children are forked
before any thread of the phase starts and leave with ``os._exit``.
"""

from __future__ import annotations

import base64
import gc
import multiprocessing
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from contextlib import ExitStack, suppress
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import yaml

from benchmarks.fleet_launches import ClaimCreatesFront
from karpenter_capi.core.clock import SystemClock
from karpenter_capi.core.fleet import ScopedClient, secret_name
from karpenter_capi.core.kube.official import OfficialClient
from karpenter_capi.core.kube.resources import PODS, SECRETS
from karpenter_capi.core.runtime.collector import policy_named
from karpenter_capi.core.runtime.manager import Manager
from karpenter_capi.core.runtime.pool import WorkerPool
from karpenter_capi.core.runtime.threaded import ThreadedDriver
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.apiserver.kubeconfig import kubeconfig_document
from karpenter_capi.sim.apiserver.shared_reads import SharedReads
from karpenter_capi.sim.capi import add_capi_emulation
from karpenter_capi.sim.scenario.fleet import FleetWorld
from karpenter_capi.sim.scheduler import SimScheduler
from karpenter_capi.sim.workloads import add_workload_emulation

CLUSTERS_PER_EMULATOR = 10
MAX_EMULATORS = 4
GC_THRESHOLDS = (20_000, 20, 20)
"""The emulators' collector thresholds with ``--emulator-gc-policy off`` (Python's default:
700, 10, 10)."""
RECORDED = frozenset({"pods", "claims", "unschedulable", "unseen_at_create", "deleted_by"})
"""``_TimedServer``'s records, read as values (everything else on a server is a call)."""


def default_emulators(clusters: int) -> int:
    """One process per 10 clusters, at most 4 (the machine has 2 cores)."""
    return max(1, min(MAX_EMULATORS, -(-clusters // CLUSTERS_PER_EMULATOR)))


class Emulator:
    """One forked process serving some workload clusters; ``call`` asks it something."""

    def __init__(self, index: int, world: FleetWorld, names: list[str], workers: int) -> None:
        self.index = index
        self.names = names
        self._lock = threading.Lock()
        parent, child = multiprocessing.Pipe()
        context = multiprocessing.get_context("fork")
        self.process = context.Process(
            target=_child,
            args=(child, world, names, workers),
            name=f"emulator-{index}",
            daemon=True,
        )
        self.process.start()
        child.close()
        self._conn = parent

    def call(self, *request: Any) -> Any:
        with self._lock:
            self._conn.send(request)
            ok, value = self._conn.recv()
        if not ok:
            raise RuntimeError(f"emulator {self.index}: {value}")
        return value

    def cpu_seconds(self) -> float:
        """User + system CPU of the child so far (from ``/proc``)."""
        try:
            fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        if self.process.is_alive():
            with suppress(OSError, EOFError, RuntimeError):
                self.call("stop")
            self.process.join(60)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5)
        self._conn.close()


class RemoteServer:
    """A workload cluster's server as the benchmark's process sees it: in an emulator."""

    def __init__(self, emulator: Emulator, name: str) -> None:
        self._emulator = emulator
        self._name = name

    def __getattr__(self, attribute: str) -> Any:
        if attribute.startswith("_"):
            raise AttributeError(attribute)
        if attribute in RECORDED:
            return self._emulator.call("get", self._name, attribute)

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._emulator.call("call", self._name, attribute, args, kwargs)

        return call

    def pending_count(self) -> int:
        return int(self._emulator.call("pending", self._name))


class Emulators:
    """K emulators for ``world``'s workload clusters; ``start`` hands them the management
    cluster's kubeconfig, writes each cluster's kubeconfig Secret naming its front, and puts a
    ``RemoteServer`` in place of each cluster's server in this process's ``world``."""

    def __init__(self, world: FleetWorld, count: int, workers: int) -> None:
        self.world = world
        names = [c.name for c in world.clusters.values()]
        count = max(1, min(count, len(names)))
        shares = [names[i::count] for i in range(count)]
        # Forked now, before this phase starts a thread of its own.
        self.emulators = [Emulator(i, world, share, workers) for i, share in enumerate(shares)]
        self.owner = {name: e for e in self.emulators for name in e.names}

    def start(self, management_kubeconfig: Path) -> None:
        urls: dict[str, str] = {}
        for emulator in self.emulators:
            urls |= emulator.call("start", str(management_kubeconfig))
        for name, url in urls.items():
            cluster = self.world.cluster(name)
            document = kubeconfig_document(url, name)
            value = base64.b64encode(yaml.safe_dump(document).encode()).decode()
            self.world.management.patch(
                SECRETS, secret_name(name), {"data": {"value": value}}, cluster.namespace
            )
            cluster.server = RemoteServer(self.owner[name], name)  # type: ignore[assignment]

    def storm(self, name: str, seconds: float) -> Callable[[], int]:
        """Start ``name``'s 429 storm (its front restarts into it); returns its hit count."""
        emulator = self.owner[name]
        emulator.call("storm", name, seconds)
        return lambda: int(emulator.call("hits", name))

    def cpu_seconds(self) -> float:
        return sum(e.cpu_seconds() for e in self.emulators)

    def claim_creates(self, name: str) -> list[tuple[float, str]]:
        """(arrival, User-Agent) of each NodeClaim created through ``name``'s front."""
        return [tuple(c) for c in self.owner[name].call("creates", name)]  # type: ignore[misc]

    def requests(self) -> list[dict[str, int]]:
        """Each workload front's count of the controller's requests (``fleet_requests``)."""
        return [e.call("requests", name) for e in self.emulators for name in e.names]

    def close(self) -> None:
        stopping = [threading.Thread(target=e.stop, daemon=True) for e in self.emulators]
        for thread in stopping:
            thread.start()
        for thread in stopping:
            thread.join(90)


def _child(conn: Connection, world: FleetWorld, names: list[str], workers: int) -> None:
    """An emulator's life: wait for the management kubeconfig, serve, answer, stop."""
    code = 0
    # The world came with the fork: out of the collector's sight (it no longer walks every
    # object of every cluster at each full collection, nor dirties their shared pages), and
    # collections rarer: they were 7% of an emulator's CPU at 20 clusters.
    gc.freeze()
    # ``fleet.py --emulator-gc-policy``: the controller's collector policy (``run --gc-policy``,
    # ``core/runtime/collector.py``). With only the thresholds below, a wave's young and
    # middle collections walked each emulator's growing heap while holding its interpreter:
    # middle ones of 0.4-0.6 s, young ones up to 0.1 s, each stalling 25 clusters' API
    # servers and emulation at once (a Go control plane's collector runs beside its work).
    policy = policy_named(os.environ.get("FLEET_EMULATOR_GC_POLICY") or "off", SystemClock())
    if policy is None:
        gc.set_threshold(*GC_THRESHOLDS)
    else:
        policy.install()
    # ``fleet.py --emulator-nice``: the control planes this process stands for would have
    # machines of their own, not the controller's CPU.
    if nice := int(os.environ.get("FLEET_EMULATOR_NICE") or 0):
        os.nice(nice)
    # ``fleet.py --emulator-batch``: SCHED_BATCH, set before this process starts a thread (its
    # threads inherit it). The kernel then never lets one of its woken threads preempt a
    # running thread: a write no longer hands the core to each watch reader it wakes, nor does
    # the emulation's wake-up take the core from the controller; its share stays the same.
    if os.environ.get("FLEET_EMULATOR_BATCH"):
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    # ``fleet.py --emulator-switch-interval``: how long a thread of this process keeps the
    # interpreter while another asks for it. This process stands for many clusters' control
    # planes, each on machines of its own: at the default 5 ms one cluster's burst of creates
    # is cut into turns with every other cluster's threads, and each turn is a hand-over.
    if switch := float(os.environ.get("FLEET_EMULATOR_SWITCH_INTERVAL") or 0):
        sys.setswitchinterval(switch)
    timers = None
    if os.environ.get("FLEET_PROFILE"):
        from benchmarks.emulator_timers import emulator_timers

        timers = emulator_timers()
    try:
        _serve(conn, world, names, workers)
        if timers is not None:
            cpu = time.process_time()
            Path(f"{os.environ['FLEET_PROFILE']}/timers-{os.getpid()}.txt").write_text(
                "\n".join([f"process {cpu:.1f} s", *timers.lines()]) + "\n"
            )
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        os._exit(code)


def _read(
    request: tuple[Any, ...],
    servers: dict[str, InMemoryAPIServer],
    fronts: dict[str, ClaimCreatesFront],
    rules: dict[str, Any],
) -> Any:
    """The answer to a request that only reads: a record, a count, a storm's hits."""
    verb, name = request[0], request[1]
    if verb == "get":
        value = getattr(servers[name], request[2])
        return dict(value) if isinstance(value, dict) else list(value)
    if verb == "pending":
        return len(servers[name].list(PODS, field_selector="spec.nodeName=").items)
    if verb == "hits":
        return rules[name].hits
    if verb == "requests":
        return fronts[name].tally.snapshot()
    return fronts[name].creates()


def _serve(conn: Connection, world: FleetWorld, names: list[str], workers: int) -> None:
    servers: dict[str, InMemoryAPIServer] = {n: world.cluster(n).server for n in names}
    fronts: dict[str, ClaimCreatesFront] = {}
    drivers: list[ThreadedDriver] = []
    rules: dict[str, Any] = {}
    stack = ExitStack()
    pool: WorkerPool | None = None
    while True:
        try:
            request = conn.recv()
        except EOFError:
            break
        verb = request[0]
        try:
            if verb == "start":
                management = OfficialClient.from_kubeconfig(request[1])
                pool = WorkerPool(workers, name="emulation")
                for name in names:
                    cluster = world.cluster(name)
                    fronts[name] = stack.enter_context(ClaimCreatesFront(cluster.server))
                    scoped = ScopedClient(management, cluster.namespace, cluster.name)
                    manager = Manager(SharedReads(cluster.server), scoped, clock=world.clock)
                    add_capi_emulation(manager, **{"nodes": True, **world.emulation})
                    add_workload_emulation(manager)
                    manager.add(SimScheduler(cluster.server, manager, world.clock, seed=world.seed))
                    driver = ThreadedDriver(manager, pool=pool, name=f"emulation-{name}")
                    driver.start()
                    drivers.append(driver)
                value: Any = {name: front.url for name, front in fronts.items()}
            elif verb in ("get", "pending", "hits", "creates", "requests"):
                value = _read(request, servers, fronts, rules)
            elif verb == "call":
                _, name, method, args, kwargs = request
                value = getattr(servers[name], method)(*args, **kwargs)
            elif verb == "storm":
                _, name, seconds = request
                rules[name] = servers[name].faults.storm(
                    "throttle", duration=seconds, retry_after_seconds=1
                )
                fronts[name].close()
                fronts[name].start()
                value = None
            elif verb == "stop":
                conn.send((True, None))
                break
            else:
                raise ValueError(f"unknown request {verb!r}")
        except Exception as error:
            conn.send((False, f"{type(error).__name__}: {error}"))
            continue
        conn.send((True, value))
    stopping = [threading.Thread(target=d.stop, daemon=True) for d in drivers]
    for thread in stopping:
        thread.start()
    for thread in stopping:
        thread.join(60)
    if pool is not None:
        pool.close()
    stack.close()
