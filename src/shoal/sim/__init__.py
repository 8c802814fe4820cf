"""The embedded simulator: a deterministic discrete-event engine around the scheduler.

    from shoal.sim import SimOptions, load_scenario, simulate

    scenario = load_scenario([Path("cluster.yaml"), Path("workload.yaml")], seed=1)
    result = simulate(scenario, SimOptions(seed=1, until=3600))
    print(result.summary.scheduled, result.summary.tts_p99)

See docs/simulator.md for the input formats and outputs.
"""

from shoal.sim.engine import ProgressCallback, SimOptions, SimResult, Simulation, simulate
from shoal.sim.report import print_report, write_results
from shoal.sim.results import PodRecord, PodState, Summary
from shoal.sim.scenario import Scenario, bundled_example, load_scenario
from shoal.sim.workload import (
    ANNOTATION_ARRIVAL,
    ANNOTATION_DURATION,
    WORKLOAD_API_VERSION,
    PodSource,
)

__all__ = [
    "ANNOTATION_ARRIVAL",
    "ANNOTATION_DURATION",
    "WORKLOAD_API_VERSION",
    "PodRecord",
    "PodSource",
    "PodState",
    "ProgressCallback",
    "Scenario",
    "SimOptions",
    "SimResult",
    "Simulation",
    "Summary",
    "bundled_example",
    "load_scenario",
    "print_report",
    "simulate",
    "write_results",
]
