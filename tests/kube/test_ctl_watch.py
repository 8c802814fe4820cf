"""`shoal get ... --watch` against the fake API server: the table, then the rows that
change (no header again), in every output format; watches that expire (410) or drop,
and an API server that fails for a while; Ctrl-C ends a `shoal get -w` process with exit
0. And the kubeconfig context's namespace as the default namespace (kubectl's)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import yaml
from kubehelpers import async_test, eventually, node, pod
from test_ctl import GROUP_LABEL, PLUGINS, SHOAL, _cluster, _json, _shoal

from shoal.commands.ctl import EXIT_BLOCKED, EXIT_NOT_FOUND
from shoal.commands.ctl.kinds import PODGROUP_KIND, POOL_KIND, QUEUE_KIND
from shoal.commands.ctl.output import Output
from shoal.commands.ctl.rows import Query, Ref, Row
from shoal.commands.ctl.watch import Changes, Printer, WatchFailures, watch
from shoal.config import default_config
from shoal.testing.fake_apiserver import FakeApiServer, Fault

TEAM_B = {"shoal.dev/queue": "team-b"}


@contextlib.asynccontextmanager
async def _watching(
    api: FakeApiServer,
    tmp_path: Path,
    query: Query,
    fmt: Output = "table",
    *,
    events: bool = False,
    watch_only: bool = False,
) -> AsyncIterator[io.StringIO]:
    """`shoal get ... --watch` on this loop, printing into the StringIO yielded; stopped
    (as Ctrl-C would) on exit."""
    out = io.StringIO()
    printer = Printer(query, fmt, show_labels=False, events=events, file=out)
    stop = asyncio.Event()
    kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
    task = asyncio.create_task(
        watch(
            default_config(),
            query,
            printer,
            kubeconfig,
            None,
            watch_only=watch_only,
            interval=0.05,
            stop=stop,
        )
    )
    try:
        yield out
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


async def _printed(out: io.StringIO, text: str, after: int = 0, timeout: float = 10.0) -> int:
    """Wait until `text` is printed after position `after`; where it ends."""
    await eventually(lambda: text in out.getvalue()[after:], timeout, what=repr(text))
    value = out.getvalue()
    return value.index(text, after) + len(text)


def _line(out: io.StringIO, start: str, after: int = 0) -> list[str]:
    """The cells of the last line printed after `after` that starts with `start`."""
    lines = [ln for ln in out.getvalue()[after:].splitlines() if ln.strip().startswith(start)]
    assert lines, (start, out.getvalue()[after:])
    return lines[-1].split()


@async_test(timeout=90)
async def test_watch_prints_the_table_then_the_rows_that_change(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        _cluster(api)
        async with _watching(api, tmp_path, Query(QUEUE_KIND)) as out:
            end = await _printed(out, "pods naming no queue go to 'default'")
            first = out.getvalue()
            assert first.splitlines()[0].split()[:2] == ["QUEUE", "STATE"]
            assert "└─ team-b" in first
            assert _line(out, "└─ team-b")[-3:] == ["2", "0", "0"]  # pending, bound, running

            # A pod of team-b bound: team-b's row and its parent's change, no header.
            api.create("v1", "pods", pod("b1", cpu="1", labels=TEAM_B, node_name="cpu-1"))
            await eventually(lambda: "└─ team-b" in out.getvalue()[end:], what="team-b again")
            await eventually(lambda: "root" in out.getvalue()[end:], what="root again")
            later = out.getvalue()[end:]
            assert "QUEUE" not in later  # the header is printed once
            assert _line(out, "└─ team-b", end)[-2] == "1"  # bound (no kubelet starts it)
            assert "team-a" not in later  # unchanged rows are not printed again
            # Under the first table's columns.
            column = first.splitlines()[0].index("BOUND")
            (b_line,) = [ln for ln in later.splitlines() if "team-b" in ln]
            assert b_line[column:].split()[0] == "1"

            # A Queue changed: its row again.
            end = len(out.getvalue())
            queue = api.get("shoal.dev", "queues", "", "team-b")
            assert queue is not None
            queue["spec"]["max"] = {"cpu": "5"}
            api.update("shoal.dev", "queues", queue)
            await eventually(
                lambda: "team-b" in out.getvalue()[end:] and "cpu=5" in out.getvalue()[end:],
                what="team-b's new max",
            )
            assert "cpu=5" in _line(out, "└─ team-b", end)


@async_test(timeout=90)
async def test_watch_json_yaml_and_name_print_each_changed_object(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        _cluster(api)
        async with _watching(api, tmp_path, Query(PODGROUP_KIND), "json", events=True) as out:
            await eventually(lambda: '"ADDED"' in out.getvalue(), what="the first list")
            end = len(out.getvalue())
            api.create("v1", "pods", pod("g2", cpu="100m", labels={GROUP_LABEL: "g"}))
            await eventually(lambda: "MODIFIED" in out.getvalue()[end:], what="g modified")
            docs = _json_stream(out.getvalue())
            assert [d["type"] for d in docs] == ["ADDED", "MODIFIED"]
            assert docs[0]["object"]["members"] == 2 and docs[1]["object"]["members"] == 3
            assert docs[1]["object"]["name"] == "g"

        async with _watching(api, tmp_path, Query(POOL_KIND), "yaml") as out:
            await eventually(lambda: "(no pool)" in out.getvalue(), what="the first list")
            end = len(out.getvalue())
            api.create("v1", "nodes", node("gpu-2", cpu="8", pool="gpu"))
            await eventually(lambda: "name: gpu" in out.getvalue()[end:], what="pool gpu again")
            docs = list(yaml.safe_load_all(out.getvalue()))
            assert [d["name"] for d in docs[:2]] == ["gpu", "(no pool)"]
            assert docs[-1]["name"] == "gpu" and docs[-1]["nodes"] == 2

        async with _watching(api, tmp_path, Query(POOL_KIND), "name", events=True) as out:
            await _printed(out, "ADDED nodepool.shoal.dev/gpu\n")
            api.delete("shoal.dev", "nodepools", "", "gpu")
            await _printed(out, "DELETED nodepool.shoal.dev/gpu\n")
            assert "(no pool)" not in out.getvalue()  # no object: no name


def _watches(api: FakeApiServer, resource: str) -> int:
    return sum(
        r.verb == "watch" and r.resource == resource and r.status == 200 for r in api.requests
    )


def _json_stream(text: str) -> list[Any]:
    decoder, docs, at = json.JSONDecoder(), [], 0
    while text[at:].strip():
        while text[at].isspace():
            at += 1
        doc, at = decoder.raw_decode(text, at)
        docs.append(doc)
    return docs


@async_test(timeout=90)
async def test_watch_only_names_and_events(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        _cluster(api)
        query = Query(QUEUE_KIND, refs=(Ref("team-b"),))
        async with _watching(api, tmp_path, query, events=True, watch_only=True) as out:
            await eventually(lambda: _watches(api, "pods") >= 1, what="a watch of pods")
            await asyncio.sleep(0.2)
            assert out.getvalue() == ""  # nothing until something changes
            api.create("v1", "pods", pod("b1", cpu="1", labels=TEAM_B, node_name="cpu-1"))
            await _printed(out, "cluster capacity")
            lines = out.getvalue().splitlines()
            assert lines[0].split()[:2] == ["EVENT", "QUEUE"]  # the header, once
            assert lines[1].split()[:2] == ["MODIFIED", "team-b"]  # flat: filtered
            assert not any("root" in ln for ln in lines)  # only the NAME asked for
            end = len(out.getvalue())
            api.delete("shoal.dev", "queues", "", "team-b")
            await _printed(out, "DELETED", end)


@async_test(timeout=90)
async def test_watch_survives_expiry_dropped_watches_and_failures(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        _cluster(api)
        async with _watching(api, tmp_path, Query(QUEUE_KIND), "name", events=True) as out:
            await _printed(out, "ADDED queue.shoal.dev/team-b\n")
            await eventually(lambda: _watches(api, "queues") >= 1, what="a watch of queues")
            # 410 Gone: the events were compacted away while the watches were down; the
            # informers relist and the change made meanwhile is seen.
            api.inject(Fault(method="GET", path="/queues$", watch=True, status=503, times=1))
            api.drop_watches()
            api.create(SHOAL, "queues", {"metadata": {"name": "team-c"}, "spec": {}})
            api.compact()
            await _printed(out, "ADDED queue.shoal.dev/team-c\n", timeout=15)
            lists = sum(r.verb == "list" and r.resource == "queues" for r in api.requests)
            assert lists >= 3  # the first, the informer's start, the relist after 410

            # The API server fails every request for a while: retried after a backoff.
            fault = api.inject(Fault(path="/queues", status=503, times=None))
            api.drop_watches()
            await eventually(lambda: fault.hits >= 2, what="failing watches")
            api.clear_faults()
            api.create(SHOAL, "queues", {"metadata": {"name": "team-d"}, "spec": {}})
            await _printed(out, "ADDED queue.shoal.dev/team-d\n", timeout=15)


@async_test(timeout=60)
async def test_watch_a_name_that_is_not_there_is_not_found(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        _cluster(api)
        result = await _shoal(tmp_path, api, "get", "queues", "nope", "--watch")
        assert result.exit_code == EXIT_NOT_FOUND
        assert 'queues "nope" not found' in result.stderr and result.stdout == ""


def test_changes_and_the_printers_columns() -> None:
    changes = Changes()
    a = Row("a", "", {"x": 1})
    b = Row("b", "", {"x": 2})
    assert changes.since([a, b]) == [("ADDED", a), ("ADDED", b)]
    assert changes.since([a, b]) == []
    a2 = Row("a", "", {"x": 3})
    assert changes.since([a2]) == [("MODIFIED", a2), ("DELETED", b)]
    relabelled = Row("a", "", {"x": 3}, labels={"k": "v"})
    assert changes.since([relabelled]) == [("MODIFIED", relabelled)]

    out = io.StringIO()
    printer = Printer(Query(PODGROUP_KIND), "table", show_labels=True, file=out)
    data = {
        "namespace": "ml",
        "name": "ddp",
        "phase": "Pending",
        "scheduled": 0,
        "running": 0,
        "minMember": 2,
        "members": 2,
        "queue": "default",
        "reason": "",
    }
    printer.print([("ADDED", Row("ddp", "ml", data))], None)
    longer = {**data, "name": "a-much-longer-name", "phase": "Running"}
    printer.print([("ADDED", Row("a-much-longer-name", "ml", longer))], None)
    first, second, third = out.getvalue().splitlines()
    assert first.split()[0] == "NAMESPACE" and first.split()[-1] == "LABELS"
    assert second.index("Pending") == first.index("PHASE")
    # A longer cell widens its column from then on; the others keep their place.
    assert third.index("ml") == 0 and third.split()[2] == "Running"


def test_watch_failures_are_said_once_per_burst() -> None:
    now = [0.0]
    quieter = WatchFailures(10.0, clock=lambda: now[0])

    def record(name: str = "shoal.kube.informer") -> logging.LogRecord:
        return logging.LogRecord(name, logging.WARNING, "", 0, "watch %s failed", ("pods",), None)

    first = record()
    assert quieter.filter(first)
    assert first.getMessage().startswith("watch pods failed (retrying;")
    assert not quieter.filter(record())  # the other watches, dropped at the same time
    assert quieter.filter(record("shoal.kube"))  # an invalid object: always said
    now[0] = 11.0
    assert quieter.filter(record())


def _pg_names(data: Any) -> list[str]:
    return [f"{r['namespace']}/{r['name']}" for r in data]


def _with_namespace(path: Path, namespace: str, context: str = "fake") -> Path:
    """The fake server's kubeconfig, its context (and a second one) in `namespace`."""
    config = yaml.safe_load(path.read_text())
    entry = config["contexts"][0]
    config["contexts"] = [
        {"name": context, "context": {**entry["context"], "namespace": namespace}},
        {"name": "plain", "context": entry["context"]},
    ]
    config["current-context"] = context
    path.write_text(yaml.safe_dump(config))
    return path


