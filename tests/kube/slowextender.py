"""An HTTP extender whose filter answers late for some pods: it runs on a thread of its
own (not on the test's event loop, which the backend's I/O shares) and records when
each slow call started and ended (time.monotonic, the fake API server's clock too)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import aiohttp

SLOW_LABEL = "shoal.test/slow"


class SlowExtender:
    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.calls: list[tuple[str, float, float]] = []  # (pod, started, ended) of slow calls
        self.started = threading.Event()  # a slow call is in progress (or was)
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                args = json.loads(self.rfile.read(length) or b"{}")
                pod = args.get("Pod") or args.get("pod") or {}
                meta = pod.get("metadata") or {}
                if (meta.get("labels") or {}).get(SLOW_LABEL):
                    began = time.monotonic()
                    owner.started.set()
                    time.sleep(owner.delay)
                    owner.calls.append((str(meta.get("name")), began, time.monotonic()))
                names = args.get("NodeNames")
                answer: dict[str, Any] = {"FailedNodes": {}, "Error": ""}
                if names is not None:
                    answer["NodeNames"], answer["Nodes"] = names, None
                else:
                    answer["Nodes"], answer["NodeNames"] = args.get("Nodes"), None
                body = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def config(self) -> dict[str, Any]:
        """The `extenders:` entry of a KubeSchedulerConfiguration."""
        return {"urlPrefix": self.url, "filterVerb": "filter", "httpTimeout": "30s"}


async def probe_during_slow_call(
    ext: SlowExtender, port: int, watch: Callable[[], None] = lambda: None
) -> list[int]:
    """Probe /healthz on `port` every 0.2 s with kube's default probe timeout (1 s) until
    the slow call has answered; the status of each probe (0: timed out). `watch` is
    called after each probe (to note what the test looks for meanwhile)."""
    probes: list[int] = []
    url = f"http://127.0.0.1:{port}/healthz"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1.0)) as http:
        while not ext.calls:
            try:
                async with http.get(url) as answer:
                    probes.append(answer.status)
            except TimeoutError:
                probes.append(0)
            watch()
            await asyncio.sleep(0.2)
    return probes


@contextmanager
def slow_extender(delay: float) -> Iterator[SlowExtender]:
    ext = SlowExtender(delay)
    thread = threading.Thread(target=ext.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield ext
    finally:
        ext.server.shutdown()
        ext.server.server_close()
