"""Errors that name the fix: no kubeconfig anywhere, and seeds that are not seeds."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from shoal.cli import app
from shoal.experiments.openb.runner import parse_seeds


def test_no_kubeconfig_says_what_to_give(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    result = CliRunner().invoke(app, ["get", "queues"])
    assert result.exit_code == 1
    assert "no kubeconfig: give --kubeconfig FILE or set KUBECONFIG" in result.stderr
    assert result.stderr.count("error:") == 1  # one error, not two that disagree


def test_seeds_take_ranges_and_lists_and_refuse_the_rest() -> None:
    assert parse_seeds("42-44") == [42, 43, 44]
    assert parse_seeds("42..44") == [42, 43, 44]
    assert parse_seeds("1,3-4") == [1, 3, 4]
    with pytest.raises(ValueError, match=r"'x' is not a seed: give non-negative integers"):
        parse_seeds("1,x")
    with pytest.raises(ValueError, match="empty seed range"):
        parse_seeds("5-3")
    result = CliRunner().invoke(app, ["experiment", "openb", "--seeds", "42..43x"])
    assert result.exit_code != 0
    assert "'42..43x' is not a seed" in result.output
    assert "invalid literal" not in result.output
