"""`shoal extender` behind a stock kube-scheduler, on the real API server.

kube-scheduler (the kit's binary, run here with a --config naming Shoal as its extender)
keeps scheduling; Shoal, a separate `shoal extender` process watching the cluster,
filters, prioritizes and binds. A GPU-share pod must land on the node Shoal chooses
(computed here by Shoal's own core on the same cluster) and carry Shoal's device
annotation; kube-scheduler's own scoring alone would pick the other node.
"""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
import sys
import urllib.error
import urllib.request
from pathlib import Path

import yaml
from apihelpers import MERGE, Space, running, space, wait_for
from kubehelpers import async_test

from shoal.api.gpu import ANNOTATION_GPU_INDEX, ANNOTATION_GPU_MILLI
from shoal.drivers.kube.resources import NODES, PODS
from shoal.drivers.kube.tls import _self_signed
from shoal.testing import SchedulerHarness, make_node, make_pod

GPU_PROFILE_PLUGINS = {
    "multiPoint": {"enabled": [{"name": "GpuShare"}, {"name": "GpuFragmentation", "weight": 10}]}
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _gpu_node(s: Space, name: str, gpus: int) -> str:
    node = await s.add_node(name, cpu="8", memory="16Gi")
    capacity = {"cpu": "8", "memory": "16Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
    await s.client.request(
        "PATCH",
        NODES.path(name=node, subresource="status"),
        body={"status": {"capacity": capacity, "allocatable": capacity}},
        content_type=MERGE,
    )
    return node


def _gpu_pod(s: Space, name: str, milli: int, *, cpu: str, node: str = "", index: str = "") -> dict:
    body = s.pod(name, cpu, node_name=node)
    annotations = {ANNOTATION_GPU_MILLI: str(milli)}
    if index:
        annotations[ANNOTATION_GPU_INDEX] = index
    body["metadata"]["annotations"] = annotations
    return body


def _shoals_choice(nodes: list[str]) -> tuple[str, str]:
    """Where Shoal's own core puts the new share on the same cluster, and its devices."""
    h = SchedulerHarness(
        {"profiles": [{"schedulerName": "default-scheduler", "plugins": GPU_PROFILE_PLUGINS}]}
    )
    for node in nodes:
        h.add_nodes(make_node(node).capacity(cpu="8", memory="16Gi", **{"nvidia.com/gpu": 4}))
    h.add_pods(
        make_pod("busy")
        .req(cpu="6", memory="64Mi")
        .annotations({ANNOTATION_GPU_MILLI: "300", ANNOTATION_GPU_INDEX: "0"})
        .node(nodes[0]),
        make_pod("share").req(cpu="500m", memory="64Mi").annotations({ANNOTATION_GPU_MILLI: "700"}),
    )
    placements, _ = h.run()
    chosen = placements["default/share"]
    assert chosen is not None
    uid = next(u for u, n in h.effects.bound.items() if n == chosen)
    return chosen, h.effects.annotations[uid][ANNOTATION_GPU_INDEX]


@async_test(timeout=150)
async def test_stock_kube_scheduler_places_a_gpu_share_where_shoal_chooses(
    control_plane: dict[str, str], tmp_path: Path
) -> None:
    async with space(control_plane["KUBECONFIG"], "extender") as s:
        n1 = await _gpu_node(s, "n1", 4)
        n2 = await _gpu_node(s, "n2", 4)
        # A running 0.3 share on n1's device 0, with most of n1's CPU: kube-scheduler's own
        # scoring (LeastAllocated, BalancedAllocation) prefers the idle n2; Shoal's
        # fragmentation-aware scoring (FGD, weight 10) fills that device with the new 0.7.
        await s.create(PODS.path(s.name), _gpu_pod(s, "busy", 300, cpu="6", node=n1, index="0"))
        expected_node, expected_devices = _shoals_choice([n1, n2])
        assert expected_node == n1

        port = _free_port()
        # Mutual TLS: Shoal serves HTTPS and answers the verbs only for a client
        # certificate signed by the cluster CA (kube-scheduler presents the kit's admin
        # certificate through its extender tlsConfig).
        pki = Path(control_plane["KUBECONFIG"]).parent / "pki"
        server_cert, server_key = tmp_path / "tls.crt", tmp_path / "tls.key"
        _self_signed(server_cert, server_key)
        ext_config = tmp_path / "extender.yaml"
        ext_config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kubescheduler.config.k8s.io/v1",
                    "kind": "KubeSchedulerConfiguration",
                    "profiles": [{"schedulerName": s.scheduler, "plugins": GPU_PROFILE_PLUGINS}],
                }
            )
        )
        ks_config = tmp_path / "kube-scheduler.yaml"
        ks_config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kubescheduler.config.k8s.io/v1",
                    "kind": "KubeSchedulerConfiguration",
                    "leaderElection": {"leaderElect": False},
                    "clientConnection": {"kubeconfig": control_plane["KUBECONFIG"]},
                    "profiles": [{"schedulerName": s.scheduler}],
                    "extenders": [
                        {
                            "urlPrefix": f"https://127.0.0.1:{port}/shoal",
                            "enableHTTPS": True,
                            "tlsConfig": {
                                "insecure": True,  # Shoal's self-signed serving certificate
                                "certFile": str(pki / "admin.crt"),
                                "keyFile": str(pki / "admin.key"),
                            },
                            "filterVerb": "filter",
                            "prioritizeVerb": "prioritize",
                            "bindVerb": "bind",
                            "weight": 5,
                            "nodeCacheCapable": True,
                            "httpTimeout": "10s",
                        }
                    ],
                }
            )
        )
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        unverified = ssl.create_default_context()
        unverified.check_hostname = False
        unverified.verify_mode = ssl.CERT_NONE
        shoal = [
            sys.executable,
            "-m",
            "shoal.cli",
            "extender",
            "--kubeconfig",
            control_plane["KUBECONFIG"],
            "--config",
            str(ext_config),
            "--address",
            f"127.0.0.1:{port}",
            "--url-prefix",
            "/shoal",
            "--tls-cert-file",
            str(server_cert),
            "--tls-private-key-file",
            str(server_key),
            "--client-ca-file",
            str(pki / "ca.crt"),
            "--log-format",
            "text",
        ]
        kube_scheduler = [
            str(Path(control_plane["K8S_BIN_DIR"]) / "kube-scheduler"),
            "--config",
            str(ks_config),
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            "--secure-port=0",
        ]
        with running(shoal, tmp_path / "shoal.log", env):

            async def ready() -> bool:
                def probe() -> bool:
                    try:
                        with urllib.request.urlopen(
                            f"https://127.0.0.1:{port}/readyz", timeout=2, context=unverified
                        ) as answer:
                            return bool(answer.status == 200)
                    except OSError:
                        return False

                return await asyncio.to_thread(probe)

            await wait_for(ready, timeout=60, what="shoal extender ready")

            def bind_without_a_certificate() -> int:
                request = urllib.request.Request(
                    f"https://127.0.0.1:{port}/shoal/bind",
                    data=b'{"PodName": "x", "PodNamespace": "y", "PodUID": "z", "Node": "n"}',
                    method="POST",
                )
                try:
                    with urllib.request.urlopen(request, timeout=5, context=unverified) as answer:
                        return int(answer.status)
                except urllib.error.HTTPError as err:
                    return int(err.code)

            # Nobody binds through Shoal without a certificate from the cluster CA.
            assert await asyncio.to_thread(bind_without_a_certificate) == 401
            with running(kube_scheduler, tmp_path / "kube-scheduler.log"):
                await s.create(PODS.path(s.name), _gpu_pod(s, "share", 700, cpu="500m"))

                async def bound() -> bool:
                    return bool((await s.bound()).get("share"))

                try:
                    await wait_for(bound, timeout=60, what="the share bound")
                except AssertionError:
                    logs = "\n".join(
                        f"--- {p.name}\n{p.read_text()[-3000:]}"
                        for p in (tmp_path / "shoal.log", tmp_path / "kube-scheduler.log")
                    )
                    raise AssertionError(f"the share was not bound\n{logs}") from None
        share = (await s.pods())["share"]
        assert share["spec"]["nodeName"] == expected_node
        assert share["metadata"]["annotations"][ANNOTATION_GPU_INDEX] == expected_devices
        # Bound through Shoal's bind verb: its identity is on the pod.
        assert "shoal.dev/scheduled-by" in share["metadata"]["annotations"], share["metadata"]
