"""`shoal get shards`: which `shoal run` replica holds which node shards.

Read from the Leases node shards keep (`shoal.drivers.kube.shards`) in the leader
election namespace: the shard map `shoal-node-shards` (a holder per slot) and one member
Lease per replica (its identity, schedulerNames, last renewal). The cluster's node
names are listed too, to count the nodes in each replica's shards (`slot_of`).

A replica is `live` when its member Lease's renewTime is within leaseDurationSeconds of
this machine's wall clock, else `expired` (the replicas themselves judge liveness on
their own clocks, from when they saw the Lease change, so a clock skew between this
machine and theirs shifts the answer). Slots held by nobody are one `(free)` row; slots
held by an identity with no member Lease one row each: live replicas take both over.

Imported by `shoal.commands.ctl.get` when the command runs (it needs the `kube` extra).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from rich.markup import escape

from shoal.commands.ctl.output import EXIT_CLUSTER, Output
from shoal.commands.ctl.output import console as _console
from shoal.commands.ctl.output import dump as _dump
from shoal.commands.ctl.output import fail as _fail
from shoal.commands.ctl.output import table as _table
from shoal.commands.ctl.output import table_console as _table_console
from shoal.drivers.kube.client import JSON, ClientSettings, KubeClient, connect
from shoal.drivers.kube.resources import LEASES, NODES
from shoal.drivers.kube.shards import (
    CONFLICTS_ANNOTATION,
    MAP_ANNOTATION,
    MAP_NAME,
    RATE_ANNOTATION,
    ROLE_LABEL,
    ShardTable,
    read_leases,
    slot_of,
)

__all__ = [
    "MemberLease",
    "ShardMapError",
    "ago",
    "member_leases",
    "no_map_message",
    "shard_rows",
    "shard_table",
    "show_shards",
    "slot_ranges",
]

PAGE_SIZE = 500  # nodes per list request, as kubectl pages

# Row states (the JSON's `state`): a replica's, or what holds slots without one.
LIVE, EXPIRED, FREE, NO_MEMBER = "live", "expired", "free", "noMemberLease"


class ShardMapError(ValueError):
    """The shard map's annotation cannot be read."""


@dataclass(frozen=True)
class MemberLease:
    """What a replica's member Lease says."""

    identity: str
    lease: str  # the Lease's name
    scheduler_names: tuple[str, ...]
    leader_lease: str
    renew_text: str | None  # spec.renewTime as written
    renewed: float | None  # ... as a Unix time (None: missing or unreadable)
    duration: int | None  # spec.leaseDurationSeconds
    binds_per_second: float | None = None  # published by the replica each round
    conflicts: int | None = None  # map writes that lost a race + Bindings refused (409)


def _unix_time(text: str) -> float | None:
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def member_leases(leases: Sequence[JSON]) -> tuple[JSON | None, list[MemberLease]]:
    """The shard map Lease (None: there is none) and the member Leases, as the replicas
    read them (`ShardKeeper._read`): by the role label, members by holderIdentity."""
    shard_map, found = read_leases(leases)
    members: list[MemberLease] = []
    for member, lease in found:
        spec = lease.get("spec") or {}
        renew = spec.get("renewTime")
        renew_text = str(renew) if renew else None
        duration = spec.get("leaseDurationSeconds")
        annotations = (lease.get("metadata") or {}).get("annotations") or {}
        members.append(
            MemberLease(
                identity=member.identity,
                lease=str((lease.get("metadata") or {}).get("name", "")),
                scheduler_names=tuple(sorted(member.scheduler_names)),
                leader_lease=member.leader_lease,
                renew_text=renew_text,
                renewed=_unix_time(renew_text) if renew_text else None,
                duration=duration if isinstance(duration, int) else None,
                binds_per_second=_number(annotations.get(RATE_ANNOTATION), float),
                conflicts=_number(annotations.get(CONFLICTS_ANNOTATION), int),
            )
        )
    return shard_map, sorted(members, key=lambda m: m.identity)


T = TypeVar("T", int, float)


def _number(text: object, kind: Callable[[str], T]) -> T | None:
    """An annotation's number (None when it is missing or not one)."""
    try:
        return kind(str(text)) if text is not None else None
    except ValueError:
        return None


