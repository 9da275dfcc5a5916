"""CPU, bytes and samples of one ``/metrics`` render of a fleet controller serving N clusters.

Why: in fleet mode one process renders every served cluster's metrics on each scrape
(Prometheus scrapes every 15-30 s). At 100 clusters that was 67,220 samples and 8.8 MB, 0.64
CPU-s a render in process, held under the GIL against every cluster's decisions: more CPU than
the whole settled fleet spends between two scrapes.

How: N ``Metrics`` (the real class, its real registry and metric objects) are fed through the
typed methods the controllers call, with a plausible number of observations per controller and
cluster after a scale-up wave (durations drawn from a fixed seed), and added to a real
``FleetMetrics``, as ``run --fleet`` wires them. Then, ``--rounds`` times each:

* ``cold``: every cluster's every series changed since the last render (a wave);
* ``settled``: between renders, only the periodic controllers of each cluster reconciled (what
  a settled fleet records between two scrapes);
* the garbage collections one settled render set off (young, middle, old);
* ``http``: a GET of ``/metrics`` through the controller's ``ObservabilityServer``, as
  Prometheus scrapes it (wall time, and the process's CPU for it).

CPU is ``time.process_time`` around ``FleetMetrics.render()`` (the feeding between renders is
not counted). Samples are counted with prometheus_client's own parser, outside the timing.

    PYTHONPATH=src .venv/bin/python benchmarks/metrics_render.py [--clusters 100]
        [--rounds 5] [--no-http] [--young-threshold 10000] [--json]
"""

from __future__ import annotations

import argparse
import gc
import gzip
import json
import random
import statistics
import sys
import time
import urllib.request
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from karpenter_capi.core.clock import FakeClock
from karpenter_capi.core.fleet.metrics import FleetMetrics
from karpenter_capi.core.observability import Metrics, ObservabilityServer

CONTROLLERS: dict[str, int] = {
    # controller -> reconciles per cluster after a scale-up wave (a fleet member's controllers
    # that ran in one, as ``run --fleet`` reported them: 9 a cluster).
    "provisioner": 120,
    "provisioner.nominations": 120,
    "nodeclaim.lifecycle": 70,
    "nodeclaim.disruption": 80,
    "nodeclaim.expiration": 45,
    "nodepool.counter": 45,
    "node.unclaimed": 45,
    "disruption": 60,
    "interruption": 300,
}
PERIODIC = ("provisioner", "disruption", "interruption", "nodeclaim.disruption")
"""The controllers that run on a timer, so reconcile between two scrapes of a settled fleet."""
SETTLED_RUNS = 15
"""Reconciles of each periodic controller between two scrapes (15 s at four looks a second,
spread over four controllers)."""


def _duration(rng: random.Random, median: float) -> float:
    return rng.lognormvariate(0.0, 1.0) * median


def feed(metrics: Metrics, rng: random.Random, clock: FakeClock) -> None:
    """One cluster's metrics as a scale-up wave leaves them."""
    for controller, runs in CONTROLLERS.items():
        for i in range(runs):
            metrics.on_reconcile(controller, _duration(rng, 0.01), None if i % 50 else True)
        metrics.on_queue_depth(controller, rng.randrange(3))
    for _ in range(40):
        metrics.observe_scheduling(_duration(rng, 0.05))
    for _ in range(20):
        metrics.observe_scheduling(_duration(rng, 0.02), controller="disruption")
    for method in ("empty", "underutilized", "drifted"):
        for _ in range(20):
            metrics.observe_disruption_evaluation(method, "single", _duration(rng, 0.01))
    metrics.set_disruption_eligible("underutilized", 0)
    metrics.set_disruption_eligible("drifted", 0)
    metrics.set_allowed_disruptions("default", "underutilized", 1)
    nodes = rng.randrange(2, 6)
    for _ in range(nodes):
        for method in ("Create", "Get"):
            with metrics.cloudprovider_call(method, provider="generic_capi", controller="lc"):
                clock.advance(_duration(rng, 0.05))
        metrics.nodeclaim_created("default")
        metrics.nodeclaim_launched("default")
        metrics.nodeclaim_registered("default")
        metrics.nodeclaim_initialized("default")
        metrics.node_created("default", zone="zone-a")
    for _ in range(nodes * 10):
        metrics.observe_pod_startup(_duration(rng, 40.0))
    metrics.set_nodepool_usage("default", {"cpu": 4.0 * nodes, "memory": 1.6e10 * nodes})
    metrics.set_nodepool_limits("default", {"cpu": 1000.0})


