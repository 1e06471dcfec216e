"""Executor side: read one offset range of a stream and yield Arrow record batches.

The filter semantics are the gateway's, reused, never re-implemented: storage's ``FilterSpec``
(Bloom skip per chunk, then the exact any/all per message, match-unfiltered), the SQL dialect
through ``filtering.view.sql_predicate``, and a registered subscription's chunk bits through
``SubscriptionRegistry.chunk_filter``, all handed to storage's ``StreamReader`` exactly as a
consumer does. The reader is bounded by the range's ``until`` (snapshotted at planning), so it
never reads past what the writer had committed then.

Chunks are decoded whole into Arrow columns (``columnar.ChunkDecoder``) and joined into
batches of about ``BATCH_ROWS`` rows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from sievemq.filtering.sql import compile_filter
from sievemq.filtering.subscriptions import SubscriptionRegistry
from sievemq.filtering.view import sql_predicate
from sievemq.spark.columnar import ChunkDecoder
from sievemq.storage import READ_FIELDS, FilterSpec, ReadStats, StorageError, StreamReader
from sievemq.storage.segment import list_segments

BATCH_ROWS = 8192


def stat_counts(stats: ReadStats) -> tuple[int, ...]:
    """A reader's counters as shipped back to the driver (metrics accumulator), in
    ``READ_FIELDS`` order."""
    return tuple(int(getattr(stats, name)) for name in READ_FIELDS)


@dataclass(frozen=True)
class ReadSettings:
    """What every partition of one read shares (picklable)."""

    columns: tuple[str, ...]
    filter_values: tuple[str, ...] = ()
    match_unfiltered: bool = False
    match_all: bool = False
    sql: str | None = None
    fail_on_data_loss: bool = True

    def spec(self) -> FilterSpec | None:
        """The consumer's x-stream-filter as storage's FilterSpec (None without values)."""
        if not self.filter_values:
            return None
        return FilterSpec(self.filter_values, self.match_unfiltered, self.match_all)


@dataclass(frozen=True)
class RangeTask:
    """One partition's work: ``[start, until)`` of one stream."""

    directory: str
    vhost: str
    stream: str
    start: int
    until: int
    slot: int | None = None  # registered subscription slot of (consumerName, sql)


class DataLossError(StorageError):
    """Offsets a read needed were deleted by retention (failOnDataLoss=true)."""


def decoder(settings: ReadSettings, schema: Any, vhost: str, stream: str) -> ChunkDecoder:
    """The columnar decoder of one partition, with the read's exact filter and SQL (file and
    network mode alike)."""
    return ChunkDecoder(
        schema,
        vhost,
        stream,
        settings.spec(),
        sql_predicate(compile_filter(settings.sql)) if settings.sql else None,
    )


def read_range(
    task: RangeTask,
    settings: ReadSettings,
    schema: Any,
    stats_out: Callable[[ReadStats], None] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Record batches (``schema``: the exact pyarrow schema) of the matching rows of a task."""
    directory = Path(task.directory)
    segments = list_segments(directory)
    start = task.start
    if not segments or segments[0] > start:
        first = segments[0] if segments else task.until
        if settings.fail_on_data_loss:
            raise DataLossError(
                f"{task.vhost}/{task.stream}: offsets {start}..{min(first, task.until) - 1} were "
                "deleted by retention (set failOnDataLoss=false to skip them)"
            )
        start = first
    if start >= task.until:
        return
    until = task.until
    reader = StreamReader(directory, bound=lambda: until)
    decode = decoder(settings, schema, task.vhost, task.stream)
    chunk_filter = SubscriptionRegistry.chunk_filter(task.slot) if task.slot is not None else None
    spec = settings.spec()
    try:
        reader.seek_offset(start)
        while True:
            chunks = reader.read_chunks(BATCH_ROWS, spec, 64, chunk_filter)
            if chunks:
                batch = decode(chunks, until)
                if batch is not None:
                    yield batch
            if reader.at_end or reader.position >= until:
                break
    finally:
        reader.close()
        reader.stats.records_matched += decode.kept
        reader.stats.records_skipped += decode.rejected
        if stats_out is not None:
            stats_out(reader.stats)
