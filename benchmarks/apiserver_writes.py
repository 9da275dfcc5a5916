"""What one write costs the in-memory API server and its watchers, in process CPU.

Why: the fleet benchmarks' emulators spend a fifth of their CPU in ``InMemoryAPIServer.patch``
and its watch fan-out: the kube-scheduler stand-in's ``PodScheduled`` status patches, the
bindings, the kubelet's and the ReplicaSets' status writes, each an event for the emulation's
own informer and for the controller's watch over HTTP. This writes the stand-in's status patch
(the answer shared, as the stand-in asks) and an annotation (a merge patch of the main resource,
answered with a copy, as to the other in-process writers) to N pods, with two watchers reading
every event on threads of their own (one as the emulation's informer reads, one encoding each
event as the HTTP front does), and reports the whole process's CPU per write: the writer's and
the readers'. ``--gap`` puts that much busy work between writes, so each write finds its
readers waiting (each write a wake-up), as a loaded emulator's writes mostly do. Figures, not
assertions: run it and read.

``--crds`` times the writes of custom resources the fleet makes most (per 100-cluster wave:
~5,400 NodeClaim patches, ~3,800 NodeClaim status patches, ~2,000 NodePool status patches,
~2,000 Machine patches, 2,000 NodeClaim creates), each through the CRD path (pruning,
defaulting, schema validation with ratcheting, CEL rules), on objects shaped like the fleet's
(``apiserver_crd_objects``): the writer's thread CPU per write, median over rounds, no watchers.

    .venv/bin/python benchmarks/apiserver_writes.py [--pods 2000] [--rounds 5] [--gap-us 50]
        [--watchers 2] [--crds [--objects 300]] [--json]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import orjson

from karpenter_capi.core.api.crds import generate_crds
from karpenter_capi.core.kube.resources import MACHINES, NAMESPACES, NODECLAIMS, NODEPOOLS, PODS
from karpenter_capi.sim.apiserver import InMemoryAPIServer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root
from benchmarks import apiserver_crd_objects as crd
from benchmarks.apiserver_bench import bench_pod
from benchmarks.fleet_emulators import GC_THRESHOLDS

NS = "bench"


def _pod(index: int) -> dict[str, Any]:
    """A pod as a ReplicaSet makes it (an owner, labels, one container with requests)."""
    pod = bench_pod(f"web-{index}", NS)
    pod["metadata"]["labels"] = {"app": "web", "pod-template-hash": "7d4b9c8f6"}
    pod["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "name": "web-7d4b9c8f6",
            "uid": "0b5c7c9e-2f43-4f7e-9d55-0d1c8a3c4b21",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    return pod


def _unschedulable(attempt: int) -> dict[str, Any]:
    """The stand-in's ``PodScheduled=False`` status patch (a new message each attempt)."""
    condition = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": f"0/{attempt} nodes are available: {attempt} Insufficient cpu.",
        "lastTransitionTime": "2026-12-05T12:00:00Z",
    }
    return {"status": {"conditions": [condition]}}


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _readers(server: InMemoryAPIServer, count: int) -> list[Any]:
    """``count`` shared watches of the pods, each read on a thread: even ones as an informer
    (every event looked at), odd ones as the HTTP front (every event encoded)."""
    streams = []
    seen: list[str] = []

    def read(stream: Any, encode: bool) -> None:
        for event in stream:
            if encode:
                orjson.dumps({"type": event.type, "object": event.object})
            else:
                seen.append(event.object["metadata"]["resourceVersion"])
                seen.clear()

    for index in range(count):
        stream = server.watch(PODS, NS, resource_version=server.resource_version, shared=True)
        streams.append(stream)
        threading.Thread(target=read, args=(stream, index % 2 == 1), daemon=True).start()
    return streams


def _round(server: InMemoryAPIServer, pods: int, attempt: int, gap: float) -> dict[str, float]:
    """Process CPU per write (µs, the gap's busy work taken out), per kind of write."""
    out: dict[str, float] = {}
    for kind in ("unschedulable", "annotate"):
        busy = 0.0
        start = time.process_time()
        for index in range(pods):
            if kind == "unschedulable":
                server.patch(
                    PODS,
                    f"web-{index}",
                    _unschedulable(attempt),
                    NS,
                    subresource="status",
                    shared=True,
                )
            else:
                patch = {"metadata": {"annotations": {"bench/attempt": str(attempt)}}}
                server.patch(PODS, f"web-{index}", patch, NS)
            if gap:
                before = time.thread_time()
                _busy(gap)
                busy += time.thread_time() - before
        time.sleep(0.05)  # the readers finish the round's events
        out[kind] = (time.process_time() - start - busy) / pods * 1e6
    return out


