"""The filter counters, defined once: a reader's, a consumer's, a stream's sum over its
consumers, the admin API's views and the Prometheus metrics all use these two types.

``ReadStats`` holds what a ``StreamReader`` counts (Spark ships exactly these back to the
driver); ``FilterStats`` adds what only a consumer knows (messages and bytes delivered, SQL
evaluation errors). Field lists are derived from the types (``READ_FIELDS``, ``FILTER_FIELDS``),
never written out again.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Final


@dataclass
class ReadStats:
    """What a reader did: tests use it to prove chunks were skipped without a body read."""

    chunks_scanned: int = 0  # chunk headers looked at
    chunks_skipped: int = 0  # ruled out by the Bloom filter, body not read
    chunks_false_positive: int = 0  # body read, but no record matched the FilterSpec
    chunks_skipped_subscription: int = 0  # ruled out by a registered subscription's bits
    records_matched: int = 0
    records_skipped: int = 0  # decoded but rejected by the FilterSpec or the predicate
    records_skipped_by_bloom: int = 0  # in chunks the Bloom filter ruled out (never decoded)
    bytes_read: int = 0
    # what a reader without a filter would have read for the same chunks (header, Bloom
    # filter and data of each chunk at or after the position): bytes_read's baseline
    bytes_unfiltered: int = 0

    def as_dict(self) -> dict[str, int]:
        """The counters by field name (JSON-ready)."""
        return dict(vars(self))


@dataclass
class FilterStats(ReadStats):
    """A reader's counters plus what its consumer delivered: of one consumer, or summed over
    the consumers of a stream."""

    messages_delivered: int = 0
    bytes_delivered: int = 0  # body bytes
    sql_errors: int = 0  # x-stream-filter-sql evaluation errors

    def add(self, other: FilterStats) -> None:
        """Add ``other``'s counters to these (a sum over streams or consumers)."""
        mine = vars(self)
        for name, value in vars(other).items():
            mine[name] += value


READ_FIELDS: Final = tuple(f.name for f in fields(ReadStats))
FILTER_FIELDS: Final = tuple(f.name for f in fields(FilterStats))

__all__ = ["FILTER_FIELDS", "READ_FIELDS", "FilterStats", "ReadStats"]
