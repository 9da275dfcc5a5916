"""How fast the solver packs pods, and how close to the cheapest possible its NodeClaims cost.

Why: upstream Karpenter holds its scheduler to ``BenchmarkScheduling``
(``pkg/controllers/provisioning/scheduling/scheduling_benchmark_test.go``) and fails it below
100 pods/s; we claim to be a drop-in replacement, so we run the same shape of problem and read
the same figures, plus two upstream does not print: what the proposed NodeClaims cost against a
lower bound on any packing's cost, and the peak memory of the solve. Figures, not assertions.

The inventory is upstream's ``fake.InstanceTypes(400)``: type ``i`` (``fake-it-i``) has i+1
vCPU, 2(i+1) GiB and 10(i+1) pods, kube-reserved 100m CPU and 10Mi, and five offerings (spot in
test-zone-1 and -2, on-demand in test-zone-1, -2 and -3), every one priced as upstream's
``PriceFromResources``: 0.1 per vCPU plus 0.1 per 10^9 bytes of memory (decimal GB, as upstream
computes it, not GiB). It carries upstream's labels too (arch amd64, three OSes, ``size``,
``special`` on large types, ``integer`` = the vCPU count). One NodePool, no requirements.

Mixes (CPU drawn from {100, 250, 500, 1000, 1500}m, memory from {100, 256, 512, 1024, 2048,
4096}Mi, as upstream):

* ``upstream-diverse``: upstream's ``makeDiversePods``, six equal groups and the remainder
  generic:
  generic; zonal and hostname topology spread (maxSkew 1, DoNotSchedule); hostname and zonal
  pod affinity; hostname pod anti-affinity. As upstream, spread and generic pods carry a random
  ``my-label`` in a..g and a spread selects a random ``my-label`` value (so it counts generic
  pods too), affinity pods carry and select random ``my-affininity`` values (upstream's
  spelling), and every anti-affinity pod is ``app: nginx`` and repels ``app: nginx``.
* ``diverse`` (the default, the mix our target is stated for): five equal groups that each
  select only themselves (own ``app`` label): generic, zonal spread, hostname spread, zonal
  self-affinity, hostname self anti-affinity.
* ``generic``: no constraints.

The price lower bound is the fractional relaxation: for each resource (cpu, memory, pod slots)
the total request divided by the best allocatable-per-price of any instance type, the largest
of these. It ignores every constraint, so where anti-affinity forces a node per pod the ratio
overstates the waste; ``structural`` also takes the max with the cost of giving every
hostname-anti-affinity pod the cheapest type that holds it alone, a bound that does count that.

The figure is one first solve, every pod read (parsed) in it: what a controller pays for pods
it has not seen before (pods it has seen are read once per version, across rounds). With
``--warm`` the same pods are solved twice with one ``PodSpecs`` cache and the second solve is
reported: what a controller pays each round for pods it has already read.
``pods_per_s`` is over wall time; ``cpu_pods_per_s`` over the process's CPU time during the
solve (``time.process_time``), the figure to compare on a loaded machine, where wall time says
more about the other processes than about the solve.

Each size runs in its own subprocess (unless ``--in-process``) so ``peak_rss_mib``, the
process's ``ru_maxrss``, is that size's honest peak; ``solve_rss_mib`` is how much the solve
raised it above the peak reached building the inputs.

    .venv/bin/python benchmarks/scheduling.py [--pods 1000,10000]
        [--mix diverse|upstream-diverse|generic] [--seed 1] [--timeout 60] [--check]
        [--json] [--in-process] [--warm]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import resource
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from karpenter_capi.core.api import wellknown
from karpenter_capi.core.clock import SystemClock
from karpenter_capi.core.instancetype import InstanceType, InstanceTypeOverhead, Offering
from karpenter_capi.core.scheduling.podspec import PodSpecs
from karpenter_capi.core.scheduling.solver import Solver
from karpenter_capi.core.scheduling.solver_io import NodePoolOption, SolveResult
from karpenter_capi.core.values.resources import ResourceList, pod_requests

Pod = dict[str, Any]
Row = dict[str, Any]

INSTANCE_TYPE_COUNT = 400
DEFAULT_SIZES = (1000, 5000, 10000, 20000)
ZONES = ("test-zone-1", "test-zone-2", "test-zone-3")
OFFERINGS = (  # upstream's fake.NewInstanceType default offerings, in its order
    (wellknown.CAPACITY_TYPE_SPOT, "test-zone-1"),
    (wellknown.CAPACITY_TYPE_SPOT, "test-zone-2"),
    (wellknown.CAPACITY_TYPE_ON_DEMAND, "test-zone-1"),
    (wellknown.CAPACITY_TYPE_ON_DEMAND, "test-zone-2"),
    (wellknown.CAPACITY_TYPE_ON_DEMAND, "test-zone-3"),
)
CPU_CHOICES = (100, 250, 500, 1000, 1500)  # millicores
MEMORY_CHOICES = (100, 256, 512, 1024, 2048, 4096)  # MiB
LABEL_VALUES = ("a", "b", "c", "d", "e", "f", "g")
MIXES = ("diverse", "upstream-diverse", "generic")
_GIB = 1 << 30
_MIB = 1 << 20
_CHECKER = Path(__file__).resolve().parent.parent / "tests" / "core" / "scheduling" / "checker.py"


# -- inventory -------------------------------------------------------------------------------


def instance_types(count: int = INSTANCE_TYPE_COUNT) -> list[InstanceType]:
    """Upstream's ``fake.InstanceTypes(count)``: incrementing sizes, five offerings each."""
    overhead = InstanceTypeOverhead(kube_reserved=ResourceList({"cpu": "100m", "memory": "10Mi"}))
    result = []
    for i in range(count):
        cpu = i + 1
        memory_gib = 2 * cpu
        price = 0.1 * cpu + 0.1 * memory_gib * _GIB / 1e9
        large = cpu > 4 and memory_gib > 8
        requirements: dict[str, frozenset[str]] = {
            wellknown.LABEL_ARCH: frozenset({wellknown.ARCH_AMD64}),
            wellknown.LABEL_OS: frozenset({"linux", "windows", "darwin"}),
            wellknown.LABEL_TOPOLOGY_ZONE: frozenset(zone for _, zone in OFFERINGS),
            wellknown.LABEL_CAPACITY_TYPE: frozenset(ct for ct, _ in OFFERINGS),
            "size": frozenset({"large" if large else "small"}),
            "integer": frozenset({str(cpu)}),
        }
        if large:
            requirements["special"] = frozenset({"optional"})
        result.append(
            InstanceType(
                name=f"fake-it-{i}",
                capacity=ResourceList(
                    {"cpu": str(cpu), "memory": f"{memory_gib}Gi", "pods": str(10 * cpu)}
                ),
                offerings=tuple(Offering(zone, ct, price) for ct, zone in OFFERINGS),
                requirements=requirements,
                overhead=overhead,
            )
        )
    return result


