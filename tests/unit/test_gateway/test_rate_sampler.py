"""The admin plane's rate sampler: a counter's rate over the window, a length's rate
negative while it shrinks, a reset counter 0, forgotten keys gone."""

from __future__ import annotations

from sievemq.gateway.rates import RateSampler


def test_counter_rate_over_the_window() -> None:
    r = RateSampler(window_s=5.0, min_gap_s=1.0)
    assert r.rate(("k",), 0, 100.0) == 0.0  # one sample: no rate yet
    for t in range(1, 11):
        rate = r.rate(("k",), 50 * t, 100.0 + t)
    assert rate == 50.0
    # a request between two samples still answers the change per second
    assert r.rate(("k",), 50 * 10 + 25, 110.5) == 50.0


def test_length_rate_is_negative_while_it_shrinks_and_counters_never_are() -> None:
    r = RateSampler()
    r.rate(("len",), 100, 0.0, gauge=True)
    assert r.rate(("len",), 60, 2.0, gauge=True) == -20.0
    r.rate(("cnt",), 100, 0.0)
    assert r.rate(("cnt",), 60, 2.0) == 0.0  # a counter that went down was reset


def test_forget_drops_other_keys() -> None:
    r = RateSampler()
    r.rate(("a",), 1, 0.0)
    r.rate(("b",), 1, 0.0)
    r.forget({("a",)})
    assert len(r) == 1
