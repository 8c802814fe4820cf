"""Quantity parsing, ported from apimachinery's TestQuantityParse (pkg/api/resource)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from shoal.api.quantity import QuantityError, parse_quantity, to_milli, to_units
from shoal.api.resources import parse_resource_list

Ki, Mi, Gi, Ti, Pi, Ei = (2**10 * 2 ** (10 * i) for i in range(6))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # zeroes with every suffix
        ("0", 0),
        ("0n", 0),
        ("0u", 0),
        ("0m", 0),
        ("0Ki", 0),
        ("0k", 0),
        ("0Mi", 0),
        ("0M", 0),
        ("0Gi", 0),
        ("0G", 0),
        ("0Ti", 0),
        ("0T", 0),
        ("1", 1),
        # binary suffixes
        ("1Ki", Ki),
        ("8Ki", 8 * Ki),
        ("7Mi", 7 * Mi),
        ("2Gi", 2 * Gi),
        ("6Gi", 6 * Gi),
        ("5Ti", 5 * Ti),
        ("4Pi", 4 * Pi),
        ("3Ei", 3 * Ei),
        ("1.5Ki", 1536),
        ("0.5Mi", Mi // 2),
        ("100.035Ki", Fraction(100035, 1000) * Ki),
        # decimal suffixes
        ("5n", Fraction(5, 10**9)),
        ("4u", Fraction(4, 10**6)),
        ("3m", Fraction(3, 1000)),
        ("500m", Fraction(1, 2)),
        ("8k", 8000),
        ("50k", 50_000),
        ("7M", 7 * 10**6),
        ("6G", 6 * 10**9),
        ("5T", 5 * 10**12),
        ("2P", 2 * 10**15),
        ("1E", 10**18),  # E alone is exa, not an exponent
        ("12E", 12 * 10**18),
        # decimal exponents
        ("1e3", 1000),
        ("1E3", 1000),
        ("1E-3", Fraction(1, 1000)),
        ("1e9", 10**9),
        ("1.2e3", 1200),
        ("1.3E+6", 1_300_000),
        ("0.5e-1", Fraction(5, 100)),
        # things that look like floating point
        ("0.1", Fraction(1, 10)),
        ("0.001", Fraction(1, 1000)),
        ("0.0005k", Fraction(1, 2)),
        ("9.01", Fraction(901, 100)),
        ("10.035M", 10_035_000),
        ("100.035k", 100_035),
        # things written by trolls
        (".001", Fraction(1, 1000)),
        (".0001k", Fraction(1, 10)),
        ("1.", 1),
        ("1.G", 10**9),
        # explicit signs
        ("+1", 1),
        ("+500m", Fraction(1, 2)),
        ("-1", -1),
        ("-1.5Ki", -1536),
    ],
)
def test_parse_valid(text: str, expected: int | Fraction) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "1.1.M",
        "1+1.0M",
        "0.1mi",
        "0.1am",
        "aoeu",
        ".5i",
        "1i",
        "-3.01i",
        "-3.01e-",
        "1e4294967297",
        "1Kb",
        "one",
        "--1",
        # leading/trailing whitespace is forbidden in kube
        " 1",
        "1 ",
    ],
)
def test_parse_invalid(text: str) -> None:
    with pytest.raises(QuantityError, match=r"is not valid|out of range"):
        parse_quantity(text)


def test_numbers_are_quantities() -> None:
    assert parse_quantity(3) == 3
    assert parse_quantity(0.25) == Fraction(1, 4)
    assert parse_quantity(0.1) == Fraction(1, 10)  # via str(): exact, not binary float
    # True == 1 and hashes alike: a cached 1 must not let a boolean through.
    assert parse_quantity(1) == 1 and to_milli(1) == 1000
    with pytest.raises(QuantityError, match="boolean"):
        parse_quantity(True)
    with pytest.raises(QuantityError, match="boolean"):
        to_milli(True)
    with pytest.raises(QuantityError, match="not finite"):
        parse_quantity(float("inf"))


@pytest.mark.parametrize(
    ("text", "milli", "units"),
    [
        ("500m", 500, 1),  # Value() rounds up
        ("1", 1000, 1),
        ("0.1", 100, 1),
        ("0.1m", 1, 1),  # MilliValue() rounds up too
        ("3.001n", 1, 1),
        ("1.5", 1500, 2),
        ("2Gi", 2 * Gi * 1000, 2 * Gi),
        ("1e3", 1_000_000, 1000),
        ("-1500m", -1500, -1),  # ceil toward +inf, like kube's RoundUp on negatives
    ],
)
def test_milli_and_unit_rounding(text: str, milli: int, units: int) -> None:
    assert to_milli(text) == milli
    assert to_units(text) == units


def test_resource_list_units() -> None:
    parsed = parse_resource_list(
        {"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": 2, "ephemeral-storage": "1e3"}
    )
    assert parsed == {"cpu": 500, "memory": Gi, "nvidia.com/gpu": 2, "ephemeral-storage": 1000}


def test_resource_list_errors_name_the_resource() -> None:
    with pytest.raises(ValueError, match=r"^memory: quantity '-1Gi' must not be negative$"):
        parse_resource_list({"cpu": "1", "memory": "-1Gi"})
    with pytest.raises(ValueError, match=r"^cpu: quantity '1 core' is not valid"):
        parse_resource_list({"cpu": "1 core"})
    assert parse_resource_list({"cpu": "-1"}, allow_negative=True) == {"cpu": -1000}


def test_quantities_beyond_int64_are_refused_with_the_limit() -> None:
    # The largest whole quantity kube's resource.Quantity (and an int64 column) holds.
    assert to_units("9223372036854775807") == 2**63 - 1
    assert to_milli("9223372036854775.807") == 2**63 - 1
    for text in ("9223372036854775808", "1e30", "10E", "8Ei"):
        with pytest.raises(QuantityError, match="9223372036854775807"):
            to_units(text)
    with pytest.raises(ValueError, match=r"^cpu: quantity '99999999999999999999' is too large"):
        parse_resource_list({"cpu": "99999999999999999999"})
    with pytest.raises(ValueError, match=r"^memory: quantity '1e30' is too large"):
        parse_resource_list({"memory": "1e30"})


def test_a_pod_whose_total_request_overflows_int64_is_refused() -> None:
    from shoal.api.errors import ManifestError
    from shoal.api.manifests import decode
    from shoal.api.objects import Pod

    def pod(*memory: str, init: str = "") -> dict[str, object]:
        spec: dict[str, object] = {
            "containers": [
                {"name": f"c{i}", "resources": {"requests": {"memory": m}}}
                for i, m in enumerate(memory)
            ]
        }
        if init:
            spec["initContainers"] = [{"name": "i", "resources": {"requests": {"memory": init}}}]
        return {"metadata": {"name": "p", "namespace": "ns"}, "spec": spec}

    with pytest.raises(ManifestError, match=r"ns/p.*total memory request is too large"):
        decode(pod("5E", "5E"), Pod)
    # An init container runs before the others: the effective request is the max.
    assert decode(pod("5E", init="5E"), Pod).metadata.name == "p"
