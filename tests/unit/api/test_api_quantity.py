"""Quantities: Kubernetes syntax in, exact milli-units out, canonical spelling back."""

from __future__ import annotations

import pytest

from muster.api import QuantityError, format_quantity, parse_quantity
from muster.api.quantity import negative_problem, parse_exact

GI = 2**30


@pytest.mark.parametrize(
    ("text", "milli"),
    [
        ("1", 1000),
        ("0", 0),
        ("1.5", 1500),
        (".5", 500),
        ("1.", 1000),
        ("+2", 2000),
        ("-2", -2000),
        ("500m", 500),
        ("1500m", 1500),
        ("0.1m", 1),  # sub-milli rounds up
        ("1n", 1),
        ("999999u", 1000),
        ("2k", 2_000_000),
        ("1M", 10**9),
        ("1G", 10**12),
        ("1T", 10**15),
        ("1P", 10**18),
        ("0.004E", 4 * 10**18),
        ("1Ki", 1024 * 1000),
        ("1Mi", 2**20 * 1000),
        ("10Gi", 10 * GI * 1000),
        ("1.5Gi", 3 * 2**29 * 1000),
        ("1Ti", 2**40 * 1000),
        ("1Pi", 2**50 * 1000),
        ("0.0078125Ei", 2**53 * 1000),
        ("9223372036854775807m", 2**63 - 1),  # the largest: Kubernetes' int64 milli-value
        ("1e3", 1_000_000),
        ("1E3", 1_000_000),
        ("5e-1", 500),
        ("1e-4", 1),
        (3, 3000),
        (0.5, 500),
        (0.1, 100),
        (1e-9, 1),
    ],
)
def test_parses_kubernetes_quantity_to_exact_milli_units(
    text: str | int | float, milli: int
) -> None:
    assert parse_quantity(text) == milli


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("abc", 'expected a quantity such as 500m, 2, 1.5, 10Gi or 1e3, got "abc"'),
        ("1.5.5", 'expected a quantity such as 500m, 2, 1.5, 10Gi or 1e3, got "1.5.5"'),
        ("10GB", 'expected a quantity such as 500m, 2, 1.5, 10Gi or 1e3, got "10GB"'),
        ("", 'expected a quantity such as 500m, 2, 1.5, 10Gi or 1e3, got ""'),
        (" 1", 'expected a quantity such as 500m, 2, 1.5, 10Gi or 1e3, got " 1"'),
        ("1 Gi", 'expected a quantity such as 500m, 2, 1.5, 10Gi or 1e3, got "1 Gi"'),
        ("1ki", 'expected a quantity such as 500m, 2, 1.5, 10Gi or 1e3, got "1ki"'),
        (True, "expected a quantity such as 500m, 2, 1.5, 10Gi or 1e3, got true"),
        (float("nan"), "expected a quantity such as 500m, 2, 1.5, 10Gi or 1e3, got nan"),
        # Digits are ASCII only: Arabic-Indic twelve is not 12.
        ("١٢", "expected a quantity such as 500m, 2, 1.5, 10Gi or 1e3, got '\\u0661\\u0662'"),
        (
            "1" * 65,
            "expected a quantity such as 500m, 2, 1.5, 10Gi or 1e3, got 65 characters (at most 64)",
        ),
    ],
)
def test_rejects_junk_with_the_users_message(value: str | float, problem: str) -> None:
    with pytest.raises(QuantityError) as raised:
        parse_quantity(value)
    assert str(raised.value) == problem


@pytest.mark.parametrize(
    "value",
    ["1e30", "9223372036854775808m", "1E", "1Ei", "-1e19", 10**30, 1e300, "1" * 64],
)
def test_refuses_a_magnitude_beyond_int64_milli_units(value: str | int | float) -> None:
    with pytest.raises(QuantityError) as raised:
        parse_quantity(value)

    assert str(raised.value).startswith(
        "must be at most 9223372036854775807m in magnitude (Kubernetes reads quantities as"
        " 64-bit milli-units), got "
    )


def test_keeps_fractional_value_exact() -> None:
    assert str(parse_exact("0.5")) == "1/2"
    assert str(parse_exact("1e-9")) == "1/1000000000"


@pytest.mark.parametrize(
    ("milli", "text"),
    [
        (0, "0"),
        (500, "500m"),
        (1500, "1500m"),
        (2000, "2"),
        (1000 * 1000, "1000"),
        (1024 * 1000, "1Ki"),
        (10 * GI * 1000, "10Gi"),
        (1536 * 2**20 * 1000, "1536Mi"),
        (2**40 * 1000, "1Ti"),
        (3 * 2**60 * 1000, "3Ei"),
        (1025 * 1000, "1025"),
        (-500, "-500m"),
        (-2 * GI * 1000, "-2Gi"),
    ],
)
def test_formats_canonical_spelling(milli: int, text: str) -> None:
    assert format_quantity(milli) == text


def test_formats_counted_resources_without_binary_suffix() -> None:
    assert format_quantity(1024 * 1000, binary=False) == "1024"


@pytest.mark.parametrize("text", ["500m", "2", "10Gi", "1536Mi", "1Ki", "7", "1001m"])
def test_round_trips_canonical_text(text: str) -> None:
    assert format_quantity(parse_quantity(text)) == text


def test_reports_negative_only_when_below_zero() -> None:
    assert negative_problem(-2000) == "must be >= 0, got -2"
    assert negative_problem(0) is None
