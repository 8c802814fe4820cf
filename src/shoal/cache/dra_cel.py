"""CEL device selectors (DeviceClass and request `selectors[].cel.expression`), on
cel-python (`celpy`, the interpreted runner).

* Each expression is compiled once (`compile_selector`); a parse error raises
  `SelectorError`, which the plugin turns into a refusal naming the claim and field.
* `device.driver`, `device.attributes["domain"].name`,
  `device.capacity["domain"].name` and `device.allowMultipleAllocations` are
  available, with unqualified attribute names in the driver's domain, as in
  Kubernetes. Quantities are values of their own:
  `quantity("40Gi")`, `.compareTo(q)`, `.isGreaterThan(q)`, `.isLessThan(q)`,
  `.asInteger()`, `.asApproximateFloat()`, and (beyond Kubernetes) `<`, `<=`, `>`, `>=`,
  `==` between quantities. `semver(...)` and Kubernetes' other CEL libraries are not
  available: such an expression fails to evaluate.
* Evaluation is cached by the device's content as far as the expression can see it
  (the attributes and capacities it names), so identical GPUs on thousands of nodes
  cost one evaluation. An expression that fails at run time (a missing attribute,
  an unknown function, a result that is not a bool) does not match the device, and
  `outcome` says why, so the plugin can refuse the pod naming the claim, the selector
  and the error, as kube-scheduler reports such a failure (see docs/dra.md).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from shoal.api.dra import SliceDevice

if TYPE_CHECKING:
    import celpy
    from celpy import celtypes
from shoal.api.quantity import parse_quantity

__all__ = ["CompiledSelector", "SelectorError", "compile_selector"]

_MACROS = re.compile(r"\.(all|exists|exists_one|map|filter)\s*\(|\bsize\s*\(")
_WORDS = re.compile(r'"((?:[^"\\]|\\.)*)"|\'((?:[^\'\\]|\\.)*)\'|([A-Za-z_][A-Za-z0-9_.\-/]*)')


class SelectorError(ValueError):
    """A selector expression CEL cannot compile."""


class Quantity:
    """A resource quantity inside CEL (kube's quantity library, the parts listed above)."""

    __slots__ = ("text", "value")

    def __init__(self, text: str) -> None:
        self.text = text
        self.value: Fraction = parse_quantity(text)

    def __lt__(self, other: object) -> bool:
        return self.value < _as_quantity(other).value

    def __le__(self, other: object) -> bool:
        return self.value <= _as_quantity(other).value

    def __gt__(self, other: object) -> bool:
        return self.value > _as_quantity(other).value

    def __ge__(self, other: object) -> bool:
        return self.value >= _as_quantity(other).value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Quantity) and self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return f"quantity({self.text!r})"


def _as_quantity(value: object) -> Quantity:
    if isinstance(value, Quantity):
        return value
    if isinstance(value, str | int):
        return Quantity(str(value))
    raise TypeError(f"not a quantity: {value!r}")


def _compare(a: object, b: object) -> celtypes.IntType:
    from celpy import celtypes

    x, y = _as_quantity(a).value, _as_quantity(b).value
    return celtypes.IntType((x > y) - (x < y))


def _functions() -> dict[str, Callable[..., Any]]:
    from celpy import celtypes

    return {
        "quantity": lambda text: Quantity(str(text)),
        "compareTo": _compare,
        "isGreaterThan": lambda a, b: celtypes.BoolType(_as_quantity(a) > _as_quantity(b)),
        "isLessThan": lambda a, b: celtypes.BoolType(_as_quantity(a) < _as_quantity(b)),
        "asInteger": lambda a: celtypes.IntType(int(_as_quantity(a).value)),
        "asApproximateFloat": lambda a: celtypes.DoubleType(float(_as_quantity(a).value)),
    }


_RUNTIME: tuple[celpy.Environment, dict[str, Callable[..., Any]]] | None = None


def _runtime() -> tuple[celpy.Environment, dict[str, Callable[..., Any]]]:
    """celpy and its CEL grammar (some 40,000 objects, which every full garbage
    collection would then walk: SchedulingBasic ran 13 % slower with them loaded at
    import), loaded the first time a selector is compiled. Its Environment raises the
    process's recursion limit as a side effect (to 2500): that is put back, since the
    Kubernetes client's guard against objects nested too deeply to decode relies on it
    (tests/kube/test_units.py)."""
    global _RUNTIME
    if _RUNTIME is None:
        import celpy

        limit = sys.getrecursionlimit()
        try:
            _RUNTIME = (celpy.Environment(), _functions())
        finally:
            sys.setrecursionlimit(limit)
    return _RUNTIME


def _cel_value(value: object) -> Any:
    from celpy import celtypes

    if isinstance(value, bool):
        return celtypes.BoolType(value)
    if isinstance(value, int):
        return celtypes.IntType(value)
    return celtypes.StringType(str(value))


