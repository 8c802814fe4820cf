"""kubectl's `-l/--selector` syntax, read into `shoal.api.selectors` requirements."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from shoal.api.selectors import Requirement

__all__ = ["SELECTOR_FORMS", "parse_selector"]

_SET_TERM = re.compile(r"^(!?)([^\s!=(),]+)\s+(in|notin)\s*\(([^()]*)\)$")
_EQ_TERM = re.compile(r"^([^\s!=(),]+)\s*(==|!=|=)\s*([^\s!=(),]*)$")
_KEY_TERM = re.compile(r"^(!?)\s*([^\s!=(),]+)$")
SELECTOR_FORMS = "key=value, key==value, key!=value, key, !key, key in (a,b), key notin (a,b)"


def parse_selector(text: str) -> tuple[Requirement, ...]:
    """kubectl's `-l` syntax as requirements (`shoal.api.selectors`); ValueError names
    the term that is not one of `SELECTOR_FORMS`. An empty selector selects everything."""
    terms, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            terms.append(text[start:i])
            start = i + 1
    terms.append(text[start:])
    requirements: list[Requirement] = []
    for raw in terms:
        term = raw.strip()
        if not term and len(terms) == 1:
            break
        if match := _SET_TERM.match(term):
            if match[1]:
                raise ValueError(f"{term!r}: '!' goes before a key alone (!key)")
            values = tuple(sorted({v.strip() for v in match[4].split(",")}))
            if "" in values:
                raise ValueError(f"{term!r}: a value in the list is empty")
            op = "In" if match[3] == "in" else "NotIn"
            requirements.append((match[2], op, values))
        elif match := _EQ_TERM.match(term):
            op = "NotIn" if match[2] == "!=" else "In"
            requirements.append((match[1], op, (match[3],)))
        elif match := _KEY_TERM.match(term):
            requirements.append((match[2], "DoesNotExist" if match[1] else "Exists", ()))
        else:
            raise ValueError(f"cannot parse {term!r}")
    return tuple(requirements)
