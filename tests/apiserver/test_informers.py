"""Informers against a real kube-apiserver: an object too deep to decode, a half-open
watch connection.

Run with `pytest -m apiserver`; skipped when ../shared/k8s is absent (see conftest.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml
from apihelpers import Space, space, wait_for
from kubehelpers import async_test

from shoal.drivers.kube.backend import KubeBackend
from shoal.drivers.kube.informer import InformerSettings
from shoal.drivers.kube.resources import VOLCANO_PODGROUPS

VOLCANO_ANNOTATION = "scheduling.k8s.io/group-name"


@contextlib.contextmanager
def _deep_recursion() -> Iterator[None]:
    """Room to encode a deeply nested body (the API server accepts 10000 levels)."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20_000))
    try:
        yield
    finally:
        sys.setrecursionlimit(limit)


def _nested(depth: int) -> dict[str, Any]:
    root: dict[str, Any] = {}
    cur = root
    for _ in range(depth):
        cur["x"] = {}
        cur = cur["x"]
    return root


def _podgroup(s: Space, name: str, min_member: int, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": VOLCANO_PODGROUPS.api_version,
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": s.name},
        "spec": {"minMember": min_member, **spec},
    }


async def _create_deep(s: Space, name: str) -> None:
    body = _podgroup(s, name, 1, x=_nested(1500))
    with _deep_recursion():
        await s.create(VOLCANO_PODGROUPS.path(s.name), body)


async def _create_gang(s: Space, group: str, members: int, cpu: str = "1") -> None:
    await s.create(VOLCANO_PODGROUPS.path(s.name), _podgroup(s, group, members))
    for i in range(members):
        body = s.pod(f"{group}-{i}", cpu)
        body["metadata"]["annotations"] = {VOLCANO_ANNOTATION: group}
        await s.client.request("POST", f"/api/v1/namespaces/{s.name}/pods", body=body)


def _failed(kube: KubeBackend) -> dict[str, str]:
    return {c.name: c.message for c in kube.readyz() if not c.ok}


def _detail(kube: KubeBackend, check: str) -> str:
    return next(c.detail for c in kube.readyz() if c.name == check)


@async_test(timeout=120)
async def test_a_volcano_podgroup_nested_1500_levels_is_named_and_later_gangs_are_scheduled(
    control_plane: dict[str, str], lax_volcano_crd: None
) -> None:
    async with space(control_plane["KUBECONFIG"], "deep") as s:
        for i in range(2):
            await s.add_node(f"n{i}", cpu="4")
        await _create_deep(s, "deep-early")  # in Shoal's first list
        try:
            async with s.shoal(s.options("deep")) as shoal:
                kube = shoal.kube
                await wait_for(lambda: _true(kube.synced and kube.leading), what="synced")
                await _create_deep(s, "deep-late")  # through the watch
                await _create_gang(s, "train", 3)

                async def whole() -> bool:
                    return set(await s.bound()) == {f"train-{i}" for i in range(3)}

                await wait_for(whole, what="the Volcano gang created after the deep one bound")
                informer = kube.informers[VOLCANO_PODGROUPS.name]
                for name in ("deep-early", "deep-late"):
                    key = f"{s.name}/{name}"
                    await wait_for(
                        lambda key=key: _true(key in informer.undecodable), what=f"{key} skipped"
                    )
                    assert f"{VOLCANO_PODGROUPS.name} {key}: nested too deeply" in _detail(
                        kube, "invalidObjects"
                    )

                    async def reported(name: str = name) -> bool:
                        return bool(await s.events(name, "InvalidObject"))

                    await wait_for(reported, what=f"an InvalidObject event on {name}")
                assert not _failed(kube)  # named, not failing: readiness stays green
                assert informer.lists == 1 and not informer.down
                metric = kube.metrics.invalid_objects.labels(VOLCANO_PODGROUPS.name)
                assert metric._value.get() == 2
        finally:
            for name in ("deep-early", "deep-late"):
                with contextlib.suppress(Exception):
                    await s.client.request("DELETE", VOLCANO_PODGROUPS.path(s.name, name))


async def _true(value: bool) -> bool:
    return value


