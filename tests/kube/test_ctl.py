"""`shoal get queues|podgroups|pools` and `shoal explain` against the fake API server:
what they report, in each output format, and their exit codes."""

from __future__ import annotations

import asyncio
import datetime
import json
from pathlib import Path
from typing import Any

import yaml
from click.testing import Result
from kubehelpers import async_test, node, pod
from typer.testing import CliRunner

from shoal.cli import app
from shoal.commands.ctl import EXIT_BLOCKED, EXIT_CLUSTER, EXIT_NOT_FOUND, EXIT_USAGE
from shoal.drivers.kube.crds import render
from shoal.testing.fake_apiserver import FakeApiServer

SHOAL = "shoal.dev/v1alpha1"
PLUGINS = "scheduling.x-k8s.io/v1alpha1"
GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
GPU = "nvidia.com/gpu"


def _pod_group(api: FakeApiServer, name: str, min_member: int) -> None:
    """A scheduler-plugins PodGroup in namespace default."""
    body = {"apiVersion": PLUGINS, "kind": "PodGroup", "metadata": {"name": name}}
    api.create(PLUGINS, "podgroups", {**body, "spec": {"minMember": min_member}})


def _cluster(api: FakeApiServer) -> None:
    """Two CPU nodes (4 cpu), a GPU node in pool `gpu`; queues root > {team-a, team-b};
    two pods of team-a bound, one too big for any node, a gang missing a member."""
    for text in render().values():
        api.create("apiextensions.k8s.io/v1", "customresourcedefinitions", yaml.safe_load(text))
    api.create("v1", "nodes", node("cpu-1", cpu="4"))
    api.create("v1", "nodes", node("cpu-2", cpu="4"))
    gpu = node("gpu-1", cpu="8", memory="32Gi", pool="gpu")
    gpu["status"]["allocatable"][GPU] = "4"
    gpu["status"]["capacity"][GPU] = "4"
    api.create("v1", "nodes", gpu)
    api.create(
        SHOAL, "nodepools", {"metadata": {"name": "gpu"}, "spec": {"nodeSelector": {"pool": "gpu"}}}
    )
    api.create(
        SHOAL,
        "queues",
        {"metadata": {"name": "root"}, "spec": {"guaranteed": {"cpu": "3"}, "max": {"cpu": "20"}}},
    )
    api.create(
        SHOAL,
        "queues",
        {"metadata": {"name": "team-a"}, "spec": {"parent": "root", "guaranteed": {"cpu": "2"}}},
    )
    api.create(
        SHOAL,
        "queues",
        {"metadata": {"name": "team-b"}, "spec": {"parent": "root", "guaranteed": {"cpu": "1"}}},
    )
    team_a = {"shoal.dev/queue": "team-a"}
    api.create("v1", "pods", pod("a1", cpu="1", labels=team_a, node_name="cpu-1"))
    api.create("v1", "pods", pod("a2", cpu="1500m", labels=team_a, node_name="cpu-2"))
    api.create("v1", "pods", pod("huge", cpu="9", labels={"shoal.dev/queue": "team-b"}))
    api.create("v1", "pods", pod("greedy", cpu="18", labels=team_a))
    api.create("v1", "pods", pod("small", cpu="100m", labels={"shoal.dev/queue": "team-b"}))
    _pod_group(api, "g", 3)
    for i in range(2):
        api.create("v1", "pods", pod(f"g{i}", cpu="100m", labels={GROUP_LABEL: "g"}))


async def _shoal(tmp_path: Path, api: FakeApiServer, *args: str) -> Result:
    kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
    runner = CliRunner()
    # The command runs its own event loop: in a thread, while the fake server serves.
    return await asyncio.to_thread(
        runner.invoke, app, [*args, "--kubeconfig", str(kubeconfig)], catch_exceptions=False
    )


