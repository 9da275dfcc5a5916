"""What every ``karpenter-capi`` subcommand shares: the plugin options and the user-facing error.

Why a module of its own: the subcommands live in modules of their own (``cli_run``,
``cli_explain``, ``cli_simulate``) that ``cli`` imports to build its parser, so what they share
cannot live in ``cli`` without an import cycle.
"""

from __future__ import annotations

import argparse
import os


class CliError(Exception):
    """A user-facing failure: printed as one line, exit status 1."""


def add_plugin_argument(parser: argparse.ArgumentParser) -> None:
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


def plugin_names(args: argparse.Namespace) -> list[str]:
    from karpenter_capi.core.plugin_host import resolve_enabled

    return resolve_enabled(args.plugins, os.environ)
