"""Retention: which whole segments to delete, by total size and by age (osiris rules)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple


class SegmentSummary(NamedTuple):
    first_offset: int
    size: int
    last_timestamp_ms: int | None


def segments_to_delete(
    segments: Sequence[SegmentSummary],
    max_bytes: int | None,
    max_age_ms: int | None,
    now_ms: int,
) -> int:
    """How many of the oldest segments to delete; the newest is always kept.

    max_bytes: walking newest to oldest, keep while the running total fits; the first one
    that does not fit goes, with everything older. max_age_ms: walking oldest to newest,
    delete segments whose last chunk is older than now - age; stop at the first young one.
    """
    n = len(segments)
    drop = 0
    if max_bytes is not None and n > 1:
        total = segments[-1].size
        keep = 1
        for seg in reversed(segments[:-1]):
            if total + seg.size > max_bytes:
                break
            total += seg.size
            keep += 1
        drop = n - keep
    if max_age_ms is not None:
        limit = now_ms - max_age_ms
        while drop < n - 1:
            ts = segments[drop].last_timestamp_ms
            if ts is None or ts >= limit:
                break
            drop += 1
    return drop
