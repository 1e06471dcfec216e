"""Bloom filter: bit layout, limits, and RabbitMQ's published false-positive rates."""

from __future__ import annotations

import random
import string

import pytest

from sievemq.storage import BloomFilter, FilterSpec


def test_added_values_are_always_found() -> None:
    bloom = BloomFilter(16)
    for v in ("emea", "amer", "apac", "invoices"):
        bloom.add(v)
    assert all(bloom.might_contain(v) for v in ("emea", "amer", "apac", "invoices"))


def test_bit_zero_means_unfiltered_and_only_empty_value_sets_it() -> None:
    bloom = BloomFilter(16)
    for i in range(200):
        bloom.add(f"value-{i}")
    assert bloom.to_bytes()[0] & 0x80 == 0
    assert not bloom.might_contain("")
    bloom.add("")
    assert bloom.to_bytes()[0] & 0x80
    assert bloom.might_contain("")


def test_round_trip_through_bytes() -> None:
    bloom = BloomFilter(32)
    bloom.add("emea")
    copy = BloomFilter.from_bytes(bloom.to_bytes())
    assert copy.size_bytes == 32
    assert copy.to_bytes() == bloom.to_bytes()
    assert copy.might_contain("emea")


@pytest.mark.parametrize("size", [0, 15, 4097])
def test_sizes_outside_16_to_4096_are_rejected(size: int) -> None:
    with pytest.raises(ValueError):
        BloomFilter(size)


def test_largest_size_works() -> None:
    bloom = BloomFilter(4096)
    bloom.add("x")
    assert bloom.might_contain("x")
    assert sum(bin(b).count("1") for b in bloom.to_bytes()) in (1, 2)


def _random_value(rng: random.Random) -> str:
    return "".join(rng.choices(string.ascii_letters, k=12))


@pytest.mark.parametrize(
    ("values", "size", "published"),
    [(10, 16, 0.02), (30, 16, 0.14), (200, 128, 0.10)],
)
def test_false_positive_rate_matches_the_stream_filtering_internals_post(
    values: int, size: int, published: float
) -> None:
    """'Stream Filtering Internals': 10 in 16 B ≈ 2 %, 30 in 16 B ≈ 14 %, 200 in 128 B ≈ 10 %."""
    rng = random.Random(values * 1000 + size)
    hits = probes = 0
    for _ in range(300):
        bloom = BloomFilter(size)
        members = {_random_value(rng) for _ in range(values)}
        for v in members:
            bloom.add(v)
        for _ in range(100):
            probe = _random_value(rng)
            if probe in members:
                continue
            probes += 1
            hits += bloom.might_contain(probe)
    rate = hits / probes
    assert published * 0.7 <= rate <= published * 1.3, rate


def test_filter_spec_checks_against_the_bloom_filter() -> None:
    bloom = BloomFilter(16)
    bloom.add("emea")
    assert FilterSpec(("emea",)).chunk_may_match(bloom)
    assert not FilterSpec(("amer",)).chunk_may_match(bloom)
    assert not FilterSpec(("amer",), match_unfiltered=True).chunk_may_match(bloom)
    bloom.add("")
    assert FilterSpec(("amer",), match_unfiltered=True).chunk_may_match(bloom)
    assert not FilterSpec(("emea", "amer"), match_all=True).chunk_may_match(bloom)
    # a chunk without a Bloom filter holds only unfiltered messages
    assert not FilterSpec(("emea",)).chunk_may_match(None)
    assert FilterSpec(("emea",), match_unfiltered=True).chunk_may_match(None)


def test_filter_spec_exact_match() -> None:
    assert FilterSpec(("a", "b")).matches(("b",))
    assert FilterSpec(("a", "b")).matches(("c", "a"))
    assert not FilterSpec(("a", "b")).matches(("c",))
    assert not FilterSpec(("a",)).matches(())
    assert FilterSpec(("a",), match_unfiltered=True).matches(())
    assert FilterSpec(("a", "b"), match_all=True).matches(("b", "a", "c"))
    assert not FilterSpec(("a", "b"), match_all=True).matches(("a",))
