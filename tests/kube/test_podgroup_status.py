"""PodGroup status written back through the effects port (`GroupStatus` effects), in
scheduler-plugins' and Volcano's terms, against the fake API server."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import yaml
from kubehelpers import async_test, bound_pods, events_for, eventually, node, pod
from kubehelpers import backend as running

from shoal.drivers.kube.crds import render
from shoal.drivers.kube.resources import PODGROUPS, VOLCANO_PODGROUPS, ResourceKind
from shoal.drivers.kube.status import group_status_patch, volcano_phase
from shoal.framework.effects import GroupStatus
from shoal.testing.fake_apiserver import FakeApiServer, Fault

PLUGINS = "scheduling.x-k8s.io/v1alpha1"
SIGS = "scheduling.sigs.k8s.io/v1alpha1"
VOLCANO = "scheduling.volcano.sh/v1beta1"
GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
VOLCANO_ANNOTATION = "scheduling.k8s.io/group-name"


def _install(api: FakeApiServer) -> None:
    for text in render().values():
        api.create("apiextensions.k8s.io/v1", "customresourcedefinitions", yaml.safe_load(text))
    # Other projects' CRDs (both have the status subresource).
    api.register("scheduling.sigs.k8s.io", "v1alpha1", "podgroups", "PodGroup", True)
    api.register("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup", True)


def _group(api_version: str, name: str, min_member: int, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"minMember": min_member, **spec},
    }


def _status(api: FakeApiServer, api_version: str, name: str) -> dict[str, Any]:
    obj = api.get(api_version.rpartition("/")[0], "podgroups", "default", name)
    return dict((obj or {}).get("status") or {})


def _condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c.get("type") == kind), {})


def _status_writes(api: FakeApiServer, name: str) -> int:
    return sum(
        1
        for r in api.requests
        if r.resource == "podgroups" and r.subresource == "status" and r.name == name
    )


@async_test(timeout=60)
async def test_gangs_that_run_show_running_with_their_counts_in_each_api(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        _install(api)
        for i in range(3):
            api.create("v1", "nodes", node(f"n{i}", cpu="4"))
        api.create(PLUGINS, "podgroups", _group(PLUGINS, "train", 3))
        api.create(SIGS, "podgroups", _group(SIGS, "tune", 2))
        api.create(VOLCANO, "podgroups", _group(VOLCANO, "infer", 2))
        for i in range(3):
            api.create("v1", "pods", pod(f"train{i}", cpu="1", labels={GROUP_LABEL: "train"}))
        for i in range(2):
            api.create("v1", "pods", pod(f"tune{i}", cpu="1", labels={GROUP_LABEL: "tune"}))
            api.create(
                "v1",
                "pods",
                pod(f"infer{i}", cpu="1", annotations={VOLCANO_ANNOTATION: "infer"}),
            )
        async with running(api, tmp_path) as (kube, _):
            await eventually(lambda: len(bound_pods(api)) == 7, what="every gang bound")
            # Bound, not started (no kubelet yet): scheduler-plugins' Scheduled, 0 running.
            for version, name, count in ((PLUGINS, "train", 3), (SIGS, "tune", 2)):
                await eventually(
                    lambda v=version, n=name: _status(api, v, n).get("phase") == "Scheduled",
                    what=f"{name} Scheduled",
                )
                status = _status(api, version, name)
                assert status["scheduled"] == count and status["running"] == 0
                assert _condition(status, "Scheduled")["status"] == "True"
            # Volcano counts bound members as ready: Running, with 0 pods running yet.
            await eventually(lambda: _status(api, VOLCANO, "infer").get("phase") == "Running")
            assert _status(api, VOLCANO, "infer")["running"] == 0
            # The kubelets start the pods: Running, with the counts.
            for name in (*(f"train{i}" for i in range(3)), "tune0", "tune1", "infer0", "infer1"):
                api.set_pod_phase("default", name, "Running")
            for version, name, count in ((PLUGINS, "train", 3), (SIGS, "tune", 2)):
                await eventually(
                    lambda v=version, n=name: _status(api, v, n).get("phase") == "Running",
                    what=f"{name} Running",
                )
                status = _status(api, version, name)
                assert status["running"] == count
                assert status["succeeded"] == 0 and status["failed"] == 0
                assert status["scheduleStartTime"]
                assert _condition(status, "Scheduled")["status"] == "True"
            await eventually(lambda: _status(api, VOLCANO, "infer").get("running") == 2)
            status = _status(api, VOLCANO, "infer")
            assert status["phase"] == "Running"
            ready = _condition(status, "Scheduled")
            assert ready["status"] == "True"
            assert ready["reason"] == "tasks in gang are ready to be scheduled"
            # Nothing changes: nothing is rewritten (our own writes come back through
            # the watch and are not changes for the core).
            await eventually(lambda: kube.group_status.idle)
            writes = _status_writes(api, "train")
            await asyncio.sleep(0.5)
            assert _status_writes(api, "train") == writes
            # The members finish: Finished / Completed, with the counts.
            for i in range(3):
                api.set_pod_phase("default", f"train{i}", "Succeeded")
            for i in range(2):
                api.set_pod_phase("default", f"infer{i}", "Succeeded")
            await eventually(lambda: _status(api, PLUGINS, "train").get("phase") == "Finished")
            assert _status(api, PLUGINS, "train")["succeeded"] == 3
            assert _status(api, PLUGINS, "train")["running"] == 0
            await eventually(lambda: _status(api, VOLCANO, "infer").get("phase") == "Completed")
            assert _status(api, VOLCANO, "infer")["succeeded"] == 2


@async_test(timeout=60)
async def test_gangs_that_cannot_fit_say_why_on_their_pod_group(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        _install(api)
        for i in range(2):
            api.create("v1", "nodes", node(f"n{i}", cpu="4"))
        # Three members of 3 cpu on two 4-cpu nodes: one member never fits.
        api.create(PLUGINS, "podgroups", _group(PLUGINS, "big", 3))
        api.create(VOLCANO, "podgroups", _group(VOLCANO, "vbig", 3))
        for i in range(3):
            api.create("v1", "pods", pod(f"big{i}", cpu="3", labels={GROUP_LABEL: "big"}))
            api.create(
                "v1", "pods", pod(f"vbig{i}", cpu="3", annotations={VOLCANO_ANNOTATION: "vbig"})
            )
        async with running(api, tmp_path):
            await eventually(
                lambda: _status(api, PLUGINS, "big").get("phase") == "Scheduling",
                what="big Scheduling",
            )
            status = _status(api, PLUGINS, "big")
            assert status["running"] == 0
            why = _condition(status, "Scheduled")
            assert why["status"] == "False" and why["reason"] == "Unschedulable"
            assert "big" in why["message"] and why["lastTransitionTime"]
            # Volcano: the group is admitted (Inqueue: there is no separate enqueue step)
            # and Unschedulable with Volcano's reason.
            await eventually(
                lambda: _condition(_status(api, VOLCANO, "vbig"), "Unschedulable") != {},
                what="vbig Unschedulable",
            )
            status = _status(api, VOLCANO, "vbig")
            assert status["phase"] == "Inqueue"
            why = _condition(status, "Unschedulable")
            assert why["status"] == "True" and why["reason"] == "NotEnoughResources"
            assert "vbig" in why["message"]
            # An event on the PodGroup too (scheduler-plugins' own CRD drops conditions).
            await eventually(lambda: bool(events_for(api, "big", "Unschedulable")))
            event = events_for(api, "big", "Unschedulable")[0]
            assert event["regarding"]["kind"] == "PodGroup" and event["type"] == "Warning"
            assert bound_pods(api) == {}
            # Room arrives: the gang runs and the condition flips.
            api.create("v1", "nodes", node("n2", cpu="4"))
            await eventually(lambda: _status(api, PLUGINS, "big").get("phase") == "Scheduled")
            assert _condition(_status(api, PLUGINS, "big"), "Scheduled")["status"] == "True"


@async_test(timeout=60)
async def test_status_writes_survive_api_errors_and_skip_objects_that_are_gone(
    tmp_path: Path,
) -> None:
    async with FakeApiServer() as api:
        _install(api)
        api.create("v1", "nodes", node("n0", cpu="8"))
        api.create(PLUGINS, "podgroups", _group(PLUGINS, "flaky", 2))
        api.inject(Fault(method="PATCH", path="/podgroups/flaky/status", status=500, times=2))
        for i in range(2):
            api.create("v1", "pods", pod(f"flaky{i}", cpu="1", labels={GROUP_LABEL: "flaky"}))
        async with running(api, tmp_path) as (kube, task):
            await eventually(lambda: _status(api, PLUGINS, "flaky").get("phase") == "Scheduled")
            assert kube.group_status.written >= 1
            # A group whose object is deleted: later changes are not written (and the
            # writer does not stop).
            api.delete("scheduling.x-k8s.io", "podgroups", "default", "flaky")
            await eventually(lambda: not kube.group_objects("default/flaky"))
            writes = _status_writes(api, "flaky")
            api.set_pod_phase("default", "flaky0", "Failed")
            await eventually(
                lambda: kube.scheduler.gangs.status()["default/flaky"]["failed"] == 1,
                what="the failure counted",
            )
            await asyncio.sleep(0.3)
            assert _status_writes(api, "flaky") == writes
            assert not task.done()
            # The writer still works for others.
            api.create(PLUGINS, "podgroups", _group(PLUGINS, "after", 1))
            api.create("v1", "pods", pod("after0", cpu="1", labels={GROUP_LABEL: "after"}))
            await eventually(lambda: _status(api, PLUGINS, "after").get("phase") == "Scheduled")


@async_test(timeout=60)
async def test_a_deleted_volcano_pod_group_no_longer_puts_its_members_in_its_queue(
    tmp_path: Path,
) -> None:
    async with FakeApiServer() as api:
        _install(api)
        api.create("v1", "nodes", node("n0", cpu="16"))
        api.create(
            "shoal.dev/v1alpha1",
            "queues",
            {"metadata": {"name": "small"}, "spec": {"max": {"cpu": "2"}}},
        )
        api.create(VOLCANO, "podgroups", _group(VOLCANO, "job", 2, queue="small"))
        for i in range(2):
            api.create(
                "v1", "pods", pod(f"job{i}", cpu="1", annotations={VOLCANO_ANNOTATION: "job"})
            )
        async with running(api, tmp_path) as (kube, _):
            await eventually(lambda: len(bound_pods(api)) == 2, what="the job runs in small")
            assert kube.scheduler.tenant_queues.group_queues == {"default/job": "small"}
            api.delete("scheduling.volcano.sh", "podgroups", "default", "job")
            await eventually(
                lambda: "default/job" not in kube.informers[VOLCANO_PODGROUPS.name].store
            )
            # Its running members are no longer charged to `small`: a pod of `small`
            # now fits under its max.
            api.create("v1", "pods", pod("later", cpu="1", labels={"shoal.dev/queue": "small"}))
            await eventually(lambda: "default/later" in bound_pods(api), what="later admitted")
            assert kube.scheduler.tenant_queues.group_queues == {}


@async_test()
async def test_a_pod_group_scheduler_plugins_marked_scheduled_is_read(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        # Without the status subresource, so the status another controller wrote is kept
        # on create (as on a cluster where it was written later).
        api.register("scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup", True, False)
        api.create("v1", "nodes", node("n0", cpu="8"))
        group = _group(PLUGINS, "legacy", 2)
        group["status"] = {"phase": "Scheduled", "scheduled": 2, "occupiedBy": "default/x"}
        api.create(PLUGINS, "podgroups", group)
        for i in range(2):
            api.create("v1", "pods", pod(f"legacy{i}", cpu="1", labels={GROUP_LABEL: "legacy"}))
        async with running(api, tmp_path) as (kube, _):
            await eventually(lambda: len(bound_pods(api)) == 2, what="the gang bound")
            assert kube.metrics.invalid_objects.labels(PODGROUPS.name)._value.get() == 0


# ---- the mapping, unit by unit -------------------------------------------------------------


def _gs(
    phase: str,
    scheduled: int = 0,
    succeeded: int = 0,
    failed: int = 0,
    reason: str = "",
    running: int | None = None,
) -> GroupStatus:
    """A group status; its bound members run (phase Running) unless `running` says."""
    return GroupStatus(
        namespace="default",
        name="g",
        source="volcano",
        has_object=True,
        phase=phase,
        min_member=2,
        scheduled=scheduled,
        running=scheduled if running is None else running,
        succeeded=succeeded,
        failed=failed,
        reason=reason,
    )


def test_volcano_phases_follow_volcanos_own_rules() -> None:
    assert volcano_phase(_gs("Pending")) == "Inqueue"
    assert volcano_phase(_gs("Scheduling", reason="no room")) == "Inqueue"
    assert volcano_phase(_gs("Running", scheduled=2)) == "Running"
    # Volcano counts bound members as ready, started or not.
    assert volcano_phase(_gs("Running", scheduled=2, running=0)) == "Running"
    # One member left running below the minimum and the rest does not fit: Unknown.
    assert volcano_phase(_gs("Scheduling", scheduled=1, reason="no room")) == "Unknown"
    # Every placed member finished (failed ones too): Completed.
    assert volcano_phase(_gs("Finished", succeeded=2)) == "Completed"
    assert volcano_phase(_gs("Failed", succeeded=1, failed=1, reason="1 member(s) failed")) == (
        "Completed"
    )
    assert volcano_phase(_gs("Failed", scheduled=1, failed=1, reason="1 member(s) failed")) == (
        "Running"
    )


def test_conditions_keep_their_transition_time_while_their_status_holds() -> None:
    kind: ResourceKind = PODGROUPS
    first = group_status_patch(kind, _gs("Scheduling", reason="no room"), {}, "t1")
    again = group_status_patch(
        kind, _gs("Scheduling", reason="still no room"), {"status": first}, "t2"
    )
    (cond,) = again["conditions"]
    assert cond["lastTransitionTime"] == "t1" and cond["message"] == "still no room"
    assert first["scheduleStartTime"] == "t1"
    assert "scheduleStartTime" not in again  # the object has one: kept
    # A merge patch: what it leaves out stays on the object.
    done = group_status_patch(
        kind, _gs("Running", scheduled=2), {"status": {**first, **again}}, "t3"
    )
    assert done["conditions"][0]["status"] == "True"
    assert done["conditions"][0]["lastTransitionTime"] == "t3"
    assert "scheduleStartTime" not in done


def test_scheduler_plugins_groups_are_scheduled_until_their_members_run() -> None:
    # As scheduler-plugins' PodGroup controller: Scheduled once minMember are bound,
    # Running once minMember run (or already succeeded). The core says which
    # (`GangManager.observed_phase`, tests/gang/test_suspend.py); the patch writes it.
    bound = group_status_patch(PODGROUPS, _gs("Scheduled", scheduled=2, running=0), {}, "t")
    assert (bound["phase"], bound["scheduled"], bound["running"]) == ("Scheduled", 2, 0)
    assert bound["conditions"][0]["type"] == "Scheduled"
    assert bound["conditions"][0]["status"] == "True"
    both = group_status_patch(PODGROUPS, _gs("Running", scheduled=2, running=2), {}, "t")
    assert both["phase"] == "Running"
