"""Kubernetes duration strings: parsing, Go-style formatting, Never, original spelling kept."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pydantic import BaseModel, ValidationError

from karpenter_capi.core.api.duration import (
    Duration,
    DurationError,
    NillableDuration,
    format_duration,
    parse_duration,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0s", timedelta(0)),
        ("30s", timedelta(seconds=30)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("720h", timedelta(days=30)),
        ("1h0m0s", timedelta(hours=1)),
        ("90m", timedelta(minutes=90)),
        ("1m30s", timedelta(seconds=90)),
    ],
)
def test_parse(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "1", "1d", "1.5h", "-1h", "1h 30m", "h", "Never", "1H"])
def test_parse_rejects(text: str) -> None:
    with pytest.raises(DurationError, match="invalid duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (timedelta(0), "0s"),
        (timedelta(seconds=45), "45s"),
        (timedelta(minutes=5), "5m0s"),
        (timedelta(hours=1, minutes=30), "1h30m0s"),
        (timedelta(days=30), "720h0m0s"),
    ],
)
def test_format_like_go(value: timedelta, text: str) -> None:
    assert format_duration(value) == text
    assert parse_duration(text) == value


def test_format_refuses_what_kubernetes_cannot_carry() -> None:
    with pytest.raises(DurationError, match="negative"):
        format_duration(timedelta(seconds=-1))
    with pytest.raises(DurationError, match="whole-second"):
        format_duration(timedelta(milliseconds=1500))


class _Holder(BaseModel):
    grace: Duration | None = None
    expire: NillableDuration


def test_fields_keep_spelling_and_compare_by_value() -> None:
    holder = _Holder.model_validate({"grace": "90m", "expire": "1h30m"})
    assert holder.model_dump(exclude_none=True) == {"grace": "90m", "expire": "1h30m"}
    assert holder.grace == Duration("1h30m") == timedelta(minutes=90)
    assert holder.expire == NillableDuration(timedelta(minutes=90))
    assert holder.model_dump_json() == '{"grace":"90m","expire":"1h30m"}'


def test_never() -> None:
    holder = _Holder.model_validate({"expire": "Never"})
    assert holder.expire.is_never
    assert holder.expire.value is None
    assert holder.expire == "Never"
    assert holder.model_dump(exclude_none=True) == {"expire": "Never"}
    with pytest.raises(ValidationError, match="invalid duration 'Never'"):
        _Holder.model_validate({"grace": "Never", "expire": "1h"})


def test_built_from_timedelta() -> None:
    holder = _Holder(grace=Duration(timedelta(seconds=30)), expire=NillableDuration(None))
    assert holder.model_dump() == {"grace": "30s", "expire": "Never"}


def test_nothing_longer_than_gos_longest_duration_is_read() -> None:
    """Go's time.Duration is int64 nanoseconds: 2562047h47m16.854775807s, so whole seconds
    stop at 2562047h47m16s; the CRD pattern admits any number of digits."""
    assert parse_duration("2562047h47m16s") == timedelta(seconds=(2**63 - 1) // 10**9)
    assert parse_duration("2562047h") == timedelta(hours=2562047)
    for text in ("2562047h47m17s", "2562048h", "99999999999h", "9" * 5000 + "s", "1000000h" * 3):
        with pytest.raises(DurationError, match="longer than the longest duration") as refused:
            parse_duration(text)
        assert "2562047h47m16s" in str(refused.value)
        assert len(str(refused.value)) < 250  # the text is quoted, cut short
    assert NillableDuration("Never").is_never
