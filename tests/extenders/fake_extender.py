"""A small kube-scheduler HTTP extender, run by the tests as a separate process.

    python fake_extender.py            # prints "PORT <n>" once listening on 127.0.0.1
    python fake_extender.py CERT KEY   # the same over HTTPS

It speaks the extender protocol with Go's field names and answers by rules the test
sets with `POST /control` (JSON):

    {"reject": {"n1": "why"}, "unresolvable": {"n2": "why"}, "scores": {"n3": 10},
     "delay": 0.0, "bind_error": "", "status": 200, "keep_victims": 1}

Every protocol request is recorded; `GET /log` returns them as a JSON list of
{"verb": ..., "body": ...}, `POST /reset` clears rules and log.
"""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

RULES: dict[str, Any] = {}
LOG: list[dict[str, Any]] = []
LOCK = threading.Lock()


def _names(args: dict[str, Any]) -> list[str]:
    if args.get("NodeNames") is not None:
        return list(args["NodeNames"])
    items = (args.get("Nodes") or {}).get("items") or []
    return [item["metadata"]["name"] for item in items]


def _filter(args: dict[str, Any]) -> dict[str, Any]:
    reject: dict[str, str] = RULES.get("reject", {})
    unresolvable: dict[str, str] = RULES.get("unresolvable", {})
    names = _names(args)
    passed = [n for n in names if n not in reject and n not in unresolvable]
    out: dict[str, Any] = {
        "FailedNodes": {n: reject[n] for n in names if n in reject},
        "FailedAndUnresolvableNodes": {n: unresolvable[n] for n in names if n in unresolvable},
        "Error": RULES.get("filter_error", ""),
    }
    if args.get("NodeNames") is not None:
        out["NodeNames"], out["Nodes"] = passed, None
    else:
        items = [i for i in args["Nodes"]["items"] if i["metadata"]["name"] in passed]
        out["Nodes"], out["NodeNames"] = {"metadata": {}, "items": items}, None
    return out


def _prioritize(args: dict[str, Any]) -> list[dict[str, Any]]:
    scores: dict[str, int] = RULES.get("scores", {})
    return [{"Host": n, "Score": scores.get(n, 0)} for n in _names(args)]


def _bind(args: dict[str, Any]) -> dict[str, Any]:
    return {"Error": RULES.get("bind_error", "")}


def _preempt(args: dict[str, Any]) -> dict[str, Any]:
    keep = int(RULES.get("keep_victims", 1))
    allowed = set(RULES.get("preempt_nodes", []))
    out: dict[str, Any] = {}
    meta = args.get("NodeNameToMetaVictims")
    full = args.get("NodeNameToVictims")
    for node, victims in (meta or full or {}).items():
        if allowed and node not in allowed:
            continue
        if meta is not None:
            uids = [p["UID"] for p in victims["Pods"]]
        else:
            uids = [p["metadata"]["uid"] for p in victims["Pods"]]
        out[node] = {
            "Pods": [{"UID": u} for u in uids[:keep]],
            "NumPDBViolations": victims["NumPDBViolations"],
        }
    return {"NodeNameToMetaVictims": out}


VERBS = {"filter": _filter, "prioritize": _prioritize, "bind": _bind, "preempt": _preempt}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in two writes: without this, Nagle's algorithm holds
        # the body until the client's delayed ACK (about 40 ms per call).
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _reply(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        with LOCK:
            self._reply(200, list(LOG))

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(length) or b"null")
        verb = self.path.rstrip("/").rsplit("/", 1)[-1]
        if verb == "control":
            with LOCK:
                RULES.clear()
                RULES.update(body)
            self._reply(200, {})
            return
        if verb == "reset":
            with LOCK:
                RULES.clear()
                LOG.clear()
            self._reply(200, {})
            return
        with LOCK:
            LOG.append({"verb": verb, "path": self.path, "body": body})
            delay = float(RULES.get("delay", 0.0))
            status = int(RULES.get("status", 200))
        if delay:
            time.sleep(delay)
        if status != 200:
            self._reply(status, {"error": "told to fail"})
            return
        handler = VERBS.get(verb)
        if handler is None:
            self._reply(404, {"error": f"unknown verb {verb}"})
            return
        with LOCK:
            answer = handler(body)
        self._reply(200, answer)


def main() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    if len(sys.argv) == 3:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(sys.argv[1], sys.argv[2])
        server.socket = context.wrap_socket(server.socket, server_side=True)
    print(f"PORT {server.server_address[1]}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever(poll_interval=0.1)


if __name__ == "__main__":
    sys.exit(main())
