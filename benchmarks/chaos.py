"""Crash anywhere at scale: kill the controller at N uniformly chosen writes, at 1,000 pods.

Why: a controller that leaks a machine or launches one twice when it is killed at the wrong
moment costs more than it saves, and the moments that matter multiply with the cluster's size.
The CI test (``tests/reliability/chaos``) tries 200 kill points at about 16 pods a phase; this
runs the same procedure (``sim.chaos``) with ``--pods`` pods per phase: scale-up, scale-down, drift
replacement and multi-node consolidation, each counted once without kills, then rerun with
up to ``--kills-per-run`` kills (before a write reaches the API or after it, the answer lost)
at writes drawn uniformly among the counted ones, the controller restarted from the API alone
after each, the cluster settled and checked (``sim.invariants``, every pod bound).

It prints the kill points tried (kills that happened), the violations found (goal 0), the extra
NodeClaims and Machines created because of restarts (against the run without kills; negative
when restarted controllers packed better than the baseline's batches) and the wall time.
Figures, and exit status 1 when a violation was found (its seed, phase and kill points
printed, which replay it). Each run is reported on stderr as it ends.

    .venv/bin/python benchmarks/chaos.py --chaos 50 [--pods 1000] [--seed 0]
        [--kills-per-run 5] [--phase NAME ...] [--json]
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence

from karpenter_capi.sim.chaos import PHASES, ChaosReport, phases, run_chaos
from karpenter_capi.sim.chaos.driver import DEFAULT_SETTLE_SECONDS


def _print(report: ChaosReport) -> None:
    figures = report.figures()
    print(
        f"{'phase':<26} {'pods':>5} {'writes':>6} {'runs':>4} {'kills':>5} {'viol.':>5} "
        f"{'extra NC':>8} {'extra M':>7}"
    )
    for phase in figures["phases"]:
        print(
            f"{phase['phase']:<26} {phase['pods']:>5} {phase['writes']:>6} {phase['trials']:>4} "
            f"{phase['kill_points_tried']:>5} {phase['violations']:>5} "
            f"{phase['extra_nodeclaims']:>8} {phase['extra_machines']:>7}"
        )
    print(
        f"kill points tried: {figures['kill_points_tried']}; violations: {figures['violations']}; "
        f"runs that did not settle: {figures['unsettled']}; "
        f"extra nodes launched because of restarts: {figures['extra_nodeclaims']} NodeClaims, "
        f"{figures['extra_machines']} Machines; wall time {figures['wall_seconds']} s "
        f"(seed {figures['seed']})"
    )
    for failure in report.failures():
        print(failure.describe())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chaos", type=int, required=True, metavar="N", help="kill points to try")
    parser.add_argument("--pods", type=int, default=1000, help="pods per phase (default 1000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kills-per-run", type=int, default=5)
    parser.add_argument("--phase", action="append", choices=PHASES, help="only these phases")
    parser.add_argument(
        "--settle",
        type=float,
        default=DEFAULT_SETTLE_SECONDS,
        metavar="SECONDS",
        help="virtual seconds a run may take to settle after its window (default "
        f"{DEFAULT_SETTLE_SECONDS:g}: past the registration TTL); large clusters consolidate "
        "one node at a time for longer",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    if args.chaos <= 0 or args.pods <= 0 or args.kills_per_run <= 0:
        parser.error("--chaos, --pods and --kills-per-run must be positive")
    # The controller logs every restart's resync and each failed reconcile; the figures are
    # what this reports.
    logging.basicConfig(level=logging.CRITICAL)
    selected = [p for p in phases(args.pods) if not args.phase or p.name in args.phase]
    report = run_chaos(
        selected,
        kill_points=args.chaos,
        seed=args.seed,
        kills_per_trial=args.kills_per_run,
        settle_seconds=args.settle,
        progress=lambda line: print(line, file=sys.stderr, flush=True),
    )
    if args.json:
        print(json.dumps(report.figures(), indent=2))
    else:
        _print(report)
    return 1 if report.violations or report.unsettled else 0


if __name__ == "__main__":
    sys.exit(main())
