"""The official client's CPU per request, over HTTP on 127.0.0.1, as the controller sends them.

Why: every request the controller makes costs its one interpreter CPU on the client side
(building the request, http.client, parsing the answer's headers and body); at 100 clusters a
scale-up wave is tens of thousands of them (``fleet.py``'s ``requests``), and that CPU delays
every cluster's provisioning decision. This measures it alone: the calling thread's CPU time
(``time.thread_time``) per request. The in-memory API server answers from a forked process
of its own, so its work neither counts nor competes for this interpreter.

Requests: ``get`` a Pod; ``patch pods/status`` (a nomination, as
``core/provisioning/nominations.py`` writes it); ``patch pods`` with a resourceVersion
precondition (as the lifecycle's metadata writes); ``list`` of 10 Pods.

``--compare SRC`` runs the same measurement with ``PYTHONPATH=SRC`` (e.g. a worktree of main)
in a subprocess, alternating with this tree's, ``--rounds`` times each, and prints both side
by side (medians over the rounds).

    PYTHONPATH=src .venv/bin/python benchmarks/client_cpu.py [--requests 2000] [--rounds 3]
        [--compare /tmp/base/src] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from karpenter_capi.core.kube.official import OfficialClient
from karpenter_capi.core.kube.resources import NAMESPACES, PODS
from karpenter_capi.sim.apiserver import InMemoryAPIServer
from karpenter_capi.sim.apiserver.http import HttpFront

NAMESPACE = "bench"
TOKEN = "bench-token-0123456789"


def _pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app": "bench"}},
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": "registry.example/app:1.0",
                    "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}},
                }
            ]
        },
    }


def _per_request(count: int, action: Callable[[int], Any]) -> float:
    """Microseconds of this thread's CPU per call of ``action``."""
    for i in range(min(50, count)):  # warm the connection and the caches
        action(i)
    began = time.thread_time()
    for i in range(count):
        action(i)
    return (time.thread_time() - began) / count * 1e6


def _serve(conn: Connection) -> None:
    """The forked server: answers until the benchmark says stop."""
    server = InMemoryAPIServer()
    server.create(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    )
    for i in range(10):
        server.create(PODS, _pod(f"p-{i}"))
    front = HttpFront(server, token=TOKEN).start()
    conn.send(front.url)
    with contextlib.suppress(EOFError):
        conn.recv()
    front.close()


def measure(requests: int) -> dict[str, float]:
    context = multiprocessing.get_context("fork")
    parent, child = context.Pipe()
    server = context.Process(target=_serve, args=(child,), daemon=True)
    server.start()
    client = OfficialClient.from_url(parent.recv(), token=TOKEN)
    try:
        nodes = [f"node-{i % 7}" for i in range(requests + 50)]

        def nominate(i: int) -> Any:
            return client.patch(
                PODS,
                "p-0",
                {"status": {"nominatedNodeName": nodes[i]}},
                NAMESPACE,
                subresource="status",
            )

        rows = {
            "get": _per_request(requests, lambda i: client.get(PODS, "p-2", NAMESPACE)),
            "patch_status": _per_request(requests, nominate),
            "list_10": _per_request(requests // 4, lambda i: client.list(PODS, NAMESPACE)),
        }
        written = [client.get(PODS, "p-1", NAMESPACE)]

        def precondition(i: int) -> Any:
            rv = written[0]["metadata"]["resourceVersion"]
            patch = {"metadata": {"resourceVersion": rv, "labels": {"n": str(i)}}}
            written[0] = client.patch(PODS, "p-1", patch, NAMESPACE)
            return written[0]

        rows["patch_precondition"] = _per_request(requests, precondition)
        return {k: round(v, 1) for k, v in rows.items()}
    finally:
        client.close()
        parent.send("stop")
        server.join(10)
        if server.is_alive():
            server.kill()


def _run_tree(src: str, requests: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": src}
    out = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--requests", str(requests), "--json"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return dict(json.loads(out))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--compare", help="another tree's src: measured alternately")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if not args.compare:
        figures = measure(args.requests)
        print(json.dumps(figures) if args.json else figures)
        return 0
    here = str(Path(__file__).resolve().parent.parent / "src")
    runs: dict[str, list[dict[str, float]]] = {"base": [], "branch": []}
    for _ in range(args.rounds):
        runs["base"].append(_run_tree(args.compare, args.requests))
        runs["branch"].append(_run_tree(here, args.requests))
    table = {
        name: {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        for name, rows in runs.items()
    }
    if args.json:
        print(json.dumps({"median_us": table, "runs": runs}))
        return 0
    print(f"{'µs CPU per request':22} {'base':>8} {'branch':>8}")
    for key in table["base"]:
        print(f"{key:22} {table['base'][key]:8.1f} {table['branch'][key]:8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