def settle(members: list[Metrics], rng: random.Random) -> None:
    """What a settled fleet records between two scrapes: its periodic controllers' runs."""
    for metrics in members:
        for controller in PERIODIC:
            for _ in range(SETTLED_RUNS):
                metrics.on_reconcile(controller, _duration(rng, 0.002), None)


def build(clusters: int, seed: int = 7) -> tuple[FleetMetrics, list[Metrics]]:
    rng = random.Random(seed)
    fleet = FleetMetrics()
    members = []
    for i in range(clusters):
        clock = FakeClock()
        metrics = Metrics(clock)
        feed(metrics, rng, clock)
        fleet.add(f"fleet/cluster-{i:03d}", metrics)
        members.append(metrics)
    return fleet, members


def _cpu(call: Any) -> tuple[float, Any]:
    start = time.process_time()
    out = call()
    return time.process_time() - start, out


def _collections() -> list[int]:
    return [generation["collections"] for generation in gc.get_stats()]


def _gc_during(call: Any) -> list[int]:
    """The collections (young, middle, old) the collector ran during ``call``."""
    before = _collections()
    call()
    return [after - was for after, was in zip(_collections(), before, strict=True)]


def measure(clusters: int, rounds: int, http: bool) -> dict[str, Any]:
    fleet, members = build(clusters)
    rng = random.Random(11)
    body = fleet.render()
    samples = sum(len(f.samples) for f in text_string_to_metric_families(body.decode()))
    cold, settled = [], []
    for _ in range(rounds):
        for metrics in members:  # every series of every cluster moves
            feed(metrics, rng, FakeClock())
        cold.append(_cpu(fleet.render)[0])
        settle(members, rng)
        settled.append(_cpu(fleet.render)[0])
    settle(members, rng)
    collections = _gc_during(fleet.render)
    report: dict[str, Any] = {
        "clusters": clusters,
        "samples": samples,
        "bytes": len(body),
        "gzip_bytes": len(gzip.compress(body, 6)),
        "gzip_cpu_seconds": _cpu(lambda: gzip.compress(body, 6))[0],
        "render_cpu_seconds": {"cold": cold, "settled": settled},
        "render_cpu_median": {
            "cold": statistics.median(cold),
            "settled": statistics.median(settled),
        },
        "gc_collections_per_settled_render": collections,
    }
    if http:
        server = ObservabilityServer(fleet, port=0, ready=lambda: True).start()
        walls, cpus = [], []
        try:
            for _ in range(rounds):
                settle(members, rng)
                cpu0, wall0 = time.process_time(), time.perf_counter()
                with urllib.request.urlopen(f"{server.url}/metrics", timeout=60) as response:
                    got = response.read()
                walls.append(time.perf_counter() - wall0)
                cpus.append(time.process_time() - cpu0)
        finally:
            server.close()
        report["http"] = {
            "bytes": len(got),
            "wall_seconds": walls,
            "cpu_seconds": cpus,
            "wall_median": statistics.median(walls),
            "cpu_median": statistics.median(cpus),
        }
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--clusters", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-http", action="store_true", help="skip the scrape over HTTP")
    parser.add_argument(
        "--young-threshold",
        type=int,
        help="the collector's young threshold (a fleet controller runs at 10000; "
        "core/runtime/collector.py); Python's default (700) when omitted",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.young_threshold:
        gc.set_threshold(args.young_threshold, *gc.get_threshold()[1:])
    report = measure(args.clusters, args.rounds, http=not args.no_http)
    if args.json:
        print(json.dumps(report))
        return 0
    med = report["render_cpu_median"]
    print(f"{report['clusters']} clusters: {report['samples']:,} samples, {report['bytes']:,} B")
    print(f"  (gzip -6: {report['gzip_bytes']:,} B, {report['gzip_cpu_seconds']:.3f} CPU-s)")
    print(f"render CPU-s, median of {args.rounds}: cold {med['cold']:.3f}, ", end="")
    print(f"settled {med['settled']:.3f}")
    for kind, runs in report["render_cpu_seconds"].items():
        print(f"  {kind}: " + ", ".join(f"{run:.3f}" for run in runs))
    young, middle, old = report["gc_collections_per_settled_render"]
    print(f"collections during a settled render: young {young}, middle {middle}, old {old}")
    if "http" in report:
        h = report["http"]
        print(f"GET /metrics: wall {h['wall_median']:.3f} s, CPU {h['cpu_median']:.3f} s (medians)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
