"""Helpers for the tests against the real API server: a namespace of one's own, nodes
whose status the test sets (no kubelet), pods, Shoal in-process, polling."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubehelpers import fast_options

from shoal.config import KubeSchedulerConfiguration, parse_config
from shoal.drivers.kube.backend import KubeBackend, KubeOptions
from shoal.drivers.kube.client import (
    ApiError,
    ClientSettings,
    Connection,
    KubeClient,
    Undecodable,
    connect,
)
from shoal.drivers.kube.leader import LeaderSettings
from shoal.drivers.kube.resources import (
    EVENTS,
    NAMESPACES,
    NODES,
    PODGROUPS,
    PODS,
    PRIORITY_CLASSES,
)

JSON = dict[str, Any]
MERGE = "application/merge-patch+json"


async def wait_for(
    check: Callable[[], Awaitable[bool]], timeout: float = 30.0, what: str = ""
) -> None:
    """Poll `check` until it holds; fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or check}")
        await asyncio.sleep(0.1)


async def counted(check: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    """Wait until a scheduler's own counts agree: the API server may show a pod bound
    before the scheduler has read the answer to its Binding and counted it."""

    async def holds() -> bool:
        return check()

    await wait_for(holds, timeout=timeout, what=what)


@dataclass
class Space:
    """One test's corner of the shared cluster: a namespace, nodes labelled with it and a
    scheduler name of its own, so that tests neither see nor disturb each other's pods."""

    client: KubeClient
    connection: Connection
    kubeconfig: str
    name: str
    nodes: list[str] = field(default_factory=list)
    cluster_objects: list[str] = field(default_factory=list)  # paths, deleted at the end

    @property
    def scheduler(self) -> str:
        return self.name

    def config(self) -> KubeSchedulerConfiguration:
        return parse_config({"profiles": [{"schedulerName": self.scheduler}]})

    def options(self, identity: str, *, leader_elect: bool = False, **more: Any) -> KubeOptions:
        """Quick client settings; a lease of its own in the test's namespace. The lease
        times leave room for a loaded 2-core machine (a renewal taking a second must not
        cost the lease)."""
        leader = LeaderSettings(
            name="shoal",
            namespace=self.name,
            identity=identity,
            lease_duration=4.0,
            renew_deadline=3.0,
            retry_period=0.25,
        )
        return fast_options(
            identity, leader_elect=leader_elect, leader=leader, request_timeout=10.0, **more
        )

    # ---- objects ------------------------------------------------------------------------

    async def add_node(
        self, name: str, cpu: str = "4", memory: str = "8Gi", *, gpus: int = 0
    ) -> str:
        """A Node whose status says what a kubelet would: capacity, allocatable, Ready."""
        name = f"{self.name}-{name}"
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {"kubernetes.io/hostname": name, "shoal.test/space": self.name},
            },
        }
        await self.client.request("POST", NODES.path(), body=body)
        self.nodes.append(name)
        capacity = {"cpu": cpu, "memory": memory, "pods": "110"}
        if gpus:
            capacity["nvidia.com/gpu"] = str(gpus)
        ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "test"}
        await self.client.request(
            "PATCH",
            NODES.path(name=name, subresource="status"),
            body={"status": {"capacity": capacity, "allocatable": capacity, "conditions": [ready]}},
            content_type=MERGE,
        )
        return name

    async def add_priority_class(self, name: str, value: int) -> str:
        name = f"{self.name}-{name}"
        body = {"apiVersion": "scheduling.k8s.io/v1", "metadata": {"name": name}, "value": value}
        await self.client.request("POST", PRIORITY_CLASSES.path(), body=body)
        self.cluster_objects.append(PRIORITY_CLASSES.path(name=name))
        return name

    def pod(
        self,
        name: str,
        cpu: str = "500m",
        *,
        priority_class: str = "",
        labels: dict[str, str] | None = None,
        node_name: str = "",
        scheduler: str | None = None,
    ) -> JSON:
        spec: JSON = {
            "schedulerName": scheduler or self.scheduler,
            # Only this test's nodes: the others' stay out of its filters and messages.
            "nodeSelector": {"shoal.test/space": self.name},
            # No kubelet confirms a graceful stop: an evicted pod is deleted at once.
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "c",
                    "image": "registry.k8s.io/pause:3.9",
                    "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}},
                }
            ],
        }
        if priority_class:
            # The Priority admission plugin sets spec.priority from the class.
            spec["priorityClassName"] = priority_class
        if node_name:
            spec["nodeName"] = node_name
        meta: JSON = {"name": name, "namespace": self.name, "labels": labels or {}}
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}

    async def create_pod(
        self,
        name: str,
        cpu: str = "500m",
        annotations: dict[str, str] | None = None,
        **kw: Any,
    ) -> JSON:
        body = self.pod(name, cpu, **kw)
        if annotations:
            body["metadata"]["annotations"] = dict(annotations)
        deadline = time.monotonic() + 10
        while True:
            try:
                return await self.client.request("POST", PODS.path(self.name), body=body)
            except ApiError as err:
                # The Priority admission plugin reads PriorityClasses from its own cache:
                # one created a moment ago may not be there yet (403 "no PriorityClass").
                if err.status != 403 or "no PriorityClass" not in err.message:
                    raise
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)

    async def set_running(self, name: str) -> None:
        """What the kubelet would report for a started pod: Running and Ready."""
        ready = {"type": "Ready", "status": "True"}
        await self.client.request(
            "PATCH",
            PODS.path(self.name, name, "status"),
            body={"status": {"phase": "Running", "conditions": [ready]}},
            content_type=MERGE,
        )

    async def create(self, path: str, body: JSON) -> JSON:
        return await self.client.request("POST", path, body=body)

    async def add_pod_group(self, name: str, min_member: int) -> JSON:
        """A scheduler-plugins PodGroup in this namespace."""
        body = {
            "apiVersion": PODGROUPS.api_version,
            "kind": "PodGroup",
            "metadata": {"name": name, "namespace": self.name},
            "spec": {"minMember": min_member},
        }
        return await self.create(PODGROUPS.path(self.name), body)

    async def get(self, path: str) -> JSON | None:
        try:
            return await self.client.request("GET", path)
        except ApiError as err:
            if err.not_found:
                return None
            raise

    async def pods(self) -> dict[str, JSON]:
        found = await self.client.request("GET", PODS.path(self.name))
        return {p["metadata"]["name"]: p for p in found.get("items") or []}

    async def placements(self) -> dict[str, str]:
        """pod name -> node for every pod of the namespace ('' when not bound)."""
        return {n: p["spec"].get("nodeName") or "" for n, p in (await self.pods()).items()}

    async def bound(self) -> dict[str, str]:
        return {n: node for n, node in (await self.placements()).items() if node}

    async def events(self, name: str, reason: str = "") -> list[JSON]:
        found = await self.client.request("GET", EVENTS.path(self.name))
        return [
            e
            for e in found.get("items") or []
            if (e.get("regarding") or {}).get("name") == name
            and (not reason or e.get("reason") == reason)
        ]

    @contextlib.asynccontextmanager
    async def watching_pods(self) -> AsyncIterator[list[JSON]]:
        """Every pod object the API server reports from now on (a watch), in order: for
        states that do not last, such as a nomination before the bind. The watch starts
        at the resourceVersion of a list made now, so nothing after it is missed however
        late the stream opens; events arrive a little after the change."""
        seen: list[JSON] = []
        listing = await self.client.request("GET", PODS.path(self.name))
        version = listing["metadata"]["resourceVersion"]

        async def watch() -> None:
            query = {"watch": "1", "resourceVersion": version}
            async with self.client.stream(PODS.path(self.name), query, read_timeout=60) as events:
                async for event in events:
                    if not isinstance(event, Undecodable):  # the tests' pods decode
                        seen.append(event["object"])

        task = asyncio.create_task(watch())
        try:
            yield seen
        finally:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task

    # ---- Shoal ---------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def shoal(
        self,
        options: KubeOptions,
        scheduler_config: KubeSchedulerConfiguration | None = None,
    ) -> AsyncIterator[Running]:
        """Shoal in-process against the API server, with its own connection (as a
        separate replica would have); stopped on exit unless the test stopped it."""
        connection = await connect(self.kubeconfig)
        kube = KubeBackend(scheduler_config or self.config(), connection, options)
        running = Running(kube, asyncio.create_task(kube.run()), connection)
        try:
            yield running
        finally:
            await running.stop()


