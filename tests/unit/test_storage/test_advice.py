"""Filter-size advice reproduces RabbitMQ's published false-positive table."""

from __future__ import annotations

import pytest

from sievemq.storage.advice import (
    estimate_distinct_values,
    false_positive_rate,
    filter_advice,
)


@pytest.mark.parametrize(
    ("size", "values", "published"),
    [(16, 10, 0.02), (16, 30, 0.14), (128, 200, 0.10)],
)
def test_rate_matches_the_stream_filtering_internals_table(
    size: int, values: int, published: float
) -> None:
    assert false_positive_rate(size, values) == pytest.approx(published, abs=0.006)


def test_advice_is_the_smallest_size_meeting_the_target() -> None:
    advice = filter_advice([200] * 50, target_fpr=0.10)
    assert advice.reachable
    assert advice.expected_false_positive_rate <= 0.10
    assert false_positive_rate(advice.size_bytes - 1, 200) > 0.10
    assert 128 < advice.size_bytes <= 136  # 128 B gives about 10.4 %


def test_advice_sizes_for_the_crowded_chunks() -> None:
    quiet_then_busy = [5] * 90 + [300] * 10
    assert (
        filter_advice(quiet_then_busy, 0.01).size_bytes > filter_advice([5] * 100, 0.01).size_bytes
    )


def test_empty_stream_gets_the_minimum_size() -> None:
    advice = filter_advice([], 0.01)
    assert advice.size_bytes == 16
    assert advice.expected_false_positive_rate == 0.0


def test_unreachable_target_says_so() -> None:
    advice = filter_advice([100_000], 0.0001)
    assert not advice.reachable
    assert advice.size_bytes == 4096


def test_bad_target_is_rejected_with_a_reason() -> None:
    with pytest.raises(ValueError, match="target_fpr"):
        filter_advice([10], 1.5)


def _bloom_with(values: list[str], size: int) -> bytes:
    import mmh3

    bits = bytearray(size)
    for value in values:
        for seed in (0, 1):  # any two independent positions do for the estimate
            position = mmh3.hash(value, seed, signed=False) % (8 * size - 1) + 1
            bits[position // 8] |= 0x80 >> (position % 8)
    return bytes(bits)


@pytest.mark.parametrize("count", [1, 10, 50, 200])
def test_distinct_values_are_estimated_from_the_set_bits(count: int) -> None:
    bloom = _bloom_with([f"value-{i}" for i in range(count)], 255)
    assert estimate_distinct_values(bloom) == pytest.approx(count, rel=0.2, abs=1)


def test_unfiltered_marker_bit_is_not_a_value() -> None:
    assert estimate_distinct_values(b"\x80" + bytes(15)) == 0.0
