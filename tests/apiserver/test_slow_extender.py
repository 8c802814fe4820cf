"""A slow HTTP extender against a real kube-apiserver (issue "Core v3", defect 4): the
core waits for it on its own thread; /healthz, the watches and the binds already decided
go on.

The extender's filter answers after 4 s for one pod. During that call: every /healthz
probe (kube's default probe timeout, 1 s) answers ok, a node created meanwhile reaches
the informer, and binds of pods decided before (held back by a 5 qps client) go out.
Before the core had a thread of its own, 22 of 23 probes failed at a 1 s timeout (the
shipped liveness probe would have restarted the leader) and nothing moved during the
call.
"""

from __future__ import annotations

from apihelpers import space, wait_for
from kubehelpers import async_test
from slowextender import SLOW_LABEL, probe_during_slow_call, slow_extender

from shoal.config import parse_config
from shoal.web.server import HealthServer


@async_test(timeout=150)
async def test_a_slow_extender_never_stalls_probes_watches_or_decided_binds(
    control_plane: dict[str, str],
) -> None:
    with slow_extender(4.0) as ext:
        async with space(control_plane["KUBECONFIG"], "slowext") as s:
            await s.add_node("n1", cpu="16")
            config = parse_config(
                {"profiles": [{"schedulerName": s.scheduler}], "extenders": [ext.config()]}
            )
            options = s.options("slowext", qps=5.0, burst=1)
            async with s.shoal(options, config) as running:
                kube = running.kube
                server = HealthServer(
                    kube.metrics.registry, kube.healthz, kube.readyz, port=0, render_on=kube.on_core
                )
                await server.start()
                try:
                    for i in range(10):
                        await s.create_pod(f"fast-{i}", "100m")
                    await wait_for(
                        lambda: _true(running.binds() >= 1), timeout=60, what="the first bind"
                    )
                    await s.create_pod("slow", "100m", labels={SLOW_LABEL: "1"})
                    await wait_for(lambda: _true(ext.started.is_set()), what="the slow call")
                    binds_before = running.binds()
                    late = await s.add_node("late", cpu="16")
                    seen: list[bool] = []

                    def watch() -> None:
                        if late in kube.informers["nodes"].store:
                            seen.append(True)

                    probes = await probe_during_slow_call(ext, server.port, watch)
                    node_seen = bool(seen)
                    binds_during = running.binds() - binds_before
                    assert len(probes) >= 10 and all(code == 200 for code in probes), probes
                    assert node_seen, "the node watch waited for the extender"
                    assert binds_during >= 3, f"{binds_during} binds sent during the 4 s call"
                    await wait_for(
                        lambda: _has(s.bound(), "slow"), timeout=30, what="the slow pod bound"
                    )
                    assert len(await s.bound()) == 11
                finally:
                    await server.stop()


async def _true(value: bool) -> bool:
    return value


async def _has(bound: object, name: str) -> bool:
    return name in await bound  # type: ignore[operator]
