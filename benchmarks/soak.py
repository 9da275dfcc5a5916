"""A day of churn: invariants every hour, the controller's memory and API requests per hour.

Why: a leak of one entry per pod, or a request per object ever seen, does not show in a
ten-minute scenario. This runs the shipped ``soak-day`` scenario (Deployments scaling every few
minutes for 40 minutes of every hour, one created and deleted hourly, drift every 6 h, nodes
expiring after 1 h, consolidation throughout) on the real controllers for ``--hours`` virtual
hours (``sim.soak``) and reports, at every hour mark:

- the invariant violations (``sim.invariants``, every check: the last 20 minutes of each hour
  are quiet, so the cluster has settled); goal 0;
- the controller's own API requests during the hour (its client's, so the emulated cluster's
  are left out; the stepped informers' zero-timeout watch drains apart); goal: flat;
- memory: RSS from ``/proc/self/status`` (``VmRSS``, the resident set now; without ``/proc``,
  ``getrusage``'s peak), and, since the controller shares the process with the simulated
  cluster, what the ``Operator`` retains (controllers, informer caches, plugin state; a
  reachability walk, ``sim.footprint``) apart from what the in-memory API server retains (its
  objects and watch history); goal: RSS growth from hour 1 to the last under 5%.

Then the controller's containers that grew between hour 1 and the last hour, by place.

    .venv/bin/python benchmarks/soak.py [--hours 24] [--seed 0] [--watch-history N]
        [--compaction-interval SECONDS]
        [--no-footprint] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from karpenter_capi.sim.scenario.schema import load_scenario
from karpenter_capi.sim.soak import Checkpoint, SoakReport, soak

MIB = 1024 * 1024


def _row(checkpoint: Checkpoint) -> str:
    memory = checkpoint.memory
    controller = memory.get("controller_bytes")
    apiserver = memory.get("apiserver_bytes")
    return (
        f"{checkpoint.hour:>4.0f}  {checkpoint.wall_seconds:>6.1f}  {checkpoint.requests_total:>8,}"
        f"  {checkpoint.pods_bound:>4}/{checkpoint.pods_pending:<3}  {checkpoint.nodes:>5}"
        f"  {memory['rss_bytes'] / MIB:>8.1f}"
        f"  {'-' if controller is None else f'{controller / MIB:.2f}':>10}"
        f"  {'-' if apiserver is None else f'{apiserver / MIB:.2f}':>9}"
        f"  {len(checkpoint.violations):>10}"
    )


HEADER = "hour  wall s  requests  bound/pend  nodes  RSS MiB  ctrl MiB  apisrv MiB  violations"


def _summary(report: SoakReport) -> list[str]:
    first, last = report.checkpoints[0], report.checkpoints[-1]
    per_hour = report.requests_per_hour()
    steady = per_hour[1:] or per_hour
    lines = [
        "",
        f"scenario {report.scenario}: {report.hours} virtual hours in {report.wall_seconds:.0f} s"
        f" wall (seed {report.seed})",
        f"RSS ({first.memory['rss_source']}): {first.memory['rss_bytes'] / MIB:.1f} MiB at hour"
        f" {first.hour:.0f}, {last.memory['rss_bytes'] / MIB:.1f} MiB at hour {last.hour:.0f}"
        f" ({report.growth_percent('rss_bytes'):+.1f}%)",
    ]
    if "controller_bytes" in last.memory:
        lines.append(
            f"controller retains {first.memory['controller_bytes'] / MIB:.2f} MiB at hour 1,"
            f" {last.memory['controller_bytes'] / MIB:.2f} MiB at the end"
            f" ({report.growth_percent('controller_bytes'):+.1f}%); the API server"
            f" {first.memory['apiserver_bytes'] / MIB:.1f} -> "
            f"{last.memory['apiserver_bytes'] / MIB:.1f} MiB"
            f" ({report.growth_percent('apiserver_bytes'):+.1f}%)"
        )
    lines += [
        f"python allocated blocks: {first.memory['python_blocks']:,} -> "
        f"{last.memory['python_blocks']:,} ({report.growth_percent('python_blocks'):+.1f}%)",
        f"controller requests per hour: hour 1 {per_hour[0]:,}; hours 2-{report.hours}"
        f" min {min(steady):,}, max {max(steady):,}, mean {sum(steady) / len(steady):,.0f}",
        f"invariant violations: {len(report.violations())}",
        f"disruptions: {report.disruptions}",
        f"errors: {len(report.errors)}",
    ]
    for violation in report.violations()[:20]:
        lines.append(f"  {violation}")
    if report.controller_growth:
        lines.append("controller containers that grew (items at hour 1 -> the last hour):")
        for place, before, after in report.controller_growth[:15]:
            lines.append(f"  {place:<60} {before:>7,} -> {after:>7,}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=int, default=24)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scenario", default="soak-day", help="a shipped scenario or a file")
    parser.add_argument(
        "--watch-history",
        type=int,
        default=500,
        help="watch events the in-memory API server keeps per resource (default 500, as a "
        "kube-apiserver watch cache keeps minutes of them; the simulator's own default, "
        "50,000, fills for days and makes its memory, not the controller's, climb)",
    )
    parser.add_argument(
        "--compaction-interval",
        type=float,
        default=300.0,
        help="virtual seconds between the in-memory API server's history compactions (default "
        "300, kube-apiserver's etcd compaction interval; 0 for none)",
    )
    parser.add_argument(
        "--no-footprint", action="store_true", help="skip the reachability walks (RSS only)"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    def progress(checkpoint: Checkpoint) -> None:
        if not args.json:
            print(_row(checkpoint), flush=True)

    if not args.json:
        print(HEADER, flush=True)
    report = soak(
        load_scenario(args.scenario),
        hours=args.hours,
        seed=args.seed,
        measure_footprint=not args.no_footprint,
        watch_history=args.watch_history,
        compaction_interval=args.compaction_interval or None,
        on_checkpoint=progress,
    )
    if args.json:
        json.dump(report.to_json(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print("\n".join(_summary(report)))
    return 1 if report.violations() or report.errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
