"""Go durations as kube's configuration files write them ("15s", "1m30s", "500ms")."""

from __future__ import annotations

__all__ = ["parse_duration"]

_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
# Longest first, so "ms" is not read as "m" followed by "s".
_ORDER = ("ms", "us", "µs", "ns", "h", "m", "s")


def parse_duration(value: object) -> float:
    """A Go duration ("15s", "1m30s", "500ms") or a number of seconds.

    Raises ValueError naming the value for anything else (a bare "15" included: Go's
    parser wants a unit, and kube-scheduler would refuse the file).
    """
    if isinstance(value, bool):
        raise ValueError(f"invalid duration {value!r}")
    if isinstance(value, int | float):
        return float(value)
    text = str(value).strip()
    sign = 1.0
    if text[:1] in ("-", "+"):
        # Go's ParseDuration takes a sign: "-1s" is a (negative) duration.
        sign, text = (-1.0 if text[0] == "-" else 1.0), text[1:]
    if not text:
        raise ValueError(f"invalid duration {value!r}")
    total, number = 0.0, ""
    i = 0
    while i < len(text):
        ch = text[i]
        if ch.isdigit() or ch == ".":
            number += ch
            i += 1
            continue
        unit = next((u for u in _ORDER if text.startswith(u, i)), None)
        if unit is None or not number:
            raise ValueError(f"invalid duration {value!r}")
        try:
            total += float(number) * _UNITS[unit]
        except ValueError:
            raise ValueError(f"invalid duration {value!r}") from None
        number = ""
        i += len(unit)
    if number:
        raise ValueError(f"invalid duration {value!r}: missing unit")
    return sign * total
