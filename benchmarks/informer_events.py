"""CPU per watch event of the controller's pods informer, wire line to handlers.

Why: in a fleet wave the controller's ``informer-workload/pods`` thread is its second biggest
CPU user after the worker pool (16.5 CPU-s at 100 clusters: each pod is seen about 14 times,
created, marked unschedulable, nominated, bound, running...), and that CPU competes for the one
interpreter with every cluster's provisioning decision. This measures what one event costs.

How: a shipped scenario (``basic-1000`` by default) runs in the simulation with its pods' watch
history kept; the pod events it produced (real shapes and sequence: the emulated ReplicaSets,
scheduler and kubelets wrote them) are serialized as the HTTP front sends them, one JSON line
each. Then the operator the scenario wired (its pods informer with the indexes and handlers a
fleet member registers: termination, disruption conditions, the provisioner's wake) is emptied
and fed every line through the official client's parser and ``Informer._apply``, ``--rounds``
times; CPU (``time.process_time``) per event is reported, with each stage's share measured the
same way (parse alone; parse and store without handlers; everything with the collector off).
``wire+parse`` is the read side of the HTTP path as well: the lines served as one chunk each
by a local socket (sent as fast as the reader takes them) and read back through the
official client's watch (urllib3's chunked reader, ``OfficialWatch``), CPU of the reading
thread only (``time.thread_time``).

    PYTHONPATH=src .venv/bin/python benchmarks/informer_events.py [--scenario basic-1000]
        [--until 240] [--rounds 5] [--save EVENTS.jsonl] [--json]
"""

from __future__ import annotations

import argparse
import gc
import json
import socket
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from karpenter_capi.core.clock import SystemClock
from karpenter_capi.core.kube._handlers import HandlerSet
from karpenter_capi.core.kube._official_wire import _parse_event
from karpenter_capi.core.kube.client import WatchEvent
from karpenter_capi.core.kube.informer import Informer
from karpenter_capi.core.kube.official import OfficialClient
from karpenter_capi.core.kube.resources import PODS
from karpenter_capi.core.operator import Operator, OperatorOptions
from karpenter_capi.core.plugin_host import PluginEnvironment, Plugins
from karpenter_capi.core.runtime.manager import WORKLOAD
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.scenario.runner import run
from karpenter_capi.sim.scenario.schema import load_scenario


def record(scenario: str, until: float) -> tuple[list[bytes], InMemoryAPIServer]:
    """The scenario's pod events as wire lines, and its API server as the run left it."""
    servers: list[InMemoryAPIServer] = []

    def on_cluster(server: InMemoryAPIServer) -> None:
        server.set_watch_history(10_000_000)
        servers.append(server)

    run(
        load_scenario(scenario),
        until=until,
        on_cluster=on_cluster,
    )
    stream = servers[0].watch(PODS, resource_version="1", timeout_seconds=0)
    lines = [orjson.dumps({"type": event.type, "object": event.object}) + b"\n" for event in stream]
    return lines, servers[0]


def fleet_member(server: InMemoryAPIServer) -> Operator:
    """An operator wired as ``karpenter-capi run --fleet`` wires each member (its pods
    informer's handlers and indexes are what this measures); nothing is started."""
    clock = SystemClock()
    environment = PluginEnvironment(workload=server, management=server, clock=clock)
    plugins = Plugins.load(["generic_capi"], environment)
    options = OperatorOptions(
        leader_elect=False,
        metrics_port=None,
        wake_on_pods=True,
        batch_complete_idle=0.2,
        packing_budget=0,
    )
    return Operator(server, server, plugins, clock, options, name="member")


def _reset(informer: Informer[Any]) -> None:
    informer.store.replace({})
    informer._versions.clear()


def _cpu_per_event(lines: list[bytes], feed: Callable[[bytes], None], rounds: int) -> list[float]:
    """µs of CPU per line, one figure per round."""
    figures = []
    for _ in range(rounds):
        gc.collect()
        started = time.process_time()
        for line in lines:
            feed(line)
        figures.append((time.process_time() - started) / len(lines) * 1e6)
    return figures


