"""How fast the controller binds a burst of pods over a real HTTP API, on the wall clock, and
what that costs it in CPU, memory and API requests (issue 25, item 5).

Why: the simulator runs on virtual time, where an API round-trip, a JSON decode and the GIL cost
nothing, so a controller that creates its NodeClaims one by one, 0.4 to 2.4 s apart on a real
control plane, looks instant there. Here every cost is paid as in a cluster:

* the **controller** is ``karpenter-capi run`` in a process of its own (so its CPU-seconds and
  peak RSS, read from ``/proc``, are its own), talking to the API only through the official
  ``kubernetes`` client over HTTP, with the usual flags and leader election off;
* the **control plane** is this process: the in-memory API server behind its HTTP front (what
  ``karpenter-capi apiserver`` serves), the emulated Cluster API bringing each Machine's Node
  up ``--boot-delay`` seconds after the Machine is made (provider ID at once, ``Ready`` after
  the delay), the kube-scheduler stand-in (``sim.scheduler``) binding pods and the kubelet
  stand-in starting them, all on the threaded runtime and the system clock, calling the server
  in process (as kube-apiserver's own components are not what is measured);
* the **writer** creates the pods at kube-controller-manager's pace: its client's default
  ``--kube-api-qps 20``/``--kube-api-burst 30`` shared by the three ReplicaSets, each creating
  its pods in the ReplicaSet controller's slow-start batches (1, 2, 4, ... at most
  ``burstReplicas`` 500 a sync), each pod naming its ReplicaSet (an ``apps/v1`` object created
  first) as its controller, as kube's do. At 20 creates a second, 1,000 pods take about 50 s to
  appear, so the figure that matters is the time from the **last** pod's creation to all bound,
  less the boot delay no controller can shorten.

The workload is issue 25's: 600 x 250m/512Mi, 300 x 1 CPU/2Gi and 100 x 2 CPU/6Gi, on
MachineDeployments of 2, 4, 16 and 32 vCPU (4 GiB a vCPU, scale-from-zero annotations, one zone,
on demand). ``--pods N`` scales it down in the same proportions (26: 16, 8 and 2).

Printed: seconds from the first pod to all bound, and from the last pod to all bound less the
boot delay (which counts from a whole-second ``creationTimestamp``, so this carries up to a
second of jitter), and the controller's own parts of that wait, exact: from the last pod to the
last scale-up write, and from the last Node turning Ready to all pods bound; the provisioning
rounds (creates a second or more apart start a new one), the
NodeClaims created per second within a round and the longest round's creates; the controller's
API requests (all verbs, watches included) per node; its CPU-seconds and peak RSS over the
scale-up and over the whole run, and the scale-up's CPU-seconds by thread
(``controller_cpu_s_by_thread``: the controller runs under ``controller_threads.py``, which
says on ``SIGUSR1``, so a change to one part shows apart from the whole's noise); nodes and
their hourly cost; empty nodes (bought but holding no pod); pods the kube-scheduler stand-in
bound where their ``status.nominatedNodeName`` said, and nominated pods it bound elsewhere.
Figures, not assertions; ``tests/e2e/test_realapi.py`` runs it small.

    .venv/bin/python benchmarks/realapi.py [--pods 1000] [--boot-delay 5] [--json]
        [--controller-arg=--workers=4 ...] [--keep-log FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.clock import SystemClock
from karpenter_capi.core.kube.resources import NODECLAIMS, NODES, PODS, REPLICASETS
from karpenter_capi.core.runtime.manager import Manager
from karpenter_capi.core.runtime.threaded import ThreadedDriver
from karpenter_capi.plugins.generic_capi.shape import PRICE_ANNOTATION
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.apiserver.http import HttpFront, ServedRequest
from karpenter_capi.sim.apiserver.kubeconfig import write_kubeconfig
from karpenter_capi.sim.apiserver.version import SIMULATED_CONTROL_PLANE
from karpenter_capi.sim.capi import (
    ANNOTATION_BOOT_DELAY,
    ANNOTATION_PROVISION_DELAY,
    add_capi_emulation,
)
from karpenter_capi.sim.cluster import new_cluster
from karpenter_capi.sim.scenario.catalog import generate_catalog
from karpenter_capi.sim.scheduler import SimScheduler
from karpenter_capi.sim.workloads import add_workload_emulation

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root
from benchmarks.controller_process import (
    ProcessStats,
    ThreadCpu,
    cpu_by_thread,
    start_controller,
    stop_controller,
    stop_on_sigterm,
)

NAMESPACE: Final = "default"
WORKLOAD: Final = (
    ("small", 600, "250m", "512Mi"),
    ("medium", 300, "1", "2Gi"),
    ("large", 100, "2", "6Gi"),
)
"""(name, replicas at 1,000 pods, cpu, memory): issue 25's mix."""
CPUS: Final = (2, 4, 16, 32)
KCM_QPS: Final = 20.0
KCM_BURST: Final = 30
"""kube-controller-manager's client defaults (``--kube-api-qps``, ``--kube-api-burst``)."""
BURST_REPLICAS: Final = 500
"""The ReplicaSet controller's most pod creations in one sync (``BurstReplicas``)."""
POLL: Final = 0.1
"""Seconds between the benchmark's looks at the pods (it measures; it decides nothing)."""