def crd_server(objects: int) -> InMemoryAPIServer:
    """A server with Karpenter's and Cluster API's CRDs, ``objects`` NodeClaims, NodePools
    and Machines."""
    server = InMemoryAPIServer(random_seed=1)
    server.apply_manifests(generate_crds())
    server.register_cluster_api()
    server.create(NAMESPACES, {"metadata": {"name": crd.NS}})
    for index in range(objects):
        server.create(NODEPOOLS, crd.nodepool(index))
        server.create(NODECLAIMS, crd.nodeclaim(index))
        server.create(MACHINES, crd.machine(index))
    return server


def _crd_write(server: InMemoryAPIServer, kind: str, index: int, attempt: int) -> None:
    if kind == "nodeclaim_create":
        created = crd.nodeclaim(index)
        created["metadata"]["name"] = f"new-{attempt}-{index:05d}"
        server.create(NODECLAIMS, created)
    elif kind == "nodeclaim_meta":
        server.patch(NODECLAIMS, f"catalog-{index:05d}", crd.nodeclaim_annotation(attempt))
    elif kind == "nodeclaim_status":
        server.patch(
            NODECLAIMS,
            f"catalog-{index:05d}",
            crd.nodeclaim_status(index, attempt),
            subresource="status",
        )
    elif kind == "nodepool_status":
        server.patch(
            NODEPOOLS, f"catalog-{index}", crd.nodepool_status(attempt), subresource="status"
        )
    else:
        name = crd.machine(index)["metadata"]["name"]
        server.patch(MACHINES, name, crd.machine_annotation(index, attempt), crd.NS)


CRD_WRITES = ("nodeclaim_create", "nodeclaim_meta", "nodeclaim_status", "nodepool_status")


def crd_round(server: InMemoryAPIServer, objects: int, attempt: int) -> dict[str, float]:
    """The writer's thread CPU per write (µs), per kind of custom-resource write."""
    out: dict[str, float] = {}
    for kind in (*CRD_WRITES, "machine_patch"):
        start = time.thread_time()
        for index in range(objects):
            _crd_write(server, kind, index, attempt)
        out[kind] = (time.thread_time() - start) / objects * 1e6
    return out


def _summary(rounds: list[dict[str, float]]) -> dict[str, Any]:
    return {
        kind: {
            "median_us": round(statistics.median(r[kind] for r in rounds), 2),
            "min_us": round(min(r[kind] for r in rounds), 2),
            "runs_us": [round(r[kind], 2) for r in rounds],
        }
        for kind in rounds[0]
    }


def _crds(args: argparse.Namespace) -> None:
    server = crd_server(args.objects)
    # As a fleet emulator starts (``fleet_emulators._child``): what exists is frozen and
    # collections are rarer, so a write's figure is its own work, not a full collection's
    # walk of every object the benchmark made.
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    # The first round warms the compiled rules' and the schema's caches; not counted.
    rounds = [crd_round(server, args.objects, attempt) for attempt in range(args.rounds + 1)]
    result = _summary(rounds[1:])
    if args.json:
        print(json.dumps({"args": vars(args), "per_write": result}, indent=2))
        return
    print(f"{args.objects} objects of each kind, writer thread CPU a write")
    for kind, figures in result.items():
        print(
            f"{kind:17s} median {figures['median_us']:7.2f} us, min {figures['min_us']:7.2f} us"
            f"  (runs: {figures['runs_us']})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--gap-us", type=float, default=50.0)
    parser.add_argument("--watchers", type=int, default=2)
    parser.add_argument("--crds", action="store_true", help="custom-resource writes instead")
    parser.add_argument("--objects", type=int, default=300)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.crds:
        _crds(args)
        return

    server = InMemoryAPIServer(random_seed=1)
    server.create(NAMESPACES, {"metadata": {"name": NS}})
    for index in range(args.pods):
        server.create(PODS, _pod(index))
    streams = _readers(server, args.watchers)
    rounds = [
        _round(server, args.pods, attempt, args.gap_us / 1e6) for attempt in range(args.rounds)
    ]
    for stream in streams:
        stream.close()
    result = _summary(rounds)
    if args.json:
        print(json.dumps({"args": vars(args), "per_write": result}, indent=2))
        return
    print(f"{args.pods} pods, {args.watchers} watchers, {args.gap_us:g} us of work between writes")
    for kind, figures in result.items():
        print(
            f"{kind:14s} process CPU a write: median {figures['median_us']:6.2f} us, "
            f"min {figures['min_us']:6.2f} us  (runs: {figures['runs_us']})"
        )


if __name__ == "__main__":
    main()
