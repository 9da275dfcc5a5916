"""Kubernetes quantity parsing, arithmetic and canonical formatting (vectors from apimachinery)."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from karpenter_capi.core.values.quantity import (
    Quantity,
    QuantityError,
    QuantityFormat,
    cpu_millis,
    format_bytes,
    format_cpu_millis,
    format_nanos,
    parse_quantity,
    to_bytes,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("100m", Fraction(1, 10)),
        ("1.5Gi", 1610612736),
        ("1e3", 1000),
        ("1E3", 1000),
        ("0.1", Fraction(1, 10)),
        ("500Mi", 500 * 2**20),
        ("1k", 1000),
        ("1Ki", 1024),
        ("-1", -1),
        ("+1", 1),
        (".5", Fraction(1, 2)),
        ("5.", 5),
        ("0", 0),
        ("1E", 10**18),
        ("5n", Fraction(5, 10**9)),
        ("4u", Fraction(4, 10**6)),
        ("1.2e3", 1200),
        ("1.3E+6", 1300000),
        ("1E-3", Fraction(1, 1000)),
        ("100.035k", 100035),
        ("0.5Mi", 2**19),
        ("1.G", 10**9),
        ("3Ei", 3 * 2**60),
        # Kubernetes rounds up to the nano: a non-zero request never becomes zero.
        ("3.001n", Fraction(4, 10**9)),
        ("0.0000000005", Fraction(1, 10**9)),
        ("0.000000000001Ki", Fraction(2, 10**9)),
        ("-3.001n", Fraction(-4, 10**9)),
        # BinarySI is capped at the largest int64, as in apimachinery.
        ("9Ei", 2**63 - 1),
    ],
)
def test_parse_matches_kubernetes(text: str, expected: Fraction | int) -> None:
    assert parse_quantity(text).as_fraction() == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "1.2.3",
        "Mi",
        "1 Mi",
        "1mi",
        "1e",
        "1Kb",
        "abc",
        "1e1.5",
        ".",
        " 1",
        "1 ",
        "1i",
        "-3.01e-",
        "0.1am",
        "1+1.0M",
        "1e4294967297",
    ],
)
def test_malformed_strings_are_rejected_naming_the_string(text: str) -> None:
    with pytest.raises(QuantityError) as caught:
        parse_quantity(text)
    assert repr(text) in str(caught.value)
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("1.5", "1500m"),
        ("1.5Gi", "1536Mi"),
        ("1024Mi", "1Gi"),
        ("1000M", "1G"),
        ("0.1", "100m"),
        ("1e3", "1e3"),
        ("1k", "1k"),
        ("1Ki", "1Ki"),
        ("1025", "1025"),
        ("5Ki", "5Ki"),
        (".001Ki", "1024m"),
        (".000000000001Ki", "2n"),
        ("1.08", "1080m"),
        ("80e-3", "80e-3"),
        ("300e6", "300e6"),
        ("1.2e3", "1200"),
        ("-1.5Gi", "-1536Mi"),
        ("-0", "0"),
        ("0Mi", "0"),
        ("12E", "12E"),
        ("1000E", "1e21"),
        ("100.035Ki", "102435840m"),
    ],
)
def test_canonical_formatting_matches_kubernetes(text: str, canonical: str) -> None:
    assert str(parse_quantity(text)) == canonical


def test_formats_remember_the_input_style() -> None:
    assert parse_quantity("1Gi").format is QuantityFormat.BINARY_SI
    assert parse_quantity("1G").format is QuantityFormat.DECIMAL_SI
    assert parse_quantity("1e9").format is QuantityFormat.DECIMAL_EXPONENT
    # Sub-unit binary values are written as DecimalSI, as apimachinery does.
    assert parse_quantity("0.000000000001Ki").format is QuantityFormat.DECIMAL_SI


def test_json_numbers_are_quantities() -> None:
    assert parse_quantity(2) == parse_quantity("2")
    assert parse_quantity(0.1) == parse_quantity("100m")
    assert parse_quantity(1e3) == parse_quantity("1k")
    with pytest.raises(QuantityError):
        parse_quantity(True)
    with pytest.raises(QuantityError, match="finite"):
        parse_quantity(float("nan"))
    with pytest.raises(QuantityError):
        parse_quantity(None)  # type: ignore[arg-type]


def test_arithmetic_is_exact() -> None:
    tenth = parse_quantity("0.1")
    assert tenth + tenth + tenth == parse_quantity("300m")
    assert parse_quantity("1Gi") - parse_quantity("512Mi") == parse_quantity("512Mi")
    assert str(parse_quantity("1Gi") - parse_quantity("512Mi")) == "512Mi"
    assert -parse_quantity("1") == parse_quantity("-1")
    assert parse_quantity("250m") * 4 == parse_quantity("1")
    assert 4 * parse_quantity("250m") == parse_quantity("1")
    # A zero receiver takes the addend's format (Quantity.Add): "0" + "1Gi" prints as 1Gi.
    assert str(parse_quantity("0") + parse_quantity("1Gi")) == "1Gi"


def test_comparison_and_hashing_use_the_value() -> None:
    assert parse_quantity("1Gi") == parse_quantity("1024Mi")
    assert hash(parse_quantity("1Gi")) == hash(parse_quantity("1073741824"))
    assert parse_quantity("100m") < parse_quantity("0.2") <= parse_quantity("200m")
    assert parse_quantity("10000T") > parse_quantity("100Gi")
    assert parse_quantity("1") >= parse_quantity("1000m")
    assert not parse_quantity("0")
    assert parse_quantity("1n")
    assert len({parse_quantity("1k"), parse_quantity("1000"), parse_quantity("1e3")}) == 1


def test_constructor_and_repr() -> None:
    assert Quantity("1.5") == Quantity.from_milli(1500)
    assert Quantity() == Quantity.from_nanos(0)
    assert Quantity.from_units(2) == Quantity(2)
    assert repr(Quantity("1536Mi")) == "Quantity('1536Mi')"


def test_helpers_round_up_like_the_scheduler() -> None:
    assert cpu_millis("1.5") == 1500
    assert cpu_millis("100m") == 100
    assert cpu_millis("1n") == 1
    assert cpu_millis(2) == 2000
    assert cpu_millis("-1n") == -1
    assert to_bytes("1Ki") == 1024
    assert to_bytes("1.5Gi") == 1610612736
    assert to_bytes("1500m") == 2
    assert format_bytes(1610612736) == "1536Mi"
    # Below 1024 apimachinery falls back to DecimalSI, so 1000 bytes print as "1k".
    assert format_bytes(1000) == "1k"
    assert format_bytes(3 * 2**30) == "3Gi"
    assert format_cpu_millis(1500) == "1500m"
    assert format_cpu_millis(2000) == "2"
    assert Quantity("1.5").milli_value() == 1500
    assert Quantity("1.5").value() == 2


def test_absurd_magnitudes_are_held_at_a_bound_not_computed_nor_refused() -> None:
    # The API server admits cpu: 1e400; a limit that large is no limit, a request fits nowhere.
    for text in ("1e400", "1e2147483647", "1e101", "100000e97"):
        assert parse_quantity(text).value() == 10**100, text
    assert parse_quantity("-1e400").value() == -(10**100)
    assert str(parse_quantity("1e400")) == "10e99"  # exponents in threes, as Kubernetes writes
    assert parse_quantity("1e99").value() == 10**99
    assert parse_quantity(10**400).value() == 10**100  # a bare JSON number, as in limits
    assert parse_quantity(-(10**400)).value() == -(10**100)
    with pytest.raises(QuantityError, match="too many digits"):
        parse_quantity("1" * 101)
    # Tiny values round up to the smallest representable quantity, like Kubernetes.
    assert parse_quantity("1e-2000000000").nanos == 1


_FORMATS = st.sampled_from(list(QuantityFormat))


# Within the int64 range of whole units: beyond it Kubernetes caps BinarySI values (see 9Ei).
_INT64_NANOS = (2**63 - 1) * 10**9


@given(nanos=st.integers(min_value=-_INT64_NANOS, max_value=_INT64_NANOS), fmt=_FORMATS)
def test_format_then_parse_round_trips_every_value(nanos: int, fmt: QuantityFormat) -> None:
    text = format_nanos(nanos, fmt)
    parsed = parse_quantity(text)
    assert parsed.nanos == nanos
    # Canonical output is a fixed point once re-read. Not always at the first step, exactly as in
    # Kubernetes: BinarySI writes 125000 units as "125000" (not a multiple of 1024), which reads
    # back as DecimalSI and is then written "125k".
    assert str(parse_quantity(str(parsed))) == str(parsed)
    if parsed.format is fmt:
        assert str(parsed) == text


def test_binary_si_without_a_binary_multiple_reads_back_as_decimal_si() -> None:
    text = format_nanos(125_000 * 10**9, QuantityFormat.BINARY_SI)
    assert text == "125000"
    assert str(parse_quantity(text)) == "125k"


@given(
    units=st.integers(min_value=0, max_value=2**32),
    suffix=st.sampled_from(["", "Ki", "Mi", "Gi", "k", "M", "G", "m", "u", "n"]),
    negative=st.booleans(),
)
def test_parse_of_generated_strings_is_exact(units: int, suffix: str, negative: bool) -> None:
    multipliers: dict[str, Fraction] = {
        "": Fraction(1),
        "Ki": Fraction(2**10),
        "Mi": Fraction(2**20),
        "Gi": Fraction(2**30),
        "k": Fraction(10**3),
        "M": Fraction(10**6),
        "G": Fraction(10**9),
        "m": Fraction(1, 10**3),
        "u": Fraction(1, 10**6),
        "n": Fraction(1, 10**9),
    }
    multiplier = multipliers[suffix]
    text = ("-" if negative else "") + f"{units}{suffix}"
    expected = units * multiplier * (-1 if negative else 1)
    quantity = parse_quantity(text)
    assert quantity.as_fraction() == expected
    assert parse_quantity(str(quantity)) == quantity


@given(
    integer=st.integers(min_value=0, max_value=10**6),
    fraction=st.text(alphabet="0123456789", min_size=1, max_size=12),
)
def test_decimal_fractions_round_up_to_the_nano(integer: int, fraction: str) -> None:
    exact = integer + Fraction(int(fraction), 10 ** len(fraction))
    nanos = parse_quantity(f"{integer}.{fraction}").nanos
    assert Fraction(nanos - 1, 10**9) < exact <= Fraction(nanos, 10**9)