@dataclass
class Running:
    kube: KubeBackend
    task: asyncio.Task[None]
    connection: Connection

    def binds(self, result: str = "bound") -> int:
        return int(self.kube.metrics.binds.labels(result)._value.get())

    def failed_binds(self) -> int:
        return sum(self.binds(r) for r in ("conflict", "gone", "error"))

    async def stop(self) -> None:
        """A clean stop: in-flight binds finish, the lease is released."""
        if not self.task.done():
            self.kube.stop()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.task, 15)
        await self._close()

    async def crash(self) -> None:
        """As if the process died: nothing is finished or released."""
        self.task.cancel()
        await self._close()

    async def _close(self) -> None:
        self.task.cancel()
        with contextlib.suppress(BaseException):
            await self.task
        await self.connection.close()


@contextlib.asynccontextmanager
async def space(kubeconfig: str, prefix: str) -> AsyncIterator[Space]:
    """A fresh namespace (and scheduler name) for one test; its nodes are deleted after."""
    connection = await connect(kubeconfig)
    client = connection.client("test", ClientSettings(qps=0, timeout=30))
    name = f"{prefix}-{uuid.uuid4().hex[:5]}"
    await client.request("POST", NAMESPACES.path(), body={"metadata": {"name": name}})
    s = Space(client, connection, kubeconfig, name)
    try:
        yield s
    finally:
        # No namespace controller: the namespace would stay Terminating with its pods;
        # nodes are what other tests could see, so those go.
        for path in [NODES.path(name=node) for node in s.nodes] + s.cluster_objects:
            with contextlib.suppress(ApiError):
                await client.request("DELETE", path)
        await connection.close()


