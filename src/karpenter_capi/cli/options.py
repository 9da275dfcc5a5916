"""The flags more than one ``karpenter-capi`` subcommand reads, and the parser they go into.

The bottom of the ``cli`` package: the subcommand modules (``run``, ``explain``, ``simulate``,
``info``) import it and ``cli.entry`` builds its parser from them, so nothing here imports
another ``cli`` module.
"""

from __future__ import annotations

import argparse
import os
from typing import NoReturn

from karpenter_capi.core.errors import InvalidInputError

_UNRECOGNIZED = "unrecognized arguments: "
_AMBIGUOUS = "ambiguous option: "


class Parser(argparse.ArgumentParser):
    """argparse's parser, except that its usage errors do not print values back.

    The value after a misspelt flag is often a credential (``--management-tokn TOKEN``), and
    argparse would echo it in "unrecognized arguments", to a terminal or a CI log. The flags are
    kept, so the message still says what was wrong. Subparsers are made of this class too.
    """

    def error(self, message: str) -> NoReturn:
        super().error(_redact_values(message))


def _redact_values(message: str) -> str:
    """``message`` with every word that is not a flag, and every ``=value``, replaced."""
    if message.startswith(_UNRECOGNIZED):
        words = message[len(_UNRECOGNIZED) :].split(" ")
        return _UNRECOGNIZED + " ".join(_flag_only(word) for word in words)
    if message.startswith(_AMBIGUOUS):
        option, sep, rest = message[len(_AMBIGUOUS) :].partition(" ")
        return _AMBIGUOUS + _flag_only(option) + sep + rest
    return message


def _flag_only(word: str) -> str:
    if not word.startswith("-"):
        return "<value>"
    flag, equals, _ = word.partition("=")
    return f"{flag}=<value>" if equals else flag


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


KNOWN_FEATURE_GATES = frozenset({"SpotToSpotConsolidation", "NominatedNodeNameForExpectation"})


def parse_feature_gates(text: str) -> dict[str, bool]:
    """``Name=true,Other=false`` as a dict (``run`` and ``explain`` take the same gates); an
    ``InvalidInputError`` naming the item for anything else."""
    gates: dict[str, bool] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, equals, value = item.partition("=")
        if not equals or value.strip().lower() not in ("true", "false") or not name.strip():
            raise InvalidInputError(f"--feature-gates: {item!r}: expected Name=true or Name=false")
        gates[name.strip()] = value.strip().lower() == "true"
    unknown = sorted(set(gates) - KNOWN_FEATURE_GATES)
    if unknown:
        known = ", ".join(sorted(KNOWN_FEATURE_GATES))
        raise InvalidInputError(
            f"--feature-gates: unknown feature gate {unknown[0]!r} (known: {known})"
        )
    return gates
