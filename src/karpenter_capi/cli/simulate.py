"""``karpenter-capi simulate``: the controller on the embedded simulated cluster.

Two ways in: a shipped or file scenario (``sim.scenario``), run for a span of virtual time with
optional pacing to wall time, an HTTP front for kubectl, invariant checks and an HTML report;
or the one-shot demo and ``-f`` manifests (``sim.demo``). Also ``apiserver``, the same in-memory
cluster served alone. Why a module of its own: it is the largest subcommand, and none of it
concerns the others.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, TextIO

from karpenter_capi.cli.options import add_plugin_argument, plugin_names
from karpenter_capi.core.errors import InvalidInputError


def add_simulate_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "name",
        nargs="?",
        metavar="SCENARIO",
        help="a shipped scenario's name (default: scale-from-zero; also basic-1000, fleet, "
        "wide-deployments, ...) or a scenario file (see docs/scenarios.md)",
    )
    source.add_argument("--demo", action="store_true", help="the built-in demo scenario")
    source.add_argument(
        "-f",
        "--scenario",
        type=Path,
        action="append",
        default=[],
        metavar="MANIFEST.yaml",
        help="scenario manifests (repeatable)",
    )
    add_plugin_argument(parser)
    parser.add_argument("--json", action="store_true", help="print the outcome as JSON")
    parser.add_argument(
        "--until",
        default="10m",
        metavar="DURATION",
        help="virtual time to run a SCENARIO for, e.g. 90s, 10m, 1h (default 10m)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed for generated names")
    parser.add_argument(
        "--check",
        action="store_true",
        help="at the end of a SCENARIO, check the invariants of a sound cluster (no leaked or "
        "double-claimed Machine, no stuck NodeClaim, no pending pod the cluster could hold, ...) "
        "and exit 1 on any violation",
    )
    parser.add_argument(
        "--realtime",
        action="store_true",
        help="pace virtual time to wall time (1 virtual second per second), to watch the run "
        "with kubectl while --serve is on",
    )
    parser.add_argument(
        "--speed",
        type=float,
        metavar="X",
        help="pace virtual time to X times wall time (--realtime is --speed 1)",
    )
    parser.add_argument(
        "--serve",
        metavar="HOST:PORT",
        help="serve the simulated cluster over HTTP while a SCENARIO runs, and after it until "
        "interrupted, so kubectl can look at it (needs --kubeconfig-out)",
    )
    parser.add_argument(
        "--kubeconfig-out", type=Path, metavar="FILE", help="where --serve writes a kubeconfig"
    )
    parser.add_argument(
        "--report",
        type=Path,
        metavar="FILE.html",
        help="also write a self-contained HTML page with the run's curves (for a SCENARIO)",
    )


def simulate_command(args: argparse.Namespace, out: TextIO) -> int:
    """Run ``karpenter-capi simulate``; the exit status."""
    from karpenter_capi.sim.demo import DEMO_SCENARIO, run_scenario

    if args.name or not (args.demo or args.scenario):
        return _run_named_scenario(args, out)
    if args.realtime or args.speed is not None:
        raise InvalidInputError("--realtime and --speed pace a SCENARIO, not --demo or -f")
    paths: list[Path] = list(args.scenario) or [DEMO_SCENARIO]
    report = run_scenario(paths, plugin_names=plugin_names(args))
    if args.json:
        json.dump(report.to_json(), out, indent=2)
        out.write("\n")
    else:
        report.print(out)
    return 0


def _speed(args: argparse.Namespace) -> float | None:
    """Virtual seconds per wall second, or None to run as fast as possible."""
    if args.speed is not None:
        if not args.speed > 0:
            raise InvalidInputError(f"--speed {args.speed}: must be a positive number")
        if args.realtime and args.speed != 1:
            raise InvalidInputError("--realtime is --speed 1; give one of them")
        return float(args.speed)
    return 1.0 if args.realtime else None


def _until(args: argparse.Namespace) -> float:
    """Seconds of simulated time --until asks for, or a user error naming the flag."""
    from karpenter_capi.core.api.duration import parse_duration

    try:
        until = parse_duration(args.until).total_seconds()
    except ValueError as exc:
        raise InvalidInputError(f"--until {args.until!r}: {exc}") from None
    if until <= 0:
        raise InvalidInputError(f"--until {args.until!r}: must be longer than 0s")
    return until


def _pacing(args: argparse.Namespace) -> dict[str, Any]:
    """The runner's pacing arguments when --speed or --realtime asks to watch; none else."""
    from karpenter_capi.sim.scenario.pacing import WallClockPacer
    from karpenter_capi.sim.scenario.runner import DEFAULT_SAMPLE_EVERY

    speed = _speed(args)
    if speed is None:
        return {}
    # Sample about once per wall second, so the progress line moves while watching.
    return {
        "pace": WallClockPacer(speed),
        "pace_step": max(1.0, speed / 10),
        "sample_every": min(DEFAULT_SAMPLE_EVERY, max(1.0, speed)),
    }


