"""The `shoal experiment openb` half of the malformed-input corpus (openb_cases.py), run
in-process through the command line: a bad trace exits 2 with a message naming the file,
the line, the column and the fix; a value that is legitimately ignored is a warning
naming it while the rest runs; input that is fine as it is gives the clean trace's
result. Never a traceback, never a hang (each run has a time limit), never a silently
different result."""

from __future__ import annotations

import contextlib
import json
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
import typer
from click.testing import CliRunner, Result

sys.path.insert(0, str(Path(__file__).parent))

from openb_cases import TraceCase, cases, write

from shoal.cli import app

CASES = cases()
# The command tree built once (typer's runner rebuilds it for every call, ~0.1 s).
SHOAL: click.Command = typer.main.get_command(app)
LIMIT_SECONDS = 20.0  # per run; the clean trace takes well under a second
# Fields of a run that are timings, not results.
TIMINGS = {"seconds"}


class Hang(BaseException):
    """Raised in the run when it passes its time limit (a BaseException: the command's
    own `except OSError` must not swallow it as it would a TimeoutError)."""


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    def expire(signum: int, frame: object) -> None:
        raise Hang(f"no answer within {seconds:.0f} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run(case: TraceCase, folder: Path) -> Result:
    write(case, folder)
    if case.args:
        trace = [a.format(dir=folder, missing=folder / "missing") for a in case.args]
    else:
        trace = ["--trace-dir", str(folder), "--trace", "x"]
    args = ["experiment", case.command, *trace, "--policy", "FGD", "--workers", "1", "--json"]
    args += ["--seeds", "1", "--quiet"] if case.command == "openb" else ["--seed", "1"]
    try:
        with time_limit(LIMIT_SECONDS):
            return CliRunner().invoke(SHOAL, args)
    except Hang as err:
        pytest.fail(f"{case.id}: hung: {err}")


def results(result: Result) -> list[dict[str, Any]]:
    """The runs a successful command printed, without their timings."""
    data = json.loads(result.stdout)
    runs = data["runs"] if isinstance(data, dict) else data
    return [{k: v for k, v in r.items() if k not in TIMINGS} for r in runs]


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    """The clean trace's results, per command."""
    out = {}
    for command in ("openb", "openb-replay"):
        case = TraceCase(f"clean-{command}", "", command=command)
        result = run(case, tmp_path_factory.mktemp(command))
        assert result.exit_code == 0, result.output
        assert "warning" not in result.stderr, result.stderr
        out[command] = results(result)
        assert out[command] and out[command][0]["pods"] > 0
    assert out["openb"][0]["unallocated"] == out["openb"][0]["unallocated"], "NaN headline"
    return out


def test_the_corpus_is_large_enough() -> None:
    assert len(CASES) >= 200


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_malformed_trace_is_named_and_never_crashes(
    case: TraceCase, tmp_path: Path, clean: dict[str, list[dict[str, Any]]]
) -> None:
    result = run(case, tmp_path)
    # Never a traceback: an exception escaping the command is a crash.
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{case.id}: crashed: {result.exception!r}\n{result.output}"
    )
    said = result.stderr
    if case.same_result:
        assert result.exit_code == 0, f"{case.id}: refused: {said}"
        assert "warning" not in said, f"{case.id}: warned about fine input: {said}"
        assert results(result) == clean[case.command], f"{case.id}: a different result"
        return
    if case.warned:
        assert result.exit_code == 0, f"{case.id}: refused, not warned: {said}"
        assert results(result)[0]["pods"] > 0, f"{case.id}: nothing ran beside the warning"
        messages = [m for m in said.splitlines() if m.startswith("warning: ")]
    else:
        assert result.exit_code == 2, f"{case.id}: exit {result.exit_code}: {result.output}"
        assert not result.stdout.strip(), f"{case.id}: printed a result: {result.stdout}"
        messages = [m for m in said.splitlines() if m.startswith("error: ")]
    assert messages, f"{case.id}: no message: {said}"
    message = messages[0] if not case.warned else " ".join(messages)
    assert case.expect.lower() in message.lower(), f"{case.id}: {case.expect!r} not in {message}"
    if case.file:
        assert case.file in message, f"{case.id}: the file is not named: {message}"
    if case.line:
        assert f"{case.file}:{case.line}:" in message, f"{case.id}: not line {case.line}: {message}"
    if case.column:
        assert f"field '{case.column}'" in message, f"{case.id}: the column is not named: {message}"
    assert "Traceback" not in result.output