# ---- a half-open connection --------------------------------------------------------------


class FreezingProxy:
    """A TCP proxy on 127.0.0.1 in front of the API server (TLS passes through it
    unchanged). `freeze()` stops forwarding on every connection open at that moment, in
    both directions, without closing them: to both ends they look half-open. Connections
    opened later are forwarded normally."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = 0
        self.connections = 0
        self._server: asyncio.Server | None = None
        self._live: list[asyncio.Event] = []  # per connection: set = frozen
        self._writers: list[asyncio.StreamWriter] = []
        self._tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> FreezingProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for writer in self._writers:
            writer.close()

    def freeze(self) -> int:
        """Freeze the open connections; returns how many."""
        for frozen in self._live:
            frozen.set()
        count = len(self._live)
        self._live = []
        return count

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        self.connections += 1
        frozen = asyncio.Event()
        self._live.append(frozen)
        self._writers += [writer, up_writer]
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._pump(source, sink, frozen))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    @staticmethod
    async def _pump(
        source: asyncio.StreamReader, sink: asyncio.StreamWriter, frozen: asyncio.Event
    ) -> None:
        try:
            while True:
                data = await source.read(65536)
                if frozen.is_set():
                    await asyncio.Event().wait()  # hold it: nothing more goes through
                if not data:
                    break
                sink.write(data)
                await sink.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            if not frozen.is_set():
                sink.close()


@contextlib.asynccontextmanager
async def _through_proxy(s: Space, tmp_path: Path) -> AsyncIterator[FreezingProxy]:
    """Shoal (started by `s.shoal`) reaches the API server through a FreezingProxy."""
    config = yaml.safe_load(Path(s.kubeconfig).read_text())
    server = config["clusters"][0]["cluster"]["server"]
    upstream = int(server.rsplit(":", 1)[1])
    async with FreezingProxy(upstream) as proxy:
        for cluster in config["clusters"]:
            cluster["cluster"]["server"] = f"https://127.0.0.1:{proxy.port}"
        path = tmp_path / "kubeconfig-proxy"
        path.write_text(yaml.safe_dump(config))
        direct = s.kubeconfig
        s.kubeconfig = str(path)
        try:
            yield proxy
        finally:
            s.kubeconfig = direct


@async_test(timeout=120)
async def test_a_half_open_watch_is_dropped_by_the_progress_deadline(
    control_plane: dict[str, str], tmp_path: Path
) -> None:
    async with space(control_plane["KUBECONFIG"], "halfopen") as s:
        for i in range(2):
            await s.add_node(f"n{i}", cpu="4")
        options = s.options("halfopen")
        # The default progress deadline (fast_options shortens it for the fake's tests).
        informer = replace(options.informer, read_timeout=InformerSettings().read_timeout)
        options = replace(options, informer=informer)
        assert options.informer.read_timeout == 15.0
        await s.create_pod("before", "500m")
        async with _through_proxy(s, tmp_path) as proxy, s.shoal(options) as shoal:
            kube = shoal.kube

            async def bound(name: str) -> bool:
                return name in await s.bound()

            await wait_for(lambda: bound("before"), what="the first pod bound")
            pods = kube.informers["pods"]
            watches, lists = pods.watches, pods.lists
            assert proxy.freeze() > 0  # the watches and pooled connections: all silent now
            frozen_at = time.monotonic()
            await s.create_pod("after", "500m")
            await wait_for(
                lambda: _true(f"{s.name}/after" in pods.store),
                timeout=25,
                what="the pod created after the freeze seen",
            )
            assert time.monotonic() - frozen_at > 5  # by a new watch, not the frozen one
            # The bind may first take a pooled connection the freeze left dead too: that
            # request times out (request_timeout) and the pod is retried.
            await wait_for(lambda: bound("after"), timeout=25, what="it bound")
            assert pods.watches > watches and pods.lists == lists  # re-watched, no relist
            # Other requests on connections the freeze left dead (a node-shard round, an
            # optional kind's relist) may have timed out meanwhile and marked their check
            # red until their next round: readiness must come back on its own.
            await wait_for(lambda: _true(not _failed(kube)), timeout=15, what="readyz green")
