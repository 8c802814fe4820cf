"""The fragmentation measure (FGD's definition and the fill term), hand-computed."""

from __future__ import annotations

from collections import Counter

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.gpu.fragmentation import (
    FragmentationModel,
    NodeStates,
    TargetShape,
    TargetWorkload,
    after_states,
)

SHARE = TargetShape(4000, 300, 1)  # 4 cpu, 0.3 GPU
WHOLE = TargetShape(8000, 1000, 1)  # 8 cpu, 1 GPU
CPU_ONLY = TargetShape(2000, 0, 0)
T4_ONLY = TargetShape(1000, 500, 1, ("T4",))


def states(
    free: list[list[int]], cpu: list[int], model: list[int], mem: list[int] | None = None
) -> NodeStates:
    return NodeStates(
        np.array(free, dtype=np.int64),
        np.array(cpu, dtype=np.int64),
        np.array(mem or [1 << 40] * len(cpu), dtype=np.int64),
        np.array(model, dtype=np.int64),
    )


def test_fgd_definition_by_hand() -> None:
    workload = TargetWorkload((SHARE, WHOLE, CPU_ONLY, T4_ONLY), (2, 1, 1, 1))
    model = FragmentationModel(workload, ["V100", "T4"], "fgd")
    s = states(
        [[500, 1000, 0], [200, 1000, 1000], [1000, 1000, 0]],
        [56000, 6000, 64000],
        [0, 0, 1],  # V100, V100, T4
    )
    # Node 0 (V100, free 500+1000): SHARE fits, fragment = devices < 300 = 0; WHOLE fits,
    # fragment = 500; CPU_ONLY: all 1500; T4_ONLY: wrong model, all 1500.
    # Node 1 (6 cpu): SHARE fits (200 is a fragment); WHOLE lacks cpu (all 2200);
    # CPU_ONLY all; T4_ONLY wrong model.
    # Node 2 (T4, 2000 free): SHARE 0, WHOLE 0, CPU_ONLY 2000, T4_ONLY 0.
    expected = [
        2 * 0 + 500 + 1500 + 1500,
        2 * 200 + 2200 + 2200 + 2200,
        2 * 0 + 0 + 2000 + 0,
    ]
    assert list(model.frag_weighted(s)) == expected
    assert np.allclose(model.frag(s), np.array(expected) / 5)


def test_fill_term_by_hand() -> None:
    workload = TargetWorkload((SHARE, WHOLE), (1, 1))
    model = FragmentationModel(workload, ["V100"], "fill")
    s = states([[1000, 530]], [20000], [0])
    # SHARE: copies = min(3 + 1 per device, 20000 // 4000 = 5) = 4 -> 1200 usable of 1530.
    # WHOLE: copies = min(1, 20000 // 8000 = 2) = 1 -> 1000 usable.
    assert list(model.frag_weighted(s)) == [(1530 - 1200) + (1530 - 1000)]
    # Memory limits copies too when shapes carry it.
    with_mem = TargetWorkload((TargetShape(4000, 300, 1, (), 8 << 30),), (1,))
    limited = FragmentationModel(with_mem, ["V100"], "fill")
    s = states([[1000, 530]], [20000], [0], mem=[17 << 30])
    assert list(limited.frag_weighted(s)) == [1530 - 2 * 300]


def test_blend_weights_both_terms() -> None:
    workload = TargetWorkload((SHARE, WHOLE), (1, 1))
    s = states([[1000, 530]], [20000], [0])
    fgd = FragmentationModel(workload, ["V100"], "fgd").frag_weighted(s)
    fill = FragmentationModel(workload, ["V100"], "fill").frag_weighted(s)
    blend = FragmentationModel(workload, ["V100"], "blend", (6, 1))
    assert list(blend.frag_weighted(s)) == list(6 * fgd + fill)
    assert blend.total_weight == 7 * 2


def test_after_states_share_tries_each_distinct_device() -> None:
    free = np.array([[500, 1000, 1000, 0]], dtype=np.int64)
    pos, dev, after = after_states(free, 300, 1, per_device=True)
    assert list(pos) == [0, 0] and list(dev) == [0, 1]
    assert after.tolist() == [[200, 1000, 1000, 0], [500, 700, 1000, 0]]
    # Whole GPUs: the lowest-index free devices, like the artifact's NodeResource.Sub.
    pos, dev, after = after_states(free, 1000, 2, per_device=False)
    assert after.tolist() == [[500, 0, 0, 0]]


