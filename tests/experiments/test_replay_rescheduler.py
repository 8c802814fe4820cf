"""The openb dynamic replay with the Rescheduler (`--rescheduler`), on a small trace in
the openb format: the requirements' case as a trace. a (4 GPUs) and b (3 GPUs) share one
8-GPU node, c (5 GPUs) has the other; d (4 GPUs) arrives later and, without the
Rescheduler, waits until a pod leaves (~28 h); with it, b is moved and d starts at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from shoal.experiments.openb.replay import format_rescheduler_table, replay, replay_policies
from shoal.experiments.openb.trace import load_trace

NODES = "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,8,A100\nn1,64000,262144,8,A100\n"
PODS = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time\n"
    "a,1000,1024,4,1000,,LS,Running,0,100000,0\n"
    "b,1000,1024,3,1000,,LS,Running,1,100000,1\n"
    "c,1000,1024,5,1000,,LS,Running,2,100000,2\n"
    "d,1000,1024,4,1000,,LS,Running,400,100000,400\n"
)


@pytest.fixture
def case(tmp_path: Path) -> Path:
    (tmp_path / "openb_node_list_gpu_node.csv").write_text(NODES)
    (tmp_path / "openb_pod_list_case.csv").write_text(PODS)
    return tmp_path


def test_the_rescheduler_places_the_waiting_multi_gpu_task_at_once(case: Path) -> None:
    trace = load_trace(case, "case")
    without = replay(trace, "FGD")
    with_it = replay(trace, "FGD", rescheduler=True)
    assert without.moves == 0 and without.multi_gpu_wait_max > 90_000
    assert with_it.moves == 1
    assert with_it.multi_gpu_wait_max <= 1.0
    assert with_it.policy == "FGD+Rescheduler"
    assert with_it.pods == without.pods + 1  # b's replacement
    assert with_it.never_scheduled == 0


def test_replay_policies_runs_each_without_and_with(case: Path) -> None:
    results = replay_policies(str(case), "case", ["FGD"], rescheduler=True, workers=1)
    assert [r.policy for r in results] == ["FGD", "FGD+Rescheduler"]
    table = format_rescheduler_table(results)
    assert "| FGD+Rescheduler | 4 | 0 |" in table
