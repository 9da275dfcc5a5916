"""Log formats: a readable line for a terminal, one JSON object per line for a log pipeline.

Controllers log through the standard ``logging`` module with context in ``extra``
(``log.info("created nodeclaim", extra={"nodeclaim": name, "nodepool": pool})``); this module
decides only how records look. The JSON shape follows Karpenter's zap output (``time``,
``level``, ``logger``, ``message``, then the context fields), so queries written for Karpenter's
logs find the same keys. Named ``logs`` so it never shadows the standard ``logging``.

In fleet mode one process serves many workload clusters, so every line a cluster's controllers
write carries ``cluster``: ``log_fields`` sets fields for whatever runs inside it (the runtime
wraps each reconcile, periodic run and informer thread of a member), and the handler
``configure_logging`` installs copies them onto each record, as zap's ``logger.With`` would.

Decision lines use upstream's messages and keys (``docs/observability.md`` lists them): an
object is ``{"name": ...}`` under its kind (``"NodeClaim": {"name": "default-x7k2p"}``, as
controller-runtime writes ``klog.KObj``), and a long list is cut as upstream's
``pretty.Slice`` cuts it; ``ref`` and ``first`` build those.
"""

from __future__ import annotations

import json
import logging
import math
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from types import MappingProxyType
from typing import IO, Any, Literal

from karpenter_capi.core.errors import InvalidInputError

LogFormat = Literal["text", "json"]

_MARK = "_karpenter_capi_handler"
"""Attribute set on the handler we install, so a second call replaces it instead of adding."""

# Everything a LogRecord carries by itself; any other attribute came from ``extra``.
_RESERVED = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message",
    "asctime",
    "taskName",  # 3.12+
}

_BARE = re.compile(r'^[^\s"=]+$')


_CONTEXT_FIELDS: ContextVar[Mapping[str, Any]] = ContextVar(
    "karpenter_capi_log_fields", default=MappingProxyType({})
)


@contextmanager
def log_fields(fields: Mapping[str, Any]) -> Iterator[None]:
    """Add ``fields`` to every record logged inside the block (this thread or task only)."""
    if not fields:
        yield
        return
    token = _CONTEXT_FIELDS.set({**_CONTEXT_FIELDS.get(), **fields})
    try:
        yield
    finally:
        _CONTEXT_FIELDS.reset(token)


class _ContextFields(logging.Filter):
    """Copies the ``log_fields`` in force onto a record, without overriding its own extras.

    A handler filter, because it runs in the thread that logged, where the context is set.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in _CONTEXT_FIELDS.get().items():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True


def configure_logging(
    fmt: LogFormat = "text", level: str | int = "INFO", stream: IO[str] | None = None
) -> logging.Handler:
    """Send every log record (the root logger's) to ``stream`` (stderr) in ``fmt``.

    Idempotent: the handler a previous call installed is replaced, and handlers installed by
    anyone else (pytest's capture, an embedding application) are left alone.
    """
    formatter: logging.Formatter
    if fmt == "json":
        formatter = JsonFormatter()
    elif fmt == "text":
        formatter = TextFormatter()
    else:
        raise InvalidInputError(f"unknown log format {fmt!r}: expected 'text' or 'json'")
    resolved = _level(level)

    root = logging.getLogger()
    for existing in list(root.handlers):
        if getattr(existing, _MARK, False):
            root.removeHandler(existing)
            existing.close()
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    setattr(handler, _MARK, True)
    handler.setFormatter(formatter)
    handler.addFilter(_ContextFields())
    root.addHandler(handler)
    root.setLevel(resolved)
    return handler


def _level(level: str | int) -> int:
    if isinstance(level, int):
        return level
    names = logging.getLevelNamesMapping()
    try:
        return names[level.strip().upper()]
    except KeyError:
        raise InvalidInputError(
            f"unknown log level {level!r}: expected one of {', '.join(sorted(names))}"
        ) from None


def ref(name: str, namespace: str | None = None) -> dict[str, str]:
    """An object reference as a log field: ``{"name": ...}`` (with ``namespace`` if given)."""
    return {"name": name, "namespace": namespace} if namespace else {"name": name}


def first(items: Sequence[str], limit: int = 5) -> str:
    """``a, b, c and 4 other(s)``: enough of a long list to recognise it in one line."""
    shown = ", ".join(items[:limit])
    return f"{shown} and {len(items) - limit} other(s)" if len(items) > limit else shown


def extras(record: logging.LogRecord) -> dict[str, Any]:
    """The fields a caller passed in ``extra=``, in the order given."""
    return {k: v for k, v in vars(record).items() if k not in _RESERVED and not k.startswith("_")}


def _timestamp(record: logging.LogRecord) -> str:
    # RFC 3339 in UTC with milliseconds, as zap's ISO8601 encoder writes it.
    moment = datetime.fromtimestamp(record.created, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, the extras, then errors."""

    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {
            "time": _timestamp(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in extras(record).items():
            # A context field never overwrites the four above: a query on "level" must not
            # be fooled by extra={"level": ...}.
            payload[key if key not in payload else f"extra.{key}"] = _jsonable(value)
        if record.exc_info:
            payload["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            payload["exception"] = record.exc_text
        if record.stack_info:
            payload["stack"] = self.formatStack(record.stack_info)
        return json.dumps(payload, default=str, ensure_ascii=False, separators=(",", ":"))


class TextFormatter(logging.Formatter):
    """``time LEVEL logger message key=value ...``, the traceback on the lines after."""

    def format(self, record: logging.LogRecord) -> str:
        parts = [_timestamp(record), record.levelname, record.name, record.getMessage()]
        parts.extend(f"{key}={_text_value(value)}" for key, value in extras(record).items())
        line = " ".join(parts)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        elif record.exc_text:
            line += "\n" + record.exc_text
        if record.stack_info:
            line += "\n" + self.formatStack(record.stack_info)
        return line


def _jsonable(value: Any) -> Any:
    # json.dumps writes NaN and Infinity, which no JSON parser reads back.
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _text_value(value: Any) -> str:
    if isinstance(value, str):
        return value if _BARE.match(value) else json.dumps(value, ensure_ascii=False)
    if isinstance(value, bool) or value is None or isinstance(value, dict | list | tuple):
        return json.dumps(value, default=str, separators=(",", ":"), ensure_ascii=False)
    return str(value)
