"""What an HTTP extender costs per pod: the same workload with and without one.

SchedulingBasic's shapes (scheduler_perf node-default / pod-default: 4 cpu nodes, pods of
100m / 500Mi), default plugins, in memory (virtual clock, in-memory binds), run to
completion with the one driver loop. Variants:

* `none`: no extender;
* `inproc`: one filter + prioritize extender answered in-process (the request and the
  answer are still encoded and decoded as JSON: the protocol's cost without the network);
* `http-names`: the same extender over loopback HTTP, `nodeCacheCapable: true` (node
  names only);
* `http-nodes`: over HTTP, `nodeCacheCapable: false` (whole Node objects, as
  kube-scheduler sends them by default).

The HTTP extender is a separate process (this script with `--serve`): Python's
ThreadingHTTPServer with keep-alive, passing every node and scoring by a hash of the
name, so its own work is small but its HTTP and JSON handling are included. Only the
nodes that pass the plugins and percentageOfNodesToScore go to the extender (kube's
rule), e.g. 230 of 500 nodes, 500 of 5000.

Usage: python bench/extender_cost.py [--nodes 500] [--pods 1000] [--modes none,inproc,...]
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from shapes import default_node, default_pod

from shoal.config import parse_config
from shoal.drivers.extenders import http_extenders
from shoal.drivers.loop import Driver
from shoal.drivers.memory import ManualClock, MemoryEffects
from shoal.scheduler import CycleResult, new_scheduler
from shoal.testing.extenders import in_process_extenders


def _names(args: dict[str, Any]) -> list[str]:
    if args.get("NodeNames") is not None:
        return list(args["NodeNames"])
    return [i["metadata"]["name"] for i in (args.get("Nodes") or {}).get("items") or []]


def answer(verb: str, args: dict[str, Any]) -> Any:
    names = _names(args)
    if verb == "filter":
        if args.get("NodeNames") is not None:
            return {"NodeNames": names, "FailedNodes": {}, "Error": ""}
        return {"Nodes": args["Nodes"], "FailedNodes": {}, "Error": ""}
    return [{"Host": n, "Score": zlib.crc32(n.encode()) % 11} for n in names]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in two writes: without this, Nagle's algorithm holds
        # the body until the client's delayed ACK (about 40 ms per call).
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        data = json.dumps(answer(self.path.rsplit("/", 1)[-1], body)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def serve() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(f"PORT {server.server_address[1]}", flush=True)
    server.serve_forever()


def run(mode: str, nodes: int, pods: int, port: int) -> float:
    extenders: list[dict[str, Any]] = []
    if mode != "none":
        extenders = [
            {
                "urlPrefix": f"http://127.0.0.1:{port}/ext",
                "filterVerb": "filter",
                "prioritizeVerb": "prioritize",
                "weight": 1,
                "nodeCacheCapable": mode != "http-nodes",
            }
        ]
    config = parse_config({"profiles": [{"schedulerName": "shoal"}], "extenders": extenders})
    built = in_process_extenders(config, answer) if mode == "inproc" else http_extenders(config)
    clock = ManualClock()
    effects = MemoryEffects(clock)
    sched = new_scheduler(config, clock=clock, effects=effects, extenders=built)
    for i in range(nodes):
        sched.add_node(default_node(i, {"kubernetes.io/hostname": f"node-{i}"}))
    bound = 0

    def note(result: CycleResult) -> None:
        nonlocal bound
        bound += result.node is not None

    driver = Driver(sched, inbox=effects, on_cycle=note)
    for i in range(pods):
        pod = default_pod(f"p-{i}", "bench")
        pod.spec.scheduler_name = "shoal"
        sched.add_pod(pod)
    start = time.perf_counter()
    driver.run()
    seconds = time.perf_counter() - start
    if bound != pods:
        raise SystemExit(f"{mode}: only {bound}/{pods} pods bound")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--modes", default="none,inproc,http-names,http-nodes")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.serve:
        serve()
        return
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline().split()[1])
        base = None
        print(f"{opts.nodes} nodes, {opts.pods} pods")
        print(f"{'mode':<12} {'pods/s':>9} {'ms/pod':>8} {'extra ms/pod':>13} {'x slower':>9}")
        for mode in opts.modes.split(","):
            seconds = run(mode, opts.nodes, opts.pods, port)
            per_pod = seconds * 1000 / opts.pods
            if base is None:
                base = per_pod
            print(
                f"{mode:<12} {opts.pods / seconds:>9.0f} {per_pod:>8.2f} "
                f"{per_pod - base:>13.2f} {per_pod / base:>9.1f}"
            )
    finally:
        server.terminate()
        server.wait(timeout=5)


if __name__ == "__main__":
    main()
