"""Parity: one scenario through the simulator's driver (SchedulerHarness, in-memory
effects, virtual time) and through the Kubernetes backend against the fake API server
gives the same outcome: the same placements, the same GPU devices (the
`shoal.dev/gpu-index` annotation on the pods), the same PodGroup phases, the same
evictions. Outcomes are compared, not timings."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from dataclasses import dataclass
from pathlib import Path

import yaml
from kubehelpers import async_test, eventually, fast_options
from kubehelpers import backend as running
from parity_scenario import CONFIG, Scenario, gpu_cluster

from shoal.api.gpu import ANNOTATION_GPU_INDEX
from shoal.api.manifests import decode
from shoal.api.objects import Node, Pod
from shoal.api.podgroup import PodGroup
from shoal.config import parse_config
from shoal.drivers.kube.crds import render
from shoal.testing.fake_apiserver import FakeApiServer
from shoal.testing.harness import SchedulerHarness

SEED = 7


@dataclass(frozen=True)
class Outcome:
    placements: dict[str, str | None]  # every pod not deleted: its node, or None (pending)
    devices: dict[str, str]  # pods that hold GPUs: the device indices
    phases: dict[str, str]  # PodGroups: their phase
    evicted: list[str]


def simulate(scenario: Scenario) -> Outcome:
    s = scenario.copy()
    h = SchedulerHarness(CONFIG, seed=SEED)
    for raw in s.nodes:
        h.add_nodes(decode(raw, Node))
    for raw in s.groups:
        h.scheduler.add_pod_group(decode(raw, PodGroup))
    for raw in s.running:
        raw["metadata"]["uid"] = str(uuid.uuid4())
        raw["status"] = {"phase": "Running"}
        h.add_pods(decode(raw, Pod))
    uids = {}
    for raw in s.pods:
        uid = raw["metadata"]["uid"] = str(uuid.uuid4())
        uids[f"default/{raw['metadata']['name']}"] = uid
        h.add_pods(decode(raw, Pod))
    # Long enough for every backoff (the preemptor retries once its victim is gone),
    # well short of the gangs' scheduleTimeoutSeconds.
    placements, _ = h.advance(30)
    devices = {
        key: h.effects.annotations[uid][ANNOTATION_GPU_INDEX]
        for key, uid in uids.items()
        if ANNOTATION_GPU_INDEX in h.effects.annotations.get(uid, {})
    }
    for key, uid in uids.items():
        echoed = h.scheduler.known_pod(uid)
        if key in devices:  # the bound pod came back carrying them, as from a watch
            assert echoed is not None
            assert echoed.pod.metadata.annotations[ANNOTATION_GPU_INDEX] == devices[key]
    phases = {key: status.phase for key, status in h.effects.group_status.items()}
    return Outcome(placements, devices, phases, sorted(h.evicted))


def _observe(api: FakeApiServer, scenario: Scenario) -> Outcome:
    names = {raw["metadata"]["name"] for raw in scenario.pods + scenario.running}
    placements: dict[str, str | None] = {}
    devices = {}
    for obj in api.pods():
        meta = obj["metadata"]
        if meta["name"] not in names:
            continue
        key = f"{meta['namespace']}/{meta['name']}"
        placements[key] = obj["spec"].get("nodeName") or None
        if ANNOTATION_GPU_INDEX in (meta.get("annotations") or {}):
            devices[key] = meta["annotations"][ANNOTATION_GPU_INDEX]
    phases = {}
    for group in api.list_objects("scheduling.x-k8s.io", "podgroups"):
        meta = group["metadata"]
        phase = (group.get("status") or {}).get("phase")
        # No kubelet starts the pods here: a gang bound whole is scheduler-plugins'
        # Scheduled; the simulator's pods run as soon as they are bound.
        phases[f"{meta['namespace']}/{meta['name']}"] = "Running" if phase == "Scheduled" else phase
    return Outcome(placements, devices, phases, sorted(api.evictions))


async def in_cluster(scenario: Scenario, tmp_path: Path, expected: Outcome) -> Outcome:
    s = scenario.copy()
    async with FakeApiServer() as api:
        for text in render().values():
            api.create("apiextensions.k8s.io/v1", "customresourcedefinitions", yaml.safe_load(text))
        for raw in s.nodes:
            api.create("v1", "nodes", raw)
        for raw in s.groups:
            api.create("scheduling.x-k8s.io/v1alpha1", "podgroups", raw)
        for raw in s.running:
            api.create("v1", "pods", raw)
            api.set_pod_phase("default", raw["metadata"]["name"], "Running")
        for raw in s.pods:
            api.create("v1", "pods", raw)
        config = parse_config(CONFIG)
        async with running(api, tmp_path, fast_options(), config, seed=SEED) as (kube, _):
            # Wait for the cluster to reach the simulator's outcome (or time out and
            # show the difference), then make sure it stays there.
            with contextlib.suppress(AssertionError):
                await eventually(lambda: _observe(api, s) == expected, timeout=20)
            await eventually(lambda: kube.group_status.idle)
            await asyncio.sleep(0.5)
            return _observe(api, s)


@async_test(timeout=90)
async def test_the_simulator_and_a_cluster_agree(tmp_path: Path) -> None:
    scenario = gpu_cluster()
    simulated = simulate(scenario)
    # The scenario exercises what it claims to (so agreeing is not trivial).
    assert simulated.placements["default/urgent"] == "cpu-tiny"
    assert simulated.evicted == ["default/victim"]
    assert simulated.placements["default/whole"] == "gpu-a100"
    assert simulated.devices["default/whole"] == "0,1"
    assert simulated.devices["default/share-v1"] == simulated.devices["default/share-v2"]
    assert simulated.phases == {"default/fits": "Running", "default/too-big": "Scheduling"}
    assert all(simulated.placements[f"default/too-big-{i}"] is None for i in range(3))
    clustered = await in_cluster(scenario, tmp_path, simulated)
    assert clustered == simulated