def _run_named_scenario(args: argparse.Namespace, out: TextIO) -> int:
    from karpenter_capi.sim.scenario.progress import progress_line
    from karpenter_capi.sim.scenario.runner import DEFAULT_SCENARIO, run
    from karpenter_capi.sim.scenario.schema import load_scenario

    scenario = load_scenario(args.name or DEFAULT_SCENARIO)
    until = _until(args)
    if scenario.fleet is not None:
        return _run_fleet_scenario(args, scenario, until, out)
    pacing = _pacing(args)
    progress = progress_line(out, json_output=args.json)
    fronts: list[Any] = []
    on_cluster = None
    if args.serve:
        if args.kubeconfig_out is None:
            raise InvalidInputError("--serve needs --kubeconfig-out FILE")
        on_cluster = _serving(args, out, fronts)
    from karpenter_capi.sim.scenario.aws import AwsUnavailableError

    try:
        try:
            result = run(
                scenario,
                until=until,
                seed=args.seed,
                plugins=tuple(plugin_names(args)),
                on_cluster=on_cluster,
                on_sample=progress,
                check=args.check,
                **pacing,
            )
        except AwsUnavailableError as exc:
            raise InvalidInputError(f"scenario {scenario.name}: {exc}") from None
        finally:
            if progress is not None:
                progress.clear()
        _report(args, result, out)
        if fronts:
            out.write("still serving; Ctrl-C to stop\n")
            out.flush()
            _wait_for_interrupt()
    finally:
        for front in fronts:
            front.close()
    return 1 if result.errors or result.violations else 0


def _run_fleet_scenario(args: argparse.Namespace, scenario: Any, until: float, out: TextIO) -> int:
    """A fleet scenario (``fleet:``): many workload clusters, one fleet-mode controller."""
    from karpenter_capi.sim.scenario.fleet import run_fleet

    unsupported = [
        flag
        for flag, given in (
            ("--serve", args.serve),
            ("--realtime", args.realtime),
            ("--speed", args.speed is not None),
            ("--report", args.report is not None),
            ("--check", args.check),
        )
        if given
    ]
    if unsupported:
        raise InvalidInputError(
            f"scenario {scenario.name} is a fleet scenario: {', '.join(unsupported)} "
            "apply to single-cluster scenarios only"
        )
    result = run_fleet(scenario, until=until, seed=args.seed, plugins=tuple(plugin_names(args)))
    out.write(result.to_json_text() + "\n" if args.json else result.summary())
    out.flush()
    return 1 if result.all_errors() else 0


def _serving(args: argparse.Namespace, out: TextIO, fronts: list[Any]) -> Any:
    """Start an HTTP front on the scenario's API server as soon as it exists."""
    from karpenter_capi.sim.apiserver.http import HttpFront
    from karpenter_capi.sim.apiserver.kubeconfig import write_kubeconfig
    from karpenter_capi.sim.apiserver.serve import parse_listen

    host, port = parse_listen(args.serve)

    def start(server: Any) -> None:
        front = HttpFront(server, host=host, port=port).start()
        fronts.append(front)
        write_kubeconfig(front.url, args.kubeconfig_out)
        out.write(f"serving {front.url}; kubeconfig {args.kubeconfig_out}\n")
        out.flush()

    return start


def _wait_for_interrupt() -> None:
    import contextlib
    import signal
    import threading

    stop = threading.Event()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with contextlib.suppress(KeyboardInterrupt):
        stop.wait()


def _report(args: argparse.Namespace, result: Any, out: TextIO) -> None:
    if args.report is not None:
        from karpenter_capi.sim.report import write_html_report

        write_html_report(result, args.report)
    if args.json:
        out.write(result.to_json_text() + "\n")
    else:
        out.write(result.summary())
        if args.report is not None:
            out.write(f"report: {args.report}\n")
    out.flush()


def apiserver_command(args: argparse.Namespace, out: TextIO) -> int:
    """Serve an in-memory cluster until interrupted (``karpenter-capi apiserver``)."""
    from karpenter_capi.sim.apiserver.serve import run_apiserver

    return run_apiserver(
        listen=args.listen, kubeconfig_out=args.kubeconfig_out, manifests=args.filename, out=out
    )