def workload(pods: int) -> list[tuple[str, int, str, str]]:
    """The mix scaled to ``pods`` in total (largest remainders get the rounding)."""
    total = sum(count for _, count, _, _ in WORKLOAD)
    exact = [pods * count / total for _, count, _, _ in WORKLOAD]
    counts = [int(x) for x in exact]
    by_remainder = sorted(range(len(exact)), key=lambda i: exact[i] - counts[i], reverse=True)
    for i in by_remainder[: pods - sum(counts)]:
        counts[i] += 1
    return [(name, n, cpu, mem) for (name, _, cpu, mem), n in zip(WORKLOAD, counts, strict=True)]


def catalog_objects(boot_delay: float) -> list[dict[str, Any]]:
    from karpenter_capi.sim.scenario.schema import Catalog

    objects = generate_catalog(
        Catalog(
            cpus=list(CPUS),
            families={"m": 4},
            zones=["zone-a"],
            consolidation_policy="WhenEmpty",
            consolidate_after="Never",
        )
    )
    for obj in objects:
        if obj.get("kind") == "MachineDeployment":
            annotations = obj["metadata"].setdefault("annotations", {})
            annotations[ANNOTATION_PROVISION_DELAY] = "0"
            annotations[ANNOTATION_BOOT_DELAY] = f"{boot_delay:g}"
    return objects


def _replicaset_object(app: str, replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": app, "namespace": NAMESPACE, "labels": {"app": app}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": app}},
            "template": {"metadata": {"labels": {"app": app}}, "spec": {"containers": []}},
        },
    }


def _pod(name: str, owner: dict[str, Any], cpu: str, memory: str) -> dict[str, Any]:
    app = owner["metadata"]["name"]
    reference = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "name": app,
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {"app": app},
            "ownerReferences": [reference],
        },
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.9",
                    "resources": {"requests": {"cpu": cpu, "memory": memory}},
                }
            ]
        },
    }


class TokenBucket:
    """client-go's default rate limiter: ``qps`` tokens a second, at most ``burst`` saved."""

    def __init__(self, qps: float, burst: int) -> None:
        self._qps, self._burst = qps, burst
        self._tokens = float(burst)
        self._last = time.monotonic()
        self._lock = threading.Lock()

    def take(self) -> None:
        with self._lock:
            now = time.monotonic()
            self._tokens = min(self._burst, self._tokens + (now - self._last) * self._qps)
            self._last = now
            self._tokens -= 1
            wait = -self._tokens / self._qps if self._tokens < 0 else 0.0
        if wait > 0:
            time.sleep(wait)


