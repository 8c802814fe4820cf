"""The Kubernetes half of the malformed-input corpus against a real kube-apiserver: what
the API server's schemas let through (a CRD with `x-kubernetes-preserve-unknown-fields`,
quantities that match the quantity pattern but no int64, free-form annotations, a name
in two PodGroup APIs, objects arriving before what they reference) is skipped and
reported, or explained on its pod, naming the object and the field; the good pods
beside it are bound; nothing crashes. (tests/corpus/test_kube_corpus.py runs the whole
corpus against the in-process fake.)

Run with `pytest -m apiserver`; skipped when ../shared/k8s is absent (see conftest.py).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

from apihelpers import Space, space, wait_for
from kubehelpers import async_test

from shoal.drivers.kube.resources import (
    PODGROUPS,
    QUEUES,
    VOLCANO_PODGROUPS,
)

JSON = dict[str, Any]
VOLCANO_GROUP = "scheduling.k8s.io/group-name"
GROUP_LABEL = "scheduling.x-k8s.io/pod-group"


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextlib.contextmanager
def _recording() -> Iterator[_Records]:
    handler = _Records()
    logging.getLogger("shoal").addHandler(handler)
    try:
        yield handler
    finally:
        logging.getLogger("shoal").removeHandler(handler)


def _volcano(s: Space, name: str, **spec: Any) -> JSON:
    return {
        "apiVersion": VOLCANO_PODGROUPS.api_version,
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": s.name},
        "spec": spec,
    }


def _plugins(s: Space, name: str, **spec: Any) -> JSON:
    return {
        "apiVersion": PODGROUPS.api_version,
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": s.name},
        "spec": spec,
    }


async def _pod(s: Space, name: str, **meta: dict[str, str]) -> None:
    body = s.pod(name, "100m")
    body["metadata"].update(meta)
    await s.client.request("POST", f"/api/v1/namespaces/{s.name}/pods", body=body)


@async_test(timeout=180)
async def test_what_the_api_server_lets_through_is_named_and_the_rest_is_bound(
    control_plane: dict[str, str], lax_volcano_crd: None
) -> None:
    async with space(control_plane["KUBECONFIG"], "malformed") as s:
        for i in range(2):
            await s.add_node(f"n{i}", cpu="8")
        huge = await s.add_node("huge", cpu="8", memory="1e30")  # a valid quantity, no int64
        volcano, plugins = VOLCANO_PODGROUPS.path(s.name), PODGROUPS.path(s.name)
        # What the lax Volcano schema lets through: wrong types, a quantity no one can read.
        bad_volcano = {
            "vpg-min-member-text": {"minMember": "two"},
            "vpg-queue-number": {"minMember": 1, "queue": 7},
            "vpg-min-resources-text": {"minMember": 1, "minResources": {"cpu": "lots"}},
        }
        for name, spec in bad_volcano.items():
            await s.create(volcano, _volcano(s, name, **spec))
        body = _volcano(s, "vpg-spec-string")
        body["spec"] = "not an object"
        await s.create(volcano, body)
        # Shoal's own CRDs: quantities the pattern accepts but no int64 holds, or negative.
        queue = f"{s.name}-queue-huge"
        await s.create(
            QUEUES.path(),
            {
                "apiVersion": QUEUES.api_version,
                "kind": "Queue",
                "metadata": {"name": queue},
                "spec": {"guaranteed": {"cpu": "1e30"}},
            },
        )
        s.cluster_objects.append(QUEUES.path(name=queue))
        await s.create(
            plugins,
            _plugins(s, "pg-min-resources-negative", minMember=1, minResources={"memory": "-1Gi"}),
        )
        # A free-form annotation: explained on the pod.
        await _pod(s, "gpu-milli-text", annotations={"alibabacloud.com/gpu-milli": "half"})
        # One gang in two APIs, disagreeing: the scheduler-plugins one is in force.
        await s.create(plugins, _plugins(s, "twin", minMember=2))
        await s.create(volcano, _volcano(s, "twin", minMember=3))
        for i in range(2):
            await _pod(s, f"twin-{i}", labels={GROUP_LABEL: "twin"})
        # Pods before the PodGroup they name.
        for i in range(2):
            await _pod(s, f"early-{i}", annotations={VOLCANO_GROUP: "late"})
        for i in range(2):
            await _pod(s, f"good-{i}")
        try:
            with _recording() as log:
                async with s.shoal(s.options("malformed")) as shoal:
                    kube = shoal.kube
                    invalid = kube.intake.invalid

                    async def named(resource: str, key: str, *fragments: str) -> bool:
                        found = invalid.get((resource, key))
                        return found is not None and all(f in found[2] for f in fragments)

                    expected = [
                        (VOLCANO_PODGROUPS.name, "vpg-min-member-text", ("spec.minMember",)),
                        (VOLCANO_PODGROUPS.name, "vpg-queue-number", ("spec.queue",)),
                        (VOLCANO_PODGROUPS.name, "vpg-min-resources-text", ("lots",)),
                        (VOLCANO_PODGROUPS.name, "vpg-spec-string", ("field spec",)),
                        (PODGROUPS.name, "pg-min-resources-negative", ("must not be negative",)),
                        (VOLCANO_PODGROUPS.name, "twin", ("scheduling.x-k8s.io one is in force",)),
                    ]
                    for resource, name, fragments in expected:
                        key = f"{s.name}/{name}"
                        await wait_for(
                            lambda r=resource, k=key, f=fragments: named(r, k, *f),
                            what=f"{resource} {key} named {fragments}",
                        )

                        async def event(name: str = name) -> bool:
                            return bool(await s.events(name, "InvalidObject"))

                        await wait_for(event, what=f"an InvalidObject event on {name}")
                    await wait_for(
                        lambda: named(QUEUES.name, queue, "does not fit in a 64-bit integer"),
                        what="the queue named",
                    )
                    await wait_for(
                        lambda: named("nodes", huge, "does not fit in a 64-bit integer"),
                        what="the node named",
                    )
                    assert huge not in kube.scheduler.cluster.table.row_of

                    async def placed(*names: str) -> bool:
                        return set(names) <= set(await s.bound())

                    await wait_for(
                        lambda: placed("good-0", "good-1", "twin-0", "twin-1"),
                        what="the good pods and the gang in force bound",
                    )

                    async def gpu_explained() -> bool:
                        notes = [e["note"] for e in await s.events("gpu-milli-text")]
                        return any("whole number from 1 to 1000" in n for n in notes)

                    await wait_for(gpu_explained, what="the GPU annotation explained")

                    async def gated() -> bool:
                        notes = [e["note"] for e in await s.events("early-0")]
                        return any("waiting for its PodGroup object" in n for n in notes)

                    await wait_for(gated, what="the early pods waiting for their PodGroup")
                    assert not await placed("early-0") and not await placed("gpu-milli-text")
                    await s.create(volcano, _volcano(s, "late", minMember=2))
                    await wait_for(lambda: placed("early-0", "early-1"), what="the late gang")

                    # Named on /readyz (never failing), and logged.
                    failed = {c.name: c.message for c in kube.readyz() if not c.ok}
                    assert not failed, failed
                    logged = {str(getattr(r, "object", "")) for r in log.records}
                    assert f"{s.name}/vpg-spec-string" in logged and huge in logged
                assert not [r.getMessage() for r in log.records if r.exc_info]
        finally:
            for name in [*bad_volcano, "vpg-spec-string", "twin", "late"]:
                with contextlib.suppress(Exception):
                    await s.client.request("DELETE", VOLCANO_PODGROUPS.path(s.name, name))
            for name in ("pg-min-resources-negative", "twin"):
                with contextlib.suppress(Exception):
                    await s.client.request("DELETE", PODGROUPS.path(s.name, name))
