"""How long a round of NodeClaims on one MachineDeployment takes to get its provider IDs over a
real HTTP API, with the threaded runtime and wall-clock time, and how many replica writes it
costs (issue 13, part 5).

Why: the stepped simulator runs one reconcile at a time, so it cannot show what concurrent
workers and a real API's latency do to a launch. On a real API server, two NodeClaims of one
round on one MachineDeployment used to race: the first raised the replicas for itself only, the
second bound the Machine made for the first, and the first asked again at its next poll, 5 s
later; every node after the first came one poll late. Here the whole operator runs as
``karpenter-capi run`` does (``ThreadedDriver``, ``--workers`` per controller, the official
Kubernetes client) against the in-memory API behind its HTTP front, next to the Cluster API
emulation (threaded too, in process), on the system clock. The emulation gives each Machine its
provider ID ``--provision-delay`` seconds after its creation (whole seconds, as
``creationTimestamp``), so with no poll in between every NodeClaim gets its ID within about
that long of the round's start.

Figures, not assertions: per round of ``--nodeclaims`` NodeClaims (created at once, as a
provisioning round does), the scale writes to the MachineDeployment, the seconds from the
round's start to the first and the last provider ID, and the spread between them.

    .venv/bin/python benchmarks/launch_latency.py [--nodeclaims 10] [--rounds 3]
        [--provision-delay 3] [--workers 4] [--json]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
import time
from typing import Any

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.clock import SystemClock
from karpenter_capi.core.kube.official import OfficialClient
from karpenter_capi.core.kube.resources import MACHINE_DEPLOYMENTS, NODECLAIMS
from karpenter_capi.core.operator import Operator, OperatorOptions
from karpenter_capi.core.plugin_host import PluginEnvironment, Plugins
from karpenter_capi.core.runtime.manager import Manager
from karpenter_capi.core.runtime.threaded import ThreadedDriver
from karpenter_capi.sim.apiserver.http import HttpFront
from karpenter_capi.sim.capi import ANNOTATION_PROVISION_DELAY, add_capi_emulation
from karpenter_capi.sim.cluster import new_cluster
from karpenter_capi.sim.scenario.catalog import generate_catalog
from karpenter_capi.sim.scenario.schema import Catalog

INSTANCE_TYPE = "c-4x-amd64-linux"
POLL = 0.02
"""Seconds between the benchmark's own looks at the NodeClaims (it measures; it decides nothing)."""


def _nodeclaim(name: str, nodepool: str, nodeclass_ref: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": name, "labels": {wellknown.LABEL_NODEPOOL: nodepool}},
        "spec": {
            "nodeClassRef": nodeclass_ref,
            "requirements": [
                {"key": wellknown.LABEL_NODEPOOL, "operator": "In", "values": [nodepool]},
                {"key": wellknown.LABEL_INSTANCE_TYPE, "operator": "In", "values": [INSTANCE_TYPE]},
            ],
            "resources": {"requests": {"cpu": "3"}},
        },
    }


def run(nodeclaims: int, rounds: int, provision_delay: int, workers: int) -> list[dict[str, Any]]:
    clock = SystemClock()
    server = new_cluster(clock=clock)
    objects = generate_catalog(Catalog(cpus=[4], families={"c": 2}, zones=["zone-a"]))
    for obj in objects:
        if obj.get("kind") == "MachineDeployment":
            annotations = obj["metadata"].setdefault("annotations", {})
            annotations[ANNOTATION_PROVISION_DELAY] = f"{provision_delay}s"
    server.apply_manifests(objects)
    pool = next(o for o in objects if o.get("kind") == "NodePool")
    nodeclass_ref = dict(pool["spec"]["template"]["spec"]["nodeClassRef"])
    nodepool = str(pool["metadata"]["name"])
    deployment = next(o for o in objects if o.get("kind") == "MachineDeployment")

    emulation = Manager(server, clock=clock)
    add_capi_emulation(emulation)
    emulation_driver = ThreadedDriver(emulation)
    results: list[dict[str, Any]] = []
    with HttpFront(server) as front:
        client = OfficialClient.from_url(front.url)
        plugins = Plugins.load(
            ["generic_capi"], PluginEnvironment(workload=client, management=client, clock=clock)
        )
        options = OperatorOptions(leader_elect=False, metrics_port=None, workers=workers)
        operator = Operator(client, client, plugins, clock, options)
        stop = threading.Event()
        runner = threading.Thread(target=operator.run, args=(stop,), daemon=True)
        emulation_driver.start()
        runner.start()
        try:
            time.sleep(1.0)  # the informers' first lists
            for number in range(rounds):
                results.append(
                    _round(server, deployment, (nodepool, nodeclass_ref), number, nodeclaims)
                )
        finally:
            stop.set()
            runner.join(timeout=30)
            emulation_driver.stop()
            client.close()
    return results


def _round(
    server: Any,
    deployment: dict[str, Any],
    pool: tuple[str, dict[str, Any]],
    number: int,
    count: int,
) -> dict[str, Any]:
    names = [f"round{number}-{i:03d}" for i in range(count)]
    md = deployment["metadata"]
    before = server.requests.snapshot()
    replicas_before = server.get(MACHINE_DEPLOYMENTS, md["name"], md["namespace"])["spec"][
        "replicas"
    ]
    start = time.monotonic()
    for name in names:
        server.create(NODECLAIMS, _nodeclaim(name, *pool))
    seen: dict[str, float] = {}
    deadline = start + 60
    while len(seen) < count and time.monotonic() < deadline:
        for name in names:
            if name not in seen and (server.get(NODECLAIMS, name).get("status") or {}).get(
                "providerID"
            ):
                seen[name] = time.monotonic() - start
        time.sleep(POLL)
    scale_writes = server.requests.since(before).get("patch/scale", 0)
    replicas = server.get(MACHINE_DEPLOYMENTS, md["name"], md["namespace"])["spec"]["replicas"]
    times = sorted(seen.values())
    return {
        "round": number,
        "nodeclaims": count,
        "launched": len(seen),
        "replicas_added": replicas - replicas_before,
        "scale_writes": scale_writes,
        "first_provider_id_seconds": round(times[0], 2) if times else None,
        "last_provider_id_seconds": round(times[-1], 2) if times else None,
        "spread_seconds": round(times[-1] - times[0], 2) if times else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--nodeclaims", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--provision-delay", type=int, default=3)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=getattr(logging, os.environ.get("LOG_LEVEL", "ERROR")))
    results = run(args.nodeclaims, args.rounds, args.provision_delay, args.workers)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    header = ["round", "nodeclaims", "launched", "+replicas", "scale writes", "first", "last"]
    print("  ".join(f"{h:>12}" for h in [*header, "spread"]))
    for row in results:
        cells = [
            row["round"],
            row["nodeclaims"],
            row["launched"],
            row["replicas_added"],
            row["scale_writes"],
            row["first_provider_id_seconds"],
            row["last_provider_id_seconds"],
            row["spread_seconds"],
        ]
        print("  ".join(f"{'-' if c is None else c:>12}" for c in cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
