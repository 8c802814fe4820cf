"""Profiles: each schedulerName is its own framework; pods are routed by
spec.schedulerName."""

from __future__ import annotations

from shoal.testing import SchedulerHarness, make_node, make_pod

CONFIG = {
    "profiles": [
        {"schedulerName": "default-scheduler"},
        {
            "schedulerName": "bin-packer",
            "plugins": {
                "score": {
                    "disabled": [{"name": "NodeResourcesBalancedAllocation"}],
                }
            },
            "pluginConfig": [
                {
                    "name": "NodeResourcesFit",
                    "args": {"scoringStrategy": {"type": "MostAllocated"}},
                }
            ],
        },
    ]
}


def _harness() -> SchedulerHarness:
    h = SchedulerHarness(CONFIG)
    h.add_nodes(
        make_node("busy").capacity(cpu="10", memory="10Gi"),
        make_node("idle").capacity(cpu="10", memory="10Gi"),
    )
    h.add_pods(make_pod("existing").node("busy").req(cpu="6", memory="6Gi"))
    return h


def test_two_scheduler_names_route_to_their_own_profile() -> None:
    h = _harness()
    assert sorted(h.scheduler.profiles) == ["bin-packer", "default-scheduler"]
    h.add_pods(
        make_pod("spread").req(cpu="1", memory="1Gi"),
        make_pod("packed").scheduler_name("bin-packer").req(cpu="1", memory="1Gi"),
    )
    placements, _ = h.run()
    assert placements["default/spread"] == "idle"  # LeastAllocated
    assert placements["default/packed"] == "busy"  # MostAllocated
    fwk = {c.pod.name: c for c in h.cycles}
    assert set(fwk) == {"spread", "packed"}


def test_profiles_have_their_own_plugins() -> None:
    h = _harness()
    default = h.scheduler.profiles["default-scheduler"].plugins
    packer = h.scheduler.profiles["bin-packer"].plugins
    default_names = [p.name for p, _ in default.score]
    assert default_names[:3] == ["TaintToleration", "NodeAffinity", "NodeResourcesFit"]
    assert "NodeResourcesBalancedAllocation" in default_names
    # Disabled at Score in the bin-packer profile only; the rest keeps its order.
    assert [p.name for p, _ in packer.score] == [
        n for n in default_names if n != "NodeResourcesBalancedAllocation"
    ]
    # BalancedAllocation still runs its PreScore in the bin-packer profile (kube disables
    # per extension point).
    assert "NodeResourcesBalancedAllocation" in [p.name for p in packer.pre_score]


def test_unknown_scheduler_name_is_left_alone() -> None:
    h = _harness()
    h.add_pods(make_pod("x").scheduler_name("nobody"))
    assert h.run().placements["default/x"] is None
    assert h.scheduler.explain("default/x") == ""
