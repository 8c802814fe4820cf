"""Node labels as integer-coded columns, so selectors run on all nodes at once.

Each label key has an int32 column (one entry per node row) holding a code into that key's
vocabulary, or -1 where the node lacks the key. `In`/`NotIn`/`Exists` become `np.isin` and
comparisons on one column; `Gt`/`Lt` use a numeric view of the column built on demand.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from shoal.api.objects import NodeSelectorRequirement, NodeSelectorTerm
from shoal.api.selectors import SelectorKey

__all__ = ["MISSING", "LabelColumns"]

MISSING = -1
Index = slice | NDArray[np.intp]


class LabelColumns:
    """Label codes per key, sized to the node table's capacity."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self.codes: dict[str, NDArray[np.int32]] = {}
        self.vocab: dict[str, dict[str, int]] = {}
        self.values: dict[str, list[str]] = {}
        self._numeric: dict[str, NDArray[np.float64]] = {}

    def grow(self, capacity: int) -> None:
        for key, column in self.codes.items():
            grown = np.full(capacity, MISSING, dtype=np.int32)
            grown[: len(column)] = column
            self.codes[key] = grown
        self._capacity = capacity
        self._numeric.clear()

    def code(self, key: str, value: str) -> int:
        vocab = self.vocab.get(key)
        if vocab is None:
            vocab = self.vocab[key] = {}
            self.values[key] = []
            self.codes[key] = np.full(self._capacity, MISSING, dtype=np.int32)
        code = vocab.get(value)
        if code is None:
            code = vocab[value] = len(self.values[key])
            self.values[key].append(value)
        return code

    def set_row(self, row: int, labels: dict[str, str]) -> None:
        for column in self.codes.values():
            column[row] = MISSING
        for key, value in labels.items():
            code = self.code(key, value)
            self.codes[key][row] = code
        self._numeric.clear()

    def move_row(self, src: int, dst: int) -> None:
        for column in self.codes.values():
            column[dst] = column[src]
            column[src] = MISSING
        self._numeric.clear()

    def clear_row(self, row: int) -> None:
        for column in self.codes.values():
            column[row] = MISSING
        self._numeric.clear()

    def column(self, key: str, index: Index) -> NDArray[np.int32]:
        """Codes of `key` for the indexed rows (all MISSING if no node has the key)."""
        column = self.codes.get(key)
        if column is None:
            size = _size(index, self._capacity)
            return np.full(size, MISSING, dtype=np.int32)
        return column[index]

    def value_codes(self, key: str, values: list[str]) -> list[int]:
        vocab = self.vocab.get(key, {})
        return [vocab[v] for v in values if v in vocab]

    def numeric(self, key: str, index: Index) -> NDArray[np.float64]:
        """The key's values parsed as integers (NaN where missing or not a number)."""
        cached = self._numeric.get(key)
        if cached is None:
            table = np.array([_as_int(v) for v in self.values.get(key, [])] + [np.nan])
            codes = self.codes.get(key)
            # MISSING (-1) picks the trailing NaN.
            cached = np.full(self._capacity, np.nan) if codes is None else table[codes]
            self._numeric[key] = cached
        return cached[index]

    def requirement_mask(self, req: NodeSelectorRequirement, index: Index) -> NDArray[np.bool_]:
        """v1 NodeSelectorRequirement evaluated on every indexed node."""
        op = req.operator
        if op in ("Gt", "Lt"):
            numbers = self.numeric(req.key, index)
            bound = int(req.values[0])
            with np.errstate(invalid="ignore"):
                result: NDArray[np.bool_] = numbers > bound if op == "Gt" else numbers < bound
            return result
        codes = self.column(req.key, index)
        if op in ("Exists", "DoesNotExist"):
            present: NDArray[np.bool_] = codes != MISSING
            return present if op == "Exists" else ~present
        wanted = self.value_codes(req.key, req.values)
        inside = np.isin(codes, wanted) if wanted else np.zeros(codes.shape, dtype=bool)
        return inside if op == "In" else ~inside

    def selector_mask(self, key: SelectorKey, n: int) -> NDArray[np.bool_]:
        """A metav1 label selector (canonical `selector_key` form) on rows 0..n-1 at
        once: None matches no row, () every row."""
        if key is None:
            return np.zeros(n, dtype=bool)
        mask = np.ones(n, dtype=bool)
        for name, op, values in key:
            codes = self.column(name, slice(0, n))
            if op in ("Exists", "DoesNotExist"):
                present = codes != MISSING
                mask &= present if op == "Exists" else ~present
                continue
            wanted = self.value_codes(name, list(values))
            inside = np.isin(codes, wanted) if wanted else np.zeros(n, dtype=bool)
            if op == "In":
                mask &= inside
            elif op == "NotIn":
                mask &= ~inside
            else:
                mask[:] = False
        return mask

    def term_mask(
        self, term: NodeSelectorTerm, names: NDArray[np.object_], index: Index
    ) -> NDArray[np.bool_]:
        """All requirements of one NodeSelectorTerm (an empty term matches nothing)."""
        if not term.match_expressions and not term.match_fields:
            return np.zeros(_size(index, self._capacity, names), dtype=bool)
        mask = np.ones(_size(index, self._capacity, names), dtype=bool)
        for req in term.match_expressions:
            mask &= self.requirement_mask(req, index)
        for req in term.match_fields:
            mask &= _field_mask(req, names)
        return mask

    def terms_mask(
        self, terms: tuple[NodeSelectorTerm, ...], names: NDArray[np.object_], index: Index
    ) -> NDArray[np.bool_]:
        """NodeSelector semantics: the terms are ORed."""
        mask = np.zeros(len(names), dtype=bool)
        for term in terms:
            mask |= self.term_mask(term, names, index)
        return mask


def _field_mask(req: NodeSelectorRequirement, names: NDArray[np.object_]) -> NDArray[np.bool_]:
    # Only metadata.name is a supported node field (as in the API server's validation).
    if req.key != "metadata.name":
        return np.zeros(len(names), dtype=bool)
    inside = np.isin(names, req.values)
    if req.operator == "In":
        return inside
    if req.operator == "NotIn":
        return ~inside
    return np.zeros(len(names), dtype=bool)


def _as_int(value: str) -> float:
    try:
        return float(int(value))
    except ValueError:
        return float("nan")


def _size(index: Index, capacity: int, names: NDArray[np.object_] | None = None) -> int:
    if names is not None:
        return len(names)
    if isinstance(index, slice):
        return len(range(*index.indices(capacity)))
    return len(index)
