"""Offer selection (gpuops/offers.py), in process: VRAM first, then price (an interruptible offer's
minimum bid), then reliability; the screen that drops numbers that are not numbers; and the check
of the box the provider delivered against the offer ordered."""

from __future__ import annotations

import math

import pytest

from gpuops.planning.offers import (
    PRICE_SLACK_USD_H,
    VRAM_TOLERANCE,
    card_of_gpu_name,
    check_delivered,
    delivered,
    effective_price,
    fits,
    offer_problem,
    rank,
    screen,
)
from gpuops.providers.base import Instance, InstanceStatus, Offer

GIB = 2**30


def offer(oid="o", price=1.0, vram=24 * GIB, n=1, spot=False, bid=None, rel=1.0, provider="vast", card="rtx-4090"):
    return Offer(
        provider=provider,
        offer_id=oid,
        card=card,
        gpu_count=n,
        vram_bytes=vram,
        usd_per_hour=price,
        spot=spot,
        min_bid=bid,
        reliability=rel,
    )


def ids(offers):
    return [o.offer_id for o in offers]


def test_cheapest_first_then_the_more_reliable_then_provider_and_id():
    pool = [
        offer("c", 0.50),
        offer("a", 0.30, rel=0.9),
        offer("b", 0.30, rel=0.99),
        offer("d", 0.90),
        offer("e", 0.30, rel=0.99, provider="runpod"),
    ]
    assert ids(rank(pool)) == ["e", "b", "a", "c", "d"]  # runpod < vast at equal price and reliability
    assert ids(rank([offer("z", 0.3), offer("y", 0.3)])) == ["y", "z"]


def test_an_interruptible_offer_ranks_and_is_capped_at_its_minimum_bid():
    pool = [offer("od", 0.40), offer("spot", 0.90, spot=True, bid=0.20), offer("nobid", 0.30, spot=True)]
    assert [effective_price(o) for o in pool] == [0.40, 0.20, 0.30]
    assert ids(rank(pool)) == ["spot", "nobid", "od"]
    assert ids(rank(pool, max_usd_per_hour=0.25)) == ["spot"]  # its bid fits, its listed price does not
    assert ids(rank(pool, max_usd_per_hour=0.40)) == ["spot", "nobid", "od"]  # the cap is inclusive


def test_spot_true_prefers_interruptible_and_falls_back_to_on_demand():
    pool = [offer("od", 0.40), offer("spot", 0.90, spot=True, bid=0.50)]
    assert ids(rank(pool, spot=True)) == ["spot"]
    assert ids(rank(pool, spot=False)) == ["od"]
    assert ids(rank(pool, spot=None)) == ["od", "spot"]
    assert ids(rank([offer("od", 0.40)], spot=True)) == ["od"]  # none interruptible: on-demand


def test_vram_must_cover_the_need_within_the_tolerance():
    need = 80 * GIB
    edge = math.ceil(need * (1 - VRAM_TOLERANCE))
    assert VRAM_TOLERANCE == 0.07
    assert fits(offer(vram=edge), need) and not fits(offer(vram=edge - 1), need)
    pool = [
        offer("small", 0.1, vram=40 * GIB),
        offer("big", 2.0, vram=80 * GIB),
        offer("shown", 1.9, vram=int(79.2 * GIB)),
    ]
    assert ids(rank(pool, need_bytes_per_gpu=need)) == ["shown", "big"]  # an 80 GiB card reporting 79.2 GiB fits
    assert ids(rank(pool)) == ["small", "shown", "big"]  # no need given: all fit


def test_gpu_count_keeps_only_that_many():
    pool = [offer("one", 0.3), offer("four", 1.2, n=4), offer("two", 0.6, n=2)]
    assert ids(rank(pool, gpu_count=4)) == ["four"]
    assert ids(rank(pool)) == ["one", "two", "four"]
    kept, notes = screen(pool, gpu_count=2)
    assert ids(kept) == ["two"] and notes == [
        "vast offer one (rtx-4090) dropped: it has 1 GPU(s), 2 asked",
        "vast offer four (rtx-4090) dropped: it has 4 GPU(s), 2 asked",
    ]


