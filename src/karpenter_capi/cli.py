"""The ``karpenter-capi`` command.

One entry point for every way the product runs: against a real cluster (``run``), on the
embedded simulated cluster (``simulate``), as a stand-alone in-memory API server
(``apiserver``), and the helpers an operator needs around it (``manifests``, ``plugins``,
``instance-types``, ``explain``). Subcommands import their machinery lazily so ``--help``
stays instant and a missing optional extra only matters to the command that needs it.

Every failure a user can cause ends as one line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from karpenter_capi import __version__
from karpenter_capi.cli_explain import add_explain_arguments, explain_command
from karpenter_capi.cli_run import add_run_arguments, run_command
from karpenter_capi.core.observability.logs import configure_logging

_EXIT_USAGE = 2
_EXIT_FAILURE = 1


class CliError(Exception):
    """A user-facing failure: printed as one line, exit status 1."""


def _add_plugin_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--plugins",
        metavar="NAME[,NAME...]",
        help="plugins to enable (default: $KARPENTER_CAPI_PLUGINS, else generic_capi)",
    )
    parser.add_argument(
        "--plugin-option",
        action="append",
        default=[],
        metavar="PLUGIN.KEY=VALUE",
        help="an option for one plugin, seen as ctx.options (repeatable)",
    )


def _build_parser() -> argparse.ArgumentParser:
    from karpenter_capi.core.kube.config import add_cluster_arguments

    parser = argparse.ArgumentParser(
        prog="karpenter-capi",
        description="Karpenter-compatible node autoprovisioner for Cluster API clusters.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument(
        "--log-level",
        default=os.environ.get("KARPENTER_CAPI_LOG_LEVEL"),
        help="logging level (default: $KARPENTER_CAPI_LOG_LEVEL, else INFO: one line per "
        "decision; WARNING for simulate and explain, whose output is their account)",
    )
    parser.add_argument(
        "--log-format",
        choices=("text", "json"),
        default=os.environ.get("KARPENTER_CAPI_LOG_FORMAT", "text"),
        help="log lines as text or one JSON object each (default: $KARPENTER_CAPI_LOG_FORMAT "
        "or text)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    run = sub.add_parser(
        "run",
        help="run the controller against a cluster",
        description="Watch pending pods and launch NodeClaims for them through the enabled "
        "plugins, against the workload and management clusters given below.",
    )
    add_cluster_arguments(run)
    _add_plugin_argument(run)
    add_run_arguments(run)
    run.set_defaults(handler=_cmd_run)

    explain = sub.add_parser(
        "explain",
        help="say what the next provisioning round and disruption pass would do, and why",
        description="Read the cluster once and print, for each pending pod, the NodeClaim or "
        "node it would get or why it cannot be helped, and for each NodeClaim whether the next "
        "disruption pass would disrupt it and why not. Writes nothing.",
    )
    add_cluster_arguments(explain)
    _add_plugin_argument(explain)
    add_explain_arguments(explain)
    explain.set_defaults(handler=_cmd_explain)

    simulate = sub.add_parser(
        "simulate",
        help="run the controller on the embedded simulated cluster",
        description="Load a scenario (Cluster API objects, a ClusterAPINodeClass, NodePools and "
        "pending pods) into an in-memory cluster, run the controller on it and print what it "
        "decided.",
    )
    source = simulate.add_mutually_exclusive_group()
    source.add_argument(
        "name",
        nargs="?",
        metavar="SCENARIO",
        help="a shipped scenario's name (default: scale-from-zero; also basic-1000, "
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
    _add_plugin_argument(simulate)
    simulate.add_argument("--json", action="store_true", help="print the outcome as JSON")
    simulate.add_argument(
        "--until",
        default="10m",
        metavar="DURATION",
        help="virtual time to run a SCENARIO for, e.g. 90s, 10m, 1h (default 10m)",
    )
    simulate.add_argument("--seed", type=int, default=0, help="seed for generated names")
    simulate.add_argument(
        "--check",
        action="store_true",
        help="at the end of a SCENARIO, check the invariants of a sound cluster (no leaked or "
        "double-claimed Machine, no stuck NodeClaim, no pending pod the cluster could hold, ...) "
        "and exit 1 on any violation",
    )
    simulate.add_argument(
        "--realtime",
        action="store_true",
        help="pace virtual time to wall time (1 virtual second per second), to watch the run "
        "with kubectl while --serve is on",
    )
    simulate.add_argument(
        "--speed",
        type=float,
        metavar="X",
        help="pace virtual time to X times wall time (--realtime is --speed 1)",
    )
    simulate.add_argument(
        "--serve",
        metavar="HOST:PORT",
        help="serve the simulated cluster over HTTP while a SCENARIO runs, and after it until "
        "interrupted, so kubectl can look at it (needs --kubeconfig-out)",
    )
    simulate.add_argument(
        "--kubeconfig-out", type=Path, metavar="FILE", help="where --serve writes a kubeconfig"
    )
    simulate.add_argument(
        "--report",
        type=Path,
        metavar="FILE.html",
        help="also write a self-contained HTML page with the run's curves (for a SCENARIO)",
    )
    simulate.set_defaults(handler=_cmd_simulate)

    apiserver = sub.add_parser(
        "apiserver",
        help="serve an in-memory Kubernetes API on loopback (kubectl works)",
        description="Serve an in-memory cluster with the project's CRDs and the Cluster API "
        "resources registered, until interrupted.",
    )
    apiserver.add_argument(
        "--listen",
        default="127.0.0.1:0",
        metavar="HOST:PORT",
        help="address to listen on; port 0 picks a free port (default 127.0.0.1:0)",
    )
    apiserver.add_argument(
        "--kubeconfig-out", type=Path, metavar="FILE", help="write a kubeconfig for it here"
    )
    apiserver.add_argument(
        "-f",
        "--filename",
        type=Path,
        action="append",
        default=[],
        metavar="MANIFEST.yaml",
        help="manifests to preload (repeatable)",
    )
    apiserver.set_defaults(handler=_cmd_apiserver)

    manifests = sub.add_parser(
        "manifests",
        help="print the CustomResourceDefinitions",
        description="Print the CRDs generated from the API models (NodePool, NodeClaim, "
        "ClusterAPINodeClass) as multi-document YAML.",
    )
    manifests.add_argument("--crds", action="store_true", required=True, help="print the CRDs")
    manifests.add_argument(
        "--split", type=Path, metavar="DIR", help="write one file per CRD into DIR instead"
    )
    manifests.set_defaults(handler=_cmd_manifests)

    plugins = sub.add_parser(
        "plugins",
        help="list installed and enabled plugins",
        description="List the plugins installed in entry point group karpenter_capi.plugins, "
        "with their distribution, version and whether they are enabled.",
    )
    _add_plugin_argument(plugins)
    plugins.add_argument("--json", action="store_true", help="print as JSON")
    plugins.set_defaults(handler=_cmd_plugins)

    instance_types = sub.add_parser(
        "instance-types",
        help="print the instance types a NodeClass resolves to",
        description="Resolve the inventory (instance types and offerings with prices) that the "
        "enabled plugins offer for a NodePool's NodeClass, from a cluster or from manifests.",
    )
    add_cluster_arguments(instance_types)
    _add_plugin_argument(instance_types)
    instance_types.add_argument("--nodepool", help="NodePool name (default: every NodePool)")
    instance_types.add_argument(
        "-f",
        "--filename",
        type=Path,
        action="append",
        default=[],
        metavar="MANIFEST.yaml",
        help="read objects from these manifests into an in-memory cluster instead of a cluster",
    )
    instance_types.add_argument("--json", action="store_true", help="print as JSON")
    instance_types.set_defaults(handler=_cmd_instance_types)
    return parser


def _cmd_manifests(args: argparse.Namespace, out: TextIO) -> int:
    from karpenter_capi.core.api.crds import crds_yaml, write_crds

    if args.split is not None:
        for path in write_crds(args.split):
            out.write(f"wrote {path}\n")
        return 0
    out.write(crds_yaml())
    return 0


def _cmd_plugins(args: argparse.Namespace, out: TextIO) -> int:
    from karpenter_capi.core.plugin_host import describe_plugins

    infos = describe_plugins(_plugin_names(args))
    rows = [
        {
            "name": info.name,
            "enabled": info.enabled,
            "distribution": info.distribution,
            "version": info.version,
            "module": info.module,
            "error": info.error,
        }
        for info in infos
    ]
    if args.json:
        json.dump(rows, out, indent=2)
        out.write("\n")
        return 0
    _print_table(
        out,
        ["NAME", "ENABLED", "DISTRIBUTION", "VERSION", "MODULE", "ERROR"],
        [
            [
                str(r["name"]),
                "yes" if r["enabled"] else "no",
                str(r["distribution"] or "-"),
                str(r["version"] or "-"),
                str(r["module"]),
                str(r["error"] or ""),
            ]
            for r in rows
        ],
    )
    return 0


def _cmd_apiserver(args: argparse.Namespace, out: TextIO) -> int:
    from karpenter_capi.sim.apiserver.serve import run_apiserver

    return run_apiserver(
        listen=args.listen, kubeconfig_out=args.kubeconfig_out, manifests=args.filename, out=out
    )


def _cmd_simulate(args: argparse.Namespace, out: TextIO) -> int:
    from karpenter_capi.sim.demo import DEMO_SCENARIO, run_scenario

    if args.name or not (args.demo or args.scenario):
        return _run_named_scenario(args, out)
    if args.realtime or args.speed is not None:
        raise CliError("--realtime and --speed pace a SCENARIO, not --demo or -f")
    paths: list[Path] = list(args.scenario) or [DEMO_SCENARIO]
    report = run_scenario(paths, plugin_names=_plugin_names(args))
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
            raise CliError(f"--speed {args.speed}: must be a positive number")
        if args.realtime and args.speed != 1:
            raise CliError("--realtime is --speed 1; give one of them")
        return float(args.speed)
    return 1.0 if args.realtime else None


def _run_named_scenario(args: argparse.Namespace, out: TextIO) -> int:
    from karpenter_capi.core.api.duration import parse_duration
    from karpenter_capi.sim.scenario.pacing import WallClockPacer
    from karpenter_capi.sim.scenario.progress import progress_line
    from karpenter_capi.sim.scenario.runner import DEFAULT_SAMPLE_EVERY, DEFAULT_SCENARIO, run
    from karpenter_capi.sim.scenario.schema import load_scenario

    scenario = load_scenario(args.name or DEFAULT_SCENARIO)
    try:
        until = parse_duration(args.until).total_seconds()
    except ValueError as exc:
        raise CliError(f"--until {args.until!r}: {exc}") from None
    speed = _speed(args)
    pacing: dict[str, Any] = {}
    if speed is not None:
        # Sample about once per wall second, so the progress line moves while watching.
        pacing = {
            "pace": WallClockPacer(speed),
            "pace_step": max(1.0, speed / 10),
            "sample_every": min(DEFAULT_SAMPLE_EVERY, max(1.0, speed)),
        }
    progress = progress_line(out, json_output=args.json)
    fronts: list[Any] = []
    on_cluster = None
    if args.serve:
        if args.kubeconfig_out is None:
            raise CliError("--serve needs --kubeconfig-out FILE")
        on_cluster = _serving(args, out, fronts)
    from karpenter_capi.sim.scenario.aws import AwsUnavailableError

    try:
        try:
            result = run(
                scenario,
                until=until,
                seed=args.seed,
                plugins=tuple(_plugin_names(args)),
                on_cluster=on_cluster,
                on_sample=progress,
                check=args.check,
                **pacing,
            )
        except AwsUnavailableError as exc:
            raise CliError(f"scenario {scenario.name}: {exc}") from None
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


def _cmd_instance_types(args: argparse.Namespace, out: TextIO) -> int:
    from karpenter_capi.core.provisioning.inventory import resolve_inventory

    workload, management = _clients(args)
    plugins = _load_plugins(args, workload, management, read_only=True)
    inventories = resolve_inventory(workload, plugins, nodepool_name=args.nodepool)
    if args.json:
        json.dump([_inventory_json(inv) for inv in inventories], out, indent=2)
        out.write("\n")
        return 0
    for inv in inventories:
        out.write(f"NodePool {inv.nodepool} (NodeClass {inv.nodeclass})\n")
        if inv.error:
            out.write(f"  error: {inv.error}\n")
            continue
        rows = []
        for it in inv.instance_types:
            for off in it.offerings:
                rows.append(
                    [
                        it.name,
                        _fmt_resource(it, "cpu"),
                        _fmt_resource(it, "memory"),
                        _fmt_resource(it, "pods"),
                        off.zone,
                        off.capacity_type,
                        f"{off.price:.4f}",
                        "yes" if off.available else "no",
                        _source_cell(it.source, off.price_source),
                        _overhead_cell(it.overhead),
                    ]
                )
        _print_table(
            out,
            [
                "NAME",
                "CPU",
                "MEMORY",
                "PODS",
                "ZONE",
                "CAPACITY-TYPE",
                "PRICE",
                "AVAILABLE",
                "SOURCE",
                "OVERHEAD",
            ],
            rows,
            indent="  ",
        )
    return 0


def _source_cell(shape_source: str, price_source: str) -> str:
    """Where the shape and the price came from: ``AWS``, or ``annotation, price AWS``."""
    shape, price = shape_source or "-", price_source or "-"
    return shape if shape == price else f"{shape}, price {price}"


def _overhead_cell(overhead: Any) -> str:
    """The overhead's total and where it came from: ``cpu=0,memory=100Mi (kubeadm default)``."""
    total = overhead.total().to_dict()
    parts = [f"{name}={total.pop(name, '0')}" for name in ("cpu", "memory")]
    parts += [f"{name}={value}" for name, value in sorted(total.items())]
    return f"{','.join(parts)} ({overhead.source or '-'})"


