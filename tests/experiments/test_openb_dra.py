"""The openb protocol with the GPUs published through DRA (`run_one_dra`): the same
trace, policy and seed strand the same GPU as with GPUs nodes list, placing the same
pods (one device model for listed GPUs, shares and DRA devices)."""

from __future__ import annotations

from pathlib import Path

import pytest

from shoal.experiments.openb.runner import run_one, run_one_dra
from shoal.experiments.openb.trace import load_trace

from .test_openb import tiny_trace  # noqa: F401  (the fixture)


@pytest.mark.parametrize("policy", ["FGD", "FragGuard"])
def test_dra_gpus_strand_what_listed_gpus_strand(tiny_trace: Path, policy: str) -> None:  # noqa: F811
    trace = load_trace(tiny_trace, "tiny")
    listed = run_one(trace, policy, seed=42)
    dra = run_one_dra(trace, policy, seed=42)
    assert (dra.pods, dra.placed) == (listed.pods, listed.placed)
    assert dra.unallocated == pytest.approx(listed.unallocated)
    assert dra.first_failure == listed.first_failure
    assert dra.curve == pytest.approx(listed.curve, nan_ok=True)


def test_the_cli_runs_it_with_dra(tiny_trace: Path) -> None:  # noqa: F811
    from typer.testing import CliRunner

    from shoal.cli import app

    args = ["experiment", "openb", "--trace-dir", str(tiny_trace), "--trace", "tiny"]
    args += ["--policy", "FGD", "--seeds", "42", "--json", "--quiet"]
    listed = CliRunner().invoke(app, args)
    dra = CliRunner().invoke(app, [*args, "--dra"])
    assert listed.exit_code == 0 and dra.exit_code == 0, (listed.output, dra.output)
    import json

    first = json.loads(listed.output)["runs"][0]
    second = json.loads(dra.output)["runs"][0]
    assert second["unallocated"] == first["unallocated"]
    assert second["placed"] == first["placed"]