@pytest.mark.parametrize(
    "bad,why",
    [
        (dict(price=math.nan), "price nan USD/h is not a finite positive number"),
        (dict(price=-1.0), "price -1.0 USD/h is not a finite positive number"),
        (dict(price=0.0), "price 0.0 USD/h is not a finite positive number"),
        (dict(price=math.inf), "price inf USD/h is not a finite positive number"),
        (dict(price=True), "price True USD/h is not a finite positive number"),
        (dict(vram=0), "VRAM 0 bytes per GPU is not a finite positive number"),
        (dict(vram=math.nan), "VRAM nan bytes per GPU is not a finite positive number"),
        (dict(n=0), "GPU count 0 is not a whole number >= 1"),
        (dict(n=1.5), "GPU count 1.5 is not a whole number >= 1"),
        (dict(spot=True, bid=math.nan), "minimum bid nan USD/h is not a finite positive number"),
        (dict(spot=True, bid=0.0), "minimum bid 0.0 USD/h is not a finite positive number"),
        (dict(rel=1.5), "reliability 1.5 is not in [0, 1]"),
        (dict(rel=-0.1), "reliability -0.1 is not in [0, 1]"),
        (dict(rel="high"), "reliability 'high' is not in [0, 1]"),
    ],
)
def test_a_number_that_is_not_a_number_drops_the_offer_with_a_note(bad, why):
    o = offer("x", **bad)
    assert offer_problem(o) == why
    kept, notes = screen([o, offer("ok", 5.0)])
    assert ids(kept) == ["ok"] and notes == [f"vast offer x (rtx-4090) dropped: {why}"]
    assert ids(rank([o, offer("ok", 5.0)])) == ["ok"]


def test_sound_offers_pass_the_screen():
    for o in (offer(), offer(spot=True, bid=0.1), offer(spot=True), offer(rel=0.0), offer(rel=1.0), offer(n=8)):
        assert offer_problem(o) is None, o
    assert offer_problem(offer(price=0.0, provider="local")) is None  # a workstation may cost nothing
    assert offer_problem(offer(price=-0.5, provider="local")) is not None


def inst(price=0.30, **extra):
    return Instance(id="i-1", label="gpuops-s", status=InstanceStatus.RUNNING, usd_per_hour=price, extra=extra)


def test_the_delivered_box_is_what_was_ordered():
    order = offer(price=0.30)
    assert check_delivered(order, inst(0.30, gpu_name="RTX 4090", num_gpus=1)) is None
    assert check_delivered(order, inst(None)) is None  # nothing reported: nothing to contradict
    assert delivered(order, inst(0.30, gpu="NVIDIA GeForce RTX 4090", gpu_count=1)) == {
        "gpu_name": "NVIDIA GeForce RTX 4090",
        "card": "rtx-4090",
        "gpu_count": 1,
        "usd_per_hour": 0.30,
    }
    assert delivered(order, inst(0.30)) == {"gpu_name": None, "card": None, "gpu_count": None, "usd_per_hour": 0.30}


def test_each_difference_of_the_delivered_box_is_named():
    order = offer(price=0.30)
    assert check_delivered(order, inst(0.30, gpu_name="RTX 3090")) == "card 'RTX 3090' instead of rtx-4090"
    assert check_delivered(order, inst(0.30, num_gpus=2)) == "2 GPU(s) instead of 1"
    assert check_delivered(order, inst(0.30, num_gpus="one")) == "'one' GPU(s) instead of 1"
    assert check_delivered(order, inst(math.nan)) == "price nan USD/h is not a price"
    assert check_delivered(order, inst(-0.1)) == "price -0.1 USD/h is not a price"
    assert check_delivered(order, inst(0.40, gpu_name="RTX 3090", num_gpus=2)) == (
        "card 'RTX 3090' instead of rtx-4090; 2 GPU(s) instead of 1; charged $0.4000/h against the offer's $0.3000/h"
    )


