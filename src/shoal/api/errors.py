"""Errors about user input that name the object, the field and the fix."""

from __future__ import annotations

__all__ = ["ManifestError"]


class ManifestError(ValueError):
    """An object could not be read. The message names the object and the field."""

    def __init__(self, kind: str, name: str, field: str, problem: str, source: str = "") -> None:
        self.kind = kind
        self.name = name
        self.field = field
        self.problem = problem
        self.source = source
        where = f"{source}: " if source else ""
        at = f": field {field}" if field else ""
        super().__init__(f"{where}{kind} {name or '<unnamed>'}{at}: {problem}")
