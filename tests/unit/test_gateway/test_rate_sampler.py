"""The admin plane's rate sampler: a counter's rate over the window, a length's rate
negative while it shrinks, a reset counter 0, a flat stretch kept as two samples,
forgotten objects gone."""

from __future__ import annotations

from sievemq.gateway.rates import RateSampler

NAMES = ("published", "messages")


def test_counter_rate_over_the_window() -> None:
    r = RateSampler(window_s=5.0, min_gap_s=1.0)
    assert r.rates(("q",), NAMES, (0, 0), 100.0, 1) == {"published": 0.0, "messages": 0.0}
    for t in range(1, 11):
        rates = r.rates(("q",), NAMES, (50 * t, 20 * t), 100.0 + t, 1)
    assert rates == {"published": 50.0, "messages": 20.0}
    # a request between two samples still answers the change per second
    assert r.rates(("q",), NAMES, (525, 210), 110.5, 1) == {"published": 50.0, "messages": 20.0}


def test_length_rate_is_negative_while_it_shrinks_and_counters_never_are() -> None:
    r = RateSampler()
    r.rates(("q",), NAMES, (100, 100), 0.0, 1)
    assert r.rates(("q",), NAMES, (60, 60), 2.0, 1) == {"published": 0.0, "messages": -20.0}


def test_a_flat_stretch_then_a_burst_is_rated_over_the_window_only() -> None:
    r = RateSampler(window_s=5.0, min_gap_s=1.0)
    for t in range(0, 600, 5):  # ten idle minutes, sampled every 5 s
        assert r.rates(("q",), NAMES, (7, 7), float(t), 1)["published"] == 0.0
    # then 100 a second for 3 s: over the 5 s window that is 60 a second, not 300 spread
    # over ten minutes
    assert r.rates(("q",), NAMES, (307, 7), 598.0, 1)["published"] == 60.0
    assert r.rates(("q",), NAMES, (507, 7), 600.0, 1)["published"] == 100.0


def test_forget_drops_other_objects() -> None:
    r = RateSampler()
    r.rates(("a",), NAMES, (1, 1), 0.0, 1)
    r.rates(("b",), NAMES, (1, 1), 0.0, 1)
    r.forget({("a",)})
    assert len(r) == 1
