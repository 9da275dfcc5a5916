"""The ``karpenter-capi`` command.

One entry point for every way the product runs: against a real cluster (``run``), on the
embedded simulated cluster (``simulate``), as a stand-alone in-memory API server
(``apiserver``), and the helpers an operator needs around it (``manifests``, ``plugins``,
``instance-types``, ``explain``). Subcommands import their machinery lazily so ``--help``
stays instant and a missing optional extra only matters to the command that needs it.

A failure the user can fix (a bad flag or input file, an unreachable or refusing cluster, a
plugin that will not load) ends as one line on stderr and exit status 1: a traceback would only
bury the message. Anything else is a bug: it is shown with its traceback and exit status 70
(``EX_SOFTWARE``), so it is reported rather than mistaken for the user's mistake.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

from karpenter_capi import __version__
from karpenter_capi.cli.explain import add_explain_arguments, explain_command
from karpenter_capi.cli.info import instance_types_command, manifests_command, plugins_command
from karpenter_capi.cli.options import Parser, add_plugin_argument
from karpenter_capi.cli.run import add_run_arguments, run_command
from karpenter_capi.cli.simulate import add_simulate_arguments, apiserver_command, simulate_command
from karpenter_capi.core.errors import InvalidInputError
from karpenter_capi.core.observability.logs import configure_logging

EXIT_FAILURE = 1
"""A failure the user can fix; argparse's usage errors exit 2."""
EXIT_BUG = 70
"""An unexpected exception: a bug, shown with its traceback (``EX_SOFTWARE`` of sysexits.h)."""


def build_parser() -> argparse.ArgumentParser:
    """The whole command line; each subcommand's handler is its ``handler`` default."""
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
    run.set_defaults(handler=run_command)

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
    explain.set_defaults(handler=explain_command)

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
    apiserver.set_defaults(handler=apiserver_command)

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
    manifests.set_defaults(handler=manifests_command)

    plugins = sub.add_parser(
        "plugins",
        help="list installed and enabled plugins",
        description="List the plugins installed in entry point group karpenter_capi.plugins, "
        "with their distribution, version and whether they are enabled.",
    )
    add_plugin_argument(plugins)
    plugins.add_argument("--json", action="store_true", help="print as JSON")
    plugins.set_defaults(handler=plugins_command)

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
    instance_types.set_defaults(handler=instance_types_command)
    return parser


def _user_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that mean "the user's input or environment is wrong", not a bug: input that
    cannot be used, a cluster that refuses or cannot be reached, a file that cannot be read, a
    plugin that cannot be loaded. A bare ``ValueError`` is not one of them: it is as often a bug."""
    from karpenter_capi.core.kube.errors import ApiError

    errors: list[type[BaseException]] = [InvalidInputError, ApiError, OSError]
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
    """Run the command line; returns the exit status.

    Without ``argv`` (the console script, ``python -m karpenter_capi``) the command owns its
    process, so ``run`` may tune the process-wide garbage collector (``cli.run``); a caller
    passing ``argv`` (a test, an embedding program) keeps its heap as it is."""
    stdout = out or sys.stdout
    parser = build_parser()
    args = parser.parse_args(argv)
    args.owns_process = argv is None
    handler: Callable[[argparse.Namespace, TextIO], int] = args.handler
    try:
        configure_logging(args.log_format, _log_level(args), stream=sys.stderr)
        return handler(args, stdout)
    except KeyboardInterrupt:
        return 130
    except _user_errors() as exc:
        message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
        print(f"karpenter-capi {args.command}: error: {message}", file=sys.stderr)
        return EXIT_FAILURE
    except Exception:
        traceback.print_exc(file=sys.stderr)
        print(
            f"karpenter-capi {args.command}: internal error: this is a bug in karpenter-capi, "
            "not in your input; please report it with the traceback above",
            file=sys.stderr,
        )
        return EXIT_BUG