def test_the_charged_price_may_round_up_by_one_percent_and_a_tenth_of_a_cent():
    order = offer(price=1.00)
    ceiling = 1.00 * 1.01 + PRICE_SLACK_USD_H
    assert check_delivered(order, inst(ceiling)) is None
    assert (
        check_delivered(order, inst(ceiling + 1e-6)) == f"charged ${ceiling + 1e-6:.4f}/h against the offer's $1.0000/h"
    )
    assert check_delivered(order, inst(0.0)) is None  # free is not a problem
    spot = offer(price=0.50, spot=True, bid=0.80)  # a bid above the listed price: the bid is the ceiling
    assert check_delivered(spot, inst(0.80)) is None and check_delivered(spot, inst(0.82)) is not None


def test_the_charged_price_must_also_respect_max_price():
    order = offer(price=1.00)
    assert check_delivered(order, inst(0.50), max_usd_per_hour=0.50) is None
    cap = 0.50 * 1.01 + PRICE_SLACK_USD_H
    assert check_delivered(order, inst(cap), max_usd_per_hour=0.50) is None
    assert (
        check_delivered(order, inst(cap + 1e-6), max_usd_per_hour=0.50)
        == "charged $0.5060/h above --max-price $0.5000/h"
    )


def test_card_names_from_either_provider_map_to_catalog_cards():
    assert card_of_gpu_name("RTX 4090").name == "rtx-4090"  # Vast gpu_name
    assert card_of_gpu_name("NVIDIA GeForce RTX 4090").name == "rtx-4090"  # RunPod gpuTypeId
    assert card_of_gpu_name("rtx-4090").name == "rtx-4090"
    assert card_of_gpu_name("RTX 3070") is None and card_of_gpu_name("") is None and card_of_gpu_name("---") is None


def test_provider_spellings_are_normalized_before_matching():
    assert card_of_gpu_name("Tesla T4").name == "t4"  # Vast's name for the T4
    assert (
        card_of_gpu_name("NVIDIA-Tesla-T4").name == "t4"
        and card_of_gpu_name("nvidia geforce rtx4090").name == "rtx-4090"
    )
    assert card_of_gpu_name("T 4").name == "t4"  # punctuation and spaces never matter
    assert (
        card_of_gpu_name("L4").name == "l4" and card_of_gpu_name("RTX 4090 GeForce").name == "rtx-4090"
    )  # letters count, noise anywhere


def test_a_delivered_box_named_as_its_provider_names_the_ordered_card_matches():
    a100 = offer(price=1.10, card="a100-80gb-sxm", vram=80 * GIB)
    assert check_delivered(a100, inst(1.10, gpu_name="A100 SXM4", num_gpus=1)) is None  # Vast's gpu_name for it
    assert check_delivered(a100, inst(1.10, gpu="NVIDIA A100-SXM4-80GB", gpu_count=1)) is None  # RunPod's gpuTypeId
    assert check_delivered(a100, inst(1.10, gpu_name="H100 SXM")) == "card 'H100 SXM' instead of a100-80gb-sxm"
    unknown = offer(price=1.0, card="my-own-card")  # not in the catalog: only its own name matches
    assert check_delivered(unknown, inst(1.0, gpu_name="My Own Card")) is None
    assert check_delivered(unknown, inst(1.0, gpu_name="RTX 4090")) == "card 'RTX 4090' instead of my-own-card"
    assert (
        check_delivered(offer(n=2), inst(0.30, num_gpus="2")) is None
        and check_delivered(offer(n=2), inst(0.30, num_gpus=2.0)) is None
    )


def test_exactly_at_the_tolerance_fits():
    need = 80 * GIB
    assert fits(offer(vram=need * (1.0 - VRAM_TOLERANCE)), need)


def test_noise_words_anywhere_in_the_name():
    assert card_of_gpu_name("T4 Tesla").name == "t4"
