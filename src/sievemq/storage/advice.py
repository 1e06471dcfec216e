"""Bloom filter sizing advice: which filter size gives a target false-positive rate.

A chunk's Bloom filter has m = 8 * size bits and two hash positions per value, so with n
distinct values in a chunk a value that is not there still matches with probability
(1 - e^(-2n/m))^2. The advice sizes the filter for a high percentile of the observed
distinct values per chunk, because a few crowded chunks are what make consumers read
chunks they do not need.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sievemq.storage.segment import (
    index_name,
    list_segments,
    read_all_entries,
    read_header,
    segment_name,
)

MIN_FILTER_BYTES = 16
MAX_FILTER_BYTES = 4096
HASH_POSITIONS = 2


def false_positive_rate(size_bytes: int, distinct_values: float) -> float:
    """Expected chance that a value absent from a chunk passes its Bloom filter."""
    if distinct_values <= 0:
        return 0.0
    bits = 8 * size_bytes
    return float((1.0 - math.exp(-HASH_POSITIONS * distinct_values / bits)) ** HASH_POSITIONS)


def estimate_distinct_values(bloom: bytes) -> float:
    """Distinct values a chunk held, estimated from how many of its Bloom bits are set.

    With X of m bits set by k positions per value, n is about -(m / k) * ln(1 - X / m)
    (Swamidass and Baldi), so advice needs no extra bookkeeping in the chunk. Bit 0 marks
    unfiltered messages, not a value, and is not counted.
    """
    bits = 8 * len(bloom)
    if bits == 0:
        return 0.0
    set_bits = int.from_bytes(bloom, "big").bit_count() - (bloom[0] >> 7)
    if set_bits >= bits - 1:
        return float("inf")
    return -(bits / HASH_POSITIONS) * math.log(1.0 - set_bits / bits)


@dataclass(frozen=True)
class FilterAdvice:
    """A recommended `x-stream-filter-size-bytes` and what it is expected to give."""

    size_bytes: int
    expected_false_positive_rate: float
    distinct_values_per_chunk: float
    target_false_positive_rate: float
    reachable: bool  # False when even the largest filter misses the target
    chunks_sampled: int = 0


def _percentile(values: Sequence[int], fraction: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))
    return float(ordered[index])


def filter_advice(
    distinct_values_per_chunk: Sequence[int],
    target_fpr: float = 0.01,
    percentile: float = 0.95,
) -> FilterAdvice:
    """The smallest filter size in 16..4096 bytes meeting `target_fpr` at the percentile."""
    if not 0.0 < target_fpr < 1.0:
        raise ValueError(f"target_fpr must be between 0 and 1, got {target_fpr}")
    if not 0.0 < percentile <= 1.0:
        raise ValueError(f"percentile must be in (0, 1], got {percentile}")
    n = _percentile(distinct_values_per_chunk, percentile) if distinct_values_per_chunk else 0.0
    sampled = len(distinct_values_per_chunk)
    low, high = MIN_FILTER_BYTES, MAX_FILTER_BYTES
    if false_positive_rate(high, n) > target_fpr:
        return FilterAdvice(
            high,
            false_positive_rate(high, n),
            n,
            target_fpr,
            reachable=False,
            chunks_sampled=sampled,
        )
    while low < high:  # the rate falls as the size grows: binary search the smallest size
        middle = (low + high) // 2
        if false_positive_rate(middle, n) <= target_fpr:
            high = middle
        else:
            low = middle + 1
    return FilterAdvice(
        low, false_positive_rate(low, n), n, target_fpr, reachable=True, chunks_sampled=sampled
    )


def recent_blooms(
    directory: Path, max_chunks: int = 1000, end_offset: int | None = None
) -> list[bytes]:
    """The Bloom bytes of the newest ``max_chunks`` chunks below ``end_offset``, oldest first.

    b"" stands for a chunk without filter values. Reads only the index and each chunk's
    header, never a body, so advice costs a few KiB of reads whatever the stream's size.
    """
    out: list[bytes] = []
    for first in reversed(list_segments(directory)):
        if len(out) >= max_chunks:
            break
        try:
            idx_fd = os.open(directory / index_name(first), os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            entries = read_all_entries(idx_fd)
        finally:
            os.close(idx_fd)
        if end_offset is not None:
            entries = [e for e in entries if e.offset < end_offset]
        entries = entries[-(max_chunks - len(out)) :]
        try:
            seg_fd = os.open(directory / segment_name(first), os.O_RDONLY)
        except FileNotFoundError:
            continue  # retention removed it meanwhile
        try:
            blooms = [got[1] for e in entries if (got := read_header(seg_fd, e.position))]
        finally:
            os.close(seg_fd)
        out[:0] = blooms
    return out


def stream_filter_advice(
    directory: Path,
    target_fpr: float = 0.01,
    max_chunks: int = 1000,
    end_offset: int | None = None,
) -> FilterAdvice:
    """Advice from the distinct values per chunk estimated from the newest chunks' Bloom bits."""
    counts: list[int] = []
    for bloom in recent_blooms(directory, max_chunks, end_offset):
        n = estimate_distinct_values(bloom) if bloom else 0.0
        if not math.isfinite(n):
            # saturated: at least as many values as the fullest countable filter holds
            half = 4 * len(bloom)
            n = half * math.log(half)
        counts.append(round(n))
    return filter_advice(counts, target_fpr)