@contextlib.contextmanager
def kube_scheduler(control_plane: dict[str, str], s: Space, folder: Path) -> Iterator[Path]:
    """The kit's stock kube-scheduler with one profile for this test's scheduler name;
    stopped (by its own pid) on exit. Yields its log."""
    config = folder / "kube-scheduler.yaml"
    config.write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\n"
        "kind: KubeSchedulerConfiguration\n"
        "leaderElection: {leaderElect: false}\n"
        f"clientConnection: {{kubeconfig: {control_plane['KUBECONFIG']}, qps: 200, burst: 400}}\n"
        f"profiles: [{{schedulerName: {s.scheduler}}}]\n"
    )
    log = folder / "kube-scheduler.log"
    command = [
        str(Path(control_plane["K8S_BIN_DIR"]) / "kube-scheduler"),
        f"--config={config}",
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        "--secure-port=0",
    ]
    with running(command, log):
        yield log


@contextlib.contextmanager
def running(args: list[str], log: Path, env: dict[str, str] | None = None) -> Iterator[None]:
    """A process (its output in `log`) while the body runs; terminated at the end, and
    killed if it does not stop within 10 s."""
    with log.open("w") as out:
        process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        yield
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@contextlib.asynccontextmanager
async def scheduling(
    control_plane: dict[str, str], s: Space, folder: Path, scheduler: str, prefix: str
) -> AsyncIterator[None]:
    """Shoal (`scheduler` "shoal") or the kit's kube-scheduler scheduling the space's
    pods while the body runs; a check failing under kube-scheduler gets the tail of its
    log."""
    if scheduler == "shoal":
        async with s.shoal(s.options(prefix)):
            yield
        return
    with kube_scheduler(control_plane, s, folder) as log:
        try:
            yield
        except AssertionError as err:
            raise AssertionError(f"{err}\n{log.read_text()[-3000:]}") from None
