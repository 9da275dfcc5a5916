"""Exact Kubernetes resource quantities (``k8s.io/apimachinery`` ``resource.Quantity``).

Every scheduling decision compares quantities written by users in many spellings (``0.5``,
``500m``, ``1.5Gi``, ``1536Mi``, ``1e3``). Floats would make ``0.1 + 0.2`` CPUs differ from
``300m`` and a node would be judged full or free by rounding noise, so a quantity is held the
way Kubernetes bounds it: an exact integer number of nano-units (Kubernetes rounds every parsed
value up to 1n). Parsing is cached because the same few strings (``100m``, ``1Gi``) repeat on
every pod of a deployment.

Grammar (as ``resource.ParseQuantity``)::

    quantity   ::= [sign] number [suffix]
    number     ::= digits | digits "." [digits] | "." digits
    suffix     ::= binarySI | decimalSI | ("e" | "E") [sign] digits
    binarySI   ::= Ki | Mi | Gi | Ti | Pi | Ei
    decimalSI  ::= n | u | m | "" | k | M | G | T | P | E

Magnitudes are bounded without refusing anything the API server admits. BinarySI values are
held at 2^63-1 units, as ``ParseQuantity`` caps them (``maxAllowed``). Go keeps larger decimal
values (``cpu: 1e400``) as arbitrary-precision decimals; here they are held at 10^100 units,
which compares the same against any real capacity (a limit that large is no limit, a request
that large fits nowhere) and stays within what a float, the gauges and the solver's matrices,
can hold. The bound is decided from the digits and the exponent before any multiplication, so
``1e2000000000`` costs nothing.

Two deliberate differences with Go's scanner, both on nonsense input: a number needs at least
one digit (Go reads ``Mi`` and ``.`` as zero; the OpenAPI pattern the API server publishes for
quantities requires a digit), and more than 100 significant digits are refused instead of being
carried as arbitrary-precision decimals.
"""

from __future__ import annotations

import math
import re
from enum import StrEnum
from fractions import Fraction
from functools import lru_cache
from typing import Final

_NANO: Final = 1_000_000_000
_MILLI_PER_NANO: Final = 1_000_000
# A bound on the significant digits of any quantity: far above anything physical (an exabyte is
# 10^18) yet small enough that a hostile string cannot make us build a gigabyte integer.
_MAX_DIGITS: Final = 100
# Decimal magnitudes are held at 10^_MAX_EXPONENT units: far above anything physical, far below
# a float's range.
_MAX_EXPONENT: Final = 100
_MAX_DECIMAL_NANOS: Final = 10 ** (_MAX_EXPONENT + 9)
MAX_EXPONENT: Final = _MAX_EXPONENT
HELD_UNITS: Final = 10**_MAX_EXPONENT
"""Where decimal magnitudes are held, in units: a value at it may stand for any larger one, so
messages quote it as "10^100 or more", not as a number the user never wrote."""
# BinarySI quantities are capped like Kubernetes does (``maxAllowed``: the largest int64).
_MAX_BINARY_NANOS: Final = (2**63 - 1) * _NANO

_QUANTITY_RE: Final = re.compile(
    r"(?P<sign>[+-]?)(?P<int>[0-9]*)(?:\.(?P<frac>[0-9]*))?"
    r"(?:(?P<exp>[eE][+-]?[0-9]+)|(?P<bin>[KMGTPE]i)|(?P<dec>[numkMGTPE]?))"
)

_DECIMAL_SUFFIX_EXPONENT: Final = {
    "n": -9,
    "u": -6,
    "m": -3,
    "": 0,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}