def shard_table(shard_map: JSON) -> ShardTable:
    """The map's table; ShardMapError when its annotation is not one."""
    meta = shard_map.get("metadata") or {}
    text = str((meta.get("annotations") or {}).get(MAP_ANNOTATION, ""))
    try:
        return ShardTable.decode(text)
    except (ValueError, KeyError, TypeError) as err:
        raise ShardMapError(
            f"Lease {meta.get('namespace', '')}/{MAP_NAME}: annotation {MAP_ANNOTATION} is "
            f"not a shard map ({err}); the replicas cannot use it either: delete the Lease "
            f"and they start over"
        ) from None


def shard_rows(
    table: ShardTable, members: Sequence[MemberLease], nodes: Sequence[str], now: float
) -> list[dict[str, Any]]:
    """One row (what -o json prints) per member Lease, then one per identity that holds
    slots with no member Lease, then one for the free slots; together they hold every
    slot once, and so every node once."""
    per_slot = [0] * table.slots
    for name in nodes:
        per_slot[slot_of(name, table.slots)] += 1

    def held(identity: str) -> dict[str, Any]:
        slots = table.held_by(identity)
        return {"shards": len(slots), "slots": slots, "nodes": sum(per_slot[s] for s in slots)}

    rows: list[dict[str, Any]] = []
    for m in members:
        ago = None if m.renewed is None else now - m.renewed
        live = ago is not None and m.duration is not None and ago < m.duration
        rows.append(
            {
                "replica": m.identity,
                "state": LIVE if live else EXPIRED,
                **held(m.identity),
                "schedulerNames": list(m.scheduler_names),
                "leaderLease": m.leader_lease,
                "memberLease": m.lease,
                "renewTime": m.renew_text,
                "renewedSecondsAgo": None if ago is None else round(ago, 3),
                "leaseDurationSeconds": m.duration,
                "bindsPerSecond": m.binds_per_second,
                "conflicts": m.conflicts,
            }
        )
    known = {m.identity for m in members}
    orphans = sorted({h for h in table.holders if h and h not in known})
    for identity, state in [*((o, NO_MEMBER) for o in orphans), ("", FREE)]:
        row = held(identity)
        if row["shards"]:
            rows.append(
                {
                    "replica": identity,
                    "state": state,
                    **row,
                    "schedulerNames": [],
                    "leaderLease": "",
                    "memberLease": "",
                    "renewTime": None,
                    "renewedSecondsAgo": None,
                    "leaseDurationSeconds": None,
                    "bindsPerSecond": None,
                    "conflicts": None,
                }
            )
    return rows


async def _read(
    namespace: str, kubeconfig: Path | None, context: str | None
) -> tuple[list[JSON], list[str] | None]:
    """The node-shard Leases of `namespace`, and the node names (None when there is no
    shard map, so nothing to count them for)."""
    connection = await connect(str(kubeconfig) if kubeconfig else None, context=context)
    try:
        client = connection.client("shoal-get", ClientSettings(user_agent="shoal-get"))
        page = await client.request(
            "GET", LEASES.path(namespace), query={"labelSelector": ROLE_LABEL}
        )
        leases = [item for item in page.get("items") or () if isinstance(item, dict)]
        shard_map, _ = member_leases(leases)
        return leases, (await _node_names(client) if shard_map is not None else None)
    finally:
        await connection.close()


async def _node_names(client: KubeClient) -> list[str]:
    names: list[str] = []
    query = {"limit": str(PAGE_SIZE)}
    while True:
        page = await client.list(NODES.path(), query)
        for item in page.items:
            names.append(str((item.get("metadata") or {}).get("name", "")))
        # A node too deep to decode still has a name, and a shard.
        names += [str(u.metadata.get("name", "")) for u in page.undecodable]
        token = page.metadata.get("continue")
        if not token:
            return [n for n in names if n]
        query = {"limit": str(PAGE_SIZE), "continue": str(token)}


# ---- printing ----------------------------------------------------------------------------


def ago(seconds: float) -> str:
    """kubectl's age: 45s, 3m20s, 2h5m, 3d4h; a time ahead of our clock is 0s."""
    s = max(0, math.floor(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60}s" if s < 600 else f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60}m"
    return f"{s // 86400}d{s % 86400 // 3600}h"


def _replica(row: Mapping[str, Any]) -> str:
    if row["state"] == FREE:
        return "(free)"
    if row["state"] == NO_MEMBER:
        return f"{row['replica']} (no member Lease)"
    return str(row["replica"])


def slot_ranges(slots: Sequence[int]) -> str:
    """[0, 1, 2, 5] -> "0-2,5"."""
    runs: list[list[int]] = []
    for slot in sorted(slots):
        if runs and slot == runs[-1][1] + 1:
            runs[-1][1] = slot
        else:
            runs.append([slot, slot])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs) or "-"


