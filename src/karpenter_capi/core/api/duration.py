"""Kubernetes duration strings (``30s``, ``1h30m``, ``720h``) and Karpenter's ``Never``.

NodePool and NodeClaim carry durations as strings (``expireAfter: 720h``); controllers need a
``timedelta`` to compare against the clock. These types parse once at the edge, expose
``.value`` as a ``timedelta``, and serialise back to the text the user wrote so that a NodePool
read and written again does not churn (``720h`` does not become ``720h0m0s``).

``NillableDuration`` mirrors Karpenter's ``NillableDuration``: the literal ``Never`` disables the
behaviour (``expireAfter: Never``) and is carried as ``value is None``, never as a Python
``None`` field, so ``model_dump(exclude_none=True)`` keeps it.

Only whole ``h``/``m``/``s`` components are accepted: that is what the CRD's OpenAPI pattern
lets through the API server, so a value this module accepts is one the API server accepts too.
The pattern alone admits ``99999999999h``, which neither Go's ``time.ParseDuration`` (upstream
Karpenter's parser) nor a ``timedelta`` holds: anything longer than Go's longest duration,
``2562047h47m16.854775807s``, is refused here with that bound in the message, so the NodePool
carrying it is marked invalid instead of raising in the middle of a controller.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any, ClassVar, Final

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

NEVER: Final = "Never"
DURATION_PATTERN: Final = r"^([0-9]+(s|m|h))+$"
# Upstream's pattern since v1.4, both alternatives anchored (``FooNever`` and ``1hr`` refused).
NILLABLE_DURATION_PATTERN: Final = r"^(([0-9]+(s|m|h))+|Never)$"

_WHOLE: Final = re.compile(r"(?:[0-9]+[hms])+")
_COMPONENT: Final = re.compile(r"([0-9]+)([hms])")
_UNIT_SECONDS: Final = {"h": 3600, "m": 60, "s": 1}
# Go's time.Duration is an int64 of nanoseconds; these are its whole seconds.
MAX_SECONDS: Final = (2**63 - 1) // 1_000_000_000
MAX_DURATION: Final = "2562047h47m16s"
# More digits than this in one component is beyond MAX_SECONDS whatever the unit; checking the
# length first keeps a hostile ten-thousand-digit string from being converted at all.
_MAX_DIGITS: Final = len(str(MAX_SECONDS))


# This project's one rule beyond upstream's CRDs for durations: the pattern admits any number of
# digits, Go's time.ParseDuration (upstream's parser, and CEL's duration()) fails beyond
# MAX_DURATION, so nothing upstream can use is refused. Evaluated only once the pattern matched.
_MAX_RULE: Final = {
    "message": f"must be at most {MAX_DURATION}, the longest duration Kubernetes holds",
    "rule": f"duration(self) <= duration('{MAX_DURATION}')",
}
_NILLABLE_MAX_RULE: Final = {
    "message": f"must be 'Never' or at most {MAX_DURATION}, the longest duration Kubernetes holds",
    "rule": f"self == '{NEVER}' || duration(self) <= duration('{MAX_DURATION}')",
}


class DurationError(ValueError):
    """A string that is not a Kubernetes duration; the message quotes it and shows examples."""


def parse_duration(text: str) -> timedelta:
    """Parse ``1h30m``-style text into a timedelta; raise ``DurationError`` otherwise."""
    if not isinstance(text, str) or not _WHOLE.fullmatch(text):
        raise DurationError(
            f"invalid duration {_shown(text)}: expected whole hours, minutes and seconds such as "
            "'30s', '5m', '1h30m' or '720h'"
        )
    components = _COMPONENT.findall(text)
    if any(len(n.lstrip("0")) > _MAX_DIGITS for n, _ in components) or (
        sum(int(n) * _UNIT_SECONDS[unit] for n, unit in components) > MAX_SECONDS
    ):
        raise DurationError(
            f"invalid duration {_shown(text)}: longer than the longest duration Kubernetes holds "
            f"({MAX_DURATION}); use a shorter one, or 'Never' where the field allows it"
        )
    return timedelta(seconds=sum(int(n) * _UNIT_SECONDS[unit] for n, unit in components))


def _shown(text: object) -> str:
    """``text`` quoted for a message, cut short: the field has no length limit, a condition's
    message has one (32768), and nobody reads a megabyte of digits."""
    quoted = repr(text)
    return quoted if len(quoted) <= 60 else f"{quoted[:57]}..."


def format_duration(value: timedelta) -> str:
    """Format like Go's ``time.Duration.String`` (``1h30m0s``, ``0s``) for whole seconds."""
    if value < timedelta(0):
        raise DurationError(f"a duration cannot be negative: {value}")
    if value.microseconds:
        raise DurationError(f"durations have whole-second precision: {value}")
    total = int(value.total_seconds())
    hours, rest = divmod(total, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{seconds}s"
    if minutes:
        return f"{minutes}m{seconds}s"
    return f"{seconds}s"


class Duration:
    """A non-negative duration that remembers its original spelling."""

    __slots__ = ("_text", "_value")
    _pattern: ClassVar[str] = DURATION_PATTERN

    def __init__(self, value: timedelta | str) -> None:
        if isinstance(value, str):
            self._value = parse_duration(value)
            self._text = value
        else:
            self._text = format_duration(value)
            self._value = value

    @property
    def value(self) -> timedelta:
        return self._value

    def total_seconds(self) -> float:
        return self._value.total_seconds()

    def __str__(self) -> str:
        return self._text

    def __repr__(self) -> str:
        return f"Duration({self._text!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Duration):
            return self._value == other._value
        if isinstance(other, timedelta):
            return self._value == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._value)

    @classmethod
    def _coerce(cls, raw: Any) -> Duration:
        if isinstance(raw, Duration):
            return raw
        if isinstance(raw, str | timedelta):
            return cls(raw)
        raise DurationError(f"invalid duration {raw!r}: expected a string such as '1h30m'")

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: type[Any], handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(
            cls._coerce,
            serialization=core_schema.plain_serializer_function_ser_schema(str),
        )

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {
            "type": "string",
            "pattern": cls._pattern,
            "x-kubernetes-validations": [_MAX_RULE],
        }