def _overhead_json(overhead: Any) -> dict[str, Any]:
    return {
        "kubeReserved": overhead.kube_reserved.to_dict(),
        "systemReserved": overhead.system_reserved.to_dict(),
        "evictionThreshold": overhead.eviction_threshold.to_dict(),
        "total": overhead.total().to_dict(),
        "source": overhead.source,
    }


def _inventory_json(inventory: Any) -> dict[str, Any]:
    """``inventory.to_json()`` with each instance type's ``source`` and ``overhead`` and each
    offering's ``priceSource`` (provenance is display-only, so the core's JSON form leaves it
    out)."""
    doc: dict[str, Any] = inventory.to_json()
    for it, it_doc in zip(inventory.instance_types, doc["instanceTypes"], strict=True):
        it_doc["source"] = it.source
        it_doc["overhead"] = _overhead_json(it.overhead)
        for offering, offering_doc in zip(it.offerings, it_doc["offerings"], strict=True):
            offering_doc["priceSource"] = offering.price_source
    return doc


def _cmd_run(args: argparse.Namespace, out: TextIO) -> int:
    return run_command(args, out, _clients, _load_plugins)


def _cmd_explain(args: argparse.Namespace, out: TextIO) -> int:
    return explain_command(args, out, _clients, _load_plugins)


