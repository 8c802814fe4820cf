"""`shoal get shards` against the fake API server: the replicas' member Leases and the
shard map (`shoal.drivers.kube.shards`) as a table, -o wide and -o json; live and
expired replicas, free slots and holders with no member Lease; no shard map."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from kubehelpers import async_test, node
from test_ctl import _json, _shoal

from shoal.commands.ctl import EXIT_CLUSTER, EXIT_USAGE
from shoal.commands.ctl.shards import ago, slot_ranges
from shoal.drivers.kube.shards import (
    CONFLICTS_ANNOTATION,
    LEADER_ANNOTATION,
    MAP_ANNOTATION,
    MAP_NAME,
    NAMES_ANNOTATION,
    RATE_ANNOTATION,
    ROLE_LABEL,
    Loan,
    ShardTable,
    slot_of,
)
from shoal.drivers.kube.status import micro_time
from shoal.testing.fake_apiserver import FakeApiServer

LEASES = "coordination.k8s.io/v1"
SLOTS = 8
NODES = [f"node-{i}" for i in range(12)]
# a: slots 0-2; b: 3-4; ghost (no member Lease): 5; free: 6-7; c holds nothing.
HOLDERS = ["a", "a", "a", "b", "b", "ghost", "", ""]


def member_lease_name(identity: str) -> str:
    """The member Lease each test replica holds (replicas take the fixed names in turn)."""
    return f"shoal-member-{['a', 'b', 'c', 'slow', 'late'].index(identity)}"


def _nodes_in(slots: list[int]) -> int:
    return sum(1 for n in NODES if slot_of(n, SLOTS) in slots)


def _member(
    api: FakeApiServer,
    identity: str,
    names: str,
    renewed_ago: float,
    namespace: str = "kube-system",
    duration: int = 15,
) -> None:
    api.create(
        LEASES,
        "leases",
        {
            "metadata": {
                "name": member_lease_name(identity),
                "namespace": namespace,
                "labels": {ROLE_LABEL: "member"},
                "annotations": {
                    NAMES_ANNOTATION: names,
                    LEADER_ANNOTATION: f"{namespace}/shoal" if identity == "a" else "",
                    **(
                        {RATE_ANNOTATION: "212.5", CONFLICTS_ANNOTATION: "3"}
                        if identity == "a"
                        else {}
                    ),
                },
            },
            "spec": {
                "holderIdentity": identity,
                "leaseDurationSeconds": duration,
                "renewTime": micro_time(time.time() - renewed_ago),
            },
        },
    )


def _map(
    api: FakeApiServer, holders: list[str], namespace: str = "kube-system", loan: Loan | None = None
) -> None:
    api.create(
        LEASES,
        "leases",
        {
            "metadata": {
                "name": MAP_NAME,
                "namespace": namespace,
                "labels": {ROLE_LABEL: "map"},
                "annotations": {MAP_ANNOTATION: ShardTable(len(holders), holders, loan).encode()},
            },
            "spec": {"holderIdentity": "", "renewTime": micro_time()},
        },
    )


def _replicas(api: FakeApiServer, namespace: str = "kube-system") -> None:
    """Nodes node-0..11; replicas a (live, shoal,gpu), b (renewed an hour ago: expired)
    and c (live, no shards); the map as HOLDERS; an unrelated Lease beside them."""
    for name in NODES:
        api.create("v1", "nodes", node(name))
    _member(api, "a", "gpu,shoal", 1, namespace)
    _member(api, "b", "shoal", 3700, namespace)
    _member(api, "c", "shoal", 2, namespace)
    _map(api, HOLDERS, namespace)
    api.create(
        LEASES,
        "leases",
        {
            "metadata": {"name": "shoal", "namespace": namespace},
            "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15},
        },
    )


def _row(table: str, first: str) -> list[str]:
    """The cells of the table row whose first cell is `first` (split on 2+ spaces)."""
    for line in table.splitlines():
        cells = [c.strip() for c in line.split("  ") if c.strip()]
        if cells and cells[0] == first:
            return cells
    raise AssertionError(f"no row {first!r} in:\n{table}")


@async_test(timeout=60)
async def test_get_shards_shows_each_replica_and_the_slots_without_one(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        _replicas(api)
        result = await _shoal(tmp_path, api, "get", "shards")
        assert result.exit_code == 0, result.output
        out = result.stdout
        assert out.splitlines()[0] == f"8 node shards in kube-system/{MAP_NAME}, 12 nodes"
        assert out.splitlines()[1].split() == [
            "REPLICA",
            "SHARDS",
            "NODES",
            "SCHEDULER",
            "NAMES",
            "RENEWED",
            "STATE",
        ]
        a, b, c = _row(out, "a"), _row(out, "b"), _row(out, "c")
        assert a[:4] + a[5:] == ["a", "3", str(_nodes_in([0, 1, 2])), "gpu,shoal", "live"]
        assert b == ["b", "2", str(_nodes_in([3, 4])), "shoal", "1h1m ago", "expired"]
        assert c[:4] + c[5:] == ["c", "0", "0", "shoal", "live"]
        # Renewed 1s and 2s before the command ran (a slow machine may add a second).
        assert re.fullmatch(r"[1-5]s ago", a[4]) and re.fullmatch(r"[2-6]s ago", c[4]), (a, c)
        ghost = _row(out, "ghost (no member Lease)")
        assert ghost == ["ghost (no member Lease)", "1", str(_nodes_in([5])), "-", "-", "-"]
        assert _row(out, "(free)") == ["(free)", "2", str(_nodes_in([6, 7])), "-", "-", "-"]
        assert "live: renewTime within leaseDurationSeconds" in out
        assert result.stderr == ""

        wide = await _shoal(tmp_path, api, "get", "shards", "-o", "wide")
        assert wide.exit_code == 0, wide.output
        a = _row(wide.stdout, "a")
        assert a[6:] == ["0-2", "15s", "kube-system/shoal", member_lease_name("a"), "212.5", "3"]
        assert _row(wide.stdout, "(free)")[6:] == ["6-7", "-", "-", "-", "-", "-"]
        assert _row(wide.stdout, "b")[-2:] == ["-", "-"]  # an older replica publishes none

        # The alias, and the options before the resource, as kubectl takes them (the
        # RENEWED ages may have moved on by a second between the two commands).
        def aged(text: str) -> list[str]:
            return [re.sub(r"\d+s ago", "Ns ago", line) for line in text.splitlines()[1:]]

        assert aged((await _shoal(tmp_path, api, "get", "shard")).stdout) == aged(out)
        before = await _shoal(tmp_path, api, "get", "-n", "kube-system", "shards")
        assert before.exit_code == 0 and _row(before.stdout, "b")[-1] == "expired"


@async_test(timeout=60)
async def test_get_shards_names_a_standing_loan(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        for name in NODES:
            api.create("v1", "nodes", node(name))
        _member(api, "a", "shoal", 1)
        _member(api, "c", "shoal", 1)
        _map(api, ["a"] * 4 + ["", "c", "a", "a"], loan=Loan("a", (4, 5), ("c",), "a/1", "ns/g"))
        result = await _shoal(tmp_path, api, "get", "shards")
        assert result.exit_code == 0, result.output
        assert "loan: a borrows shards 4-5 from c for gang ns/g" in result.stdout


@async_test(timeout=60)
async def test_get_shards_json_is_a_list_of_the_rows(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        _replicas(api)
        rows: list[dict[str, Any]] = _json(
            await _shoal(tmp_path, api, "get", "shards", "-o", "json")
        )
        assert [(r["replica"], r["state"]) for r in rows] == [
            ("a", "live"),
            ("b", "expired"),
            ("c", "live"),
            ("ghost", "noMemberLease"),
            ("", "free"),
        ]
        by = {r["state"] if r["state"] == "free" else r["replica"]: r for r in rows}
        assert by["a"]["slots"] == [0, 1, 2] and by["a"]["shards"] == 3
        assert by["a"]["nodes"] == _nodes_in([0, 1, 2])
        assert by["a"]["schedulerNames"] == ["gpu", "shoal"]
        assert by["a"]["leaderLease"] == "kube-system/shoal"
        assert by["a"]["memberLease"] == member_lease_name("a")
        assert by["a"]["leaseDurationSeconds"] == 15
        assert 0 <= by["a"]["renewedSecondsAgo"] < 15
        assert by["b"]["renewedSecondsAgo"] >= 3700 and by["b"]["renewTime"].endswith("Z")
        assert by["ghost"]["slots"] == [5] and by["ghost"]["memberLease"] == ""
        assert by["free"]["slots"] == [6, 7] and by["free"]["renewTime"] is None
        # The rows hold every slot once, so every node once.
        assert sorted(s for r in rows for s in r["slots"]) == list(range(SLOTS))
        assert sum(r["nodes"] for r in rows) == len(NODES)

        as_yaml = await _shoal(tmp_path, api, "get", "shards", "-o", "yaml")
        assert as_yaml.exit_code == 0 and "replica: ghost" in as_yaml.stdout


@async_test(timeout=60)
async def test_a_replica_expires_after_its_lease_duration(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        api.create("v1", "nodes", node("only"))
        _member(api, "slow", "shoal", 20, duration=30)  # renewed 20s ago, 30s lease: live
        _member(api, "late", "shoal", 20, duration=10)  # 20s ago, 10s lease: expired
        _map(api, ["slow", "late"])
        rows = _json(await _shoal(tmp_path, api, "get", "shards", "-o", "json"))
        assert {r["replica"]: r["state"] for r in rows} == {"slow": "live", "late": "expired"}
        assert sum(r["nodes"] for r in rows) == 1
        assert [r["nodes"] for r in rows if r["slots"] == [slot_of("only", 2)]] == [1]


@async_test(timeout=60)
async def test_the_namespace_option_and_no_shard_map(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        _replicas(api, namespace="shoal-system")
        empty = await _shoal(tmp_path, api, "get", "shards")
        assert empty.exit_code == 0 and empty.stdout == ""
        assert (
            "no shard map: no Shoal replica with node shards has run against this cluster "
            "(namespace kube-system" in empty.stderr
        )
        assert "-n" in empty.stderr
        assert _json(await _shoal(tmp_path, api, "get", "shards", "-o", "json")) == []

        there = await _shoal(tmp_path, api, "get", "shards", "-n", "shoal-system")
        assert there.exit_code == 0, there.output
        assert there.stdout.startswith(f"8 node shards in shoal-system/{MAP_NAME}, 12 nodes")
        rows = _json(
            await _shoal(tmp_path, api, "get", "shards", "--namespace=shoal-system", "-ojson")
        )
        assert [r["replica"] for r in rows] == ["a", "b", "c", "ghost", ""]

        # Member Leases but no map (it was just deleted): the replicas recreate it.
        api.delete("coordination.k8s.io", "leases", "shoal-system", MAP_NAME)
        gone = await _shoal(tmp_path, api, "get", "shards", "-n", "shoal-system")
        assert gone.exit_code == 0 and gone.stdout == ""
        assert "no shard map in namespace shoal-system, but 3 member Lease(s)" in gone.stderr


@async_test(timeout=60)
async def test_bad_output_and_a_broken_map(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        _replicas(api)
        name = await _shoal(tmp_path, api, "get", "shards", "-o", "name")
        assert name.exit_code == EXIT_USAGE and "table, wide, json or yaml" in name.stderr
        extra = await _shoal(tmp_path, api, "get", "shards", "a")
        assert extra.exit_code == EXIT_USAGE
        unknown = await _shoal(tmp_path, api, "get", "widgets")
        assert unknown.exit_code == EXIT_USAGE and "shards (shard)" in unknown.stderr

        broken = api.get("coordination.k8s.io", "leases", "kube-system", MAP_NAME)
        assert broken is not None
        broken["metadata"]["annotations"][MAP_ANNOTATION] = json.dumps(
            {"slots": 3, "holders": ["a"]}
        )
        api.update("coordination.k8s.io", "leases", broken)
        bad = await _shoal(tmp_path, api, "get", "shards")
        assert bad.exit_code == EXIT_CLUSTER
        assert "is not a shard map (3 slots but 1 holders)" in bad.stderr


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (-3, "0s"),
        (0.9, "0s"),
        (59, "59s"),
        (200, "3m20s"),
        (900, "15m"),
        (7500, "2h5m"),
        (3 * 86400 + 4 * 3600, "3d4h"),
    ],
)
def test_ago(seconds: float, text: str) -> None:
    assert ago(seconds) == text


def test_slot_ranges() -> None:
    assert slot_ranges([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    assert slot_ranges([]) == "-"
