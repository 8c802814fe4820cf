"""The same queue in every surface, in the same words (issue: tools disagreed about the
same object). One `shoal run` process over the fake API server: a Queue with two pods
placed (one of them started by its kubelet) and one pending. The Queue's status (what
`kubectl get queue` prints), `shoal get queues -o json`, the dashboard's JSON API and
/metrics all say bound 2, running 1, pending 1, and the same fair share."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from kubehelpers import async_test, bound_pods, eventually, node, pod
from test_run_dashboard import address, shoal_run
from typer.testing import CliRunner

from shoal.api.resources import parse_quota_list
from shoal.cli import app
from shoal.drivers.kube.crds import render
from shoal.testing.fake_apiserver import FakeApiServer

SHOAL_API = "shoal.dev/v1alpha1"


@async_test(timeout=120)
async def test_a_queue_reads_the_same_everywhere(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        for text in render().values():
            api.create("apiextensions.k8s.io/v1", "customresourcedefinitions", yaml.safe_load(text))
        kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
        api.create("v1", "nodes", node("n1", cpu="4"))
        api.create(
            SHOAL_API,
            "queues",
            {"metadata": {"name": "team"}, "spec": {"guaranteed": {"cpu": "1"}}},
        )
        team = {"shoal.dev/queue": "team"}
        for i in range(2):
            api.create("v1", "pods", pod(f"t{i}", cpu="1", labels=team))
        api.create("v1", "pods", pod("big", cpu="8", labels=team))  # never fits
        args = ["--kubeconfig", str(kubeconfig), "--bind-address", "127.0.0.1:0"]
        async with (
            shoal_run(*args, "--leader-elect=false") as logs,
            aiohttp.ClientSession() as http,
        ):
            await eventually(lambda: address(logs) != "", timeout=30, what="serving")
            await eventually(lambda: len(bound_pods(api)) == 2, timeout=30, what="2 binds")
            # What t0's kubelet would report: started.
            started = api.get("", "pods", "default", "t0")
            assert started is not None
            started["status"]["phase"] = "Running"
            api.update("", "pods", started)

            def status() -> dict[str, Any]:
                found = api.get("shoal.dev", "queues", "", "team") or {}
                return dict(found.get("status") or {})

            await eventually(
                lambda: status().get("runningPods") == 1 and status().get("boundPods") == 2,
                timeout=30,
                what="the Queue's status",
            )
            base = f"http://{address(logs)}"
            async with http.get(base + "/dashboard/api/queues") as response:
                dashboard = {q["name"]: q for q in (await response.json())["queues"]}["team"]
            async with http.get(base + "/metrics") as response:
                metrics = await response.text()
            cli = await asyncio.to_thread(
                CliRunner().invoke,
                app,
                ["get", "queues", "team", "-o", "json", "--kubeconfig", str(kubeconfig)],
            )
        assert cli.exit_code == 0, cli.output
        row = json.loads(cli.stdout)  # one NAME: that object, as kubectl prints it
        assert row["name"] == "team"
        api_status = status()

        # Pods: bound = placed, running = started, pending = not placed.
        assert (api_status["boundPods"], api_status["runningPods"], api_status["pendingPods"]) == (
            2,
            1,
            1,
        )
        assert (row["boundPods"], row["runningPods"], row["pendingPods"]) == (2, 1, 1)
        assert (dashboard["bound"], dashboard["running"], dashboard["pending"]) == (2, 1, 1)
        pending_metric = re.search(r'shoal_queue_pending_pods\{queue="team"\} (\S+)', metrics)
        assert pending_metric is not None and float(pending_metric.group(1)) == 1
        # The queue's state and its amounts, in the same units.
        assert api_status["state"] == row["state"] == "Open"
        assert api_status["allocated"]["cpu"] == row["allocated"]["cpu"] == "2"
        fair_api = parse_quota_list(api_status["fairShare"])["cpu"]
        assert parse_quota_list(row["fairShare"])["cpu"] == fair_api
        assert dashboard["fairShare"]["cpu"] == fair_api  # quota units (millicores)
        fair_metric = re.search(
            r'shoal_queue_fair_share\{queue="team",resource="cpu"\} (\S+)', metrics
        )
        assert fair_metric is not None and abs(float(fair_metric.group(1)) - fair_api / 1000) < 1e-6
