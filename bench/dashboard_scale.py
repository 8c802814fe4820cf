"""The dashboard at scale, in headless Chromium: page height, poll payload, main-thread time.

Scene: 5000 nodes (4000 with 8 GPUs), 500 leaf queues under 10 parents (510 queues and
the default one), a job or a few per leaf queue, a 4-pod gang in every fifth, pods no
node matches, and gangs too large to ever fit; `shoal simulate --until 120 --serve`
runs it and serves the dashboard (`--live SPEED`: serve while simulating, so that the
state changes between polls). Chromium is driven over its DevTools protocol (a small
client over aiohttp's websocket) and the page reports per poll the bytes it fetched and
the main-thread time it spent parsing and rendering (`window.shoalStats`, see
src/shoal/web/dashboard/static/dashboard.js); long tasks come from a PerformanceObserver.

Prints, for a 1400 px and a 390 px wide window: the document height, whether the page
scrolls sideways, the bytes of the first poll and of the later ones, parse + render time
per poll (first, and the largest later one), long tasks, and console errors. Usage:
  python bench/dashboard_scale.py [--nodes 5000] [--parents 10] [--leaves 50]
      [--until 120] [--live 10] [--polls 6] [--sections] [--screenshots docs/img]

tests/web/test_dashboard_scale.py imports this file for the same measurements.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
GPU = "nvidia.com/gpu"
QUEUE = "shoal.dev/queue"
GROUP = "pod-group.scheduling.sigs.k8s.io/name"
MIN = "pod-group.scheduling.sigs.k8s.io/min-available"
CHROMIUM = next(
    (found for name in ("chromium", "chromium-browser") if (found := shutil.which(name))), None
)


# ---- the scene ------------------------------------------------------------------------


def write_scene(
    directory: Path, *, nodes: int = 5000, parents: int = 10, leaves: int = 50, jobs: int = 4
) -> tuple[Path, Path]:
    """Cluster (nodes and queues, JSON Lines) and workload files; (cluster, workload).

    Leaf queue team-P-CC under org-P; every leaf queue gets 1..`jobs` GPU jobs arriving
    over the first minute; every fifth a 4-pod gang of whole nodes; every tenth a pod
    whose node selector nothing matches; every 25th a gang asking 16 GPUs per pod (no
    node has them)."""
    directory.mkdir(parents=True, exist_ok=True)
    cluster = directory / "cluster.jsonl"
    gpu_nodes = nodes * 4 // 5
    with cluster.open("w") as out:
        for i in range(nodes):
            allocatable = {"cpu": "64", "memory": "512Gi", "pods": "110"}
            labels = {"topology.kubernetes.io/zone": f"zone-{i % 4}"}
            if i < gpu_nodes:
                allocatable[GPU] = "8"
                labels["nvidia.com/gpu.product"] = "A100" if i % 2 else "V100"
            node = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": f"node-{i:05d}", "labels": labels},
                "status": {"allocatable": allocatable},
            }
            out.write(json.dumps(node) + "\n")
        for p in range(parents):
            spec: dict[str, Any] = {"guaranteed": {GPU: 8 * leaves}}
            out.write(json.dumps(_queue(f"org-{p}", spec)) + "\n")
            for c in range(leaves):
                spec = {"parent": f"org-{p}", "weight": 1 + c % 3, "guaranteed": {GPU: 4 + c % 4}}
                out.write(json.dumps(_queue(f"team-{p}-{c:02d}", spec)) + "\n")
    groups: list[dict[str, Any]] = []
    for p in range(parents):
        for c in range(leaves):
            queue = f"team-{p}-{c:02d}"
            n = p * leaves + c
            groups.append(
                {
                    "name": f"{queue}-job",
                    "count": 1 + n % jobs,
                    "rate": 0.1,
                    "duration": {"distribution": "exponential", "mean": 600},
                    "template": _pod(p, queue, {}, {"cpu": "4", "memory": "16Gi", GPU: 1 + c % 4}),
                }
            )
            if c % 5 == 0:
                gang = {GROUP: f"{queue}-gang", MIN: "4"}
                groups.append(
                    {
                        "name": f"{queue}-gang",
                        "count": 4,
                        "arrival": 10,
                        "duration": 900,
                        "template": _pod(p, queue, gang, {"cpu": "8", "memory": "64Gi", GPU: 8}),
                    }
                )
            if c % 10 == 3:
                lost = _pod(p, queue, {}, {"cpu": "1"})
                lost["spec"]["nodeSelector"] = {"topology.kubernetes.io/zone": "zone-mars"}
                groups.append({"name": f"{queue}-lost", "count": 1, "template": lost})
            if c % 25 == 7:
                huge = {GROUP: f"{queue}-huge", MIN: "2"}
                groups.append(
                    {
                        "name": f"{queue}-huge",
                        "count": 2,
                        "arrival": 5,
                        "template": _pod(p, queue, huge, {"cpu": "8", GPU: 16}),
                    }
                )
    workload = directory / "workload.json"
    document = {
        "apiVersion": "sim.shoal.dev/v1alpha1",
        "kind": "Workload",
        "metadata": {"name": "dashboard-scale"},
        "spec": {"pods": groups},
    }
    workload.write_text(json.dumps(document))
    return cluster, workload


def _queue(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "shoal.dev/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": spec,
    }


def _pod(
    parent: int, queue: str, labels: dict[str, str], requests: dict[str, Any]
) -> dict[str, Any]:
    return {
        "metadata": {"namespace": f"ns-{parent}", "labels": {QUEUE: queue, **labels}},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "resources": {"requests": {k: str(v) for k, v in requests.items()}},
                }
            ]
        },
    }


# ---- the server -----------------------------------------------------------------------


def serve(*args: str, timeout: float = 300) -> tuple[subprocess.Popen[str], str]:
    """Start `shoal simulate -q ARGS --serve` on a free port; (process, dashboard URL)."""
    command = [sys.executable, "-m", "shoal.cli", "simulate", "-q", *args]
    command += ["--serve", "--serve-address", "127.0.0.1:0"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    output = []
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        output.append(line)
        found = re.search(r"Dashboard: (http://\S+/dashboard/)", line)
        if found:
            # The report follows; nobody reads it: drain the pipe so the server never blocks.
            threading.Thread(target=process.stdout.read, daemon=True).start()
            return process, found.group(1)
    process.kill()
    raise AssertionError("no dashboard address printed:\n" + "".join(output))


def stop(process: subprocess.Popen[str]) -> int:
    process.send_signal(signal.SIGINT)
    try:
        return process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()


# ---- Chromium over the DevTools protocol ----------------------------------------------


class DevToolsError(RuntimeError):
    pass


@dataclass
class Tab:
    """One page of the browser, attached with a flat session."""

    browser: Browser
    session: str
    events: list[dict[str, Any]] = field(default_factory=list)

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        return await self.browser.send(method, params, self.session)

    async def evaluate(self, expression: str) -> Any:
        answer = await self.send(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in answer:
            raise DevToolsError(f"{expression[:80]}: {answer['exceptionDetails']}")
        return answer["result"].get("value")

    async def wait_for(self, expression: str, timeout: float = 60.0) -> Any:
        """Poll `expression` until it is truthy; its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = await self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"still false after {timeout} s: {expression}")
            await asyncio.sleep(0.1)

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and error log entries (a failed load, a
        404) seen so far."""
        out = []
        for event in self.events:
            method, params = event["method"], event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                args = params.get("args", [])
                out.append(
                    "console: " + " ".join(str(a.get("value", a.get("description"))) for a in args)
                )
            elif method == "Runtime.exceptionThrown":
                details = params.get("exceptionDetails", {})
                out.append(
                    "exception: "
                    + str(details.get("exception", {}).get("description", details.get("text")))
                )
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                entry = params["entry"]
                text = f"{entry.get('text')} {entry.get('url', '')}".strip()
                out.append(f"log ({entry.get('source')}): {text}")
        return out


class Browser:
    """Headless Chromium with a DevTools websocket (see `open_browser`)."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self._next = 0
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._tabs: dict[str, Tab] = {}
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for message in self.ws:
            if message.type != aiohttp.WSMsgType.TEXT:
                continue
            data = json.loads(message.data)
            if "id" in data:
                future = self._waiting.pop(data["id"], None)
                if future is not None and not future.done():
                    if "error" in data:
                        future.set_exception(DevToolsError(str(data["error"])))
                    else:
                        future.set_result(data.get("result", {}))
            elif (tab := self._tabs.get(data.get("sessionId", ""))) is not None:
                tab.events.append(data)
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(DevToolsError("the browser closed the connection"))

    async def send(
        self, method: str, params: dict[str, Any] | None = None, session: str | None = None
    ) -> dict[str, Any]:
        self._next += 1
        message: dict[str, Any] = {"id": self._next, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[self._next] = future
        await self.ws.send_str(json.dumps(message))
        return await asyncio.wait_for(future, 120)

    async def tab(self, width: int, height: int, *, mobile: bool = False) -> Tab:
        target = await self.send("Target.createTarget", {"url": "about:blank"})
        attached = await self.send(
            "Target.attachToTarget", {"targetId": target["targetId"], "flatten": True}
        )
        tab = Tab(self, attached["sessionId"])
        self._tabs[tab.session] = tab
        for domain in ("Page", "Runtime", "Log"):
            await tab.send(f"{domain}.enable")
        await tab.send(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=mobile,
        )
        return tab


@contextlib.asynccontextmanager
async def open_browser(profile: Path) -> AsyncIterator[Browser]:
    """Headless Chromium (a fresh profile in `profile`) and a DevTools connection."""
    assert CHROMIUM is not None, "no chromium on PATH"
    profile.mkdir(parents=True, exist_ok=True)
    port_file = profile / "DevToolsActivePort"
    port_file.unlink(missing_ok=True)
    command = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",  # CI runs as root
        "--disable-gpu",
        "--hide-scrollbars",
        "--no-first-run",
        f"--user-data-dir={profile}",
        "--remote-debugging-port=0",
        "about:blank",
    ]
    log = (profile / "chromium.log").open("w")
    process = subprocess.Popen(command, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 60
        while not (port_file.exists() and len(port_file.read_text().splitlines()) >= 2):
            if process.poll() is not None or time.monotonic() > deadline:
                raise DevToolsError("chromium did not open its DevTools port: " + log.name)
            await asyncio.sleep(0.05)
        port, path = port_file.read_text().splitlines()[:2]
        async with (
            aiohttp.ClientSession() as session,
            session.ws_connect(f"ws://127.0.0.1:{port}{path}", max_msg_size=0) as ws,
        ):
            browser = Browser(ws)
            try:
                yield browser
            finally:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(browser.send("Browser.close"), 10)
                browser._reader.cancel()
    finally:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)
        if process.poll() is None:
            process.kill()
            process.wait()
        log.close()