def nodepool(types: Sequence[InstanceType]) -> NodePoolOption:
    """Upstream's ``test.NodePool()``: no requirements, no taints, no limits."""
    return NodePoolOption(name="default", instance_types=tuple(types))


# -- pods ------------------------------------------------------------------------------------


class PodFactory:
    """Builds benchmark pods from one seeded RNG, so a seed names one exact workload."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.count = 0

    def _value(self) -> str:
        return self.rng.choice(LABEL_VALUES)

    def pod(self, labels: dict[str, str], **spec: Any) -> Pod:
        self.count += 1
        cpu = self.rng.choice(CPU_CHOICES)
        memory = self.rng.choice(MEMORY_CHOICES)
        name = f"pod-{self.count:06d}"
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": "default",
                "uid": f"uid-{name}",
                "labels": labels,
            },
            "spec": {
                "containers": [
                    {
                        "name": "app",
                        "image": "registry.k8s.io/pause",
                        "resources": {"requests": {"cpu": f"{cpu}m", "memory": f"{memory}Mi"}},
                    }
                ],
                **spec,
            },
        }

    # upstream's makeGenericPods / makeTopologySpreadPods / makePodAffinityPods / ...

    def generic(self, count: int, labels: dict[str, str] | None = None) -> list[Pod]:
        return [
            self.pod(dict(labels) if labels else {"my-label": self._value()}) for _ in range(count)
        ]

    def spread(self, count: int, key: str, labels: dict[str, str] | None = None) -> list[Pod]:
        pods = []
        for _ in range(count):
            own = dict(labels) if labels else {"my-label": self._value()}
            selected = dict(labels) if labels else {"my-label": self._value()}
            constraint = {
                "maxSkew": 1,
                "topologyKey": key,
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": selected},
            }
            pods.append(self.pod(own, topologySpreadConstraints=[constraint]))
        return pods

    def affinity(self, count: int, key: str, labels: dict[str, str] | None = None) -> list[Pod]:
        pods = []
        for _ in range(count):
            own = dict(labels) if labels else {"my-affininity": self._value()}
            selected = dict(labels) if labels else {"my-affininity": self._value()}
            term = {"labelSelector": {"matchLabels": selected}, "topologyKey": key}
            affinity = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
            pods.append(self.pod(own, affinity=affinity))
        return pods

    def anti_affinity(self, count: int, key: str, labels: dict[str, str]) -> list[Pod]:
        term = {"labelSelector": {"matchLabels": labels}, "topologyKey": key}
        affinity = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
        return [self.pod(dict(labels), affinity=affinity) for _ in range(count)]


def make_pods(count: int, mix: str, seed: int) -> list[Pod]:
    """The benchmark workload: ``count`` pods of ``mix`` (see the module docstring)."""
    factory = PodFactory(seed)
    zone, hostname = wellknown.LABEL_TOPOLOGY_ZONE, wellknown.LABEL_HOSTNAME
    if mix == "generic":
        return factory.generic(count)
    if mix == "upstream-diverse":
        share = count // 6
        pods = [
            *factory.generic(share),
            *factory.spread(share, zone),
            *factory.spread(share, hostname),
            *factory.affinity(share, hostname),
            *factory.affinity(share, zone),
            *factory.anti_affinity(share, hostname, {"app": "nginx"}),
        ]
    elif mix == "diverse":
        share = count // 5
        pods = [
            *factory.generic(share, {"app": "generic"}),
            *factory.spread(share, zone, {"app": "spread-zone"}),
            *factory.spread(share, hostname, {"app": "spread-hostname"}),
            *factory.affinity(share, zone, {"app": "affinity-zone"}),
            *factory.anti_affinity(share, hostname, {"app": "anti-hostname"}),
        ]
    else:
        raise ValueError(f"unknown mix {mix!r}; expected one of {', '.join(MIXES)}")
    return pods + factory.generic(count - len(pods))


# -- bounds ----------------------------------------------------------------------------------


def _cheapest(instance_type: InstanceType) -> float:
    return min(o.price for o in instance_type.offerings if o.available)


def price_lower_bound(pods: Sequence[Pod], types: Sequence[InstanceType]) -> float:
    """The fractional relaxation: no packing of ``pods`` onto ``types`` can cost less."""
    totals = ResourceList.sum(pod_requests(p, include_pod_count=True) for p in pods)
    bound = 0.0
    for name in ("cpu", "memory", "pods"):
        best = max(t.allocatable.milli(name) / _cheapest(t) for t in types)
        if totals.milli(name) and best > 0:
            bound = max(bound, totals.milli(name) / best)
    return bound


def _hostname_anti_affinity(pod: Pod) -> bool:
    anti = ((pod.get("spec") or {}).get("affinity") or {}).get("podAntiAffinity") or {}
    terms = anti.get("requiredDuringSchedulingIgnoredDuringExecution") or []
    return any(t.get("topologyKey") == wellknown.LABEL_HOSTNAME for t in terms)


def structural_lower_bound(pods: Sequence[Pod], types: Sequence[InstanceType]) -> float:
    """The fractional bound, or if larger, one node per self-repelling (hostname) pod.

    Valid for these workloads because each anti-affinity group repels itself: no two of its
    pods share a node, so each needs a node at least as dear as the cheapest that holds it.
    """
    by_price = sorted(types, key=_cheapest)
    alone = 0.0
    for pod in pods:
        if not _hostname_anti_affinity(pod):
            continue
        requests = pod_requests(pod, include_pod_count=True)
        alone += next((_cheapest(t) for t in by_price if requests.fits(t.allocatable)), 0.0)
    return max(price_lower_bound(pods, types), alone)


# -- one run ---------------------------------------------------------------------------------


def _rss_mib() -> float:
    # ru_maxrss is KiB on Linux (bytes on macOS; this benchmark targets Linux).
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _load_checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("scheduling_checker", _CHECKER)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load the checker from {_CHECKER}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


def _solve(
    pool: NodePoolOption, pods: Sequence[Pod], timeout: float, specs: PodSpecs
) -> SolveResult:
    solver = Solver(
        [pool],
        existing_nodes=[],
        daemonsets=[],
        namespaces={},
        max_instance_types=60,
        clock=SystemClock(),
        timeout_seconds=timeout,
        pod_specs=specs,
    )
    return solver.solve(pods)


def run_one(
    count: int, mix: str, seed: int, *, timeout: float, check: bool, warm: bool = False
) -> Row:
    """Build the workload, solve it once, measure; optionally verify with the checker.

    ``warm``: solve it once unmeasured first, with the same parsed-pod cache, and measure the
    second solve (the pods already read, as in a controller's later rounds)."""
    types = instance_types()
    pool = nodepool(types)
    pods = make_pods(count, mix, seed)
    specs = PodSpecs()
    if warm:
        for pod in pods:  # a version, as the API server gives every pod: the cache's key
            pod["metadata"]["resourceVersion"] = "1"
        _solve(pool, pods, timeout, specs)
        specs.new_round()
    rss_before = _rss_mib()

    start = time.perf_counter()
    cpu_start = time.process_time()
    result: SolveResult = _solve(pool, pods, timeout, specs)
    seconds = time.perf_counter() - start
    cpu_seconds = time.process_time() - cpu_start
    rss_after = _rss_mib()

    price = result.price
    bound = price_lower_bound(pods, types)
    structural = structural_lower_bound(pods, types)
    placed = sum(len(c.pods) for c in result.new_nodeclaims)
    reasons = Counter(_reason_head(why) for why in result.unschedulable.values())
    row: Row = {
        "mix": mix,
        "pods": count,
        "warm": warm,
        "seed": seed,
        "seconds": round(seconds, 3),
        "pods_per_s": round(count / seconds, 1) if seconds else None,
        "cpu_seconds": round(cpu_seconds, 3),
        "cpu_pods_per_s": round(count / cpu_seconds, 1) if cpu_seconds else None,
        "nodes": len(result.new_nodeclaims),
        "placed": placed,
        "unschedulable": len(result.unschedulable),
        "timed_out": result.timed_out,
        "price": round(price, 3),
        "bound": round(bound, 3),
        "ratio": round(price / bound, 3) if bound else None,
        "structural": round(structural, 3),
        "ratio_structural": round(price / structural, 3) if structural else None,
        "peak_rss_mib": round(rss_after, 1),
        "solve_rss_mib": round(rss_after - rss_before, 1),
        "unschedulable_reasons": dict(reasons.most_common(3)),
    }
    if check:
        checker = _load_checker()
        start = time.perf_counter()
        violations: list[str] = checker.check(result, pods, [pool])
        row["check_seconds"] = round(time.perf_counter() - start, 3)
        row["violations"] = len(violations)
        row["violation_samples"] = violations[:10]
    return row


def _reason_head(reason: str) -> str:
    return reason if len(reason) <= 120 else reason[:117] + "..."


def _in_subprocess(count: int, args: argparse.Namespace) -> Row:
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        "--pods",
        str(count),
        "--mix",
        args.mix,
        "--seed",
        str(args.seed),
        "--timeout",
        str(args.timeout),
    ]
    if args.check:
        command.append("--check")
    if args.warm:
        command.append("--warm")
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"benchmark worker for {count} pods failed:\n{done.stderr}")
    row: Row = json.loads(done.stdout.strip().splitlines()[-1])
    return row


