"""Share prices (`shoal.gpu.share_prices`): LP duals of the shares seen and the loss
of placing a share on a device, computed by hand; and FragGuard using them."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.gpu.share_prices import SharePrices
from shoal.plugins.gpu_frag_guard import GpuFragGuard, GpuFragGuardArgs
from shoal.testing.plugin_env import make_handle, run_score

from .helpers import gpu_node, gpu_pod


def prices_of(mix: dict[int, float]) -> SharePrices:
    prices = SharePrices()
    prices.update(mix)
    return prices


def loss(prices: SharePrices, free: int, milli: int) -> float:
    return float(prices.loss(np.array([free]), milli)[0])


def test_pairs_and_triples_price_at_a_half_and_a_third() -> None:
    # 100 x 470 pack two per device, 60 x 320 three: 50 + 20 devices, and no mix of the
    # two does better (470 + 320 leaves 210). Prices: 1/2 and 1/3.
    prices = prices_of({470: 100, 320: 60})
    assert prices.prices == pytest.approx({470: 0.5, 320: 1 / 3})
    # K(680) = two 320s = 2/3; K(530) = one 470 = 1/2; K(360) = 1/3; K(210) = 0.
    assert prices.worth(np.array([680, 530, 360, 210, 1000])) == pytest.approx(
        [2 / 3, 1 / 2, 1 / 3, 0, 1]
    )
    # A 320 beside a 470 (530 free): 1/2 - 1/3 - 0 = 1/6 of a device lost; beside a
    # 320 (680 free) or on a fresh device: nothing.
    assert loss(prices, 530, 320) == pytest.approx(1000 / 6)
    assert loss(prices, 680, 320) == pytest.approx(0)
    assert loss(prices, 1000, 320) == pytest.approx(0)
    # A 470 beside a 320: 2/3 - 1/2 - 0 = 1/6; beside a 470: nothing.
    assert loss(prices, 680, 470) == pytest.approx(1000 / 6)
    assert loss(prices, 530, 470) == pytest.approx(0)


def test_the_price_of_a_small_share_follows_how_many_compete_for_the_room() -> None:
    # Few 160s for many 810s: some 810s go alone, so an 810 costs a whole device and the
    # 160 nothing; it loses nothing in the 190 an 810 leaves.
    few = prices_of({810: 100, 160: 10})
    assert few.prices == pytest.approx({810: 1.0, 160: 0.0})
    assert loss(few, 190, 160) == pytest.approx(0)
    # Many 160s: 810 + 160 and six 160s per device; 160 costs 1/6, 810 5/6, and an 810
    # on a fresh device loses nothing (its 190 will take a 160).
    many = prices_of({810: 10, 160: 100})
    assert many.prices == pytest.approx({810: 5 / 6, 160: 1 / 6})
    assert loss(many, 1000, 810) == pytest.approx(0)
    # A 160 on a fresh device spoils nothing either; in the room of one 810 beside a
    # 160 (840 free) it does: 5/6 - 1/6 - K(680) = 5/6 - 1/6 - 4/6 = 0. Ties are fine.
    assert loss(many, 840, 160) == pytest.approx(0)


def test_a_size_not_in_the_mix_is_priced_by_what_it_displaces() -> None:
    prices = prices_of({470: 100, 320: 60})
    # 400 is not in the mix: priced K(400) = 1/3, so on a fresh device it loses
    # 1 - 1/3 - K(600) = 1 - 1/3 - 1/2 = 1/6.
    assert prices.price(400) == pytest.approx(1 / 3)
    assert loss(prices, 1000, 400) == pytest.approx(1000 / 6)


def test_no_shares_seen_is_no_prices() -> None:
    prices = prices_of({})
    assert not prices.fitted
    assert prices_of({1000: 5}).fitted is False


def test_a_refit_on_a_new_mix_keeps_working() -> None:
    prices = prices_of({470: 100, 320: 60})
    prices.update({470: 100, 320: 60, 810: 50, 650: 30})
    # 650 + 320 and 810 alone: 650 is worth 2/3, 810 a device.
    assert prices.prices[810] == pytest.approx(1.0)
    assert prices.prices[650] + prices.prices[320] == pytest.approx(1.0)
    prices.update({250: 8})
    assert prices.prices == pytest.approx({250: 0.25})


def test_frag_guard_puts_a_share_where_it_completes_a_pattern() -> None:
    # Two 1-GPU nodes: on a, a 470 share; on b, a 320 share. Seen: 470s and 320s (as
    # above). A 320 arriving: FGD's term alone rates both about the same; with prices,
    # beside the 470 it loses 1/6 of a device (167 milli off the gain), beside the 320
    # nothing.
    def scores(weight: float) -> dict[str, int] | None:
        handle = make_handle(
            nodes=[gpu_node("a", 1, cpu="64"), gpu_node("b", 1, cpu="64")],
            pods=[
                gpu_pod("p470", milli=470, node="a", devices="0"),
                gpu_pod("p320", milli=320, node="b", devices="0"),
            ],
        )
        args = GpuFragGuardArgs.model_validate(
            {
                "targetWorkload": [
                    {"cpuMilli": 4000, "gpuMilli": 470, "gpuCount": 1, "weight": 100},
                    {"cpuMilli": 4000, "gpuMilli": 320, "gpuCount": 1, "weight": 60},
                ],
                "sharePrices": weight,
            }
        )
        plugin = GpuFragGuard.new(args, handle)
        return run_score(plugin, gpu_pod("new", milli=320), handle)

    plain, priced = scores(0.0), scores(1.0)
    assert plain is not None and priced is not None
    assert plain["a"] == plain["b"]
    assert priced["b"] == plain["b"]
    assert priced["a"] < priced["b"]


@settings(max_examples=40, deadline=None)
@given(
    st.dictionaries(
        st.integers(min_value=1, max_value=99).map(lambda x: x * 10),
        st.integers(min_value=1, max_value=60),
        min_size=1,
        max_size=8,
    )
)
def test_prices_are_an_optimal_dual(mix: dict[int, int]) -> None:
    prices = prices_of({s: float(c) for s, c in mix.items()})
    # Dual feasible: no multiset of sizes fitting a device is worth more than one device.
    assert prices.worth(np.array([1000]))[0] <= 1 + 1e-6
    # The LP optimum lies between the volume bound and any real packing (first-fit
    # decreasing gives one).
    items = sorted((s for s, c in mix.items() for _ in range(c)), reverse=True)
    gaps: list[int] = []
    for size in items:
        for i, gap in enumerate(gaps):
            if gap >= size:
                gaps[i] -= size
                break
        else:
            gaps.append(1000 - size)
    assert sum(items) / 1000 - 1e-6 <= prices.bins <= len(gaps) + 1e-6
    # No placement gains worth: L(h, s) >= 0 wherever s fits.
    free = np.arange(1001)
    for size in mix:
        fits = free[free >= size]
        assert (prices.loss(fits, size) >= 0).all()
        raw = prices.worth(fits) - prices.price(size) - prices.worth(fits - size)
        assert (raw >= -1e-6).all()
