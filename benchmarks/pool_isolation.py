"""Does one cluster's 429 storm slow the others down on a shared ``WorkerPool``?

Why: issue 28 asks that one workload cluster storming 429s change the other clusters' p99 by
less than 10%. The pool's fairness (clusters in turn) and per-cluster caps are what should
make that true. This measures it with the real runtime (``Manager``, ``ThreadedDriver``,
informers over the in-memory API, the pool) and a stand-in controller per cluster whose
reconcile costs ``--reconcile-ms`` (an API round trip): ``--clusters`` quiet clusters each get
``--rate`` new keys a second for ``--seconds``; with ``--storm``, one more cluster starts with
a ``--backlog`` of keys whose every reconcile waits ``--storm-ms`` and then fails with 429, as
an overloaded API server answers, retried with each key's backoff for the whole run.

Figures, not assertions: the quiet clusters' latency from a key's creation to the start of its
reconcile (p50, p99, max), without and with the storm, pooled (``--pool-workers``) and, for
reference, unpooled (``--workers`` threads per cluster).

    .venv/bin/python benchmarks/pool_isolation.py [--clusters 20] [--pool-workers 8]
        [--per-cluster N] [--seconds 5] [--rate 10] [--backlog 2000] [--modes pooled,unpooled]
        [--json]
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from karpenter_capi.core.clock import SystemClock
from karpenter_capi.core.kube.errors import TooManyRequests
from karpenter_capi.core.kube.resources import CONFIGMAPS, Resource
from karpenter_capi.core.runtime.controller import DONE, WORKLOAD, Key, Result, Watch
from karpenter_capi.core.runtime.manager import Manager
from karpenter_capi.core.runtime.pool import WorkerPool
from karpenter_capi.core.runtime.threaded import ThreadedDriver
from karpenter_capi.sim.apiserver import InMemoryAPIServer


class _StandIn:
    """Reconciles ConfigMaps: waits like an API call, records latency or fails with a 429."""

    name = "standin"
    primary = CONFIGMAPS
    primary_cluster = WORKLOAD

    def __init__(self, cost: float, created: dict[str, float] | None, storm: bool) -> None:
        self._cost = cost
        self._created = created
        self._storm = storm
        self._pause = threading.Event()  # never set: waits are the API's latency
        self.latencies: list[float] = []

    def watches(self) -> Sequence[Watch]:
        return []

    def reads(self) -> Sequence[tuple[Resource, str]]:
        return []

    def reconcile(self, key: Key) -> Result:
        if self._created is not None:
            created = self._created.get(key)
            if created is not None:
                self.latencies.append(time.monotonic() - created)
        self._pause.wait(self._cost)
        if self._storm:
            raise TooManyRequests("the API server is overloaded")
        return DONE


def _configmap(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default"}, "data": {}}


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def run(mode: str, storm: bool, args: argparse.Namespace) -> dict[str, Any]:
    clock = SystemClock()
    pool = None
    if mode == "pooled":
        pool = WorkerPool(args.pool_workers, per_cluster=args.per_cluster, name="fleet").start()
    quiet: list[tuple[InMemoryAPIServer, _StandIn, dict[str, float]]] = []
    drivers: list[ThreadedDriver] = []

    def add(name: str, controller: _StandIn, api: InMemoryAPIServer) -> None:
        manager = Manager(api, clock=clock, controllers=[controller])
        driver = ThreadedDriver(manager, workers=args.workers, pool=pool, name=name)
        driver.start()
        drivers.append(driver)

    if storm:
        api = InMemoryAPIServer(clock=clock)
        for index in range(args.backlog):
            api.create(CONFIGMAPS, _configmap(f"storm-{index}"), "default")
        add("storm", _StandIn(args.storm_ms / 1000, None, storm=True), api)
    for index in range(args.clusters):
        api = InMemoryAPIServer(clock=clock)
        created: dict[str, float] = {}
        controller = _StandIn(args.reconcile_ms / 1000, created, storm=False)
        add(f"quiet-{index}", controller, api)
        quiet.append((api, controller, created))
    for driver in drivers:
        driver.wait_for_sync(60)
    # Keys arrive round by round, every cluster one key per round, at ``rate`` rounds/s.
    rounds = int(args.seconds * args.rate)
    start = time.monotonic()
    for round_index in range(rounds):
        for api, _, created in quiet:
            name = f"k{round_index}"
            created[f"default/{name}"] = time.monotonic()
            api.create(CONFIGMAPS, _configmap(name), "default")
        delay = start + (round_index + 1) / args.rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(len(c.latencies) < rounds for _, c, _ in quiet):
        time.sleep(0.05)
    for driver in drivers:
        driver.stop(30)
    if pool is not None:
        pool.close(30)
    latencies = [value for _, controller, _ in quiet for value in controller.latencies]
    return {
        "mode": mode,
        "storm": storm,
        "reconciled": len(latencies),
        "expected": rounds * len(quiet),
        "p50_ms": round(_percentile(latencies, 0.5) * 1000, 1),
        "p99_ms": round(_percentile(latencies, 0.99) * 1000, 1),
        "max_ms": round(max(latencies, default=float("nan")) * 1000, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clusters", type=int, default=20)
    parser.add_argument("--pool-workers", type=int, default=8)
    parser.add_argument("--per-cluster", type=int, default=None, help="pool cap per cluster")
    parser.add_argument("--workers", type=int, default=4, help="per controller")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rate", type=float, default=10.0, help="keys/s per quiet cluster")
    parser.add_argument("--reconcile-ms", type=float, default=5.0)
    parser.add_argument("--backlog", type=int, default=2000)
    parser.add_argument("--storm-ms", type=float, default=50.0)
    parser.add_argument("--modes", default="pooled,unpooled")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.CRITICAL)
    modes = [mode for mode in args.modes.split(",") if mode in ("pooled", "unpooled")]
    # A short run first, discarded: the first run in a process pays for lazy imports and
    # warm-up, which would otherwise land on whichever scenario comes first.
    run(modes[0] if modes else "pooled", False, argparse.Namespace(**{**vars(args), "seconds": 1}))
    report = [run(mode, storm, args) for mode in modes for storm in (False, True)]
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(
        f"{args.clusters} quiet clusters at {args.rate:g} keys/s each, {args.reconcile_ms:g} ms "
        f"a reconcile; storm: {args.backlog} keys failing with 429 after {args.storm_ms:g} ms"
    )
    print(f"{'mode':<9} {'storm':<6} {'reconciled':>11} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for row in report:
        done = f"{row['reconciled']}/{row['expected']}"
        print(
            f"{row['mode']:<9} {str(row['storm']).lower():<6} {done:>11} "
            f"{row['p50_ms']:>8} {row['p99_ms']:>8} {row['max_ms']:>8}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
