"""The guides under docs/ say what the code does.

Fenced code blocks carry a tag after the language when the test should check them:

* ```` ```python file=docs/examples/x.py ````: the block is an excerpt of that file;
* ```` ```python run ````: the block runs (blocks of one page share a namespace, in
  order, from the repository root with docs/examples importable);
* ```` ```text parse_config=docs/examples/x.yaml ````: the block is exactly the
  ConfigError that `parse_config` raises for that file;
* ```` ```console ```` whose first line is `$ shoal ...`: the command's output (run with
  typer's CliRunner from the repository root; a last line `# exit code N` gives the
  expected exit status, 0 otherwise).

docs/configuration.md also carries the default plugin table and the in-tree plugin args,
which must match `shoal.plugins`.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from shoal.config import ConfigError, parse_config
from shoal.config.types import EXTENSION_POINTS, KubeSchedulerConfiguration
from shoal.framework.registry import PluginSpec
from shoal.plugins import DEFAULT_MULTI_POINT, IN_TREE
from shoal.scheduler import default_registry

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))
FENCE = re.compile(r"^( *)```([^\n]*)\n(.*?)^\1```[ \t]*$", re.S | re.M)


def blocks(page: Path) -> list[tuple[str, str]]:
    """(info string, content) of every fenced block; indented blocks are dedented."""
    out = []
    for m in FENCE.finditer(page.read_text()):
        indent = m.group(1)
        body = "".join(line.removeprefix(indent) for line in m.group(3).splitlines(keepends=True))
        out.append((m.group(2).strip(), body))
    return out


def tagged(tag: str) -> list[tuple[Path, str, str]]:
    out = []
    for page in PAGES:
        for info, body in blocks(page):
            for word in info.split()[1:]:
                if word == tag or word.startswith(tag + "="):
                    out.append((page, word.partition("=")[2], body))
    return out


def page_id(item: tuple[Path, str, str]) -> str:
    return f"{item[0].name}:{item[1] or 'run'}"


@pytest.mark.parametrize("item", tagged("file"), ids=page_id)
def test_file_excerpts_match_the_files(item: tuple[Path, str, str]) -> None:
    page, target, body = item
    text = (ROOT / target).read_text()
    assert body in text, f"{page.name}: a block tagged file={target} differs from the file"


RUNNABLE_PAGES = sorted({page for page, _, _ in tagged("run")})


@pytest.mark.parametrize("page", RUNNABLE_PAGES, ids=lambda page: page.name)
def test_runnable_snippets_run(page: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    monkeypatch.syspath_prepend(str(DOCS / "examples"))
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem}"}
    for i, (_, _, body) in enumerate(b for b in tagged("run") if b[0] == page):
        code = compile(body, f"{page.name} (run block {i + 1})", "exec")
        exec(code, namespace)
    sys.modules.pop("gpu_model_preference", None)


@pytest.mark.parametrize("item", tagged("parse_config"), ids=page_id)
def test_shown_config_errors_are_real(item: tuple[Path, str, str]) -> None:
    _, target, body = item
    path = ROOT / target
    with pytest.raises(ConfigError) as err:
        parse_config(
            yaml.safe_load(path.read_text()),
            source=path.name,
            registry=default_registry(include_entry_points=False),
        )
    assert str(err.value) == body.rstrip("\n")


def shoal_commands() -> list[tuple[Path, str, str]]:
    out = []
    for page in PAGES:
        for info, body in blocks(page):
            if info.split()[:1] == ["console"] and body.startswith("$ shoal "):
                command, _, output = body.partition("\n")
                out.append((page, command.removeprefix("$ shoal "), output))
    return out


@pytest.mark.parametrize("item", shoal_commands(), ids=page_id)
def test_shown_cli_output_is_real(
    item: tuple[Path, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from shoal.cli import app

    monkeypatch.chdir(ROOT)
    _, command, output = item
    lines = output.splitlines()
    expected_exit = 0
    if lines and lines[-1].startswith("# exit code "):
        expected_exit = int(lines.pop().removeprefix("# exit code "))
    result = CliRunner().invoke(app, shlex.split(command))
    assert result.exit_code == expected_exit, result.output
    assert result.output.rstrip("\n") == "\n".join(lines).rstrip("\n")


# ---- docs/configuration.md: defaults and args ------------------------------------------

POINT_NAMES = {
    "pre_enqueue": "PreEnqueue",
    "queue_sort": "QueueSort",
    "pre_filter": "PreFilter",
    "filter": "Filter",
    "post_filter": "PostFilter",
    "pre_score": "PreScore",
    "score": "Score",
    "reserve": "Reserve",
    "permit": "Permit",
    "pre_bind": "PreBind",
    "bind": "Bind",
    "post_bind": "PostBind",
}


def default_plugin_table() -> str:
    """The table of docs/configuration.md, computed from the default profile."""
    from shoal.drivers.memory import ManualClock, MemoryEffects
    from shoal.scheduler import new_scheduler

    sched = new_scheduler(
        KubeSchedulerConfiguration(),
        clock=ManualClock(),
        effects=MemoryEffects(),
        registry=default_registry(include_entry_points=False),
    )
    plugins = sched.profiles["default-scheduler"].plugins
    weights = {p.name: w for p, w in plugins.score}
    lines = [
        "| # | plugin | extension points | score weight | args |",
        "|---|---|---|---|---|",
    ]
    for i, (name, _) in enumerate(DEFAULT_MULTI_POINT, 1):
        points = []
        for point in EXTENSION_POINTS:
            members = getattr(plugins, point)
            if point == "queue_sort":
                members = [members]
            elif point == "score":
                members = [p for p, _ in members]
            if any(p.name == name for p in members):
                points.append(POINT_NAMES[point])
        if any(p.name == name for p, _ in plugins.score) and hasattr(
            next(p for p, _ in plugins.score if p.name == name), "normalize_score"
        ):
            points.insert(points.index("Score") + 1, "NormalizeScore")
        spec: PluginSpec = IN_TREE[name]
        args = f"`{spec.args.__name__}`" if spec.args else "none"
        weight = str(weights[name]) if name in weights else "-"
        lines.append(f"| {i} | {name} | {', '.join(points)} | {weight} | {args} |")
    return "\n".join(lines)


def test_default_plugin_table_is_current() -> None:
    page = (DOCS / "configuration.md").read_text()
    table = default_plugin_table()
    assert table in page, (
        "docs/configuration.md: the default plugin table is out of date; replace it with:\n" + table
    )


def test_every_in_tree_plugin_and_arg_is_documented() -> None:
    page = (DOCS / "configuration.md").read_text()
    for name, spec in IN_TREE.items():
        assert f"`{name}`" in page or f"| {name} |" in page, f"{name} is not documented"
        if spec.args is None:
            continue
        assert f"### {name}" in page, f"docs/configuration.md needs a '### {name}' args section"
        section = page.split(f"### {name}", 1)[1].split("\n### ", 1)[0]
        for field in spec.args.model_fields.values():
            alias = field.alias
            assert alias and f"`{alias}`" in section, f"{name} arg {alias} is not documented"
