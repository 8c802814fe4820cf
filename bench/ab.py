"""Run a bench script on two revisions in the same run and compare their pods/s.

    python bench/ab.py --base REV [--repeat N] [--keep] -- bench/scheduling_basic.py --pods 10000

The base revision is checked out in a git worktree in the temp directory (reused if one
of that commit is already there; removed at the end if this run created it, unless
--keep, so two concurrent runs on the same base should pass --keep to the first). The
script runs alternately under the base tree and the current tree (the git tree of the
working directory), N times each, in the order base, current, current, base, base, ...
so that neither side always runs first on a machine whose load changes. Each run has
PYTHONPATH set to its tree's src (checked: shoal must import from there) and its tree as
working directory; under the base tree it runs the base's own copy of the script if the
base has one, else the current copy (always the current copy with --current-script: when
the script gained options or output the base's copy lacks).

Every number followed by "pods/s" in a run's output is a metric, named by the line's
heading (the text before its first colon) and the word just before the number; a name
seen twice in one output gets "#2", "#3". The table gives each metric's median over the
runs on each side and the ratio current / base (above 1: current is faster).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NUMBER = r"(\d[\d,]*(?:\.\d+)?)"
RATE = re.compile(NUMBER + r"\s*pods/s")


def git(tree: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(tree), *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"ab: git {' '.join(args)} failed in {tree}: {done.stderr.strip()}")
    return done.stdout.strip()


def metrics(output: str) -> dict[str, float]:
    """Every "<number> pods/s" in the output, by a name built from the line around it."""
    found: dict[str, float] = {}
    for line in output.splitlines():
        heading = ""
        if ":" in line:
            heading = " ".join(line.split(":", 1)[0].split())
        for match in RATE.finditer(line):
            before = line[: match.start()]
            if heading and ":" in before:
                before = before.split(":", 1)[1]
            clause = re.split(r"[,;(]", before)[-1].split()
            word = clause[-1] if clause else ""
            name = " ".join(part for part in (heading, word) if part) or "pods/s"
            unique, n = name, 1
            while unique in found:
                n += 1
                unique = f"{name} #{n}"
            found[unique] = float(match.group(1).replace(",", ""))
    return found


def base_tree(repo: Path, commit: str) -> tuple[Path, bool]:
    """A worktree of `commit`: (path, whether this call created it)."""
    path = Path(tempfile.gettempdir()) / f"shoal-ab-{commit[:12]}"
    if path.exists():
        head = subprocess.run(
            ["git", "-C", str(path), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        if head == commit:
            return path, False
        raise SystemExit(
            f"ab: {path} exists but is not a checkout of {commit[:12]} (HEAD {head or '?'}); "
            f"remove it (git worktree remove --force {path}) and run again"
        )
    git(repo, "worktree", "add", "--detach", str(path), commit)
    return path, True


def check_import(python: str, tree: Path) -> None:
    """Fail early if PYTHONPATH does not make `shoal` import from this tree (an installed
    copy earlier on sys.path would silently benchmark the wrong code)."""
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    done = subprocess.run(
        [python, "-c", "import shoal; print(shoal.__file__)"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tree,
        check=False,
    )
    where = Path(done.stdout.strip() or "?").resolve()
    if done.returncode != 0 or not where.is_relative_to((tree / "src").resolve()):
        raise SystemExit(
            f"ab: with PYTHONPATH={tree / 'src'}, shoal imports from {where} {done.stderr.strip()}"
        )


def run_once(
    python: str, tree: Path, script: Path, args: list[str], timeout: float | None
) -> tuple[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    start = time.perf_counter()
    try:
        done = subprocess.run(
            [python, str(script), *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=tree,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as err:
        raise SystemExit(f"ab: {script} under {tree} ran past --timeout {timeout} s") from err
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        sys.stdout.write(done.stdout)
        sys.stderr.write(done.stderr)
        raise SystemExit(f"ab: {script} under {tree} exited with {done.returncode}")
    return done.stdout, elapsed


def fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def table(base: list[dict[str, float]], current: list[dict[str, float]]) -> list[str]:
    names = list(dict.fromkeys(name for run in current + base for name in run))
    rows = [("metric", "base median", "current median", "ratio", "base runs", "current runs")]
    for name in names:
        b = [run[name] for run in base if name in run]
        c = [run[name] for run in current if name in run]
        bm = statistics.median(b) if b else None
        cm = statistics.median(c) if c else None
        ratio = f"{cm / bm:.3f}" if bm and cm is not None else "-"
        rows.append(
            (
                name,
                fmt(bm),
                fmt(cm),
                ratio,
                " ".join(fmt(v) for v in b),
                " ".join(fmt(v) for v in c),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for k, row in enumerate(rows):
        cells = [row[0].ljust(widths[0])] + [row[i].rjust(widths[i]) for i in (1, 2, 3)]
        cells += [row[i].ljust(widths[i]) for i in (4, 5)]
        lines.append("  ".join(cells).rstrip())
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--base", required=True, help="the revision to compare against")
    parser.add_argument("--repeat", type=int, default=3, help="runs per side (default 3)")
    parser.add_argument("--keep", action="store_true", help="keep a worktree this run created")
    parser.add_argument("--python", default=sys.executable, help="interpreter for the runs")
    parser.add_argument("--timeout", type=float, default=None, help="seconds per run")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every run's output")
    parser.add_argument(
        "--current-script",
        action="store_true",
        help="run the current tree's copy of the script on both sides",
    )
    parser.add_argument("script", help="the bench script, e.g. bench/scheduling_basic.py")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")
    ns = parser.parse_args()
    if ns.repeat < 1:
        parser.error("--repeat must be at least 1")
    script_args = ns.args[1:] if ns.args[:1] == ["--"] else ns.args

    current = Path(git(Path.cwd(), "rev-parse", "--show-toplevel")).resolve()
    script = Path(ns.script).resolve()
    if not script.is_file():
        parser.error(f"no such script: {ns.script}")
    if not script.is_relative_to(current):
        parser.error(f"{ns.script} is not inside the current tree {current}")
    relative = script.relative_to(current)
    commit = git(current, "rev-parse", "--verify", f"{ns.base}^{{commit}}")
    base, created = base_tree(current, commit)
    try:
        own = (base / relative).is_file() and not ns.current_script
        base_script = base / relative if own else script
        check_import(ns.python, base)
        check_import(ns.python, current)
        head = git(current, "rev-parse", "--short", "HEAD")
        dirty = " (with uncommitted changes)" if git(current, "status", "--porcelain") else ""
        print(f"base:    {ns.base} = {commit[:12]} in {base}, script {base_script}")
        print(f"current: {head}{dirty} in {current}, script {script}")
        command = " ".join([str(relative), *script_args])
        print(f"command: {command}; {ns.repeat} run(s) per side")
        results: dict[str, list[dict[str, float]]] = {"base": [], "current": []}
        sides = {"base": (base, base_script), "current": (current, script)}
        order: list[str] = []
        for i in range(ns.repeat):
            order += ["base", "current"] if i % 2 == 0 else ["current", "base"]
        for n, side in enumerate(order, 1):
            tree, path = sides[side]
            output, elapsed = run_once(ns.python, tree, path, script_args, ns.timeout)
            found = metrics(output)
            if ns.verbose:
                sys.stdout.write(output)
            summary = ", ".join(f"{k} {fmt(v)}" for k, v in found.items()) or "no pods/s found"
            print(f"[{n}/{len(order)}] {side:7s} {elapsed:6.1f} s  {summary}", flush=True)
            if not found:
                sys.stdout.write(output)
                raise SystemExit(f"ab: no number followed by 'pods/s' in the {side} output")
            results[side].append(found)
        print()
        print("\n".join(table(results["base"], results["current"])))
        print("ratio = current median / base median (above 1: current is faster)")
    finally:
        if created and not ns.keep:
            git(current, "worktree", "remove", "--force", str(base))
        elif created:
            print(f"kept the base worktree {base} (git worktree remove --force {base})")


if __name__ == "__main__":
    main()
