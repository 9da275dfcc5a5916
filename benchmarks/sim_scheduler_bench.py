"""How long the simulator's kube-scheduler stand-in takes to place a batch of pending pods.

Why: every scenario's time goes partly to the stand-in, and scoring nodes as kube-scheduler's
default profile does (LeastAllocated, BalancedAllocation, default topology spreading, ...)
costs more per pod and node than a plain fit test. This shows the price per cycle, by size.
Figures, not assertions: run it and read.

    .venv/bin/python benchmarks/sim_scheduler_bench.py [--sizes 1000x50,5000x200] [--json]

Each size ``PxN`` is P pods of ten owners (ReplicaSets, so the system default spreading
applies) on N nodes over three zones; the cycle's wall time includes the binding writes to the
in-memory API server.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from typing import Any

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.kube.resources import NODES, PODS
from karpenter_capi.core.runtime.manager import Manager
from karpenter_capi.core.runtime.stepped import SteppedDriver
from karpenter_capi.sim.cluster import new_cluster
from karpenter_capi.sim.scheduler import SimScheduler

Row = dict[str, Any]
_SHAPES = [("250m", "512Mi"), ("500m", "1Gi"), ("1", "2Gi"), ("100m", "256Mi"), ("2", "4Gi")]


def _node(name: str, zone: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": zone},
        },
        "spec": {},
    }


def _pod(index: int) -> dict[str, Any]:
    owner = index % 10
    cpu, memory = _SHAPES[owner % len(_SHAPES)]
    return {
        "metadata": {
            "name": f"app-{owner}-{index:05}",
            "labels": {"app": f"app-{owner}"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": f"app-{owner}",
                    "uid": f"rs-{owner}",
                    "controller": True,
                }
            ],
        },
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "pause",
                    "resources": {"requests": {"cpu": cpu, "memory": memory}},
                }
            ]
        },
    }


def measure(pods: int, nodes: int) -> Row:
    clock = FakeClock()
    api = new_cluster(clock=clock)
    manager = Manager(api, clock=clock)
    scheduler = SimScheduler(api, manager, clock)
    manager.add(scheduler)
    driver = SteppedDriver(manager)
    allocatable = {"cpu": "16", "memory": "64Gi", "pods": "110"}
    for i in range(nodes):
        created = api.create(NODES, _node(f"node-{i:04}", "abc"[i % 3]))
        created["status"] = {
            "capacity": allocatable,
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True"}],
        }
        api.update(NODES, created, subresource="status")
    for i in range(pods):
        api.create(PODS, _pod(i), "default")
    start = time.perf_counter()
    driver.run_until_quiet()
    seconds = time.perf_counter() - start
    bound = sum(1 for p in api.list(PODS, "default").items if p["spec"].get("nodeName"))
    return {
        "pods": pods,
        "nodes": nodes,
        "bound": bound,
        "cycles": scheduler.cycles,
        "seconds": round(seconds, 4),
        "pods_per_second": round(pods / seconds, 1) if seconds else None,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000x50,5000x200", help="PODSxNODES,...")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = []
    for size in args.sizes.split(","):
        pods, nodes = (int(part) for part in size.split("x"))
        rows.append(measure(pods, nodes))
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'pods':>6} {'nodes':>6} {'bound':>6} {'cycles':>6} {'seconds':>8} {'pods/s':>9}")
    for row in rows:
        print(
            f"{row['pods']:>6} {row['nodes']:>6} {row['bound']:>6} {row['cycles']:>6} "
            f"{row['seconds']:>8.3f} {row['pods_per_second']:>9}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