def _json(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@async_test(timeout=60)
async def test_get_queues_reports_the_tenancy_managers_numbers(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        _cluster(api)
        data = _json(await _shoal(tmp_path, api, "get", "queues", "-o", "json"))
        by_name = {q["name"]: q for q in data["queues"]}
        names = [q["name"] for q in data["queues"]]
        assert names.index("root") < names.index("team-a")  # parents first
        assert by_name["team-a"]["parent"] == "root" and by_name["team-a"]["depth"] == 1
        assert by_name["team-a"]["allocated"]["cpu"] == "2500m"
        assert by_name["team-a"]["boundPods"] == 2
        assert by_name["team-a"]["state"] == "Open"
        assert by_name["root"]["allocated"]["cpu"] == "2500m"  # the subtree's usage
        assert by_name["root"]["max"] == {"cpu": "20"}
        assert by_name["team-a"]["guaranteed"] == {"cpu": "2"}
        assert by_name["team-b"]["pendingPods"] == 2
        assert by_name["team-a"]["pendingPods"] == 1
        assert "cpu" in by_name["team-a"]["fairShare"]
        table = await _shoal(tmp_path, api, "get", "queues")
        assert table.exit_code == 0
        assert "└─ team-a" in table.stdout and "cpu=2.5" in table.stdout
        as_yaml = yaml.safe_load(
            (await _shoal(tmp_path, api, "get", "queues", "-o", "yaml")).stdout
        )
        assert as_yaml == data


@async_test(timeout=60)
async def test_get_podgroups_and_pools(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        _cluster(api)
        groups = _json(await _shoal(tmp_path, api, "get", "podgroups", "-o", "json"))
        (g,) = [g for g in groups if g["name"] == "g"]
        assert g["phase"] == "Pending"
        assert (g["minMember"], g["members"], g["scheduled"], g["running"]) == (3, 2, 0, 0)
        assert (
            _json(await _shoal(tmp_path, api, "get", "podgroups", "-n", "other", "-o", "json"))
            == []
        )

        pools = {
            p["name"]: p for p in _json(await _shoal(tmp_path, api, "get", "pools", "-o", "json"))
        }
        assert pools["gpu"]["nodes"] == 1 and pools["gpu"]["capacity"][GPU] == "4"
        assert pools["(no pool)"]["nodes"] == 2
        assert pools["(no pool)"]["capacity"]["cpu"] == "8"
        assert pools["(no pool)"]["used"]["cpu"] == "2500m"
        table = await _shoal(tmp_path, api, "get", "pools")
        assert table.exit_code == 0 and "0/4" in table.stdout  # GPUs used/capacity


@async_test(timeout=60)
async def test_explain_names_the_blocker_and_exits_by_outcome(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        _cluster(api)
        huge = await _shoal(tmp_path, api, "explain", "default/huge", "-o", "json")
        assert huge.exit_code == EXIT_BLOCKED, huge.output
        answer = json.loads(huge.stdout)
        assert answer["blocked"] is True
        assert answer["queue"]["name"] == "team-b"
        assert "0/3 nodes are available" in answer["summary"]
        assert "Insufficient cpu" in answer["placement"]["reasons"], json.dumps(answer)

        greedy = await _shoal(tmp_path, api, "explain", "default/greedy", "-o", "json")
        assert greedy.exit_code == EXIT_BLOCKED
        queue = json.loads(greedy.stdout)["queue"]
        assert "queue root would exceed its max cpu" in queue["quota"]
        assert queue["allocated"]["cpu"] == "2500m" and queue["guaranteed"] == {"cpu": "2"}

        gang = await _shoal(tmp_path, api, "explain", "default/g0", "-o", "json")
        assert gang.exit_code == EXIT_BLOCKED
        answer = json.loads(gang.stdout)
        assert answer["gang"]["name"] == "default/g" and answer["gang"]["minMember"] == 3
        assert answer["gate"]["plugin"] == "Coscheduling"

        fits = await _shoal(tmp_path, api, "explain", "default/small")
        assert fits.exit_code == 0, fits.output
        assert "fits now" in fits.stdout
        # The best nodes with each Score plugin's part: the idle 8-cpu gpu-1 first (the
        # node the attempt places it on), then cpu-1 (1 of 4 cpu used) before cpu-2.
        assert "Scores" in fits.stdout and "NodeResourcesFit" in fits.stdout
        scores = _json(await _shoal(tmp_path, api, "explain", "default/small", "-o", "json"))
        best = scores["scores"]
        assert [b["node"] for b in best] == ["gpu-1", "cpu-1", "cpu-2"], best
        assert "gpu-1" in scores["summary"]
        assert all(b["total"] == sum(b["plugins"].values()) for b in best)
        assert "NodeResourcesFit" in best[0]["plugins"]

        bound = await _shoal(tmp_path, api, "explain", "default/a1", "-o", "yaml")
        assert bound.exit_code == 0
        assert yaml.safe_load(bound.stdout)["node"] == "cpu-1"

        table = await _shoal(tmp_path, api, "explain", "default/huge")
        assert table.exit_code == EXIT_BLOCKED and "BLOCKED" in table.stdout
        assert "Insufficient cpu" in table.stdout

        missing = await _shoal(tmp_path, api, "explain", "default/nope")
        assert missing.exit_code == EXIT_NOT_FOUND
        assert "not found" in missing.stderr
        # The scheduler's own pods are untouched: explain binds nothing.
        assert not (api.get("", "pods", "default", "small") or {}).get("spec", {}).get("nodeName")


@async_test(timeout=60)
async def test_exit_codes_for_bad_arguments_and_an_unreachable_cluster(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        _cluster(api)
        bad = await _shoal(tmp_path, api, "get", "queues", "-o", "xml")
        assert bad.exit_code == EXIT_USAGE and "--output" in bad.stderr
        bad = await _shoal(tmp_path, api, "explain", "no-namespace")
        assert bad.exit_code == EXIT_USAGE and "NAMESPACE/NAME" in bad.stderr
        kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
    # The server is gone now.
    runner = CliRunner()
    gone = await asyncio.to_thread(
        runner.invoke, app, ["get", "queues", "--kubeconfig", str(kubeconfig)]
    )
    assert gone.exit_code == EXIT_CLUSTER
    assert "cannot read the cluster" in gone.stderr


@async_test(timeout=60)
async def test_a_cluster_without_shoals_crds_and_an_invalid_queue(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        api.create("v1", "nodes", node("n1", cpu="4"))
        api.create("v1", "pods", pod("p", cpu="1", node_name="n1"))
        # No CRDs: no Queues or PodGroups to list; everything is in the default queue.
        data = _json(await _shoal(tmp_path, api, "get", "queues", "-o", "json"))
        assert [q["name"] for q in data["queues"]] == ["default"]
        assert data["queues"][0]["allocated"]["cpu"] == "1"
        assert _json(await _shoal(tmp_path, api, "get", "podgroups", "-o", "json")) == []

    async with FakeApiServer() as api:
        for text in render().values():
            api.create("apiextensions.k8s.io/v1", "customresourcedefinitions", yaml.safe_load(text))
        api.create("v1", "nodes", node("n1", cpu="4"))
        bad = {
            "metadata": {"name": "bad"},
            "spec": {"guaranteed": {"cpu": "4"}, "max": {"cpu": "2"}},
        }
        api.create(SHOAL, "queues", bad)
        api.create(SHOAL, "queues", {"metadata": {"name": "good"}, "spec": {}})
        result = await _shoal(tmp_path, api, "get", "queues", "-o", "json")
        # The bad Queue is listed as Invalid with why (and said on stderr); the good one
        # is in force.
        rows = {q["name"]: q for q in _json(result)["queues"]}
        assert rows["good"]["state"] == "Open"
        assert rows["bad"]["state"] == "Invalid"
        assert "exceeds spec.max.cpu" in rows["bad"]["problem"]
        assert "Queue bad" in result.stderr


@async_test(timeout=60)
async def test_explain_runs_the_whole_gang_cycle_for_a_member(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        _cluster(api)
        for name, cpu in (("ok", "100m"), ("big", "5")):
            _pod_group(api, name, 2)
            for i in range(2):
                api.create("v1", "pods", pod(f"{name}{i}", cpu=cpu, labels={GROUP_LABEL: name}))
        fits = await _shoal(tmp_path, api, "explain", "default/ok1", "-o", "json")
        assert fits.exit_code == 0, fits.output
        answer = json.loads(fits.stdout)
        assert answer["gang"]["name"] == "default/ok" and answer["placement"]["fits"]
        # One 5-cpu member fits (the 8-cpu node), the other does not: neither goes.
        big = await _shoal(tmp_path, api, "explain", "default/big0", "-o", "json")
        assert big.exit_code == EXIT_BLOCKED, big.output
        answer = json.loads(big.stdout)
        assert not answer["placement"]["fits"]
        assert "gang default/big" in answer["summary"]


@async_test(timeout=60)
async def test_deploy_cli_rbac_allows_every_list_the_commands_make(tmp_path: Path) -> None:
    rules = yaml.safe_load(
        (
            Path(__file__).resolve().parents[2] / "deploy" / "operators" / "shoal-viewer.yaml"
        ).read_text()
    )["rules"]
    allowed = {
        (group, resource, verb)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    async with FakeApiServer() as api:
        _cluster(api)
        for args in (
            ("get", "queues"),
            ("get", "pools"),
            ("get", "shards"),
            ("explain", "default/huge"),
        ):
            await _shoal(tmp_path, api, *args)
        made = {(r.group, r.resource, r.verb) for r in api.requests}
    assert ("", "pods", "list") in made and ("shoal.dev", "queues", "list") in made
    assert ("coordination.k8s.io", "leases", "list") in made
    # Lists only (no watch, no write), each one allowed.
    assert made <= allowed, sorted(made - allowed)


@async_test(timeout=60)
async def test_explain_shows_every_blocker_at_once(tmp_path: Path) -> None:
    # A member of an incomplete gang, over its queue's max, too big for any node: the
    # gate, the quota and the nodes are all named (the nodes used to be left out).
    async with FakeApiServer() as api:
        _cluster(api)
        labels = {"shoal.dev/queue": "team-a", "scheduling.x-k8s.io/pod-group": "big"}
        _pod_group(api, "big", 2)
        api.create("v1", "pods", pod("big-0", cpu="19", labels=labels))
        result = await _shoal(tmp_path, api, "explain", "default/big-0", "-o", "json")
        assert result.exit_code == EXIT_BLOCKED, result.output
        answer = json.loads(result.stdout)
        assert "1/2 members exist" in answer["gate"]["message"]
        assert "queue root would exceed its max cpu" in answer["queue"]["quota"]
        assert "Insufficient cpu" in answer["nodes"]["message"]
        table = await _shoal(tmp_path, api, "explain", "default/big-0")
        assert "Insufficient cpu" in table.stdout and "members exist" in table.stdout

        # Over quota only: still says where it would go (18 cpu: no node has it).
        greedy = await _shoal(tmp_path, api, "explain", "default/greedy", "-o", "json")
        assert "Insufficient cpu" in json.loads(greedy.stdout)["nodes"]["message"]


@async_test(timeout=60)
async def test_explain_judges_with_the_configuration_the_running_scheduler_publishes(
    tmp_path: Path,
) -> None:
    from shoal.config import parse_config
    from shoal.drivers.kube.backend import published_config

    async with FakeApiServer() as api:
        _cluster(api)
        api.create("v1", "pods", pod("custom", cpu="100m", scheduler="custom-sched"))
        # Without a running Shoal: the default configuration has no such profile.
        alone = json.loads(
            (await _shoal(tmp_path, api, "explain", "default/custom", "-o", "json")).stdout
        )
        assert alone["blocked"] is True
        assert alone["configSource"].startswith("the default")

        config = parse_config(
            {
                "apiVersion": "kubescheduler.config.k8s.io/v1",
                "kind": "KubeSchedulerConfiguration",
                "profiles": [{"schedulerName": "custom-sched"}],
            }
        )
        api.create(
            "coordination.k8s.io/v1",
            "leases",
            {
                "metadata": {
                    "name": "shoal-member-0",
                    "namespace": "shoal-system",
                    "labels": {"shoal.io/node-shards": "member"},
                    "annotations": {"shoal.io/config": published_config(config)},
                },
                "spec": {"holderIdentity": "shoal-0", "leaseDurationSeconds": 15},
            },
        )
        judged = await _shoal(tmp_path, api, "explain", "default/custom", "-o", "json")
        answer = json.loads(judged.stdout)
        assert judged.exit_code == 0, judged.output
        assert "fits now" in answer["summary"]
        assert "Lease shoal-system/shoal-member-0" in answer["configSource"]
        table = await _shoal(tmp_path, api, "explain", "default/custom")
        assert "the running scheduler's" in table.stdout
        assert "(shoal-0, expired)" in answer["configSource"]  # never renewed

        # A live replica: the expired one (killed long ago) is no longer named or used.
        renewed = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        api.create(
            "coordination.k8s.io/v1",
            "leases",
            {
                "metadata": {
                    "name": "shoal-member-1",
                    "namespace": "shoal-system",
                    "labels": {"shoal.io/node-shards": "member"},
                    "annotations": {"shoal.io/config": published_config(parse_config({}))},
                },
                "spec": {
                    "holderIdentity": "shoal-1",
                    "leaseDurationSeconds": 15,
                    "renewTime": renewed,
                },
            },
        )
        answer = json.loads(
            (await _shoal(tmp_path, api, "explain", "default/custom", "-o", "json")).stdout
        )
        assert answer["configSource"] == (
            "the running scheduler's, from Lease shoal-system/shoal-member-1 (shoal-1)"
        )
        assert answer["blocked"] is True  # the live replica has no custom-sched profile


@async_test(timeout=60)
async def test_a_gang_the_running_scheduler_tried_is_scheduling_with_its_reason(
    tmp_path: Path,
) -> None:
    """`shoal get pg` and `explain` build a core of their own, which has tried nothing:
    a gang the running scheduler tried and could not place showed as Pending with no
    reason, while its PodGroup status (kubectl get pg) and the dashboard said
    Scheduling and why. They now say what the running scheduler wrote."""
    said = "gang default/big: 1/2 members placeable, needs 5 cpu more"
    async with FakeApiServer() as api:
        _cluster(api)
        _pod_group(api, "big", 2)
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": said,
        }
        for i in range(2):
            api.create("v1", "pods", pod(f"big{i}", cpu="5", labels={GROUP_LABEL: "big"}))
            # What the running scheduler wrote (through pods/status).
            api.set_pod_status("default", f"big{i}", conditions=[condition])
        groups = _json(await _shoal(tmp_path, api, "get", "podgroups", "-o", "json"))
        by_name = {g["name"]: g for g in groups}
        assert (by_name["big"]["phase"], by_name["big"]["reason"]) == ("Scheduling", said)
        assert by_name["g"]["phase"] == "Pending"  # never tried: a member is missing
        table = await _shoal(tmp_path, api, "get", "pg", "big")
        assert "Scheduling" in table.stdout and "1/2 members placeable" in table.stdout
        answer = json.loads(
            (await _shoal(tmp_path, api, "explain", "default/big0", "-o", "json")).stdout
        )
        assert (answer["gang"]["phase"], answer["gang"]["reason"]) == ("Scheduling", said)
