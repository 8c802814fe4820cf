"""The configuration half of the malformed-input corpus, through `shoal validate-config`
in-process: exit 1 (never a traceback) and the problem named."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))

from configs import ConfigCase, config_cases

from shoal.cli import app

CASES = list(config_cases())


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_malformed_configuration_is_refused_naming_the_problem(
    case: ConfigCase, tmp_path: Path
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(case.text if case.config is None else yaml.safe_dump(case.config))
    result = CliRunner().invoke(app, ["validate-config", str(path)])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    expected_exit = (0,) if case.warned else (1, 2)
    assert result.exit_code in expected_exit, f"{case.id}: exit {result.exit_code}: {result.output}"
    assert case.expect.lower() in result.output.lower(), f"{case.id}: {result.output}"
