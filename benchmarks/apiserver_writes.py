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

    .venv/bin/python benchmarks/apiserver_writes.py [--pods 2000] [--rounds 5] [--gap-us 50]
        [--watchers 2] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import orjson

from karpenter_capi.core.kube.resources import NAMESPACES, PODS
from karpenter_capi.sim.apiserver import InMemoryAPIServer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root
from benchmarks.apiserver_bench import bench_pod

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--gap-us", type=float, default=50.0)
    parser.add_argument("--watchers", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

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
    result = {
        kind: {
            "median_us": round(statistics.median(r[kind] for r in rounds), 2),
            "min_us": round(min(r[kind] for r in rounds), 2),
            "runs_us": [round(r[kind], 2) for r in rounds],
        }
        for kind in rounds[0]
    }
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
