"""YAML and JSON read the way the API server and kube-scheduler read them: a key given
twice in one mapping is an error, not "the last one wins" (client-go's strict decoding
and kubectl refuse such objects; PyYAML and `json` keep the last value silently, so a
pod with `containers:` twice ran with the second list and no word).

`load_documents` reads a multi-document YAML text one document at a time, so a document
with a duplicate key is reported (`DuplicateKey`, with its line) and the next documents
are still read.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode

__all__ = ["DuplicateKey", "StrictLoader", "load", "load_documents", "load_json"]

_MERGE = "tag:yaml.org,2002:merge"


class DuplicateKey(ValueError):
    """A mapping gives one key twice."""


class StrictLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` that refuses a key given twice in one mapping (YAML merge keys,
    `<<: *base`, may still be overridden by the mapping's own keys)."""

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, MappingNode):
            seen: set[Any] = set()
            for key_node, _ in node.value:
                if key_node.tag == _MERGE:
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    duplicate = key in seen
                except TypeError:
                    continue  # unhashable: the base constructor says so
                if duplicate:
                    raise ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        f"found duplicate key {key!r}: a key given twice keeps only one of "
                        "its values; remove the other",
                        key_node.start_mark,
                    )
                seen.add(key)
        return super().construct_mapping(node, deep)


def _duplicate(err: ConstructorError) -> DuplicateKey | None:
    if err.problem is None or "duplicate key" not in err.problem:
        return None
    line = err.problem_mark.line + 1 if err.problem_mark is not None else 0
    return DuplicateKey(f"{err.problem} (line {line})")


def load(text: str) -> Any:
    """One YAML document (as `yaml.safe_load`); a key given twice raises `DuplicateKey`
    naming it and its line."""
    try:
        return yaml.load(text, Loader=StrictLoader)
    except ConstructorError as err:
        duplicate = _duplicate(err)
        if duplicate is None:
            raise
        raise duplicate from None


def load_documents(text: str) -> Iterator[Any]:
    """Every document of a YAML text; a document with a duplicate key yields a
    `DuplicateKey` naming the key and its line, and the next documents are read on.
    Other YAML errors raise (the rest of the text cannot be trusted)."""
    loader = StrictLoader(text)
    try:
        while loader.check_data():  # type: ignore[no-untyped-call]
            try:
                yield loader.get_data()
            except ConstructorError as err:
                duplicate = _duplicate(err)
                if duplicate is None:
                    raise
                yield duplicate
    finally:
        loader.dispose()


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKey(
                f"found duplicate key {key!r}: a key given twice keeps only one of its "
                "values; remove the other"
            )
        out[key] = value
    return out


def load_json(text: str) -> Any:
    """JSON (as `json.loads`), refusing duplicate keys."""
    return json.loads(text, object_pairs_hook=_pairs)