# ---- measuring ------------------------------------------------------------------------

# What the page says about itself after some polls.
PAGE_FACTS = """(() => {
  const doc = document.documentElement;
  const s = window.shoalStats;
  return {
    height: doc.scrollHeight,
    scrollWidth: doc.scrollWidth,
    clientWidth: doc.clientWidth,
    loaded: Number(document.body.dataset.loaded || 0),
    polls: s.polls.map((p) => ({at: p.at, bytes: p.bytes, requests: p.requests,
      unchanged: p.unchanged, parseMs: p.parseMs, renderMs: p.renderMs, longestMs: p.longestMs,
      sections: p.sections})),
    longTasks: s.longTasks,
    refreshErrors: s.errors,
    status: document.getElementById("status").textContent,
    queueRows: document.querySelectorAll("tr[data-queue]").length,
    gangRows: document.querySelectorAll("tr[data-gang]").length,
    nodeRows: document.querySelectorAll("tr[data-node]").length,
    yTicks: Object.fromEntries(["queue-history", "queue-now"].map((id) => {
      const c = window.Chart && Chart.getChart(id);
      return [id, c ? c.scales.y.ticks.map((t) => t.label) : []];
    })),
    overflowing: [...document.querySelectorAll("main *")].filter((e) => {
      const r = e.getBoundingClientRect();
      return r.width > 0 && r.right > doc.clientWidth + 1 && !e.closest(".table-wrap, .heat");
    }).slice(0, 5).map((e) => e.tagName + (e.id ? "#" + e.id : "") + "." + e.className),
  };
})()"""


