"""Fixtures for simulator tests."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from shoal.sim import Scenario, load_scenario

ScenarioFactory = Callable[..., Scenario]


@pytest.fixture
def scenario(tmp_path: Path) -> ScenarioFactory:
    """scenario(cluster_yaml, workload_yaml, seed=0) -> Scenario read from files."""
    counter = iter(range(1_000_000))

    def make(*texts: str, seed: int = 0) -> Scenario:
        paths = []
        for text in texts:
            path = tmp_path / f"input-{next(counter)}.yaml"
            path.write_text(textwrap.dedent(text))
            paths.append(path)
        return load_scenario(paths, seed=seed)

    return make
