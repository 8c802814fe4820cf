"""The malformed-input corpus (generate.py) through the simulator's edge and core: every
bad object is refused or explained by a message saying what is wrong, the good objects
beside it still run, nothing crashes, hangs or is accepted silently."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from generate import Case, cases, write

from shoal.sim.engine import SimOptions, Simulation
from shoal.sim.results import PodState
from shoal.sim.scenario import load_scenario

CASES = cases()


def test_the_corpus_is_large_enough() -> None:
    assert len(CASES) >= 265


def messages_for(case: Case, tmp_path: Path) -> tuple[list[str], dict[str, PodState]]:
    scenario = load_scenario(write(case, tmp_path / f"{case.id}.yaml"))
    result = Simulation(scenario, SimOptions(until=600)).run()
    said = [str(e) for e in scenario.errors] + list(result.warnings)
    said += [f"{r.namespace}/{r.name}: {r.message}" for r in result.records if r.message]
    return said, {r.name: r.state for r in result.records}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_malformed_input_is_named_and_the_rest_runs(case: Case, tmp_path: Path) -> None:
    said, states = messages_for(case, tmp_path)
    expect, who = case.expect.lower(), _who(case).lower()
    matching = [m for m in said if expect in m.lower() and who in m.lower()]
    assert matching, f"{case.id}: nothing says {case.expect!r} about {who!r}; said: {said}"
    assert states.get("good-pod") in (PodState.RUNNING, PodState.FINISHED), (
        f"{case.id}: the good pod did not run beside the bad input: {states}; said: {said}"
    )


def _who(case: Case) -> str:
    """What the message must name: the case's `names`, else the bad object's name (its
    kind when it has none that can be printed), else nothing (a document that is no
    object at all, a file that cannot be read)."""
    if case.names:
        return case.names
    first = case.documents[0] if case.documents else None
    if not isinstance(first, dict):
        return ""
    meta = first.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    if isinstance(name, str) and name:
        return name
    kind = first.get("kind")
    return kind if isinstance(kind, str) else ""