def _qualified(driver: str, name: str) -> tuple[str, str]:
    domain, slash, rest = name.rpartition("/")
    return (domain, rest) if slash else (driver, name)


@dataclass
class CompiledSelector:
    expression: str
    program: Any
    # Names the expression mentions (None: it iterates over maps, see everything).
    names: frozenset[str] | None
    # Per device view: True or False, or why evaluating the expression failed.
    results: dict[tuple[object, ...], bool | str] = field(default_factory=dict)

    def _view(self, driver: str, device: SliceDevice) -> tuple[object, ...]:
        """The part of the device the expression can see, hashable (the cache key)."""
        names = self.names
        attrs = tuple(
            sorted(
                (_qualified(driver, key), repr(a.value()))
                for key, a in device.attributes.items()
                if names is None or _qualified(driver, key)[1] in names
            )
        )
        caps = tuple(
            sorted(
                (_qualified(driver, key), str(c.value))
                for key, c in device.capacity.items()
                if names is None or _qualified(driver, key)[1] in names
            )
        )
        return (driver, attrs, caps, bool(device.allow_multiple_allocations))

    def matches(self, driver: str, device: SliceDevice) -> bool:
        return self.outcome(driver, device) is True

    def outcome(self, driver: str, device: SliceDevice) -> bool | str:
        """Whether the expression accepts the device, or (a non-empty string) why
        evaluating it on the device failed."""
        key = self._view(driver, device)
        found = self.results.get(key)
        if found is None:
            found = self._evaluate(driver, device)
            self.results[key] = found
        return found

    def _evaluate(self, driver: str, device: SliceDevice) -> bool | str:
        from celpy import celtypes

        attributes: dict[str, dict[str, Any]] = {}
        for key, attr in device.attributes.items():
            domain, name = _qualified(driver, key)
            attributes.setdefault(domain, {})[name] = _cel_value(attr.value())
        capacity: dict[str, dict[str, Any]] = {}
        for key, cap in device.capacity.items():
            domain, name = _qualified(driver, key)
            try:
                capacity.setdefault(domain, {})[name] = Quantity(str(cap.value))
            except ValueError:
                continue
        activation = {
            "device": celtypes.MapType(
                {
                    celtypes.StringType("driver"): celtypes.StringType(driver),
                    celtypes.StringType("attributes"): _map_of_maps(attributes),
                    celtypes.StringType("capacity"): _map_of_maps(capacity),
                    celtypes.StringType("allowMultipleAllocations"): celtypes.BoolType(
                        bool(device.allow_multiple_allocations)
                    ),
                }
            )
        }
        try:
            result = self.program.evaluate(activation)
        except Exception as err:
            return _runtime_error(err)
        if isinstance(result, Exception):  # celpy may return an error as the value
            return _runtime_error(result)
        if isinstance(result, bool | celtypes.BoolType):
            return bool(result)
        return f"the result is {_type_name(result)} {_shorten(repr(result), 60)}, not a bool"


def _runtime_error(err: BaseException) -> str:
    """A one-line account of a CEL evaluation error (celpy's CELEvalError carries
    (message, exception type, details); its messages can embed the whole activation)."""
    args = err.args
    text = str(args[0]) if args else ""
    text = text.split(" (in activation", 1)[0].strip() or type(err).__name__
    details = args[2] if len(args) > 2 else None
    if text == "no such key" and isinstance(details, tuple) and details:
        text += ": " + ", ".join(repr(str(d)) for d in details)
    return _shorten(text, 200)


def _type_name(value: object) -> str:
    name = type(value).__name__
    return name[:-4].lower() if name.endswith("Type") else name


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _map_of_maps(values: dict[str, dict[str, Any]]) -> celtypes.MapType:
    from celpy import celtypes

    return celtypes.MapType(
        {
            celtypes.StringType(domain): celtypes.MapType(
                {celtypes.StringType(k): v for k, v in inner.items()}
            )
            for domain, inner in values.items()
        }
    )


_COMPILED: dict[str, CompiledSelector] = {}


def compile_selector(expression: str) -> CompiledSelector:
    """The compiled selector (compiled once per distinct expression)."""
    found = _COMPILED.get(expression)
    if found is not None:
        return found
    if not expression.strip():
        raise SelectorError("the expression is empty")
    try:
        env, functions = _runtime()
        program = env.program(env.compile(expression), functions=functions)
    except Exception as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise SelectorError(f"CEL cannot compile it: {first}") from None
    names: frozenset[str] | None = None
    if not _MACROS.search(expression):
        words: set[str] = set()
        for match in _WORDS.finditer(expression):
            text = match.group(1) or match.group(2) or match.group(3) or ""
            words.update(text.split("."))
            words.add(text)
        names = frozenset(words)
    compiled = CompiledSelector(expression, program, names)
    _COMPILED[expression] = compiled
    return compiled
