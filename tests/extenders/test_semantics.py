"""kube-scheduler's extender rules, with in-process extenders (same wire format, no
server): score arithmetic, calling order, interest through init containers and limits,
answers that name nodes they were not given, a failing prioritizer."""

from __future__ import annotations

from typing import Any

from shoal.config.load import parse_config
from shoal.framework.cycle_state import CycleState
from shoal.framework.extender import ExtenderError, prioritize_with_extenders
from shoal.framework.types import Candidates
from shoal.testing import SchedulerHarness, make_node, make_pod
from shoal.testing.extenders import InProcessTransport, in_process_extenders


def _names(request: dict[str, Any]) -> list[str]:
    if request["NodeNames"] is not None:
        return list(request["NodeNames"])
    return [i["metadata"]["name"] for i in request["Nodes"]["items"]]


def build(extenders: list[dict[str, Any]], *answers: Any) -> SchedulerHarness:
    config = parse_config(
        {"profiles": [{"schedulerName": "default-scheduler"}], "extenders": extenders}
    )
    return SchedulerHarness(config, extenders=in_process_extenders(config, *answers))


def calls(h: SchedulerHarness, i: int) -> list[tuple[str, Any]]:
    transport = h.scheduler.handle.extenders[i].transport
    assert isinstance(transport, InProcessTransport)
    return transport.calls


def test_extender_scores_are_added_as_score_times_weight_times_ten() -> None:
    h = build(
        [{"urlPrefix": "http://e", "prioritizeVerb": "p", "weight": 3}],
        lambda verb, req: [{"Host": n, "Score": 7 if n == "n2" else 0} for n in _names(req)],
    )
    h.add_nodes(*(make_node(n).capacity(cpu="4", memory="8Gi") for n in ("n1", "n2")))
    h.add_pods(make_pod("a").req(cpu="1"))
    fwk = h.scheduler.profiles["default-scheduler"]
    h.scheduler.snapshot.refresh()
    pod = h.scheduler.known_pod("default/a")
    assert pod is not None
    state = CycleState()
    fwk.run_pre_filter(state, pod)
    fwk.run_pre_score(state, pod, Candidates.all(2))
    plugin_totals = fwk.run_score(state, pod, Candidates.all(2))
    assert plugin_totals[0] == plugin_totals[1]  # identical nodes: only the extender differs
    placements, _ = h.run()
    assert placements == {"default/a": "n2"}
    extenders = h.scheduler.handle.extenders
    added = prioritize_with_extenders(extenders, pod, ["n1", "n2"], h.scheduler.cluster.node)
    assert added == {"n1": 0, "n2": 7 * 3 * 10}


def test_ignorable_extenders_are_called_after_the_others() -> None:
    order: list[str] = []

    def named(name: str) -> Any:
        def answer(verb: str, req: dict[str, Any]) -> Any:
            order.append(name)
            return {"NodeNames": _names(req)}

        return answer

    h = build(
        [
            {
                "urlPrefix": "http://first",
                "filterVerb": "f",
                "ignorable": True,
                "nodeCacheCapable": True,
            },
            {"urlPrefix": "http://second", "filterVerb": "f", "nodeCacheCapable": True},
        ],
        named("first"),
        named("second"),
    )
    h.add_nodes(make_node("n1").capacity(cpu="4", memory="8Gi"))
    h.add_pods(make_pod("a").req(cpu="1"))
    h.run()
    assert order == ["second", "first"]


def test_interest_counts_limits_and_init_containers() -> None:
    def answer(verb: str, req: dict[str, Any]) -> Any:
        return {"NodeNames": [], "FailedNodes": dict.fromkeys(_names(req), "managed")}

    h = build(
        [
            {
                "urlPrefix": "http://e",
                "filterVerb": "f",
                "nodeCacheCapable": True,
                "managedResources": [{"name": "example.com/foo", "ignoredByScheduler": True}],
            }
        ],
        answer,
    )
    h.add_nodes(make_node("n1").capacity(cpu="4", memory="8Gi"))
    h.add_pods(
        make_pod("plain").req(cpu="1"),
        make_pod("init").req(cpu="1").init_req({"example.com/foo": "1"}),
        make_pod("limit").req(cpu="1").lim({"example.com/foo": "1"}),
    )
    placements, messages = h.run()
    assert placements["default/plain"] == "n1"
    assert placements["default/init"] is None and placements["default/limit"] is None
    assert messages["default/init"] == (
        "0/1 nodes are available: 1 managed."
        " preemption: 0/1 nodes are available: 1 No preemption victims found for "
        "incoming pod."
    )
    sent = sorted(req["Pod"]["metadata"]["name"] for _, req in calls(h, 0))
    assert sent == ["init", "limit"]


def test_a_filter_answer_naming_a_node_it_was_not_given_is_an_error() -> None:
    h = build(
        [{"urlPrefix": "http://e", "filterVerb": "f", "nodeCacheCapable": True}],
        lambda verb, req: {"NodeNames": ["elsewhere"]},
    )
    h.add_nodes(make_node("n1").capacity(cpu="4", memory="8Gi"))
    h.add_pods(make_pod("a").req(cpu="1"))
    placements, messages = h.run()
    assert placements == {"default/a": None}
    assert (
        "claims a filtered node 'elsewhere' which is not found in the input node list"
        in (messages["default/a"])
    )


def test_a_failing_prioritizer_is_left_out_even_when_not_ignorable() -> None:
    def down(verb: str, req: dict[str, Any]) -> Any:
        raise ExtenderError("connection refused")

    h = build([{"urlPrefix": "http://e", "prioritizeVerb": "p", "weight": 1}], down)
    h.add_nodes(*(make_node(n).capacity(cpu="4", memory="8Gi") for n in ("n1", "n2")))
    h.add_pods(make_pod("a").req(cpu="1"))
    placements, _ = h.run()
    assert placements["default/a"] in ("n1", "n2")


def test_a_single_feasible_node_is_not_prioritized() -> None:
    h = build(
        [{"urlPrefix": "http://e", "prioritizeVerb": "p", "weight": 1}],
        lambda verb, req: [],
    )
    h.add_nodes(make_node("n1").capacity(cpu="4", memory="8Gi"))
    h.add_pods(make_pod("a").req(cpu="1"))
    placements, _ = h.run()
    assert placements == {"default/a": "n1"}
    assert calls(h, 0) == []