@dataclass
class Measured:
    width: int
    height: int  # the document's
    scroll_width: int
    client_width: int
    polls: list[dict[str, Any]]
    long_tasks: list[dict[str, float]]
    errors: list[str]
    facts: dict[str, Any]

    @property
    def first_bytes(self) -> int:
        return int(self.polls[0]["bytes"])

    @property
    def later_bytes(self) -> int:
        """The largest poll after the first."""
        return max((int(p["bytes"]) for p in self.polls[1:]), default=0)

    @property
    def first_ms(self) -> float:
        """Main-thread time of the first poll: parsing and rendering (Chart.js setup)."""
        return float(self.polls[0]["parseMs"] + self.polls[0]["renderMs"])

    @property
    def later_ms(self) -> float:
        """The most main-thread time a later poll took (parsing and rendering)."""
        return max((p["parseMs"] + p["renderMs"] for p in self.polls[1:]), default=0.0)

    @property
    def later_block_ms(self) -> float:
        """The longest the page rendered without yielding, in a later poll."""
        return max((float(p["longestMs"]) for p in self.polls[1:]), default=0.0)

    @property
    def later_long_tasks(self) -> list[float]:
        """Long tasks (> 50 ms, PerformanceObserver) after the first poll began to render."""
        if len(self.polls) < 2:
            return []
        start = float(self.polls[1]["at"])
        return [t["ms"] for t in self.long_tasks if t["start"] >= start]

    def report(self) -> str:
        first = self.polls[0]
        later = self.polls[1:]
        unchanged = sum(p["unchanged"] for p in later)
        asked = sum(p["requests"] for p in later)
        long_later = self.later_long_tasks
        return (
            f"{self.width} px: document {self.height} px high, scrollWidth {self.scroll_width} "
            f"(clientWidth {self.client_width}), console errors {len(self.errors)}\n"
            f"  first poll: {self.first_bytes} B in {first['requests']} requests; main thread "
            f"{self.first_ms:.1f} ms (parse + render, Chart.js set-up), longest block "
            f"{first['longestMs']:.1f} ms\n"
            f"  {len(later)} later polls: at most {self.later_bytes} B ({unchanged} of {asked} "
            f"answers unchanged); main thread at most {self.later_ms:.1f} ms per poll, longest "
            f"block {self.later_block_ms:.1f} ms; long tasks (> 50 ms) {len(long_later)}"
            + (f", longest {max(long_later):.0f} ms" if long_later else "")
        )