# -- output ----------------------------------------------------------------------------------

_COLUMNS: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
    ("mix", "mix", str),
    ("pods", "pods", str),
    ("seconds", "seconds", lambda v: f"{v:.2f}"),
    ("pods_per_s", "pods/s", lambda v: f"{v:.0f}"),
    ("cpu_pods_per_s", "cpu pods/s", lambda v: f"{v:.0f}"),
    ("nodes", "nodes", str),
    ("unschedulable", "unsched", str),
    ("price", "price/h", lambda v: f"{v:.2f}"),
    ("bound", "bound", lambda v: f"{v:.2f}"),
    ("ratio", "ratio", lambda v: f"{v:.3f}"),
    ("ratio_structural", "ratio(struct)", lambda v: f"{v:.3f}"),
    ("peak_rss_mib", "peak MiB", lambda v: f"{v:.0f}"),
    ("solve_rss_mib", "solve MiB", lambda v: f"{v:.0f}"),
)


def _print_table(rows: Sequence[Row]) -> None:
    columns = list(_COLUMNS)
    if any("violations" in row for row in rows):
        columns.append(("violations", "violations", str))
    cells = [[h for _, h, _ in columns]]
    for row in rows:
        cells.append(["-" if row.get(k) is None else fmt(row[k]) for k, _, fmt in columns])
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    for line in cells:
        print("  ".join(cell.rjust(width) for cell, width in zip(line, widths, strict=True)))
    for row in rows:
        if row.get("timed_out"):
            print(f"{row['mix']} {row['pods']}: the solve timed out")
        for reason, n in row.get("unschedulable_reasons", {}).items():
            print(f"{row['mix']} {row['pods']}: {n} unschedulable: {reason}")
        for violation in row.get("violation_samples", []):
            print(f"{row['mix']} {row['pods']}: VIOLATION {violation}")


