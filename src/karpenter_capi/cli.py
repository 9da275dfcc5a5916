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
from karpenter_capi.cli_common import CliError, Parser, add_plugin_argument, plugin_names
from karpenter_capi.cli_explain import add_explain_arguments, explain_command
from karpenter_capi.cli_run import add_run_arguments, run_command
from karpenter_capi.cli_simulate import add_simulate_arguments, simulate_command
from karpenter_capi.core.observability.logs import configure_logging

_EXIT_USAGE = 2
_EXIT_FAILURE = 1


def _build_parser() -> argparse.ArgumentParser:
    from karpenter_capi.core.kube.config import add_cluster_arguments

    parser = Parser(
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
    add_plugin_argument(run)
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
    add_plugin_argument(explain)
    add_explain_arguments(explain)
    explain.set_defaults(handler=_cmd_explain)

    simulate = sub.add_parser(
        "simulate",
        help="run the controller on the embedded simulated cluster",
        description="Load a scenario (Cluster API objects, a ClusterAPINodeClass, NodePools and "
        "pending pods) into an in-memory cluster, run the controller on it and print what it "
        "decided.",
    )
    add_simulate_arguments(simulate)
    simulate.set_defaults(handler=simulate_command)

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
    add_plugin_argument(plugins)
    plugins.add_argument("--json", action="store_true", help="print as JSON")
    plugins.set_defaults(handler=_cmd_plugins)

    instance_types = sub.add_parser(
        "instance-types",
        help="print the instance types a NodeClass resolves to",
        description="Resolve the inventory (instance types and offerings with prices) that the "
        "enabled plugins offer for a NodePool's NodeClass, from a cluster or from manifests.",
    )
    add_cluster_arguments(instance_types)
    add_plugin_argument(instance_types)
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

    infos = describe_plugins(plugin_names(args))
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
    return Plugins.load(plugin_names(args), environment)


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
