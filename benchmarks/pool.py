"""Threads and memory of many whole operators in one process: shared ``WorkerPool`` or not.

Why: fleet mode (issue 28) runs one ``Operator`` per workload cluster in one process. Unpooled,
each operator's ``ThreadedDriver`` starts ``--workers`` threads per controller plus one per
periodic controller, on top of its informers' threads; a shared pool replaces all those worker
and timer threads with ``--pool-workers`` threads for the whole fleet. This measures what that
changes for ``--drivers`` idle operators (every controller wired, the generic_capi plugin, an
in-memory API server each, synced caches): threads alive, and resident memory (``VmRSS``)
before the operators start and once every cache has synced, so the drivers' own cost is the
difference. Each mode runs in a fresh process, so neither inherits the other's heap.

Figures, not assertions.

    .venv/bin/python benchmarks/pool.py [--drivers 100] [--workers 4] [--pool-workers 8]
        [--modes unpooled,pooled] [--json]
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from karpenter_capi.core.clock import SystemClock
from karpenter_capi.core.operator import Operator, OperatorOptions
from karpenter_capi.core.plugin_host import PluginEnvironment, Plugins
from karpenter_capi.core.runtime.pool import WorkerPool
from karpenter_capi.core.runtime.threaded import ThreadedDriver
from karpenter_capi.sim.cluster import new_cluster

SYNC_TIMEOUT = 600.0


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status (this benchmark needs Linux)")


def measure(mode: str, drivers: int, workers: int, pool_workers: int) -> dict[str, Any]:
    """Build ``drivers`` operators, start them pooled or not, and measure once synced."""
    clock = SystemClock()
    threads_before = threading.active_count()
    operators = []
    for index in range(drivers):
        server = new_cluster(clock=clock)
        environment = PluginEnvironment(workload=server, management=server, clock=clock)
        plugins = Plugins.load(["generic_capi"], environment)
        options = OperatorOptions(
            leader_elect=False, metrics_port=None, workers=workers, packing_budget=0
        )
        operators.append(Operator(server, server, plugins, clock, options, name=f"c{index}"))
    rss_built = _rss_mib()
    pool = WorkerPool(pool_workers, name="fleet").start() if mode == "pooled" else None
    started = time.monotonic()
    running = []
    for operator in operators:
        driver = ThreadedDriver(
            operator.manager,
            workers=workers,
            is_leader=operator.is_leader,
            pool=pool,
            name=operator.name,
        )
        driver.start()
        running.append(driver)
    synced = all(driver.wait_for_sync(SYNC_TIMEOUT) for driver in running)
    sync_seconds = time.monotonic() - started
    # Let every controller's first reconcile or periodic run happen before measuring.
    time.sleep(2.0)
    rss_running = _rss_mib()
    threads = threading.active_count() - threads_before
    controllers = len(operators[0].manager.entries) if operators else 0
    informers = len(operators[0].manager.informers) if operators else 0
    for driver in running:
        driver.stop(30)
    if pool is not None:
        pool.close(30)
    return {
        "mode": mode,
        "drivers": drivers,
        "controllers_per_driver": controllers,
        "informers_per_driver": informers,
        "workers": workers,
        "pool_workers": pool_workers if pool is not None else None,
        "synced": synced,
        "sync_seconds": round(sync_seconds, 2),
        "threads": threads,
        "threads_per_driver": round(threads / max(1, drivers), 1),
        "rss_built_mib": round(rss_built, 1),
        "rss_running_mib": round(rss_running, 1),
        "rss_drivers_mib": round(rss_running - rss_built, 1),
        "rss_per_driver_mib": round((rss_running - rss_built) / max(1, drivers), 2),
    }


def _child(mode: str, args: argparse.Namespace) -> dict[str, Any]:
    command = [
        sys.executable,
        __file__,
        "--child",
        mode,
        "--drivers",
        str(args.drivers),
        "--workers",
        str(args.workers),
        "--pool-workers",
        str(args.pool_workers),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--drivers", type=int, default=100)
    parser.add_argument("--workers", type=int, default=4, help="per controller (--workers)")
    parser.add_argument("--pool-workers", type=int, default=8)
    parser.add_argument(
        "--modes",
        default="unpooled,pooled",
        help="which to measure, comma-separated (unpooled 100 needs ~6000 threads)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--child", choices=("pooled", "unpooled"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    if args.child:
        print(json.dumps(measure(args.child, args.drivers, args.workers, args.pool_workers)))
        return 0
    modes = [mode for mode in args.modes.split(",") if mode in ("unpooled", "pooled")]
    if not modes:
        parser.error("--modes takes unpooled, pooled or both")
    report = [_child(mode, args) for mode in modes]
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(
        f"{args.drivers} idle operators ({report[0]['controllers_per_driver']} controllers, "
        f"{report[0]['informers_per_driver']} informers each), --workers {args.workers}"
    )
    header = ("mode", "threads", "/driver", "RSS MiB", "drivers", "/driver")
    print(f"{header[0]:<10} " + " ".join(f"{cell:>8}" for cell in header[1:]))
    for row in report:
        print(
            f"{row['mode']:<10} {row['threads']:>8} {row['threads_per_driver']:>8} "
            f"{row['rss_running_mib']:>8} {row['rss_drivers_mib']:>8} "
            f"{row['rss_per_driver_mib']:>8}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
