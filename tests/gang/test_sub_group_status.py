"""Status per role of a gang with sub-groups (issue 27): which role holds the gang, in
the pending message, the PodGroup status, `shoal get podgroups -o wide|json` and
`shoal explain`; and each role's counts (minMember, members, scheduled = bound, running =
started by a kubelet, succeeded)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from shoal.api.objects import ObjectMeta
from shoal.api.podgroup import SUB_GROUP_LABEL, SUB_GROUPS, PodGroup, PodGroupSpec
from shoal.cli import app
from shoal.drivers.kube.crds import render
from shoal.drivers.kube.resources import PODGROUPS, VOLCANO_PODGROUPS
from shoal.drivers.kube.status import group_status_patch
from shoal.framework.effects import GroupStatus, SubGroupStatus
from shoal.gang.manager import GangManager
from shoal.testing import RunResult, SchedulerHarness, make_node, make_pod
from shoal.testing.builders import PodBuilder
from shoal.testing.fake_apiserver import FakeApiServer

GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
PLUGINS = "scheduling.x-k8s.io/v1alpha1"
ROLES = {"driver": {"minMember": 1}, "workers": {"minMember": 4}}


def job(min_member: int = 5) -> PodGroup:
    return PodGroup(
        metadata=ObjectMeta(
            name="job", namespace="ml", annotations={SUB_GROUPS: json.dumps(ROLES)}
        ),
        spec=PodGroupSpec(min_member=min_member),
    )


def member(name: str, role: str) -> PodBuilder:
    return (
        make_pod(name)
        .namespace("ml")
        .labels({GROUP_LABEL: "job", SUB_GROUP_LABEL: role})
        .req(cpu="1")
    )


def harness() -> SchedulerHarness:
    h = SchedulerHarness()
    h.add_nodes(*(make_node(f"n{i}").capacity(cpu="8", memory="32Gi") for i in range(2)))
    return h


def settle(h: SchedulerHarness) -> RunResult:
    """Run to quiescence, then let the core publish what changed (group statuses go out
    when time passes, `Scheduler.tick`)."""
    h.run()
    return h.advance(1)


def roles(h: SchedulerHarness) -> dict[str, SubGroupStatus]:
    return {r.name: r for r in h.effects.group_status["ml/job"].sub_groups}


def test_a_gang_short_of_members_says_which_role_is_short() -> None:
    h = harness()
    h.scheduler.add_pod_group(job())
    h.add_pods(member("driver-0", "driver"), *(member(f"w{i}", "workers") for i in range(3)))
    placements, messages = settle(h)
    assert not any(placements.values())
    assert messages["ml/w0"] == (
        "pod is gated by Coscheduling: gang ml/job: 4/5 members exist, waiting for 1 more "
        "(sub-group workers: 3/4)"
    )
    status = h.effects.group_status["ml/job"]
    assert status.phase == "Pending"
    assert roles(h)["workers"] == SubGroupStatus("workers", 4, members=3, scheduled=0, running=0)
    assert roles(h)["driver"] == SubGroupStatus("driver", 1, members=1, scheduled=0, running=0)
    assert GangManager.short_role(status.sub_groups) == "sub-group workers: 3/4 members exist"

    # The missing worker arrives: the gang starts, every role at its minimum.
    h.add_pods(member("w3", "workers"))
    placements, _ = settle(h)
    assert all(placements.values())
    status = h.effects.group_status["ml/job"]
    assert status.phase == "Running"
    assert roles(h)["workers"] == SubGroupStatus("workers", 4, members=4, scheduled=4, running=4)
    assert GangManager.short_role(status.sub_groups) == ""


def test_enough_members_in_all_but_not_in_one_role_holds_the_gang() -> None:
    # minMember 4 is met by 2 drivers + 3 workers, but the workers' own minimum (4) is not.
    h = harness()
    h.scheduler.add_pod_group(job(min_member=4))
    h.add_pods(
        member("driver-0", "driver"),
        member("driver-1", "driver"),
        *(member(f"w{i}", "workers") for i in range(3)),
    )
    placements, messages = settle(h)
    assert not any(placements.values())
    assert messages["ml/driver-0"] == (
        "pod is gated by Coscheduling: gang ml/job: sub-group workers: 3/4 members exist, "
        "waiting for 1 more"
    )
    assert h.effects.group_status["ml/job"].phase == "Pending"


def test_succeeded_members_count_for_their_role() -> None:
    h = harness()
    h.scheduler.add_pod_group(job())
    h.add_pods(member("driver-0", "driver"), *(member(f"w{i}", "workers") for i in range(4)))
    h.run()
    uid = next(
        uid for uid, p in h.scheduler.gangs.groups["ml/job"].members.items() if p.name == "w0"
    )
    h.scheduler.finish_pod(uid, succeeded=True)
    settle(h)
    workers = roles(h)["workers"]
    assert (workers.members, workers.scheduled, workers.succeeded) == (3, 3, 1)
    group = h.scheduler.gangs.groups["ml/job"]
    assert group.sub_group_needed("workers") == 0  # 3 placed + 1 succeeded
    assert h.scheduler.gangs.status()["ml/job"]["subGroups"] == [
        {"name": "driver", "minMember": 1, "members": 1, "bound": 1, "running": 1, "succeeded": 0},
        {"name": "workers", "minMember": 4, "members": 3, "bound": 3, "running": 3, "succeeded": 1},
    ]


def test_a_placed_gang_that_lost_a_member_says_which_role_is_short() -> None:
    h = harness()
    h.scheduler.add_pod_group(job(min_member=3))
    h.add_pods(member("driver-0", "driver"), *(member(f"w{i}", "workers") for i in range(4)))
    h.run()
    h.delete_pod("ml/w0")  # its replacement is not there yet
    settle(h)
    status = h.effects.group_status["ml/job"]
    assert GangManager.short_role(status.sub_groups) == "sub-group workers: 3/4 members exist"
    h.add_pods(member("w4", "workers"))
    settle(h)
    assert GangManager.short_role(h.effects.group_status["ml/job"].sub_groups) == ""


def test_a_role_that_does_not_fit_is_named_with_the_filters_reasons() -> None:
    h = harness()
    h.scheduler.add_pod_group(job())
    h.add_pods(
        member("driver-0", "driver"),
        *(member(f"w{i}", "workers").req(cpu="5") for i in range(4)),  # 2 nodes: 2 fit
    )
    _, messages = settle(h)
    message = messages["ml/w0"]
    assert message.startswith("gang ml/job: sub-group workers: 2/4 members placeable; 0/2 nodes"), (
        message
    )
    assert "Insufficient cpu" in message
    assert h.effects.group_status["ml/job"].reason == message


def test_the_podgroup_status_carries_the_roles_in_scheduler_plugins_terms() -> None:
    status = GroupStatus(
        namespace="ml",
        name="job",
        source="scheduler-plugins",
        has_object=True,
        phase="Running",
        min_member=5,
        scheduled=5,
        running=4,
        succeeded=0,
        failed=0,
        sub_groups=(
            SubGroupStatus("driver", 1, members=1, scheduled=1, running=1),
            SubGroupStatus("workers", 4, members=4, scheduled=4, running=3),
        ),
    )
    body = group_status_patch(PODGROUPS, status, {}, "now")
    assert body["subGroups"] == [
        {
            "name": "driver",
            "minMember": 1,
            "members": 1,
            "scheduled": 1,
            "running": 1,
            "succeeded": 0,
        },
        {
            "name": "workers",
            "minMember": 4,
            "members": 4,
            "scheduled": 4,
            "running": 3,
            "succeeded": 0,
        },
    ]
    # Volcano's own CRD has no such field: its status stays in Volcano's terms.
    assert "subGroups" not in group_status_patch(VOLCANO_PODGROUPS, status, {}, "now")
    # Roles dropped from the PodGroup: the field written before goes.
    plain = GroupStatus("ml", "job", "scheduler-plugins", True, "Running", 5, 5, 5, 0, 0)
    assert group_status_patch(PODGROUPS, plain, {"status": body}, "now")["subGroups"] is None
    assert "subGroups" not in group_status_patch(PODGROUPS, plain, {}, "now")
    # And Shoal's CRD keeps it (the API server would prune a field its schema lacks).
    crd = yaml.safe_load(render()["podgroups.scheduling.x-k8s.io.yaml"])
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    properties = schema["properties"]["status"]["properties"]["subGroups"]["items"]["properties"]
    assert set(properties) == {"name", "minMember", "members", "scheduled", "running", "succeeded"}


# ---- the CLI, against the fake API server --------------------------------------------


def _node(name: str) -> dict[str, Any]:
    allocatable = {"cpu": "8", "memory": "32Gi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"capacity": allocatable, "allocatable": allocatable},
    }


def _pod(name: str, role: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "labels": {GROUP_LABEL: "job", SUB_GROUP_LABEL: role},
        },
        "spec": {
            "schedulerName": "shoal",
            "containers": [
                {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}
            ],
        },
        "status": {"phase": "Pending"},
    }


def test_get_podgroups_and_explain_say_which_role_is_short(tmp_path: Path) -> None:
    async def main() -> None:
        async with FakeApiServer() as api:
            for text in render().values():
                api.create(
                    "apiextensions.k8s.io/v1", "customresourcedefinitions", yaml.safe_load(text)
                )
            api.create("v1", "nodes", _node("n1"))
            api.create(
                PLUGINS,
                "podgroups",
                {
                    "apiVersion": PLUGINS,
                    "kind": "PodGroup",
                    "metadata": {
                        "name": "job",
                        "namespace": "ml",
                        "annotations": {SUB_GROUPS: json.dumps(ROLES)},
                    },
                    "spec": {"minMember": 5},
                },
            )
            api.create("v1", "pods", _pod("driver-0", "driver"))
            for i in range(3):
                api.create("v1", "pods", _pod(f"w{i}", "workers"))
            kubeconfig = str(api.kubeconfig(tmp_path / "kubeconfig"))

            def shoal(*args: str) -> str:
                result = CliRunner().invoke(
                    app, [*args, "--kubeconfig", kubeconfig], catch_exceptions=False
                )
                assert result.exit_code in (0, 4), result.output  # 4: explain says blocked
                return result.stdout

            (row,) = json.loads(
                await asyncio.to_thread(shoal, "get", "podgroups", "-A", "-o", "json")
            )
            assert row["subGroups"] == [
                {"name": "driver", "minMember": 1, "members": 1, "scheduled": 0, "running": 0,
                 "succeeded": 0},
                {"name": "workers", "minMember": 4, "members": 3, "scheduled": 0, "running": 0,
                 "succeeded": 0},
            ]  # fmt: skip
            assert row["shortSubGroup"] == "sub-group workers: 3/4 members exist"
            wide = await asyncio.to_thread(shoal, "get", "podgroups", "-A", "-o", "wide")
            assert "SUB-GROUPS" in wide and "driver=0/1,workers=0/4" in wide
            assert "sub-group workers: 3/4 members exist" in wide
            explained = await asyncio.to_thread(shoal, "explain", "ml/w0")
            assert "sub-group workers: 3 members, 0 scheduled, 0 running (minMember 4)" in explained
            assert "(sub-group workers: 3/4)" in explained  # the gate's own words

    asyncio.run(asyncio.wait_for(main(), 60))
