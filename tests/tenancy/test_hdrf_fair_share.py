"""HDRF fair share in resource units, on trees computed by hand."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from shoal.tenancy.fairshare import hdrf_fair_share
from shoal.tenancy.tree import QueueDef, QueueTree

GPU = "nvidia.com/gpu"


def shares(
    defs: list[QueueDef], demand: dict[str, dict[str, int]], capacity: dict[str, int]
) -> dict[str, dict[str, float]]:
    tree = QueueTree(defs)
    wanted = np.zeros((len(tree.names), len(tree.resources)), dtype=np.int64)
    for name, amounts in demand.items():
        wanted[tree.index[name]] = tree.vector(amounts)
    cap = np.array([float(capacity.get(r, 0)) for r in tree.resources])
    out = hdrf_fair_share(tree, wanted, cap)
    return {
        name: {r: float(out[i, k]) for k, r in enumerate(tree.resources) if out[i, k]}
        for name, i in tree.index.items()
        if i
    }


def gpus(result: dict[str, dict[str, float]], name: str) -> float:
    return result[name].get(GPU, 0.0)


def test_equal_weights_split_equally() -> None:
    out = shares(
        [QueueDef("a"), QueueDef("b"), QueueDef("c")],
        {q: {GPU: 30} for q in "abc"},
        {GPU: 30},
    )
    assert [gpus(out, q) for q in "abc"] == pytest.approx([10, 10, 10])


def test_weights_two_to_one() -> None:
    out = shares(
        [QueueDef("a", weight=2), QueueDef("b")], {"a": {GPU: 30}, "b": {GPU: 30}}, {GPU: 30}
    )
    assert [gpus(out, "a"), gpus(out, "b")] == pytest.approx([20, 10])


def test_small_demand_leaves_the_rest_to_the_others() -> None:
    out = shares(
        [QueueDef("a"), QueueDef("b"), QueueDef("c")],
        {"a": {GPU: 2}, "b": {GPU: 30}, "c": {GPU: 30}},
        {GPU: 30},
    )
    assert [gpus(out, q) for q in "abc"] == pytest.approx([2, 14, 14])


def test_queue_without_demand_gets_nothing_even_with_a_guarantee() -> None:
    out = shares(
        [QueueDef("a", guaranteed={GPU: 10}), QueueDef("b")],
        {"b": {GPU: 30}},
        {GPU: 30},
    )
    assert gpus(out, "a") == 0 and gpus(out, "b") == pytest.approx(30)


def test_guarantee_is_a_floor_where_there_is_demand() -> None:
    out = shares(
        [QueueDef("a", guaranteed={GPU: 15}), QueueDef("b"), QueueDef("c")],
        {q: {GPU: 30} for q in "abc"},
        {GPU: 30},
    )
    assert [gpus(out, q) for q in "abc"] == pytest.approx([15, 7.5, 7.5])
    # ...but never above the demand
    out = shares(
        [QueueDef("a", guaranteed={GPU: 15}), QueueDef("b")],
        {"a": {GPU: 4}, "b": {GPU: 30}},
        {GPU: 30},
    )
    assert [gpus(out, "a"), gpus(out, "b")] == pytest.approx([4, 26])


def test_max_caps_and_the_leftover_is_redistributed() -> None:
    out = shares(
        [QueueDef("a", maximum={GPU: 5}), QueueDef("b"), QueueDef("c")],
        {q: {GPU: 30} for q in "abc"},
        {GPU: 30},
    )
    assert [gpus(out, q) for q in "abc"] == pytest.approx([5, 12.5, 12.5])


def test_three_level_tree() -> None:
    # The org/team/user tree of test_fair_share: orgs 2:1 on 30 GPUs.
    defs = [
        QueueDef("org-a", weight=2),
        QueueDef("org-b"),
        QueueDef("team-a1", parent="org-a"),
        QueueDef("team-a2", parent="org-a"),
        QueueDef("team-b1", parent="org-b"),
        QueueDef("u1", parent="team-a1"),
        QueueDef("u2", parent="team-a1"),
        QueueDef("u3", parent="team-a2"),
        QueueDef("u4", parent="team-b1"),
        QueueDef("u5", parent="team-b1"),
    ]
    users = ["u1", "u2", "u3", "u4", "u5"]
    out = shares(defs, {u: {GPU: 80} for u in users}, {GPU: 30})
    assert [gpus(out, u) for u in users] == pytest.approx([5, 5, 10, 5, 5])
    assert [gpus(out, q) for q in ("org-a", "org-b", "team-a1", "team-a2")] == pytest.approx(
        [20, 10, 10, 10]
    )
    # u3 wants only 2: team-a2 is capped by its subtree's demand; team-a1 takes the rest
    # of org-a's share, org-b keeps its own.
    out = shares(defs, {**{u: {GPU: 80} for u in users}, "u3": {GPU: 2}}, {GPU: 30})
    assert [gpus(out, u) for u in users] == pytest.approx([9, 9, 2, 5, 5])


def test_multi_resource_is_drf() -> None:
    # DRF's example: 9 CPUs, 18 GB; a's tasks ask <1 CPU, 4 GB>, b's <3 CPU, 1 GB>.
    # Both end at a dominant share of 2/3: a runs 3 tasks' worth, b 2.
    gb = 2**30
    out = shares(
        [QueueDef("a"), QueueDef("b")],
        {"a": {"cpu": 100_000, "memory": 400 * gb}, "b": {"cpu": 300_000, "memory": 100 * gb}},
        {"cpu": 9000, "memory": 18 * gb},
    )
    assert out["a"]["cpu"] == pytest.approx(3000) and out["a"]["memory"] == pytest.approx(12 * gb)
    assert out["b"]["cpu"] == pytest.approx(6000) and out["b"]["memory"] == pytest.approx(2 * gb)


def test_never_more_than_capacity_or_demand() -> None:
    rng = np.random.default_rng(7)
    for _ in range(200):
        n = int(rng.integers(1, 6))
        defs = [
            QueueDef(
                f"q{i}",
                weight=int(rng.integers(1, 4)),
                guaranteed={GPU: int(rng.integers(0, 4))},
                maximum={GPU: int(rng.integers(4, 20))} if rng.random() < 0.5 else None,
            )
            for i in range(n)
        ]
        demand = {
            f"q{i}": {GPU: int(rng.integers(0, 20)), "cpu": int(rng.integers(0, 9000))}
            for i in range(n)
        }
        out = shares(defs, demand, {GPU: 16, "cpu": 8000})
        total = sum(gpus(out, f"q{i}") for i in range(n))
        assert total <= 16 + 1e-6
        assert sum(out[f"q{i}"].get("cpu", 0.0) for i in range(n)) <= 8000 + 1e-6
        for d in defs:
            got = gpus(out, d.name)
            assert got <= demand[d.name][GPU] + 1e-6
            if d.maximum:
                assert got <= d.maximum[GPU] + 1e-6


def test_fairshare_does_not_import_the_manager() -> None:
    """Fair share is pure functions over the tree and arrays; the manager imports it."""
    import shoal.tenancy.fairshare as fairshare

    source = ast.parse(Path(fairshare.__file__).read_text())
    imported = {
        node.module
        for node in ast.walk(source)
        if isinstance(node, ast.ImportFrom) and node.module is not None
    } | {
        alias.name
        for node in ast.walk(source)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    assert "shoal.tenancy.manager" not in imported