@dataclass
class Writer:
    """kube-controller-manager's ReplicaSet controller creating the workload's pods."""

    server: InMemoryAPIServer
    mix: Sequence[tuple[str, int, str, str]]
    created: list[float] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self) -> None:
        bucket = TokenBucket(KCM_QPS, KCM_BURST)
        threads = [
            threading.Thread(target=self._replicaset, args=(bucket, *entry), daemon=True)
            for entry in self.mix
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def _replicaset(self, bucket: TokenBucket, app: str, count: int, cpu: str, mem: str) -> None:
        # The ReplicaSet the Deployment controller made; its pods name it as their controller.
        owner = self.server.create(REPLICASETS, _replicaset_object(app, count), NAMESPACE)
        made = 0
        while made < count:
            # One sync: slow-start batches (1, 2, 4, ...) up to BurstReplicas pods. A batch's
            # creates run in parallel in kube, but the shared rate limit is what paces them.
            todo, batch = min(count - made, BURST_REPLICAS), 1
            while todo > 0:
                size = min(batch, todo)
                for _ in range(size):
                    bucket.take()
                    self.server.create(PODS, _pod(f"{app}-{made:04d}", owner, cpu, mem), NAMESPACE)
                    with self._lock:
                        self.created.append(time.monotonic())
                    made += 1
                todo -= size
                batch *= 2


def _wait_until(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(POLL)


def _rounds(creates: Sequence[float]) -> list[tuple[int, float]]:
    """(NodeClaims, seconds from the first create to the last) of each provisioning round,
    told apart by a pause of a second or more between creates (rounds are seconds apart)."""
    rounds: list[list[float]] = []
    for at in creates:
        if rounds and at - rounds[-1][-1] < 1.0:
            rounds[-1].append(at)
        else:
            rounds.append([at])
    return [(len(r), r[-1] - r[0]) for r in rounds]


def _verb(request: ServedRequest) -> str:
    """``patch machinedeployments/scale``, ``list pods``: a request as kube-apiserver counts it."""
    parts = request.path.strip("/").split("/")
    rest = parts[2:] if parts[:1] == ["api"] else parts[3:]
    if rest[:1] == ["namespaces"] and len(rest) > 2:
        rest = rest[2:]
    if not rest:
        return f"{request.method.lower()} {request.path}"
    resource = rest[0] + (f"/{rest[2]}" if len(rest) > 2 else "")
    verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(
        request.method, "get"
    )
    if verb == "get" and len(rest) == 1:
        verb = "watch" if "watch=true" in request.query.lower() else "list"
    return f"{verb} {resource}"


def _note_ready(server: InMemoryAPIServer, ready: dict[str, float]) -> None:
    now = time.monotonic()
    for node in server.list(NODES).items:
        name = node["metadata"]["name"]
        if name not in ready and any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (node.get("status") or {}).get("conditions") or []
        ):
            ready[name] = now


def _bound(server: InMemoryAPIServer) -> tuple[int, int]:
    pods = server.list(PODS, NAMESPACE).items
    return sum(1 for p in pods if (p.get("spec") or {}).get("nodeName")), len(pods)


def run(
    pods: int = 1000,
    boot_delay: float = 5.0,
    controller_args: Sequence[str] = (),
    timeout: float = 300.0,
    keep_log: Path | None = None,
    *,
    nominations: bool = True,
) -> dict[str, Any]:
    """One run; returns the figures (``bound`` < ``pods`` if it timed out). With
    ``nominations`` the server says v1.35 (KEP-5278 on, as on the v1.36 control plane of
    issue 25), so the controller nominates planned pods and the stand-in follows them."""
    clock = SystemClock()
    server = new_cluster(clock=clock)
    if nominations:
        server.version_info = dict(SIMULATED_CONTROL_PLANE)
    objects = catalog_objects(boot_delay)
    server.apply_manifests(objects)
    prices = {
        o["spec"]["template"]["metadata"]["labels"][wellknown.LABEL_INSTANCE_TYPE]: float(
            o["metadata"]["annotations"][PRICE_ANNOTATION]
        )
        for o in objects
        if o.get("kind") == "MachineDeployment"
    }
    emulation = Manager(server, clock=clock)
    add_capi_emulation(emulation, nodes=True)
    add_workload_emulation(emulation)
    scheduler = SimScheduler(server, emulation, clock)
    emulation.add(scheduler)
    driver = ThreadedDriver(emulation)
    mix = workload(pods)
    writer = Writer(server, mix)
    with tempfile.TemporaryDirectory() as tmp, HttpFront(server, record_requests=True) as front:
        kubeconfig = write_kubeconfig(front.url, Path(tmp) / "kubeconfig")
        log = keep_log or Path(tmp) / "controller.log"
        driver.start()
        threads_file = Path(tmp) / "threads.json"
        controller = start_controller(kubeconfig, log, controller_args, thread_cpu=threads_file)
        stats = ProcessStats(controller.pid)
        threads = ThreadCpu(controller.pid, threads_file)
        try:
            # Started once it has listed pods (the front records a watch only when it ends).
            _wait_until(
                lambda: (
                    any(r.path == "/api/v1/pods" for r in front.requests)
                    or controller.poll() is not None
                ),
                60,
                "the controller to list pods",
            )
            if controller.poll() is not None:
                raise RuntimeError(f"the controller exited ({controller.returncode}); see {log}")
            time.sleep(1.0)
            cpu_start, requests_start = stats.cpu_seconds(), len(front.requests)
            threads_start = threads.read()
            writing = threading.Thread(target=writer.run, daemon=True)
            writing.start()
            deadline = time.monotonic() + timeout
            bound = 0
            ready: dict[str, float] = {}  # Node -> when this loop first saw it Ready
            while time.monotonic() < deadline:
                bound, total = _bound(server)
                _note_ready(server, ready)
                if bound == pods and total == pods:
                    break
                time.sleep(POLL)
            all_bound = time.monotonic()
            cpu_total = stats.cpu_seconds()
            threads_end = threads.read()
            cpu_scale_up, rss = cpu_total - cpu_start, stats.peak_rss_mb()
            writing.join(timeout=5)
            # Only the controller speaks HTTP here: every request the front served is its own.
            served = front.requests
            startup_requests = requests_start
        finally:
            stop_controller(controller)
            driver.stop()
    figures = _figures(server, writer, served[startup_requests:], prices, all_bound)
    scales = [r.at for r in served if r.method == "PATCH" and r.path.endswith("/scale")]
    # The parts of the wait that are the controller's own, free of the boot delay's whole
    # second (it counts from a creationTimestamp): from the last pod to the last scale-up,
    # and from the last Node turning Ready to every pod bound (registration, scheduling).
    figures["last_pod_to_last_scale_up_s"] = (
        round(max(scales) - writer.created[-1], 2) if scales else None
    )
    # Whether kube-scheduler realized the nominations: pods bound where they were nominated
    # when tried, and nominated pods it bound elsewhere.
    figures["bound_as_nominated"] = scheduler.bound_as_nominated
    figures["bound_elsewhere_than_nominated"] = scheduler.bound_elsewhere
    figures["last_ready_to_all_bound_s"] = (
        round(all_bound - max(ready.values()), 2) if ready else None
    )
    return {
        "pods": pods,
        "bound": bound,
        "boot_delay": boot_delay,
        **figures,
        "last_pod_to_all_bound_less_boot_s": round(
            figures["last_pod_to_all_bound_s"] - boot_delay, 2
        ),
        "controller_cpu_s": round(cpu_scale_up, 2),
        "controller_cpu_s_with_start": round(cpu_total, 2),
        "controller_peak_rss_mb": round(rss, 1),
        "controller_cpu_s_by_thread": cpu_by_thread(threads_start, threads_end),
    }


def _figures(
    server: InMemoryAPIServer,
    writer: Writer,
    served: list[ServedRequest],
    prices: dict[str, float],
    all_bound: float,
) -> dict[str, Any]:
    nodes = server.list(NODES).items
    used = {p["spec"].get("nodeName") for p in server.list(PODS, NAMESPACE).items}
    claims = server.list(NODECLAIMS).items
    types = [
        (c["metadata"].get("labels") or {}).get(wellknown.LABEL_INSTANCE_TYPE, "") for c in claims
    ]
    controller = served
    creates = sorted(
        r.at for r in controller if r.method == "POST" and r.path.endswith("/nodeclaims")
    )
    verbs: dict[str, int] = {}
    for r in controller:
        key = _verb(r)
        verbs[key] = verbs.get(key, 0) + 1
    first, last = writer.created[0], writer.created[-1]
    rounds = _rounds(creates)
    busy = sum(span for count, span in rounds if count > 1)
    return {
        "first_pod_to_all_bound_s": round(all_bound - first, 2),
        "last_pod_to_all_bound_s": round(all_bound - last, 2),
        "pods_created_over_s": round(last - first, 2),
        "nodeclaims": len(claims),
        "rounds": len(rounds),
        "nodeclaims_per_s": round(sum(n for n, _ in rounds if n > 1) / busy, 1) if busy else None,
        "longest_round_creates_s": round(max((span for _, span in rounds), default=0.0), 2),
        "nodes": len(nodes),
        "empty_nodes": sum(1 for n in nodes if n["metadata"]["name"] not in used),
        "cost_per_hour": round(sum(prices.get(t, 0.0) for t in types), 3),
        "instance_types": dict(sorted((t, types.count(t)) for t in set(types))),
        "controller_requests": len(controller),
        "requests_per_node": round(len(controller) / len(nodes), 1) if nodes else None,
        "requests_by_verb": dict(sorted(verbs.items())),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--boot-delay", type=float, default=5.0)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument(
        "--controller-arg", action="append", default=[], help="an extra flag for the controller"
    )
    parser.add_argument("--keep-log", type=Path, help="keep the controller's log here")
    parser.add_argument(
        "--no-nominations",
        action="store_true",
        help="serve v1.31 (no KEP-5278): the controller nominates nothing",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    stop_on_sigterm()
    figures = run(
        args.pods,
        args.boot_delay,
        args.controller_arg,
        args.timeout,
        args.keep_log,
        nominations=not args.no_nominations,
    )
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    width = max(len(k) for k in figures)
    for key, value in figures.items():
        print(f"{key:<{width}}  {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