async def measure(
    browser: Browser,
    url: str,
    width: int,
    height: int = 900,
    *,
    mobile: bool = False,
    polls: int = 4,
    screenshot: Path | None = None,
    full_page: bool = True,
) -> Measured:
    """Load the dashboard in a `width` x `height` window, wait for `polls` polls and
    read what the page reports (and save a screenshot)."""
    tab = await browser.tab(width, height, mobile=mobile)
    await tab.send("Page.navigate", url=url)
    loaded = "Number(document.body && document.body.dataset.loaded || 0)"
    await tab.wait_for(f"{loaded} >= {polls}", 90)
    facts = await tab.evaluate(PAGE_FACTS)
    if screenshot is not None:
        clip_height = facts["height"] if full_page else min(facts["height"], 2 * height)
        shot = await tab.send(
            "Page.captureScreenshot",
            format="png",
            captureBeyondViewport=True,
            clip={"x": 0, "y": 0, "width": width, "height": clip_height, "scale": 1},
        )
        screenshot.write_bytes(base64.b64decode(shot["data"]))
    return Measured(
        width,
        facts["height"],
        facts["scrollWidth"],
        facts["clientWidth"],
        facts["polls"],
        facts["longTasks"],
        tab.errors(),
        facts,
    )


async def drill_down(browser: Browser, url: str, queue: str) -> dict[str, Any]:
    """Find `queue` by name, click it, open its first gang: what the page shows then."""
    tab = await browser.tab(1400, 900)
    await tab.send("Page.navigate", url=url)
    loaded = "Number(document.body && document.body.dataset.loaded || 0)"
    await tab.wait_for(f"{loaded} >= 1", 90)
    await tab.evaluate(
        "(() => { const i = document.getElementById('queue-search');"
        f" i.value = {json.dumps(queue)}; i.dispatchEvent(new Event('input')); }})()"
    )
    row = f"document.querySelector('tr[data-queue={json.dumps(queue)}]')"
    await tab.wait_for(f"document.querySelectorAll('tr[data-queue]').length === 1 && !!{row}")
    await tab.evaluate(f"{row}.click()")
    # Wait for the gang table filtered to the queue and its pending pods.
    gangs = await tab.wait_for(
        f"""(() => {{
          const rows = [...document.querySelectorAll('tr[data-gang]')];
          const ok = !document.getElementById('queue-pods').hidden &&
            !document.getElementById('gang-queue').hidden && rows.length &&
            rows.every((r) => r.children[1].textContent === {json.dumps(queue)});
          return ok && rows.map((r) => r.dataset.gang);
        }})()"""
    )
    await tab.evaluate("document.querySelector('tr[data-gang]').click()")
    pods = await tab.wait_for(
        "[...document.querySelectorAll('tr.detail tr[data-pod]')].map((r) => r.innerText)"
    )
    facts = await tab.evaluate(
        """(() => {
          const all = (css) => [...document.querySelectorAll(css)];
          return {
            queuePods: all('#queue-pod-table tr[data-pod]').map((r) => r.innerText),
            chart: window.Chart ? Chart.getChart('queue-history').options.plugins.title.text : '',
          };
        })()"""
    )
    return {"gangs": gangs, "pods": pods, **facts, "errors": tab.errors()}


