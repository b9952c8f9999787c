"""Kubernetes resource quantities ("500m", "2", "10Gi", "1e3") as exact integers of milli-units.

`parse_quantity` is how every request, quota and usage enters muster; `format_quantity` is how
one leaves (encode, reports). Arithmetic is exact: no float ever touches a quantity.
"""

from __future__ import annotations

import functools
import math
import re
from fractions import Fraction

from muster.api.model import MilliUnits

_SUFFIXES: dict[str, Fraction] = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}
# Largest first, so format_quantity picks the biggest suffix that divides exactly.
_BINARY_UNITS = (
    ("Ei", 2**60),
    ("Pi", 2**50),
    ("Ti", 2**40),
    ("Gi", 2**30),
    ("Mi", 2**20),
    ("Ki", 2**10),
)

# <sign><digits>[.<digits>] then either an exponent (e3, E-2) or one suffix. "1E" is exa, "1E3"
# is an exponent: the exponent branch needs digits, so the regex tries it first. Digits are
# ASCII only, as in Kubernetes' grammar ("١٢" is not 12).
_QUANTITY = re.compile(
    r"(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:[eE](?P<exponent>[+-]?[0-9]+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)"
)
_EXAMPLES = "expected a quantity such as 500m, 2, 1.5, 10Gi or 1e3"
# Kubernetes reads a quantity's milli-value as an int64 (cpu, in the scheduler and kubelet):
# anything larger cannot be meant, and must never reach int64 arithmetic downstream.
MAX_MILLI = 2**63 - 1
_MAX_UNITS = Fraction(MAX_MILLI, 1000)
_MAX_CHARS = 64  # a longer spelling is beyond int64 or below nano precision anyway


class QuantityError(ValueError):
    """A value that is not a Kubernetes quantity; str() is the user's message."""


def parse_exact(value: str | int | float) -> Fraction:
    """Return the exact value of a quantity in whole units ("500m" -> 1/2, "1Ki" -> 1024).

    Accepts a quantity string or a YAML int or float (a float is read through its shortest
    decimal spelling, so 0.1 is exactly 1/10). Raises QuantityError for anything else, and
    for a magnitude beyond int64 milli-units.
    """
    exact = _exact(value)
    if abs(exact) > _MAX_UNITS:
        raise QuantityError(
            f"must be at most {MAX_MILLI}m in magnitude (Kubernetes reads quantities as"
            f" 64-bit milli-units), got {shown(value)}"
        )
    return exact


def _exact(value: str | int | float) -> Fraction:
    if isinstance(value, bool):
        raise QuantityError(f"{_EXAMPLES}, got {str(value).lower()}")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"{_EXAMPLES}, got {value}")
        return Fraction(repr(value))
    if not isinstance(value, str):
        raise QuantityError(f"{_EXAMPLES}, got {type(value).__name__}")
    if len(value) > _MAX_CHARS:
        raise QuantityError(f"{_EXAMPLES}, got {len(value)} characters (at most {_MAX_CHARS})")
    match = _QUANTITY.fullmatch(value)
    if match is None:
        raise QuantityError(f"{_EXAMPLES}, got {shown(value)}")
    number = Fraction(match["number"])
    if match["exponent"] is not None:
        exponent = int(match["exponent"])
        if abs(exponent) > 40:
            raise QuantityError(f'exponent out of range in "{value}"')
        return number * Fraction(10) ** exponent
    return number * _SUFFIXES[match["suffix"] or ""]


def shown(value: object) -> str:
    """A value as messages show it: strings quoted, non-ASCII escaped, long ones cut (a
    hostile value is never echoed whole)."""
    text = value if isinstance(value, str) else repr(value)
    if len(text) > 40:
        text = text[:37] + "..."
    return f'"{text}"' if text.isascii() else ascii(text)


@functools.lru_cache(maxsize=4096)  # the same few strings ("100m", "64Mi") recur everywhere
def parse_quantity(text: str | int | float) -> MilliUnits:
    """Return a quantity as an integer number of milli-units ("500m" -> 500, "2" -> 2000).

    Sub-milli precision rounds up to the next milli-unit ("0.1m" -> 1), as Kubernetes does when
    it reads a quantity's milli value. Negative values parse; callers that forbid them check
    with `negative_problem`. Raises QuantityError for junk ("abc", "1.5.5", "10GB").
    """
    return MilliUnits(math.ceil(parse_exact(text) * 1000))


def negative_problem(milli: int) -> str | None:
    """Return the user's message when a quantity that must not be negative is, else None."""
    if milli < 0:
        return f"must be >= 0, got {format_quantity(milli)}"
    return None


def format_quantity(milli: int, *, binary: bool = True) -> str:
    """Return the canonical spelling of a quantity of `milli` milli-units.

    The rule, in order:
    1. not a whole number of units: milli-units, "500m", "1500m";
    2. `binary` and a non-zero exact multiple of 1Ki: the largest binary suffix that divides it
       exactly, "1Ki", "10Gi", "1536Mi";
    3. otherwise the plain integer, "2", "1000".
    Pass `binary=False` for counted resources (cpu, gpus) so 1024 cpus print as "1024".
    """
    sign = "-" if milli < 0 else ""
    magnitude = abs(milli)
    if magnitude % 1000:
        return f"{sign}{magnitude}m"
    units = magnitude // 1000
    if binary and units and units % 1024 == 0:
        for suffix, size in _BINARY_UNITS:
            if units % size == 0:
                return f"{sign}{units // size}{suffix}"
    return f"{sign}{units}"
