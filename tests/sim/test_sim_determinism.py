"""Same scenario and seed => byte-identical results; the bundled example behaves."""

from __future__ import annotations

from pathlib import Path

from shoal.sim import PodState, SimOptions, bundled_example, load_scenario, simulate, write_results


def _results_file(path: Path, seed: int, **options: float) -> bytes:
    with bundled_example() as paths:
        scenario = load_scenario(paths, seed=seed)
    result = simulate(scenario, SimOptions(seed=seed, **options))  # type: ignore[arg-type]
    write_results(path, result.records)
    return path.read_bytes()


def test_same_seed_gives_identical_results_file(tmp_path):
    first = _results_file(tmp_path / "a.jsonl", seed=42)
    assert first == _results_file(tmp_path / "b.jsonl", seed=42)
    assert first != _results_file(tmp_path / "c.jsonl", seed=43)
    csv_a = _results_file(tmp_path / "a.csv", seed=1, cycle_seconds=0.01)
    assert csv_a == _results_file(tmp_path / "b.csv", seed=1, cycle_seconds=0.01)
    assert csv_a.startswith(
        b"pod,namespace,status,node,arrival,bound_at,finished_at,attempts,message,origin\n"
    )


def test_bundled_example_runs_and_shows_why_pods_are_pending():
    with bundled_example() as paths:
        scenario = load_scenario(paths, seed=0)
    assert scenario.errors == []
    assert len(scenario.nodes) == 12
    result = simulate(scenario, SimOptions(seed=0))
    s = result.summary
    assert s.rejected == 0
    assert s.scheduled > 150
    assert s.finished > 100
    assert s.evicted > 0  # cpu-1 is removed while pods run on it
    pending = {r.name: r.message for r in result.records if r.state is PodState.PENDING}
    assert set(pending) == {"train-16gpu", "bigmem-analytics", "edge-cache"}
    assert pending["train-16gpu"].startswith("0/12 nodes are available:")
    assert "Insufficient nvidia.com/gpu" in pending["train-16gpu"]
    assert "untolerated taint(s)" in pending["edge-cache"]
    assert set(s.utilisation_mean) == {"cpu", "memory", "nvidia.com/gpu"}
    assert 0 < s.utilisation_mean["nvidia.com/gpu"] <= 1
    # The gang's workers start together, once all four fit.
    gang = {r.bound_at for r in result.records if r.name.startswith("ddp-llm-")}
    assert len(gang) == 1 and None not in gang
    # The tainted GPU node only runs pods that tolerate it.
    on_gpu3 = {r.name.rsplit("-", 1)[0] for r in result.records if r.node == "gpu-3"}
    assert on_gpu3 == {"infer"}
