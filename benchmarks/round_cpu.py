"""The CPU of one provisioning round of a fleet benchmark's cluster, in process.

Why: ``fleet.py``'s stage timings (``controller_stages.py``) give a round's thread CPU inside
the fleet controller, 20-25 ms at 100 clusters against 8 ms for its lone cluster, whose rounds
are smaller (its phase scales in four waves of ``--pods / 4``; the fleet's one wave is all of
``--pods``). This times a fleet wave's round alone, without the fleet: one cluster of
``fleet.py``'s world (its NodePool, NodeClass and Cluster API objects, served by a stepped
fleet whose informers fill the caches the round reads), ``--pods`` pending pods of its
Deployment's template (the wave's burst, marked unschedulable as kube-scheduler would), and a
round over them that plans and creates ``--pods / 10`` NodeClaims 8 at a time, as
``run --fleet`` does. Each repetition starts from
the same state (the round's NodeClaims deleted, a fresh ``Provisioner`` whose caches of parsed
pods start empty, as a wave's first round finds them, or with ``--parsed`` hold the pods, as
the pods' events now leave them) and is timed with ``time.thread_time``. Its NodeClaim creates
are the in-memory server's, far dearer in CPU than a create over HTTP (about 150 us of the
client's), and the round's thread makes some of them itself (``together.py``).

    PYTHONPATH=src python benchmarks/round_cpu.py [--pods 200] [--rounds 30] [--parsed]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from fleet import _scenario

from karpenter_capi.core.kube.resources import NODECLAIMS, PODS
from karpenter_capi.core.operator import OperatorOptions
from karpenter_capi.core.provisioning.provisioner import Provisioner
from karpenter_capi.core.provisioning.state import ClusterSnapshot
from karpenter_capi.core.scheduling.podspec import PodSpecs
from karpenter_capi.sim.demo import mark_unschedulable
from karpenter_capi.sim.scenario.fleet import FleetWorld
from karpenter_capi.sim.scenario.runner import deployment


def _world(pods: int) -> tuple[FleetWorld, Provisioner]:
    args = argparse.Namespace(pods=pods, nodes=max(1, pods // 10))
    world = FleetWorld(
        _scenario(args, 1),
        operator_options=OperatorOptions(
            leader_elect=False,
            metrics_port=None,
            wake_on_pods=True,
            batch_complete_idle=0.2,
            create_concurrency=8,
        ),
    )
    driver = world.stepped()
    driver.run_until_quiet()
    [member] = world.fleet.members.values()
    provisioner: Provisioner = member.operator.provisioning._provisioner
    [cluster] = world.clusters.values()
    [workload] = cluster.group.workloads
    template = deployment(workload, pods)["spec"]["template"]
    for number in range(pods):
        meta = {**template["metadata"], "name": f"app-{number:05d}", "namespace": "default"}
        cluster.server.create(
            PODS, {"apiVersion": "v1", "kind": "Pod", **template, "metadata": meta}
        )
    mark_unschedulable(cluster.server)
    return world, provisioner


def _fresh(template: Provisioner, snapshot: ClusterSnapshot, *, parsed: bool) -> Provisioner:
    """A provisioner as the member's, with nothing kept from an earlier round; with
    ``parsed``, the pending pods already parsed, as the provisioning controller's pod events
    parse them while the window is open (``controller.py``, ``_pod_event``)."""
    specs = PodSpecs()
    if parsed:
        for pod in snapshot.pods:
            specs.get(pod)
    return Provisioner(
        template._client,
        template._plugins,
        template._clock,
        recorder=template._recorder,
        max_instance_types=template._max_instance_types,
        solve_timeout=template._solve_timeout,
        packing_budget=template._packing_budget,
        metrics=template._metrics,
        plans_nominated=template.plans_nominated,
        create_concurrency=8,
        pod_specs=specs,
        stores=template._stores,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument(
        "--parsed", action="store_true", help="pods parsed before the round, by their events"
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--profile", type=int, default=0, help="print cProfile's top N")
    args = parser.parse_args()
    world, member = _world(args.pods)
    [cluster] = world.clusters.values()
    server = cluster.server
    profile = cProfile.Profile(time.thread_time) if args.profile else None
    cpu: list[float] = []
    wall: list[float] = []
    launched = 0
    for _ in range(args.rounds):
        for claim in server.list(NODECLAIMS).items:
            server.delete(NODECLAIMS, claim["metadata"]["name"])
        snapshot = ClusterSnapshot.read(server)
        provisioner = _fresh(member, snapshot, parsed=args.parsed)
        started, begun = time.thread_time(), time.perf_counter()
        if profile is not None:
            profile.enable()
        report = provisioner.reconcile(snapshot)
        if profile is not None:
            profile.disable()
        cpu.append(time.thread_time() - started)
        wall.append(time.perf_counter() - begun)
        launched = len(report.launched)
    out: dict[str, Any] = {
        "pods": args.pods,
        "parsed_before": args.parsed,
        "nodeclaims": launched,
        "round_cpu_ms": {
            "p50": round(statistics.median(cpu) * 1000, 2),
            "min": round(min(cpu) * 1000, 2),
            "max": round(max(cpu) * 1000, 2),
        },
        "round_wall_ms_p50": round(statistics.median(wall) * 1000, 2),
    }
    print(json.dumps(out, indent=None if args.json else 2))
    if profile is not None:
        pstats.Stats(profile).sort_stats("cumulative").print_stats(args.profile)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
