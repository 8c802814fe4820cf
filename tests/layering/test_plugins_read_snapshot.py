"""Plugins read the cluster only through `handle.snapshot` (the read view) and change it
only through `handle.transaction()` and the effects port: no plugin touches the live
cache (`handle.cluster`, or any `.cluster` attribute), which is what lets the core put
a copy-on-write session behind the snapshot without touching a plugin. The imports of
the cache's own modules are forbidden by an import-linter contract (pyproject.toml);
this test catches the attribute, which an import contract cannot see."""

from __future__ import annotations

import ast
from pathlib import Path

PLUGINS = Path(__file__).resolve().parents[2] / "src" / "shoal" / "plugins"
FORBIDDEN_ATTRIBUTES = {"cluster", "_cluster"}


def _uses(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    return [
        f"{path.name}:{node.lineno}: .{node.attr}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr in FORBIDDEN_ATTRIBUTES
    ]


def test_no_plugin_reads_the_live_cache() -> None:
    found = [use for path in sorted(PLUGINS.rglob("*.py")) for use in _uses(path)]
    assert found == [], "plugins must read handle.snapshot, not the cache: " + ", ".join(found)


def test_the_check_sees_an_access(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("def f(self):\n    return self.handle.cluster.table\n")
    assert _uses(sample) == ["sample.py:2: .cluster"]