def _sizes(values: Sequence[str] | None) -> list[int]:
    if not values:
        return list(DEFAULT_SIZES)
    return [int(part) for value in values for part in value.split(",") if part.strip()]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--pods",
        action="append",
        help="pod counts, repeatable or comma separated (default 1000,5000,10000,20000)",
    )
    parser.add_argument("--mix", choices=MIXES, default="diverse")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=60.0, help="solver timeout, seconds")
    parser.add_argument("--check", action="store_true", help="verify with the checker")
    parser.add_argument("--json", action="store_true", help="one JSON object per run")
    parser.add_argument(
        "--in-process", action="store_true", help="run every size here (peak RSS is cumulative)"
    )
    parser.add_argument(
        "--warm", action="store_true", help="report a second solve of the same, parsed pods"
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sizes = _sizes(args.pods)

    if args.worker:
        (count,) = sizes
        row = run_one(
            count, args.mix, args.seed, timeout=args.timeout, check=args.check, warm=args.warm
        )
        print(json.dumps(row))
        return 0

    rows = []
    for count in sizes:
        if args.in_process:
            row = run_one(
                count, args.mix, args.seed, timeout=args.timeout, check=args.check, warm=args.warm
            )
        else:
            row = _in_subprocess(count, args)
        rows.append(row)
        if args.json:
            print(json.dumps(row), flush=True)
    if not args.json:
        _print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