_EXPONENT_DECIMAL_SUFFIX: Final = {exp: suffix for suffix, exp in _DECIMAL_SUFFIX_EXPONENT.items()}
_BINARY_SUFFIX_POWER: Final = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_POWER_BINARY_SUFFIX: Final = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity. The message names the string."""

    def __init__(self, text: object, reason: str = "not a valid Kubernetes quantity") -> None:
        super().__init__(f"{text!r}: {reason}")
        self.text = text


class QuantityFormat(StrEnum):
    """How a quantity prefers to be written back, as Kubernetes remembers it from the input."""

    DECIMAL_SI = "DecimalSI"
    BINARY_SI = "BinarySI"
    DECIMAL_EXPONENT = "DecimalExponent"


def _ceil_div_away_from_zero(numerator: int, denominator: int) -> int:
    """Divide, rounding the magnitude up: Kubernetes never rounds a non-zero request to zero."""
    magnitude = -(-abs(numerator) // denominator)
    return -magnitude if numerator < 0 else magnitude


class Quantity:
    """An immutable, exact quantity: ``nanos`` (an ``int``) plus the preferred output format.

    Equality, ordering and hashing look at the value only (``Quantity("1Gi") ==
    Quantity("1024Mi")``), as ``resource.Quantity.Cmp`` does.
    """

    __slots__ = ("_format", "_nanos")

    _nanos: int
    _format: QuantityFormat

    def __init__(self, value: str | int | float | Quantity = 0) -> None:
        parsed = parse_quantity(value)
        self._nanos = parsed._nanos
        self._format = parsed._format

    @classmethod
    def from_nanos(cls, nanos: int, fmt: QuantityFormat = QuantityFormat.DECIMAL_SI) -> Quantity:
        quantity = cls.__new__(cls)
        quantity._nanos = nanos
        quantity._format = fmt
        return quantity

    @classmethod
    def from_milli(cls, milli: int, fmt: QuantityFormat = QuantityFormat.DECIMAL_SI) -> Quantity:
        return cls.from_nanos(milli * _MILLI_PER_NANO, fmt)

    @classmethod
    def from_units(cls, units: int, fmt: QuantityFormat = QuantityFormat.DECIMAL_SI) -> Quantity:
        return cls.from_nanos(units * _NANO, fmt)

    @property
    def nanos(self) -> int:
        """The exact value in units of 10^-9."""
        return self._nanos

    @property
    def format(self) -> QuantityFormat:
        return self._format

    def milli_value(self) -> int:
        """Value in thousandths, rounded away from zero (``resource.Quantity.MilliValue``)."""
        return _ceil_div_away_from_zero(self._nanos, _MILLI_PER_NANO)

    def value(self) -> int:
        """Value in whole units, rounded away from zero (``resource.Quantity.Value``)."""
        return _ceil_div_away_from_zero(self._nanos, _NANO)

    def as_fraction(self) -> Fraction:
        return Fraction(self._nanos, _NANO)

    def is_zero(self) -> bool:
        return self._nanos == 0

    def __add__(self, other: Quantity) -> Quantity:
        # As ``Quantity.Add``: a zero receiver takes the format of the addend.
        fmt = other._format if self._nanos == 0 else self._format
        return Quantity.from_nanos(self._nanos + other._nanos, fmt)

    def __sub__(self, other: Quantity) -> Quantity:
        fmt = other._format if self._nanos == 0 else self._format
        return Quantity.from_nanos(self._nanos - other._nanos, fmt)

    def __neg__(self) -> Quantity:
        return Quantity.from_nanos(-self._nanos, self._format)

    def __mul__(self, factor: int) -> Quantity:
        return Quantity.from_nanos(self._nanos * factor, self._format)

    __rmul__ = __mul__

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Quantity):
            return self._nanos == other._nanos
        return NotImplemented

    def __lt__(self, other: Quantity) -> bool:
        return self._nanos < other._nanos

    def __le__(self, other: Quantity) -> bool:
        return self._nanos <= other._nanos

    def __gt__(self, other: Quantity) -> bool:
        return self._nanos > other._nanos

    def __ge__(self, other: Quantity) -> bool:
        return self._nanos >= other._nanos

    def __hash__(self) -> int:
        return hash(self._nanos)

    def __bool__(self) -> bool:
        return self._nanos != 0

    def __str__(self) -> str:
        return format_nanos(self._nanos, self._format)

    def __repr__(self) -> str:
        return f"Quantity({str(self)!r})"


def format_nanos(nanos: int, fmt: QuantityFormat = QuantityFormat.DECIMAL_SI) -> str:
    """The canonical Kubernetes spelling of a value (``Quantity.String``).

    No fractional digits, the largest suffix that loses nothing, and binary suffixes only for
    BinarySI values that are whole numbers of at least 1024 (``1.5Gi`` -> ``1536Mi``,
    ``0.5`` -> ``500m``, ``1e3`` stays ``1e3``).
    """
    if nanos == 0:
        return "0"
    sign = "-" if nanos < 0 else ""
    magnitude = -nanos if nanos < 0 else nanos
    if fmt is QuantityFormat.BINARY_SI:
        if magnitude >= 1024 * _NANO and magnitude % _NANO == 0:
            units = magnitude // _NANO
            power = 0
            while power < 6 and units % 1024 == 0:
                units //= 1024
                power += 1
            return f"{sign}{units}{_POWER_BINARY_SUFFIX[power]}"
        fmt = QuantityFormat.DECIMAL_SI
    mantissa, exponent = magnitude, -9
    while mantissa % 1000 == 0:
        mantissa //= 1000
        exponent += 3
    if fmt is QuantityFormat.DECIMAL_SI and exponent <= 18:
        return f"{sign}{mantissa}{_EXPONENT_DECIMAL_SUFFIX[exponent]}"
    # DecimalExponent, or a DecimalSI value beyond the largest suffix (E): exponent notation.
    return f"{sign}{mantissa}" if exponent == 0 else f"{sign}{mantissa}e{exponent}"


@lru_cache(maxsize=8192)
def _parse_text(text: str) -> Quantity:
    match = _QUANTITY_RE.fullmatch(text)
    if match is None:
        raise QuantityError(text)
    integer, fraction = match["int"], match["frac"] or ""
    if not integer and not fraction:
        raise QuantityError(text, "a quantity needs at least one digit")
    digits = (integer + fraction).lstrip("0")
    if len(digits) > _MAX_DIGITS:
        raise QuantityError(text, "too many digits")
    mantissa = int(digits) if digits else 0
    negative = match["sign"] == "-"

    binary_suffix = match["bin"]
    if binary_suffix is not None:
        nanos, fmt = _binary_nanos(mantissa, len(fraction), binary_suffix)
    else:
        nanos, fmt = _decimal_nanos(text, match, mantissa, digits, len(fraction))
    return Quantity.from_nanos(-nanos if negative else nanos, fmt)


def _binary_nanos(mantissa: int, fraction_digits: int, suffix: str) -> tuple[int, QuantityFormat]:
    """Nanos of a binary-suffixed value (Ki, Mi, ...), rounded up and capped as Kubernetes
    does, and the format it keeps."""
    scaled = mantissa * (1024 ** _BINARY_SUFFIX_POWER[suffix]) * _NANO
    nanos = -(-scaled // 10**fraction_digits)
    if nanos > _MAX_BINARY_NANOS:
        return _MAX_BINARY_NANOS, QuantityFormat.BINARY_SI
    if 0 < nanos < _NANO:
        # Kubernetes switches sub-unit binary values to DecimalSI "to avoid confusion".
        return nanos, QuantityFormat.DECIMAL_SI
    return nanos, QuantityFormat.BINARY_SI


def _decimal_nanos(
    text: str, match: re.Match[str], mantissa: int, digits: str, fraction_digits: int
) -> tuple[int, QuantityFormat]:
    """Nanos of a decimal-suffixed or exponent value, rounded up and capped as Kubernetes
    does, and the format it keeps."""
    exponent_text = match["exp"]
    if exponent_text is not None:
        # Go keeps the exponent in an int32 and rejects anything outside it.
        if len(exponent_text) > 12 or abs(exponent := int(exponent_text[1:])) > 2**31 - 1:
            raise QuantityError(text, "exponent out of range")
        fmt = QuantityFormat.DECIMAL_EXPONENT
    else:
        exponent = _DECIMAL_SUFFIX_EXPONENT[match["dec"]]
        fmt = QuantityFormat.DECIMAL_SI
    shift = exponent - fraction_digits + 9
    if mantissa == 0:
        return 0, fmt
    if shift >= 0:
        # Past the bound's digit count the value is over it: the integer is never built.
        if shift + len(digits) > _MAX_EXPONENT + 9:
            return _MAX_DECIMAL_NANOS, fmt
        return min(mantissa * 10**shift, _MAX_DECIMAL_NANOS), fmt
    if -shift > len(digits):
        # Smaller than one nano: Kubernetes rounds any non-zero value up to 1n.
        return 1, fmt
    return -(-mantissa // 10**-shift), fmt


def parse_quantity(value: str | int | float | Quantity) -> Quantity:
    """Parse a quantity as found in Kubernetes JSON: a string, or a bare JSON number.

    Raises ``QuantityError`` (a ``ValueError``) naming the input when it is malformed.
    """
    if isinstance(value, Quantity):
        return value
    if isinstance(value, str):
        return _parse_text(value)
    if isinstance(value, bool):
        raise QuantityError(value, "a boolean is not a quantity")
    if isinstance(value, int):
        # A bare JSON integer is held at the same bound as a written one (``1e400``).
        bounded = max(-_MAX_DECIMAL_NANOS, min(value * _NANO, _MAX_DECIMAL_NANOS))
        return Quantity.from_nanos(bounded)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(value, "not a finite number")
        # repr() is the shortest string that round-trips, so 0.1 means 100m, not 100.000...01m.
        return _parse_text(repr(value))
    raise QuantityError(value, f"a {type(value).__name__} is not a quantity")


def cpu_millis(value: str | int | float | Quantity) -> int:
    """CPU in millicores, rounded up as the scheduler does (``"1.5"`` -> 1500, ``"1n"`` -> 1)."""
    return parse_quantity(value).milli_value()


def to_bytes(value: str | int | float | Quantity) -> int:
    """A memory/storage quantity in whole bytes, rounded up (``"1Ki"`` -> 1024)."""
    return parse_quantity(value).value()


def format_bytes(count: int) -> str:
    """Bytes in canonical BinarySI spelling (1610612736 -> ``"1536Mi"``)."""
    return format_nanos(count * _NANO, QuantityFormat.BINARY_SI)


def format_cpu_millis(millis: int) -> str:
    """Millicores in canonical DecimalSI spelling (1500 -> ``"1500m"``, 2000 -> ``"2"``)."""
    return format_nanos(millis * _MILLI_PER_NANO, QuantityFormat.DECIMAL_SI)
