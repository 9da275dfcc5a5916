"""What a log pipeline (json) and a person at a terminal (text) read."""

from __future__ import annotations

import io
import json
import logging
import re
from datetime import UTC, datetime

import pytest

from karpenter_capi.core.observability import configure_logging

log = logging.getLogger("karpenter_capi.test")


def lines(stream: io.StringIO) -> list[str]:
    return stream.getvalue().splitlines()


def test_json_lines_carry_the_standard_fields_and_the_extras() -> None:
    stream = io.StringIO()
    configure_logging("json", "DEBUG", stream)

    log.info(
        "created nodeclaim %s",
        "default-x7k2p",
        extra={"nodepool": "default", "pods": 3, "price": 0.096, "ids": ["a", "b"]},
    )
    log.debug("tick")

    first, second = (json.loads(line) for line in lines(stream))
    assert first["level"] == "INFO"
    assert first["logger"] == "karpenter_capi.test"
    assert first["message"] == "created nodeclaim default-x7k2p"
    assert (first["nodepool"], first["pods"], first["price"], first["ids"]) == (
        "default",
        3,
        0.096,
        ["a", "b"],
    )
    moment = datetime.fromisoformat(first["time"])
    assert first["time"].endswith("Z")
    assert moment.utcoffset() == UTC.utcoffset(None)
    assert second["message"] == "tick"
    assert "exception" not in first


def test_json_carries_the_exception_as_a_string() -> None:
    stream = io.StringIO()
    configure_logging("json", stream=stream)

    try:
        raise ValueError("bad annotation on md-1")
    except ValueError:
        log.exception("skipping machine deployment", extra={"machinedeployment": "md-1"})

    (record,) = (json.loads(line) for line in lines(stream))
    assert record["level"] == "ERROR"
    assert record["machinedeployment"] == "md-1"
    assert isinstance(record["exception"], str)
    assert record["exception"].startswith("Traceback")
    assert "ValueError: bad annotation on md-1" in record["exception"]


def test_json_stays_json_for_awkward_extras() -> None:
    stream = io.StringIO()
    configure_logging("json", stream=stream)

    log.warning(
        "odd",
        extra={"when": datetime(2026, 1, 1, tzinfo=UTC), "ratio": float("nan"), "level": "x"},
    )

    (record,) = (json.loads(line) for line in lines(stream))
    assert record["when"] == "2026-01-01 00:00:00+00:00"
    assert record["ratio"] == "nan"
    # A context field named like a standard one does not overwrite it.
    assert record["level"] == "WARNING"
    assert record["extra.level"] == "x"


def test_text_is_one_readable_line_with_key_values() -> None:
    stream = io.StringIO()
    configure_logging("text", "info", stream)

    log.info("launched", extra={"nodeclaim": "default-x7k2p", "reason": "no capacity", "ok": True})
    log.debug("not shown at INFO")

    (line,) = lines(stream)
    pattern = (
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z INFO karpenter_capi\.test launched "
        r'nodeclaim=default-x7k2p reason="no capacity" ok=true'
    )
    assert re.fullmatch(pattern, line)


def test_configuring_twice_replaces_the_handler_and_keeps_others() -> None:
    foreign = logging.StreamHandler(io.StringIO())
    logging.getLogger().addHandler(foreign)
    first, second = io.StringIO(), io.StringIO()

    configure_logging("text", stream=first)
    configure_logging("json", stream=second)
    log.warning("once")

    assert first.getvalue() == ""
    assert [json.loads(line)["message"] for line in lines(second)] == ["once"]
    assert foreign in logging.getLogger().handlers
    ours = [h for h in logging.getLogger().handlers if getattr(h, "stream", None) is second]
    assert len(ours) == 1


def test_bad_format_or_level_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown log format"):
        configure_logging("yaml")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown log level 'LOUD'"):
        configure_logging("text", "LOUD")


def test_text_puts_the_traceback_after_the_line() -> None:
    stream = io.StringIO()
    configure_logging("text", stream=stream)

    try:
        raise KeyError("md-1")
    except KeyError:
        log.exception("lost machine deployment")

    first, *rest = lines(stream)
    assert first.endswith("ERROR karpenter_capi.test lost machine deployment")
    assert rest[0] == "Traceback (most recent call last):"
    assert rest[-1] == "KeyError: 'md-1'"