def _wire_per_event(lines: list[bytes], rounds: int) -> list[float]:
    """µs of the reading thread's CPU per event, each line served as one HTTP chunk."""
    body = b"".join(b"%x\r\n%s\r\n" % (len(line), line) for line in lines) + b"0\r\n\r\n"
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
    listener = socket.create_server(("127.0.0.1", 0))
    sent = threading.Semaphore(0)  # the answer is on its way

    def serve() -> None:
        for _ in range(rounds):
            connection, _address = listener.accept()
            with connection, connection.makefile("rb") as request:
                while request.readline() not in (b"\r\n", b""):
                    pass
                sent.release()  # the reader starts now: more than the socket holds is sent
                connection.sendall(head + b"Connection: close\r\n\r\n" + body)
                connection.recv(1)  # until the client closes

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    client = OfficialClient.from_url(f"http://127.0.0.1:{listener.getsockname()[1]}")
    figures = []
    try:
        for _ in range(rounds):
            stream = client.watch(PODS)
            sent.acquire()
            gc.collect()
            started = time.thread_time()
            events = sum(1 for _ in stream)
            figures.append((time.thread_time() - started) / max(1, events) * 1e6)
    finally:
        client.close()
        server.join()
        listener.close()
    return figures


def measure(lines: list[bytes], operator: Operator, rounds: int) -> dict[str, Any]:
    informer: Informer[Any] = operator.manager.informer(PODS, WORKLOAD)
    handlers = informer._handlers

    def parse(line: bytes) -> None:
        _parse_event(line)

    def apply(line: bytes) -> None:
        event = _parse_event(line)
        if event is not None:
            informer._apply(event)

    # Each round starts from an empty cache: a pod's first line is its ADDED again.
    stages: dict[str, list[float]] = {
        "wire+parse": _wire_per_event(lines, rounds),
        "parse": [],
        "parse+store": [],
        "total": [],
        "total, gc off": [],
    }
    for _ in range(rounds):
        stages["parse"] += _cpu_per_event(lines, parse, 1)
        informer._handlers = HandlerSet(handlers.name)
        _reset(informer)
        stages["parse+store"] += _cpu_per_event(lines, apply, 1)
        informer._handlers = handlers
        _reset(informer)
        stages["total"] += _cpu_per_event(lines, apply, 1)
        # The same with the cyclic collector off: the path's own CPU, without the collections
        # its allocations bring (which grow with the heap: far more in a 100-cluster process).
        _reset(informer)
        gc.disable()
        try:
            stages["total, gc off"] += _cpu_per_event(lines, apply, 1)
        finally:
            gc.enable()
    kinds: dict[str, int] = {}
    for line in lines:
        kind = str(orjson.loads(line)["type"])
        kinds[kind] = kinds.get(kind, 0) + 1
    pods = len({_key(line) for line in lines})
    return {
        "events": len(lines),
        "pods": pods,
        "event_types": kinds,
        "bytes_per_event": round(sum(map(len, lines)) / len(lines)),
        "handlers": len(handlers._handlers),
        "indexes": sorted(informer.store._indexers),
        "us_per_event": {name: round(statistics.median(v), 2) for name, v in stages.items()},
        "us_per_event_runs": {name: [round(x, 2) for x in v] for name, v in stages.items()},
    }


def _key(line: bytes) -> str:
    event = WatchEvent(**orjson.loads(line))
    metadata = event.object.get("metadata", {})
    return f"{metadata.get('namespace')}/{metadata.get('name')}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--scenario", default="basic-1000")
    parser.add_argument("--until", type=float, default=240.0, help="virtual seconds to run")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--save", help="also write the recorded events here, one line each")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    lines, server = record(args.scenario, args.until)
    if args.save:
        Path(args.save).write_bytes(b"".join(lines))
    report = measure(lines, fleet_member(server), args.rounds)
    report["scenario"] = args.scenario
    if args.json:
        print(json.dumps(report))
        return 0
    print(
        f"{report['events']} pod events of {report['pods']} pods "
        f"({report['bytes_per_event']} bytes each; {report['event_types']}), "
        f"{report['handlers']} handlers, indexes {report['indexes']}"
    )
    for name, value in report["us_per_event"].items():
        runs = report["us_per_event_runs"][name]
        print(f"  {name:14s} {value:8.2f} µs CPU/event  (runs {runs})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
