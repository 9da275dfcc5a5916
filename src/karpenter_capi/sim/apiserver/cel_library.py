"""The CEL functions kube-apiserver offers to CRD validation rules, on top of standard CEL.

``common-expression-language`` (the ``cel`` package: Python bindings of the Rust cel crate)
implements the CEL specification: macros, ``has()``, conversions, ``size``, ``matches``,
``startsWith``... Kubernetes adds libraries of its own, and rules in real CRDs use them
(Karpenter's restricted-label rules call ``x.find("^([^/]+)")``). This module registers them:

* regex: ``find``, ``findAll`` (Kubernetes' regex library);
* strings: ``charAt``, ``indexOf``, ``lastIndexOf``, ``lowerAscii``, ``upperAscii``,
  ``replace``, ``split``, ``substring``, ``trim``, ``join``, ``reverse``, ``strings.quote``
  (cel-go's strings extension; the implementations come from ``cel.stdlib``);
* lists: ``isSorted``, ``sum``, ``min``, ``max``, ``indexOf``, ``lastIndexOf`` (Kubernetes'
  list library; ``indexOf`` and ``lastIndexOf`` dispatch on the receiver, string or list);
* sets (``sets.contains``, ``sets.equivalent``, ``sets.intersects``), ``base64.encode`` and
  ``base64.decode``, and the ``bool()`` conversion, from ``cel.stdlib``.

Not registered: ``quantity()``, ``url()``, ``ip()``/``cidr()``, ``semver()``,
``strings.format`` and the authorizer (rules that call them fail to evaluate: "Undefined
variable or function"). A function raising reports a CEL evaluation error, as cel-go's do.

Functions receive Python values the library converted from CEL, so list equality here must
keep ``true`` and ``1`` apart as CEL does (Python's ``True == 1`` would not).
"""

from __future__ import annotations

import functools
import itertools
import logging
import re
from collections.abc import Callable
from typing import Any

from cel import stdlib

from karpenter_capi.sim.apiserver.correlate import deep_equal

Function = Callable[..., Any]


@functools.lru_cache(maxsize=512)
def _regex(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as error:
        raise ValueError(f"invalid regex {pattern!r}: {error}") from None


def find(text: str, pattern: str) -> str:
    """The first match of ``pattern`` in ``text``, or ``""``."""
    match = _regex(pattern).search(text)
    return match.group(0) if match else ""


def find_all(text: str, pattern: str, limit: int = -1) -> list[str]:
    """Every match (at most ``limit`` when it is not negative)."""
    if limit == 0:
        return []
    found = [m.group(0) for m in _regex(pattern).finditer(text)]
    return found if limit < 0 else found[:limit]


def is_sorted(items: list[Any]) -> bool:
    return all(not (b < a) for a, b in itertools.pairwise(items))


def _extreme(name: str, pick: Function) -> Function:
    def extreme(*args: Any) -> Any:
        items = args[0] if len(args) == 1 and isinstance(args[0], list) else list(args)
        if not items:
            raise ValueError(f"{name} called on empty list")
        return pick(items)

    extreme.__name__ = name
    return extreme


def index_of(receiver: Any, needle: Any, *offset: int) -> int:
    """``"abc".indexOf("b")`` (strings extension) or ``[1, 2].indexOf(2)`` (list library)."""
    if isinstance(receiver, str):
        return stdlib.index_of(receiver, needle, *offset)
    return next((i for i, item in enumerate(receiver) if deep_equal(item, needle)), -1)


def last_index_of(receiver: Any, needle: Any, *offset: int) -> int:
    if isinstance(receiver, str):
        return stdlib.last_index_of(receiver, needle, *offset)
    found = [i for i, item in enumerate(receiver) if deep_equal(item, needle)]
    return found[-1] if found else -1


def kubernetes_functions() -> dict[str, Function]:
    """Name -> implementation of every function registered beyond the CEL standard."""
    functions: dict[str, Function] = {"bool": stdlib.bool_}
    functions.update(stdlib.EXTENSIONS["strings"])
    functions.update(stdlib.EXTENSIONS["sets"])
    functions.update(stdlib.EXTENSIONS["encoders"])
    functions.update(
        {
            "find": find,
            "findAll": find_all,
            "isSorted": is_sorted,
            "sum": stdlib.sum_,
            "min": _extreme("min", min),
            "max": _extreme("max", max),
            "indexOf": index_of,
            "lastIndexOf": last_index_of,
        }
    )
    return functions


class _DropFunctionFailures(logging.Filter):
    """The bindings log a warning whenever a Python function raises, then raise the error too.

    The error already becomes the rule's evaluation error in the 422 the client gets; the log
    line would only repeat it on the server's stderr for every rejected request.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Python function ")


_FILTER = _DropFunctionFailures()


def quiet_function_failures() -> None:
    """Install the filter above on the bindings' logger (idempotent)."""
    logger = logging.getLogger("cel")
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)


# Kubernetes' escaping of property names that are not CEL identifiers (apiserver cel.Escape).
_RESERVED = frozenset(
    {
        "true",
        "false",
        "null",
        "in",
        "as",
        "break",
        "const",
        "continue",
        "else",
        "for",
        "function",
        "if",
        "import",
        "let",
        "loop",
        "package",
        "namespace",
        "return",
        "var",
        "void",
        "while",
    }
)
_ESCAPED_PART = re.compile(r"__|[-./]|[^a-zA-Z0-9_]")
_ESCAPES = {"__": "__underscores__", ".": "__dot__", "-": "__dash__", "/": "__slash__"}


def escape_property(name: str) -> str | None:
    """The name a rule uses for property ``name`` (``foo-bar`` -> ``foo__dash__bar``).

    None when it has none (starts with a digit, or holds a character kube cannot escape): such
    a property is invisible to rules, as in kube.
    """
    if not name or name[0].isdigit():
        return None
    if name in _RESERVED:
        return f"__{name}__"
    unsupported = False

    def escape(match: re.Match[str]) -> str:
        nonlocal unsupported
        part = match.group(0)
        if part in _ESCAPES:
            return _ESCAPES[part]
        unsupported = True
        return ""

    escaped = _ESCAPED_PART.sub(escape, name)
    return None if unsupported else escaped