# What the page fetches on its first poll (default state), and what the page before
# paging fetched on every poll (the whole tree, every queue's history, 200 gangs, 50 nodes,
# the heat map as arrays with names).
PAGE_QUERIES = [
    "summary",
    "queues?parent=&offset=0&limit=20",
    "queues/top?n=15&by=allocated&resource=dominant",
    "queues/history?resource=dominant&queue={queue}",
    "gangs?offset=0&limit=10",
    "pending",
    "nodes?sort=frag&offset=0&limit=10",
    "nodes/heat?format=packed&names=0&limit=20000",
]
OLD_QUERIES = [
    "summary",
    "queues",
    "queues/history?resource=dominant",
    "gangs?limit=200",
    "pending",
    "nodes?sort=frag&offset=0&limit=50",
    "nodes/heat",
]


def api_sizes(url: str) -> dict[str, dict[str, int]]:
    """Bytes of each answer the page asks for, now and before paging: {"page": {query:
    bytes}, "before": {...}}."""
    import urllib.request

    base = url.removesuffix("/dashboard/") + "/dashboard/api/"

    def get(query: str) -> bytes:
        with urllib.request.urlopen(base + query, timeout=60) as response:
            body: bytes = response.read()
            return body

    queue = json.loads(get("queues/top?n=1"))["items"][0]["name"]
    page = {q.format(queue=queue): len(get(q.format(queue=queue))) for q in PAGE_QUERIES}
    before = {q: len(get(q)) for q in OLD_QUERIES}
    return {"page": page, "before": before}


# ---- main -----------------------------------------------------------------------------


async def _run(url: str, screenshots: Path | None, profile: Path, polls: int) -> list[Measured]:
    async with open_browser(profile) as browser:
        wide = await measure(
            browser,
            url,
            1400,
            polls=polls,
            screenshot=screenshots / "dashboard-scale.png" if screenshots else None,
        )
        narrow = await measure(
            browser,
            url,
            390,
            844,
            mobile=True,
            polls=polls,
            screenshot=screenshots / "dashboard-scale-390.png" if screenshots else None,
            full_page=False,
        )
        return [wide, narrow]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--parents", type=int, default=10)
    parser.add_argument("--leaves", type=int, default=50)
    parser.add_argument("--until", type=float, default=120)
    parser.add_argument(
        "--live",
        type=float,
        default=None,
        metavar="SPEED",
        help="serve while simulating at SPEED simulated s per s (the state changes between polls)",
    )
    parser.add_argument("--polls", type=int, default=6, help="polls to wait for per window")
    parser.add_argument("--sections", action="store_true", help="render time per section")
    parser.add_argument("--screenshots", type=Path, default=None, help="save PNGs here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        cluster, workload = write_scene(
            Path(tmp) / "scene", nodes=args.nodes, parents=args.parents, leaves=args.leaves
        )
        started = time.perf_counter()
        extra = ["--serve-speed", str(args.live)] if args.live else []
        process, url = serve(
            "-c", str(cluster), "-w", str(workload), "--until", str(args.until), *extra
        )
        print(
            f"serving {url} after {time.perf_counter() - started:.1f} s"
            f"{f' (live, {args.live} simulated s per s)' if args.live else ''}"
        )
        try:
            sizes = api_sizes(url) if not args.live else None
            results = asyncio.run(_run(url, args.screenshots, Path(tmp) / "profile", args.polls))
        finally:
            stop(process)
    if sizes is not None:
        for name, answers in sizes.items():
            total = sum(answers.values())
            print(f"API bytes, {name}: {total} in all")
            for query, size in answers.items():
                print(f"  {size:>8}  /dashboard/api/{query}")
    for m in results:
        print(m.report())
        for e in m.errors:
            print("  error:", e)
        if m.facts["overflowing"]:
            print("  wider than the window:", m.facts["overflowing"])
        print(
            "  per poll (bytes, main-thread ms, longest block ms):",
            [
                (p["bytes"], round(p["parseMs"] + p["renderMs"], 1), round(p["longestMs"], 1))
                for p in m.polls
            ],
        )
        if args.sections:
            for i, poll in enumerate(m.polls):
                print(f"  poll {i}: render ms by section {poll['sections']}")


if __name__ == "__main__":
    main()
