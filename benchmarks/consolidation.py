"""How long one full disruption pass takes on a large fragmented cluster, and what it finds.

Why: upstream Karpenter needs 10 to 30 minutes to evaluate consolidation in large clusters
(about 18 minutes per 1,000 nodes for a single-node scan), because every simulation rebuilds
its scheduler over the whole cluster. Our target is one full pass (emptiness, drift, multi-node
and single-node consolidation, every method evaluated) over 1,000 nodes and 10,000 pods in
under 5 s on a 2-core machine. Figures, not assertions.

The cluster: N nodes (default 1,000) drawn from a kwok-style catalog (vCPU {2, 4, 8, 16, 32}
x memory per vCPU {2, 4, 8} GiB x {amd64, arm64}, 4 zones, on-demand at 0.025/vCPU +
0.001/GiB), each given pods in proportion to its size (10 per node on average, fewer where
they do not fit in 90% of its CPU) from 40 deployments of mixed sizes, a fifth of them spread
across zones (half with ``DoNotSchedule``); then a random 30% of the pods are removed, as after
a scale-down (``--removed 0`` keeps them all: 1,000 nodes, 10,000 pods). The
pass is ``core.disruption.planner.plan``, exactly what the controller runs; it runs three times
over one ``ParsedCluster``, as the controller's passes share one: the first reads every object
(``first_pass_*``; ``first_pass_read_*`` is its reading of the objects: pods parsed, the facts
of pods, Nodes and NodeClaims, what informer events bring once per object version), the second
is what a later pass over an unchanged cluster costs (``pass_*``), the third one after a status
update of ``--changed`` of the pods (1%: a new ``resourceVersion`` each, nothing it decides by
changed), what a later pass costs in a live cluster where something always changed
(``changed_pass_*``): the changed pods read again (the others are the very objects of the last
pass, as an informer's store shares them, and are carried over), what is derived per node made
again for the nodes they are bound to. Seconds are the process's CPU time but
``*_wall_seconds``.

    .venv/bin/python benchmarks/consolidation.py [--nodes 1000] [--seed 1] [--removed 0.3]
        [--changed 0.01] [--json] [--converge MAX_COMMANDS] [--catalog kwok|capi]

``--converge N`` carries out each pass's command on the synthetic cluster at once (candidates
gone, their pods where the command's simulation put them, replacements registered at their
cheapest offering) and passes again, up to N commands or until a pass finds none: the price
consolidation ends at, the commands by kind (delete, 1->1, 1->N, N->1, N->M), the pods
restarted, and any pod left without a place (stranded).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.api.nodepool import NodePool
from karpenter_capi.core.clock import SystemClock, format_timestamp
from karpenter_capi.core.disruption.methods import Command
from karpenter_capi.core.disruption.planner import PassReport, PassSettings, plan
from karpenter_capi.core.disruption.simulation import Simulator
from karpenter_capi.core.instancetype import InstanceType, InstanceTypeOverhead, Offering
from karpenter_capi.core.provisioning.inventory import NodePoolInventory
from karpenter_capi.core.provisioning.state import ClusterSnapshot, ParsedCluster
from karpenter_capi.core.scheduling.podspec import pod_key
from karpenter_capi.core.values.resources import ResourceList, pod_requests

CPUS = (2, 4, 8, 16, 32)
FAMILIES = {"c": 2, "s": 4, "m": 8}
ARCHS = ("amd64", "arm64")
ZONES = ("zone-a", "zone-b", "zone-c", "zone-d")
DEPLOYMENTS = 40
PODS_PER_NODE = 10
NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


CAPI_SIZES = {2: 0.096, 4: 0.192, 16: 0.768}
"""``--catalog capi``: the few on-demand MachineDeployments a Cluster API cluster typically
opts in (2, 4 and 16 CPUs, 4 GiB per CPU), where one node replaced by one smaller one often
does not exist, so splitting (1->N) is what consolidation has left."""


def _type(name: str, cpu: int, memory: int, price: float, arch: str) -> InstanceType:
    overhead = InstanceTypeOverhead(kube_reserved=ResourceList({"cpu": "100m", "memory": "300Mi"}))
    return InstanceType(
        name=name,
        capacity=ResourceList({"cpu": str(cpu), "memory": f"{memory}Gi", "pods": "110"}),
        offerings=tuple(Offering(zone, wellknown.CAPACITY_TYPE_ON_DEMAND, price) for zone in ZONES),
        requirements={
            wellknown.LABEL_ARCH: frozenset({arch}),
            wellknown.LABEL_OS: frozenset({"linux"}),
        },
        overhead=overhead,
    )


def catalog(kind: str = "kwok") -> list[InstanceType]:
    if kind == "capi":
        return [
            _type(f"md-{cpu}cpu", cpu, cpu * 4, price, "amd64") for cpu, price in CAPI_SIZES.items()
        ]
    return [
        _type(
            f"{family}-{cpu}x-{arch}-linux",
            cpu,
            cpu * per_cpu,
            round(0.025 * cpu + 0.001 * cpu * per_cpu, 6),
            arch,
        )
        for family, per_cpu in FAMILIES.items()
        for cpu in CPUS
        for arch in ARCHS
    ]


def nodepool() -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "default", "uid": "pool-uid"},
        "spec": {
            "template": {
                "spec": {
                    "nodeClassRef": {
                        "group": "karpenter.cluster.x-k8s.io",
                        "kind": "ClusterAPINodeClass",
                        "name": "default",
                    },
                    "requirements": [
                        {
                            "key": wellknown.LABEL_CAPACITY_TYPE,
                            "operator": "In",
                            "values": [wellknown.CAPACITY_TYPE_ON_DEMAND],
                        }
                    ],
                    "expireAfter": "720h",
                }
            },
            "disruption": {
                "consolidationPolicy": "WhenEmptyOrUnderutilized",
                "consolidateAfter": "0s",
                "budgets": [{"nodes": "100%"}],
            },
        },
    }


def deployments(rng: random.Random) -> list[dict[str, Any]]:
    result = []
    for index in range(DEPLOYMENTS):
        cpu = rng.choice((100, 250, 500, 750, 1000))
        memory = rng.choice((128, 256, 512, 1024, 2048))
        spec: dict[str, Any] = {
            "containers": [
                {
                    "name": "app",
                    "resources": {"requests": {"cpu": f"{cpu}m", "memory": f"{memory}Mi"}},
                }
            ]
        }
        app = f"app-{index}"
        if index % 5 == 0:
            spec["topologySpreadConstraints"] = [
                {
                    "maxSkew": 1 if index % 10 == 0 else 5,
                    "topologyKey": wellknown.LABEL_TOPOLOGY_ZONE,
                    "whenUnsatisfiable": "ScheduleAnyway" if index % 10 else "DoNotSchedule",
                    "labelSelector": {"matchLabels": {"app": app}},
                }
            ]
        result.append({"app": app, "spec": spec})
    return result


def node_objects(
    name: str, instance_type: InstanceType, zone: str, created: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A registered, initialized, consolidatable Node and its NodeClaim."""
    labels = {
        wellknown.LABEL_INSTANCE_TYPE: instance_type.name,
        wellknown.LABEL_TOPOLOGY_ZONE: zone,
        wellknown.LABEL_CAPACITY_TYPE: wellknown.CAPACITY_TYPE_ON_DEMAND,
        wellknown.LABEL_NODEPOOL: "default",
        wellknown.LABEL_HOSTNAME: name,
        wellknown.LABEL_INITIALIZED: "true",
        wellknown.LABEL_ARCH: next(iter(instance_type.requirements[wellknown.LABEL_ARCH])),
        wellknown.LABEL_OS: "linux",
    }
    # uid and resourceVersion as every object read from the API has: the controller's caches
    # (parsed pods, node label requirements) are keyed by them.
    node = {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": "1",
            "labels": labels,
            "creationTimestamp": created,
        },
        "spec": {"providerID": f"sim://{name}"},
        "status": {
            "allocatable": instance_type.allocatable.to_dict(),
            "capacity": instance_type.capacity.to_dict(),
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    claim = {
        "metadata": {
            "name": name,
            "uid": f"claim-uid-{name}",
            "resourceVersion": "1",
            "labels": {wellknown.LABEL_NODEPOOL: "default"},
            "creationTimestamp": created,
        },
        "spec": {"expireAfter": "720h"},
        "status": {
            "nodeName": name,
            "providerID": f"sim://{name}",
            "conditions": [
                {"type": "Initialized", "status": "True"},
                {"type": "Consolidatable", "status": "True"},
            ],
        },
    }
    return node, claim


def build(
    nodes: int, seed: int, removed: float = 0.3, kind: str = "kwok"
) -> tuple[ClusterSnapshot, list[NodePoolInventory], int]:
    rng = random.Random(seed)
    types = catalog(kind)
    templates = deployments(rng)
    raw_pool = nodepool()
    inventory = NodePoolInventory(
        "default", "default", NodePool.model_validate(raw_pool), raw_pool, types
    )
    node_objs, claims, pods = [], [], []
    created = format_timestamp(NOW - timedelta(hours=2))
    for index in range(nodes):
        instance_type = rng.choice(types)
        name = f"node-{index:05d}"
        node, claim = node_objects(name, instance_type, ZONES[index % len(ZONES)], created)
        node_objs.append(node)
        claims.append(claim)
        allocatable = instance_type.allocatable
        budget_cpu = allocatable.milli("cpu") * 0.9
        budget_memory = allocatable.milli("memory") * 0.95
        used_cpu = used_memory = 0.0
        # 10 pods per node on average, in proportion to the node's size so that they fit.
        cpus = int(instance_type.capacity.milli("cpu") // 1000)
        sizes = [int(it.capacity.milli("cpu") // 1000) for it in types]
        wanted = max(1, round(PODS_PER_NODE * cpus / (sum(sizes) / len(sizes))))
        placed = 0
        for attempt in range(60):
            if placed == wanted:
                break
            template = rng.choice(templates)
            pod = {
                "metadata": {
                    "name": f"{template['app']}-{index}-{attempt}",
                    "namespace": "default",
                    "uid": f"uid-{template['app']}-{index}-{attempt}",
                    "resourceVersion": "1",
                    "labels": {"app": template["app"]},
                    "creationTimestamp": created,
                },
                "spec": {**template["spec"], "nodeName": name},
                "status": {"phase": "Running"},
            }
            requests = pod_requests(pod)
            cpu, memory = requests.milli("cpu"), requests.milli("memory")
            if used_cpu + cpu > budget_cpu or used_memory + memory > budget_memory:
                continue
            used_cpu += cpu
            used_memory += memory
            placed += 1
            pods.append(pod)
    total = len(pods)
    kept = [p for p in pods if rng.random() >= removed]
    snapshot = ClusterSnapshot(pods=kept, nodes=node_objs, nodeclaims=claims, daemonsets=[])
    return snapshot, [inventory], total


def cluster_price(snapshot: ClusterSnapshot, types: Sequence[InstanceType]) -> float:
    prices = {it.name: it.offerings[0].price for it in types}
    labels = (n["metadata"]["labels"] for n in snapshot.nodes)
    return sum(prices[node_labels[wellknown.LABEL_INSTANCE_TYPE]] for node_labels in labels)


def apply(
    snapshot: ClusterSnapshot,
    inventories: Sequence[NodePoolInventory],
    command: Command,
    serial: int,
) -> tuple[ClusterSnapshot, int]:
    """The cluster once ``command`` is carried out: its candidates gone, their pods where the
    command's simulation put them (other nodes, or its replacements, registered at the
    cheapest offering); and how many of their pods found no place (stranded)."""
    simulation = Simulator(snapshot, inventories, SystemClock()).simulate(command.candidates)
    if len(simulation.new_nodeclaims) != len(command.replacements):
        raise AssertionError(f"the command's simulation changed: {command.describe()}")
    gone = {c.node_name for c in command.candidates}
    destination = {pod_key(pod): node for node, pods in simulation.placed.items() for pod in pods}
    nodes = [n for n in snapshot.nodes if n["metadata"]["name"] not in gone]
    claims = [c for c in snapshot.nodeclaims if c["status"]["nodeName"] not in gone]
    created = format_timestamp(NOW)
    for index, claim in enumerate(simulation.new_nodeclaims):
        instance_type, offering = claim.cheapest()
        name = f"new-{serial:05d}-{index}"
        node, nodeclaim = node_objects(name, instance_type, offering.zone, created)
        nodes.append(node)
        claims.append(nodeclaim)
        destination.update((pod_key(pod), name) for pod in claim.pods)
    pods, stranded = [], 0
    for pod in snapshot.pods:
        if pod["spec"].get("nodeName") in gone:
            target = destination.get(pod_key(pod))
            if target is None:
                stranded += 1
                continue
            # A new binding is a new version of the pod, as the API would write it.
            version = str(int(pod["metadata"]["resourceVersion"]) + 1)
            pod = {
                **pod,
                "metadata": {**pod["metadata"], "resourceVersion": version},
                "spec": {**pod["spec"], "nodeName": target},
            }
        pods.append(pod)
    return ClusterSnapshot(pods=pods, nodes=nodes, nodeclaims=claims, daemonsets=[]), stranded


def shape(command: Command) -> str:
    """delete, 1->1, 1->N, N->1 or N->M: which kind of move a command is."""
    if not command.replacements:
        return "delete"
    old = "1" if len(command.candidates) == 1 else "N"
    new = "1" if len(command.replacements) == 1 else ("N" if old == "1" else "M")
    return f"{old}->{new}"


def converge(
    snapshot: ClusterSnapshot, inventories: Sequence[NodePoolInventory], max_commands: int
) -> dict[str, Any]:
    """Pass after pass, each command carried out at once, until a pass finds none: where
    consolidation leaves the cluster, and what it took to get there."""
    types = inventories[0].instance_types
    before = cluster_price(snapshot, types)
    nodes_before = len(snapshot.nodes)
    shapes: dict[str, int] = {}
    stranded = restarted = passes = simulations = 0
    seconds = 0.0
    parsed = ParsedCluster()  # kept across passes, as the controller keeps it
    for passes in range(1, max_commands + 1):
        parsed.specs.new_round()
        report = plan(snapshot, inventories, [], now=NOW, clock=SystemClock(), parsed=parsed)
        seconds += report.seconds
        simulations += report.simulations
        command = report.command
        if command is None:
            break
        key = f"{command.method} {shape(command)}"
        shapes[key] = shapes.get(key, 0) + 1
        restarted += sum(len(c.pods) for c in command.candidates)
        snapshot, lost = apply(snapshot, inventories, command, passes)
        stranded += lost
    return {
        "commands": sum(shapes.values()),
        "passes": passes,
        "converged": report.command is None,
        "pass_seconds_total": round(seconds, 2),
        "simulations": simulations,
        "by_kind": dict(sorted(shapes.items())),
        "pods_restarted": restarted,
        "stranded_pods": stranded,
        "nodes_before": nodes_before,
        "nodes_after": len(snapshot.nodes),
        "price_before": round(before, 4),
        "price_after": round(cluster_price(snapshot, types), 4),
    }


class _CpuClock(SystemClock):
    """The process's CPU time as the pass's monotonic clock: its own figures (the read, each
    method) then say what it cost, however busy the shared machine is."""

    def monotonic(self) -> float:
        return time.process_time()


def _timed_pass(
    snapshot: ClusterSnapshot, inventories: Sequence[NodePoolInventory], parsed: ParsedCluster
) -> tuple[PassReport, float]:
    """One full pass (every method evaluated) and the wall seconds it took (its CPU seconds
    are ``report.seconds``)."""
    started = time.perf_counter()
    report = plan(
        snapshot,
        inventories,
        [],
        now=NOW,
        clock=_CpuClock(),
        settings=PassSettings(evaluate_all=True),
        parsed=parsed,
    )
    return report, time.perf_counter() - started


def touched(snapshot: ClusterSnapshot, share: float, seed: int) -> ClusterSnapshot:
    """``snapshot`` after a status update of ``share`` of its pods: a new ``resourceVersion``
    each, nothing a pass decides by changed."""
    rng = random.Random(seed)
    pods = []
    for pod in snapshot.pods:
        if rng.random() < share:
            version = str(int(pod["metadata"]["resourceVersion"]) + 1)
            pod = {**pod, "metadata": {**pod["metadata"], "resourceVersion": version}}
        pods.append(pod)
    return ClusterSnapshot(
        pods=pods, nodes=snapshot.nodes, nodeclaims=snapshot.nodeclaims, daemonsets=[]
    )


def _timings(prefix: str, report: PassReport, wall: float) -> dict[str, Any]:
    return {
        f"{prefix}seconds": round(report.seconds, 3),
        f"{prefix}read_seconds": round(report.read_seconds, 3),
        f"{prefix}objects_read": report.objects_read,
        f"{prefix}wall_seconds": round(wall, 3),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--removed", type=float, default=0.3, help="share of pods removed")
    parser.add_argument(
        "--changed", type=float, default=0.01, help="share of pods updated before the third pass"
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--catalog",
        choices=("kwok", "capi"),
        default="kwok",
        help="kwok: 30 types, 2-32 CPUs; capi: 2, 4 and 16 CPUs at $0.048 per CPU",
    )
    parser.add_argument(
        "--converge",
        type=int,
        metavar="MAX_COMMANDS",
        default=0,
        help="carry out each pass's command and pass again until none is found",
    )
    args = parser.parse_args(argv)
    started = time.perf_counter()
    snapshot, inventories, created = build(args.nodes, args.seed, args.removed, args.catalog)
    build_seconds = time.perf_counter() - started
    if args.converge:
        result = {"nodes": args.nodes, "pods": len(snapshot.pods)}
        result.update(converge(snapshot, inventories, args.converge))
        if args.json:
            json.dump(result, sys.stdout, indent=2)
            sys.stdout.write("\n")
        else:
            for key, value in result.items():
                print(f"{key}: {value}")
        return 0
    # The controller keeps parsed pods and per-node sums across passes (``ParsedCluster``), so
    # only its first pass reads every object: the first pass is reported apart, the second is
    # what a later pass over an unchanged cluster costs, the third one over a cluster where a
    # few pods changed.
    parsed = ParsedCluster()
    first, first_wall = _timed_pass(snapshot, inventories, parsed)
    report, pass_wall = _timed_pass(snapshot, inventories, parsed)
    changed_snapshot = touched(snapshot, args.changed, args.seed)
    changed, changed_wall = _timed_pass(changed_snapshot, inventories, parsed)
    for other in (first, changed):
        if (other.command and other.command.describe()) != (
            report.command and report.command.describe()
        ):
            raise AssertionError("another pass over the same cluster chose another command")
    before = cluster_price(snapshot, inventories[0].instance_types)
    command = report.command
    after = before - (command.savings if command else 0.0)
    row = {
        "nodes": args.nodes,
        "pods": len(snapshot.pods),
        "pods_before_removal": created,
        "build_seconds": round(build_seconds, 3),
        **_timings("first_pass_", first, first_wall),
        **_timings("pass_", report, pass_wall),
        "changed_pods": sum(
            a is not b for a, b in zip(snapshot.pods, changed_snapshot.pods, strict=True)
        ),
        **_timings("changed_pass_", changed, changed_wall),
        "method_seconds": {m: round(t, 3) for m, t in report.method_seconds.items()},
        "first_pass_method_seconds": {m: round(t, 3) for m, t in first.method_seconds.items()},
        "simulations": report.simulations,
        "method": command.method if command else None,
        "command": command.describe() if command else None,
        "nodes_disrupted": len(command.candidates) if command else 0,
        "price_before": round(before, 4),
        "price_after": round(after, 4),
        "outcomes": report.summary()["outcomes"],
    }
    if args.json:
        json.dump(row, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    print(f"cluster: {row['nodes']} nodes, {row['pods']} pods ({created} before the removal)")
    for label, prefix in (
        ("first pass (reads every object)", "first_pass_"),
        ("later pass, nothing changed", "pass_"),
        (f"later pass, {row['changed_pods']} pods changed", "changed_pass_"),
    ):
        print(
            f"{label}: {row[prefix + 'seconds']:.3f} s CPU, of which reading"
            f" {row[prefix + 'objects_read']} objects {row[prefix + 'read_seconds']:.3f} s"
            f" ({row[prefix + 'wall_seconds']:.3f} s wall)"
        )
    print(f"simulations per pass: {row['simulations']}")
    for method, outcome in row["outcomes"].items():
        print(f"  {method}: {outcome}")
    print(f"command: {row['command']}")
    print(f"price per hour: {row['price_before']:.4f} before, {row['price_after']:.4f} after")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