def _fmt_resource(instance_type: Any, name: str) -> str:
    value = instance_type.capacity.get(name)
    return "-" if value is None else str(value)


def _plugin_names(args: argparse.Namespace) -> list[str]:
    from karpenter_capi.core.plugin_host import resolve_enabled

    return resolve_enabled(args.plugins, os.environ)


def _clients(args: argparse.Namespace) -> tuple[Any, Any]:
    """The workload and management clients: a cluster, or manifests in memory with ``-f``."""
    if getattr(args, "filename", None):
        from karpenter_capi.sim.cluster import new_cluster
        from karpenter_capi.sim.manifests import load_manifest_files

        server = new_cluster()
        server.apply_manifests(load_manifest_files(args.filename))
        return server, server
    from karpenter_capi.core.kube.config import cluster_config_from_args, connect_clusters

    return connect_clusters(cluster_config_from_args(args, os.environ))


def _load_plugins(
    args: argparse.Namespace, workload: Any, management: Any, *, read_only: bool = False
) -> Any:
    """The enabled plugins; ``read_only`` (a command that only looks) runs them as under
    ``--dry-run``, so they write nothing (no NodeClass status, no price ConfigMap)."""
    from karpenter_capi.core.clock import SystemClock
    from karpenter_capi.core.plugin_host import PluginEnvironment, Plugins, parse_plugin_options

    environment = PluginEnvironment(
        workload=workload,
        management=management,
        clock=SystemClock(),
        options=parse_plugin_options(args.plugin_option),
        dry_run=read_only or bool(getattr(args, "dry_run", False)),
    )
    return Plugins.load(_plugin_names(args), environment)