Column = tuple[str, Callable[[Mapping[str, Any]], str]]


def _or_dash(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def _columns(wide: bool) -> list[Column]:
    def renewed(r: Mapping[str, Any]) -> str:
        seconds = r["renewedSecondsAgo"]
        return "-" if seconds is None else f"{ago(seconds)} ago"

    def state(r: Mapping[str, Any]) -> str:
        return str(r["state"]) if r["state"] in (LIVE, EXPIRED) else "-"

    columns: list[Column] = [
        ("REPLICA", _replica),
        ("SHARDS", lambda r: str(r["shards"])),
        ("NODES", lambda r: str(r["nodes"])),
        ("SCHEDULER NAMES", lambda r: ",".join(r["schedulerNames"]) or "-"),
        ("RENEWED", renewed),
        ("STATE", state),
    ]
    if wide:

        def duration(r: Mapping[str, Any]) -> str:
            seconds = r["leaseDurationSeconds"]
            return "-" if seconds is None else f"{seconds}s"

        columns += [
            ("SLOTS", lambda r: slot_ranges(r["slots"])),
            ("LEASE DURATION", duration),
            ("LEADER LEASE", lambda r: r["leaderLease"] or "-"),
            ("MEMBER LEASE", lambda r: r["memberLease"] or "-"),
            ("BINDS/S", lambda r: _or_dash(r["bindsPerSecond"])),
            ("CONFLICTS", lambda r: _or_dash(r["conflicts"])),
        ]
    return columns


def _print(
    rows: Sequence[Mapping[str, Any]], table: ShardTable, namespace: str, wide: bool
) -> None:
    console = _table_console(wide)
    nodes = sum(int(r["nodes"]) for r in rows)
    console.print(
        f"{table.slots} node shards in {namespace}/{MAP_NAME}, {nodes} nodes", markup=False
    )
    columns = _columns(wide)
    out = _table(*(title for title, _ in columns))
    for row in rows:
        out.add_row(*(escape(cell(row)) for _, cell in columns))
    console.print(out)
    loan = table.loan
    if loan is not None:
        console.print(
            f"loan: {loan.to} borrows shards {slot_ranges(loan.slots)} from "
            f"{', '.join(loan.lenders) or 'nobody'} for gang {loan.why or '-'} (until it "
            "is placed, or its time limit)",
            markup=False,
        )
    console.print(
        "live: renewTime within leaseDurationSeconds by this machine's clock; live "
        "replicas take over the shards of the others and the free ones",
        markup=False,
    )


def no_map_message(namespace: str, members: int) -> str:
    if members:
        return (
            f"no shard map in namespace {namespace}, but {members} member Lease(s): the "
            f"replicas create it at their next round (every retryPeriod)"
        )
    return (
        f"no shard map: no Shoal replica with node shards has run against this cluster "
        f"(namespace {namespace}; if `shoal run` uses another leader-election namespace, "
        f"give it with -n: with deploy/'s manifests, -n shoal-system; with the Helm chart, "
        f"the release namespace)"
    )


def show_shards(namespace: str, fmt: Output, kubeconfig: Path | None, context: str | None) -> None:
    """`shoal get shards`; exits 1 when the cluster cannot be read or the map is not one."""
    try:
        leases, nodes = asyncio.run(_read(namespace, kubeconfig, context))
    except Exception as err:  # kubeconfig unreadable, connection refused, 401/403/5xx
        raise _fail(EXIT_CLUSTER, f"cannot read the cluster: {type(err).__name__}: {err}") from None
    shard_map, members = member_leases(leases)
    if shard_map is None or nodes is None:
        if fmt in ("json", "yaml"):
            _dump([], fmt)
        # As `No resources found.`: on stderr, exit 0.
        _console(stderr=True).print(
            no_map_message(namespace, len(members)), markup=False, soft_wrap=True
        )
        return
    try:
        table = shard_table(shard_map)
    except ShardMapError as err:
        raise _fail(EXIT_CLUSTER, str(err)) from None
    rows = shard_rows(table, members, nodes, time.time())
    if fmt in ("json", "yaml"):
        _dump(rows, fmt)
    else:
        _print(rows, table, namespace, fmt == "wide")