@async_test(timeout=120)
async def test_the_kubeconfig_contexts_namespace_is_the_default(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        _cluster(api)
        api.create(
            PLUGINS,
            "podgroups",
            {
                "apiVersion": PLUGINS,
                "kind": "PodGroup",
                "metadata": {"name": "ddp", "namespace": "ml"},
                "spec": {"minMember": 2},
            },
        )
        api.create(
            "v1", "pods", pod("ddp-0", cpu="100m", namespace="ml", labels={GROUP_LABEL: "ddp"})
        )
        kubeconfig = _with_namespace(api.kubeconfig(tmp_path / "kubeconfig"), "ml")

        async def run(*args: str) -> Any:
            return await _shoal_with(kubeconfig, *args)

        assert _pg_names(_json(await run("get", "pg", "-o", "json"))) == ["ml/ddp"]
        assert _pg_names(_json(await run("get", "pg", "-n", "default", "-o", "json"))) == [
            "default/g"
        ]
        every = ["default/g", "ml/ddp"]
        assert _pg_names(_json(await run("get", "pg", "-A", "-o", "json"))) == every
        # A context without a namespace: every namespace, as before.
        plain = _json(await run("get", "pg", "--context", "plain", "-o", "json"))
        assert _pg_names(plain) == every
        # NAME in the context's namespace (one object), NAMESPACE/NAME anywhere.
        assert _json(await run("get", "pg", "ddp", "-o", "json"))["namespace"] == "ml"
        assert _json(await run("get", "pg", "default/g", "-o", "json"))["name"] == "g"
        missing = await run("get", "pg", "g")
        assert missing.exit_code == EXIT_NOT_FOUND
        assert "podgroup g is in namespace default: use -n default or -A" in missing.stderr
        empty = await run("get", "pg", "-l", "app=none")
        assert empty.exit_code == 0 and "No resources found in ml namespace." in empty.stderr

        # explain POD: in the context's namespace; NAMESPACE/POD and -n as before.
        ml = await run("explain", "ddp-0", "-o", "json")
        assert ml.exit_code == EXIT_BLOCKED, ml.output
        assert json.loads(ml.stdout)["pod"] == "ml/ddp-0"
        assert (await run("explain", "pod/ddp-0", "-o", "json")).exit_code == EXIT_BLOCKED
        huge = await run("explain", "default/huge", "-o", "json")
        assert huge.exit_code == EXIT_BLOCKED and json.loads(huge.stdout)["pod"] == "default/huge"
        other = await run("explain", "-n", "default", "huge", "-o", "json")
        assert other.exit_code == EXIT_BLOCKED
        bare = await run("explain", "--context", "plain", "huge")
        assert bare.exit_code != 0 and "NAMESPACE/NAME" in bare.stderr


async def _shoal_with(kubeconfig: Path, *args: str) -> Any:
    from typer.testing import CliRunner

    from shoal.cli import app

    runner = CliRunner()
    return await asyncio.to_thread(
        runner.invoke, app, [*args, "--kubeconfig", str(kubeconfig)], catch_exceptions=False
    )


SHOAL_PROCESS = [sys.executable, "-c", "from shoal.cli import app; app()"]


@async_test(timeout=90)
async def test_ctrl_c_ends_a_watching_process_with_exit_0(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        _cluster(api)
        kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
        proc = await asyncio.create_subprocess_exec(
            *SHOAL_PROCESS,
            "get",
            "q",
            "-w",
            "--kubeconfig",
            str(kubeconfig),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        assert proc.stdout is not None and proc.stderr is not None
        try:
            lines: list[str] = []

            async def until(text: str) -> None:
                while not lines or text not in lines[-1]:
                    line = await asyncio.wait_for(proc.stdout.readline(), 30)  # type: ignore[union-attr]
                    assert line, f"stdout closed before {text!r}: {lines}"
                    lines.append(line.decode())

            await until("cluster capacity")  # printed as it goes, not when it ends
            api.create("v1", "pods", pod("b1", cpu="1", labels=TEAM_B, node_name="cpu-1"))
            await until("team-b")
            proc.send_signal(signal.SIGINT)
            code = await asyncio.wait_for(proc.wait(), 15)
            err = (await proc.stderr.read()).decode()
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        assert code == 0, err
        assert "Traceback" not in err and "KeyboardInterrupt" not in err
        assert sum("QUEUE" in line for line in lines) == 1
