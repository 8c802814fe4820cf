"""Kubernetes resource quantities ("500m", "2Gi", "1e3") parsed exactly.

The scheduler never works with floats for resources: CPU is kept in millicores and
everything else in whole base units, rounded up the way `resource.Quantity.MilliValue()`
and `Value()` round in Kubernetes. Parsing uses `fractions.Fraction` so "0.1" is exact.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from functools import lru_cache

__all__ = ["INT64_MAX", "QuantityError", "check_int64", "parse_quantity", "to_milli", "to_units"]

# Kubernetes' resource.Quantity holds at most 2^63-1 in magnitude ("numbers larger ...
# will be capped"), and the scheduler reads it with Value()/MilliValue() into an int64
# (which silently overflows); Shoal's node table columns are int64 too. Anything larger
# is refused with a message instead of crashing, wrapping or turning into a zero.
INT64_MAX = 2**63 - 1

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
# sign, digits with optional fraction, then a suffix: binary, decimal SI or exponent.
_QUANTITY = re.compile(
    r"^(?P<sign>[+-]?)(?P<num>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?[0-9]+|n|u|m|k|M|G|T|P|E|)$"
)


class QuantityError(ValueError):
    """A string is not a valid Kubernetes quantity."""


# typed: True and 1 (or 1.0) are different keys, so booleans are always rejected.
@lru_cache(maxsize=4096, typed=True)
def parse_quantity(text: str | int | float) -> Fraction:
    """Parse a Kubernetes quantity into an exact rational number of base units."""
    if isinstance(text, bool):
        raise QuantityError(f"quantity {text!r} is a boolean, expected a number or a string")
    if isinstance(text, int):
        return Fraction(text)
    if isinstance(text, float):
        if not math.isfinite(text):
            raise QuantityError(f"quantity {text!r} is not finite")
        return Fraction(str(text))
    # No whitespace around the number (kube rejects " 1" and "1 " too).
    match = _QUANTITY.fullmatch(text)
    if match is None:
        raise QuantityError(
            f"quantity {text!r} is not valid: expected a number with an optional suffix "
            "such as 500m, 2Gi, 1.5, 1e3"
        )
    value = Fraction(match["num"])
    suffix = match["suffix"]
    if suffix in _BINARY:
        value *= _BINARY[suffix]
    elif suffix in _DECIMAL:  # includes "E" (exa): only "E<digits>" is an exponent
        value *= _DECIMAL[suffix]
    else:
        exponent = int(suffix[1:])
        if abs(exponent) > 30:
            raise QuantityError(f"quantity {text!r} has an exponent out of range")
        value *= Fraction(10) ** exponent
    return -value if match["sign"] == "-" else value


def check_int64(amount: int, what: str, unit: str = "") -> int:
    """`amount` if it fits in an int64; otherwise a QuantityError naming `what` and the
    limit (`unit`: the unit the amount is counted in, e.g. "millicores")."""
    if -INT64_MAX <= amount <= INT64_MAX:
        return amount
    counted = f" {unit}" if unit else ""
    raise QuantityError(
        f"{what} is too large: {amount}{counted} does not fit in a 64-bit integer "
        f"(at most {INT64_MAX}{counted}, the limit of Kubernetes' resource.Quantity)"
    )


@lru_cache(maxsize=4096, typed=True)
def to_milli(text: str | int | float) -> int:
    """Quantity in thousandths of a unit, rounded up (Kubernetes `MilliValue`)."""
    return check_int64(math.ceil(parse_quantity(text) * 1000), f"quantity {text!r}", "milli-units")


@lru_cache(maxsize=4096, typed=True)
def to_units(text: str | int | float) -> int:
    """Quantity in whole units, rounded up (Kubernetes `Value`)."""
    return check_int64(math.ceil(parse_quantity(text)), f"quantity {text!r}")
