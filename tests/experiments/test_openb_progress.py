"""`shoal experiment openb`'s progress: bars on a terminal, one line per finished run
elsewhere (none with --json), nothing with --quiet; the ETA from the wall time per run."""

from __future__ import annotations

import io

from shoal.experiments.openb.progress import SweepProgress, progress_mode
from shoal.experiments.openb.runner import RunResult


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def _run(policy: str, seed: int) -> RunResult:
    return RunResult("default", policy, seed, 10, 9, 1000, 4.25, [], None, 12.3)


def test_the_mode_follows_the_terminal_and_the_flags() -> None:
    assert progress_mode(quiet=False, json_output=False, stream=_Tty()) == "bar"
    assert progress_mode(quiet=False, json_output=True, stream=_Tty()) == "bar"
    assert progress_mode(quiet=False, json_output=False, stream=io.StringIO()) == "lines"
    assert progress_mode(quiet=False, json_output=True, stream=io.StringIO()) == "off"
    assert progress_mode(quiet=True, json_output=False, stream=_Tty()) == "off"


def test_lines_say_each_run_and_the_time_left() -> None:
    now = [100.0]
    out = io.StringIO()
    units = [("default", p, s) for p in ("FGD", "BestFit") for s in (1, 2)]
    with SweepProgress(units, "lines", stream=out, clock=lambda: now[0]) as progress:
        progress.start()
        assert progress.eta() is None
        now[0] = 130.0
        progress.done(_run("FGD", 1))
        # 30 s per run so far, 3 runs left; FGD's is the next one in the order.
        assert progress.eta() == 90.0 and progress.eta("FGD") == 30.0
        now[0] = 160.0
        progress.done(_run("FGD", 2))
        assert progress.eta("FGD") == 0.0 and progress.eta("BestFit") == 60.0
    lines = out.getvalue().splitlines()
    assert lines == [
        "[1/4] FGD seed 1 on default: 4.25 % unallocated (12.3 s); 0:00:30 elapsed, ETA 0:01:30",
        "[2/4] FGD seed 2 on default: 4.25 % unallocated (12.3 s); 0:01:00 elapsed, ETA 0:01:00",
    ]


def test_bars_count_runs_per_policy_and_off_prints_nothing() -> None:
    out = _Tty()
    units = [("default", p, s) for p in ("FGD", "BestFit") for s in (1, 2)]
    with SweepProgress(units, "bar", stream=out) as progress:
        progress.start()
        progress.done(_run("BestFit", 2))
    text = out.getvalue()
    assert "all runs" in text and "1/4" in text
    assert "FGD" in text and "0/2" in text and "BestFit" in text and "1/2" in text

    quiet = io.StringIO()
    with SweepProgress(units, "off", stream=quiet) as progress:
        progress.start()
        progress.done(_run("FGD", 1))
    assert quiet.getvalue() == ""