def _print_table(
    out: TextIO, header: Sequence[str], rows: Sequence[Sequence[str]], indent: str = ""
) -> None:
    widths = [len(h) for h in header]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    for row in [list(header), *rows]:
        line = "   ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True))
        out.write(indent + line.rstrip() + "\n")


def _user_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that mean "the user's input or environment is wrong", not a bug."""
    from karpenter_capi.core.kube.errors import ApiError

    errors: list[type[BaseException]] = [CliError, ApiError, OSError, ValueError]
    try:
        from karpenter_capi.core.plugin_host import PluginLoadError
    except ImportError:  # pragma: no cover - the plugin layer is part of core
        pass
    else:
        errors.append(PluginLoadError)
    try:
        from urllib3.exceptions import HTTPError
    except ImportError:  # pragma: no cover - urllib3 comes with kubernetes
        pass
    else:
        errors.append(HTTPError)
    return tuple(errors)


def _log_level(args: argparse.Namespace) -> str:
    """INFO unless told otherwise, so ``run`` shows what it decides. ``simulate`` (thousands of
    decisions in seconds of virtual time) and ``explain`` (whose output is the decisions) print
    their own account, so they log only warnings unless asked."""
    if args.log_level:
        return str(args.log_level).upper()
    return "WARNING" if args.command in ("simulate", "explain") else "INFO"


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run the command line; returns the exit status."""
    stdout = out or sys.stdout
    parser = _build_parser()
    args = parser.parse_args(argv)
    handler: Callable[[argparse.Namespace, TextIO], int] = args.handler
    try:
        configure_logging(args.log_format, _log_level(args), stream=sys.stderr)
        return handler(args, stdout)
    except KeyboardInterrupt:
        return 130
    except _user_errors() as exc:
        message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
        print(f"karpenter-capi {args.command}: error: {message}", file=sys.stderr)
        return _EXIT_FAILURE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