def test_target_workload_coverage_and_ties() -> None:
    counts = Counter({SHARE: 50, WHOLE: 30, CPU_ONLY: 15, T4_ONLY: 5})
    workload = TargetWorkload.from_counts(counts, coverage=0.9)
    assert workload.shapes == (SHARE, WHOLE, CPU_ONLY) and workload.weights == (50, 30, 15)
    # Equal counts: the larger shape (cpu, then milli) comes first, as in the artifact.
    tie = TargetWorkload.from_counts(Counter({SHARE: 5, WHOLE: 5}), coverage=0.5)
    assert tie.shapes == (WHOLE,)


def _reference_frag_weighted(model: FragmentationModel, s: NodeStates) -> list[int]:
    """The measure straight from its definition, every device against every demand."""
    free = s.free
    allowed = model.allowed.T[s.model]
    ge = free[:, None, :] >= model.demands[None, :, None]
    usable = np.where(ge, free[:, None, :], 0).sum(axis=2)[:, model.demand_of]
    fits = (ge.sum(axis=2)[:, model.demand_of] >= model.count) & allowed
    fits &= s.cpu_left[:, None] >= model.cpu
    fgd = np.where(fits, usable, 0) @ model.weight
    per_device = (free[:, None, :] // model.demands[None, :, None]).sum(axis=2)
    copies = per_device[:, model.demand_of] // np.maximum(model.count, 1)
    copies = np.minimum(copies, s.cpu_left[:, None] // np.maximum(model.cpu, 1))
    by_memory = s.mem_left[:, None] // np.maximum(model.memory, 1)
    copies = np.minimum(copies, np.where(model.memory > 0, by_memory, copies))
    copies = np.where(allowed, np.maximum(copies, 0), 0)
    fill = (copies * model.count * model.milli) @ model.weight
    satisfied = model.mix[0] * fgd + model.mix[1] * fill
    return list(free.sum(axis=1) * model.total_weight - satisfied)


@settings(max_examples=200, deadline=None)
@given(
    shapes=st.lists(
        st.tuples(
            st.integers(0, 16000),
            st.sampled_from([0, 50, 100, 250, 300, 333, 500, 999, 1000]),
            st.integers(0, 8),
            st.sampled_from([(), ("T4",), ("V100",), ("T4", "V100")]),
            st.sampled_from([0, 1 << 30, 8 << 30]),
        ),
        min_size=1,
        max_size=12,
    ),
    weights=st.lists(st.integers(1, 50), min_size=12, max_size=12),
    nodes=st.sampled_from([1, 2, 5, 40, 63, 64, 100, 127, 128, 300]),
    width=st.integers(1, 8),
    mix=st.sampled_from([(1, 0), (0, 1), (3, 1)]),
    seed=st.integers(0, 1000),
    extreme=st.booleans(),
)
def test_frag_weighted_matches_the_definition(
    shapes: list[tuple[int, int, int, tuple[str, ...], int]],
    weights: list[int],
    nodes: int,
    width: int,
    mix: tuple[int, int],
    seed: int,
    extreme: bool,
) -> None:
    """Small batches and large ones (the shapes' table, the counted and tabled paths,
    integer and float64 floor division) agree with the definition, every device compared
    with every demand; cpu and memory left include exact multiples of the shapes' (where
    a float quotient could round the wrong way), negatives and values past 2^53."""
    workload = TargetWorkload(
        tuple(TargetShape(c, m, k, models, mem) for c, m, k, models, mem in shapes),
        tuple(weights[: len(shapes)]),
    )
    model = FragmentationModel(workload, ["T4", "V100"], "blend", mix)
    rng = np.random.default_rng(seed)
    s = NodeStates(
        rng.choice([0, 0, 1, 50, 100, 250, 300, 700, 999, 1000], size=(nodes, width)),
        np.where(
            rng.random(nodes) < 0.5,
            rng.integers(-2000, 64000, nodes),
            rng.integers(0, 64, nodes) * 1000,
        ),
        np.choose(
            rng.choice(4, p=[0.45, 0.45, 0.05, 0.05] if extreme else [0.5, 0.5, 0, 0], size=nodes),
            [
                rng.integers(0, 64 << 30, nodes),
                rng.integers(0, 64, nodes) << 30,
                rng.integers(-(1 << 30), 0, nodes),
                rng.integers(1 << 53, 1 << 60, nodes),
            ],
        ),
        rng.integers(-1, 2, nodes),
    )
    assert list(model.frag_weighted(s)) == _reference_frag_weighted(model, s)