class NillableDuration:
    """A duration or ``Never`` (``value is None``), as Karpenter's ``NillableDuration``."""

    __slots__ = ("_text", "_value")

    def __init__(self, value: timedelta | str | None) -> None:
        if value is None or value == NEVER:
            self._value: timedelta | None = None
            self._text = NEVER
        elif isinstance(value, str):
            self._value = parse_duration(value)
            self._text = value
        else:
            self._text = format_duration(value)
            self._value = value

    @property
    def value(self) -> timedelta | None:
        """The duration, or None for ``Never``."""
        return self._value

    @property
    def is_never(self) -> bool:
        return self._value is None

    def __str__(self) -> str:
        return self._text

    def __repr__(self) -> str:
        return f"NillableDuration({self._text!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, NillableDuration):
            return self._value == other._value
        if isinstance(other, timedelta):
            return self._value == other
        if other == NEVER:
            return self._value is None
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._value)

    @classmethod
    def _coerce(cls, raw: Any) -> NillableDuration:
        if isinstance(raw, NillableDuration):
            return raw
        if isinstance(raw, Duration):
            return cls(raw.value)
        if isinstance(raw, str | timedelta):
            try:
                return cls(raw)
            except DurationError as err:
                # The too-long message already offers 'Never'; say it once.
                said = str(err)
                raise DurationError(said if NEVER in said else f"{said}, or 'Never'") from None
        raise DurationError(f"invalid duration {raw!r}: expected a string such as '1h' or 'Never'")

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: type[Any], handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(
            cls._coerce,
            serialization=core_schema.plain_serializer_function_ser_schema(str),
        )

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {
            "type": "string",
            "pattern": NILLABLE_DURATION_PATTERN,
            "x-kubernetes-validations": [_NILLABLE_MAX_RULE],
        }
