"""Every bad input at once, over HTTP, next to a workload: what a user is told, what it costs.

Why: one malformed object must never stop the rest of the cluster, and every one must be
refused by the API server or named on itself (issue 24). The CI suite
(``tests/reliability/malformed_http``) asserts that entry by entry; this runs the same world
(its catalogue and harness: the controller over the official client and the in-memory API
server's HTTP front with the CRDs' validation, the emulated Cluster API, kubelets and
kube-scheduler stand-in, on a virtual clock) with the workload ``--scale`` times bigger, and
prints the figures the issue counts:

- inputs applied, refused at admission, surfaced on the object (a condition or an Event),
  silent (listed, with the part of the issue expected to fix each);
- the workload's pods bound, and the virtual seconds from its Deployments to the last pod
  bound, against a clean run of the same world without a single bad input, the NodeClaims
  each ends with, and the instance types of the catalog NodePool's (the workload's nodes);
- Machines leaked and the other invariant violations at the end (``sim.invariants``);
- log records with a traceback, and WARNING lines (all of them, and distinct).

``--leave-out-stoppers`` drops the inputs that stop provisioning for the whole cluster on the
code the issue was filed against, to see what the rest does (the issue's "with the seven left
out" figures). Exit status 1 when an input is silent, a Machine leaked or a traceback was
logged (goal: 0 of each).

    .venv/bin/python benchmarks/malformed.py [--scale 1] [--until 60] [--seed 0]
        [--leave-out-stoppers] [--json]
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root: tests.*
from karpenter_capi.sim.scenario.catalog import NAME
from tests.reliability.malformed_http.catalogue import STOPPERS, catalogue
from tests.reliability.malformed_http.harness import UNTIL, MalformedRun


def _figures(run: MalformedRun, clean: MalformedRun, wall: float) -> dict[str, Any]:
    refused: list[str] = []
    surfaced: list[str] = []
    silent: list[dict[str, str]] = []
    for entry in run.entries:
        if run.applied[entry.id].answer == "refused":
            refused.append(entry.id)
            continue
        outcome, _ = run.outcome(entry)
        if outcome is not None:
            surfaced.append(entry.id)
        else:
            silent.append(
                {"id": entry.id, "class": entry.klass, "missing": entry.fails_today or "-"}
            )
    leaked = [v for v in run.violations if v.startswith("leaked-machine")]
    return {
        "inputs": len(run.entries),
        "refused": len(refused),
        "surfaced": len(surfaced),
        "silent": len(silent),
        "silent_inputs": silent,
        "workload_pods": run.workload_total,
        "workload_bound": run.workload_bound,
        "workload_bound_seconds": run.workload_bound_at,
        "clean_bound_seconds": clean.workload_bound_at,
        "nodeclaims": run.result.nodeclaims if run.result else None,
        "clean_nodeclaims": clean.result.nodeclaims if clean.result else None,
        "workload_nodes": run.instance_types.get(NAME, []),
        "clean_workload_nodes": clean.instance_types.get(NAME, []),
        "leaked_machines": len(leaked),
        "violations": run.violations,
        "tracebacks": len(run.tracebacks),
        "traceback_kinds": sorted(set(run.tracebacks)),
        "warnings": len(run.warnings),
        "warnings_distinct": len(set(run.warnings)),
        "wall_seconds": round(wall, 1),
    }


def _print(figures: dict[str, Any]) -> None:
    def seconds(value: float | None) -> str:
        return "never" if value is None else f"{value:g} s"

    print(f"inputs applied            {figures['inputs']}")
    print(f"refused at admission      {figures['refused']}")
    print(f"surfaced on the object    {figures['surfaced']}")
    print(f"silent                    {figures['silent']}")
    for entry in figures["silent_inputs"]:
        print(f"  {entry['id']:<44} {entry['class']:<28} {entry['missing']}")
    print(
        f"workload bound            {figures['workload_bound']}/{figures['workload_pods']}, "
        f"last after {seconds(figures['workload_bound_seconds'])} "
        f"(clean run: {seconds(figures['clean_bound_seconds'])}, virtual)"
    )
    print(
        f"NodeClaims at the end     {figures['nodeclaims']} "
        f"(clean run: {figures['clean_nodeclaims']})"
    )
    nodes, clean_nodes = figures["workload_nodes"], figures["clean_workload_nodes"]
    print(
        f"{NAME} NodePool's nodes  {len(nodes)}: {', '.join(nodes) or '-'} (clean run: "
        f"{'the same' if nodes == clean_nodes else ', '.join(clean_nodes) or '-'})"
    )
    print(f"leaked Machines           {figures['leaked_machines']}")
    print(f"invariant violations      {len(figures['violations'])}")
    for violation in figures["violations"]:
        print(f"  {violation[:150]}")
    print(f"tracebacks logged         {figures['tracebacks']}")
    for kind in figures["traceback_kinds"][:10]:
        print(f"  {kind[:150]}")
    print(
        f"WARNING lines             {figures['warnings']} ({figures['warnings_distinct']} distinct)"
    )
    print(f"wall                      {figures['wall_seconds']} s")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=int, default=1, help="workload replicas times this")
    parser.add_argument("--until", type=float, default=UNTIL, help="virtual seconds per run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--leave-out-stoppers",
        action="store_true",
        help="without the inputs that stopped provisioning for everyone (issue 24 item 1)",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    # The controller's own log lines are counted, not shown.
    logging.getLogger("karpenter_capi").propagate = False

    entries = [e for e in catalogue() if not (args.leave_out_stoppers and e.id in STOPPERS)]
    clean = MalformedRun(scale=args.scale).run(until=args.until, seed=args.seed)
    started = time.perf_counter()
    run = MalformedRun(entries, scale=args.scale).run(until=args.until, seed=args.seed)
    figures = _figures(run, clean, time.perf_counter() - started)
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        _print(figures)
    bad = figures["silent"] or figures["leaked_machines"] or figures["tracebacks"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
