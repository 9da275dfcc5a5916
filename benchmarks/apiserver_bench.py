"""How fast the simulated API serves, in process and over HTTP through the official client.

Why: the contract suite and the simulator lean on the in-memory API and its HTTP front; this
shows where time goes (store vs. wire vs. the official client's generated models) and how
watch fan-out scales with the number of informers. Figures, not assertions: run it and read.

    .venv/bin/python benchmarks/apiserver_bench.py [--pods 10000] [--watchers 1,10,50]
        [--events 200] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes.client import CoreV1Api

from karpenter_capi.core.kube.client import KubeClient
from karpenter_capi.core.kube.official import OfficialClient
from karpenter_capi.core.kube.resources import NAMESPACES, PODS
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.apiserver.http import HttpFront

Row = dict[str, Any]
_SENT_AT = "bench/sent-at"


def bench_pod(name: str, namespace: str, sent_at: float | None = None) -> dict[str, Any]:
    """A small pod with one container's requests (``apiserver_writes.py`` builds on it)."""
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": {"app": "bench", "tier": name[-1]},
    }
    if sent_at is not None:
        metadata["annotations"] = {_SENT_AT: repr(sent_at)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": "registry.example/app:1.0",
                    "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}},
                }
            ],
            "tolerations": [{"key": "karpenter.sh/disrupted", "operator": "Exists"}],
        },
    }


def _ensure_namespace(kube: KubeClient, name: str) -> None:
    try:
        kube.create(
            NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        )
    except Exception as exc:  # already there (or the store does not require namespaces)
        if getattr(exc, "code", None) != 409:
            raise


def _timed(label: str, count: int, unit: str, action: Callable[[], Any], *, repeat: int = 1) -> Row:
    """Best of ``repeat`` runs (reads are repeated so a first-call warm-up does not count)."""
    elapsed = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        elapsed = min(elapsed, time.perf_counter() - start)
    return {
        "benchmark": label,
        "count": count,
        "seconds": round(elapsed, 4),
        "rate": round(count / elapsed, 1) if elapsed else None,
        "unit": unit,
    }


def bench_create(pods: int, http_pods: int) -> tuple[list[Row], InMemoryAPIServer, HttpFront]:
    rows: list[Row] = []
    local = InMemoryAPIServer()
    _ensure_namespace(local, "bench")
    rows.append(
        _timed(
            "create pods in process",
            pods,
            "pods/s",
            lambda: [local.create(PODS, bench_pod(f"p-{i:05d}", "bench")) for i in range(pods)],
        )
    )
    server = InMemoryAPIServer()
    front = HttpFront(server).start()
    client = OfficialClient.from_url(front.url)
    _ensure_namespace(client, "bench")
    rows.append(
        _timed(
            "create pods over HTTP (OfficialClient)",
            http_pods,
            "pods/s",
            lambda: [
                client.create(PODS, bench_pod(f"p-{i:05d}", "bench")) for i in range(http_pods)
            ],
        )
    )
    # Fill the rest in process, so the list benchmarks see ``pods`` objects.
    for i in range(http_pods, pods):
        server.create(PODS, bench_pod(f"p-{i:05d}", "bench"))
    client.close()
    return rows, server, front


def bench_lists(front: HttpFront, pods: int) -> list[Row]:
    client = OfficialClient.from_url(front.url)
    generated = CoreV1Api(client.api_client)
    rows = [
        _timed(
            "list over HTTP, raw JSON (OfficialClient.list)",
            pods,
            "objects/s",
            lambda: client.list(PODS, "bench"),
            repeat=3,
        ),
        _timed(
            "list over HTTP, generated models (CoreV1Api.list_namespaced_pod)",
            pods,
            "objects/s",
            lambda: generated.list_namespaced_pod("bench"),
            repeat=3,
        ),
    ]

    def paginate() -> None:
        token: str | None = None
        seen = 0
        while True:
            page = client.list(PODS, "bench", limit=500, continue_token=token)
            seen += len(page.items)
            token = page.continue_token
            if not token:
                break
        if seen != pods:
            raise RuntimeError(f"pagination saw {seen} pods, expected {pods}")

    rows.append(
        _timed("paginated list over HTTP, limit=500", pods, "objects/s", paginate, repeat=3)
    )
    client.close()
    return rows


def bench_watch_fanout(front: HttpFront, watchers: int, events: int) -> Row:
    """``watchers`` watches on one namespace; ``events`` creates; delivery rate and latency."""
    namespace = f"fan-{watchers}"
    server = front.api
    _ensure_namespace(server, namespace)
    client = OfficialClient.from_url(front.url, pool_maxsize=watchers + 8)
    start_rv = client.list(PODS, namespace).resource_version
    latencies: list[float] = []
    lock = threading.Lock()
    done = threading.Barrier(watchers + 1)
    streams = [client.watch(PODS, namespace, resource_version=start_rv) for _ in range(watchers)]

    def consume(stream: Any) -> None:
        received = 0
        mine: list[float] = []
        for event in stream:
            now = time.perf_counter()
            sent = event.object.get("metadata", {}).get("annotations", {}).get(_SENT_AT)
            if event.type == "ADDED" and sent:
                mine.append(now - float(sent))
                received += 1
                if received == events:
                    break
        with lock:
            latencies.extend(mine)
        done.wait()

    threads = [threading.Thread(target=consume, args=(s,), daemon=True) for s in streams]
    for thread in threads:
        thread.start()
    begin = time.perf_counter()
    for i in range(events):
        server.create(PODS, bench_pod(f"w-{i:05d}", namespace, sent_at=time.perf_counter()))
    done.wait(timeout=120)
    elapsed = time.perf_counter() - begin
    for stream in streams:
        stream.close()
    client.close()
    delivered = len(latencies)
    ordered = sorted(latencies) or [0.0]
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return {
        "benchmark": f"watch fan-out over HTTP, {watchers} watcher(s) x {events} events",
        "count": delivered,
        "seconds": round(elapsed, 4),
        "rate": round(delivered / elapsed, 1) if elapsed else None,
        "unit": "events/s delivered",
        "latency_p50_ms": round(statistics.median(ordered) * 1000, 2),
        "latency_p99_ms": round(p99 * 1000, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=10_000, help="pods to create and list")
    parser.add_argument(
        "--http-pods",
        type=int,
        default=None,
        help="of those, how many to create over HTTP (default: all)",
    )
    parser.add_argument("--watchers", default="1,10,50", help="comma-separated watcher counts")
    parser.add_argument("--events", type=int, default=200, help="events per fan-out round")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    http_pods = args.pods if args.http_pods is None else min(args.http_pods, args.pods)

    rows, _server, front = bench_create(args.pods, http_pods)
    try:
        rows += bench_lists(front, args.pods)
        for count in (int(w) for w in args.watchers.split(",") if w.strip()):
            rows.append(bench_watch_fanout(front, count, args.events))
    finally:
        front.close()

    if args.json:
        json.dump(rows, sys.stdout, indent=2)
        print()
        return 0
    print(f"{'benchmark':<68} {'count':>7} {'seconds':>8} {'rate':>10}  unit / latency")
    for row in rows:
        extra = ""
        if "latency_p50_ms" in row:
            extra = f"  p50 {row['latency_p50_ms']} ms, p99 {row['latency_p99_ms']} ms"
        print(
            f"{row['benchmark']:<68} {row['count']:>7} {row['seconds']:>8} "
            f"{row['rate']!s:>10}  {row['unit']}{extra}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
