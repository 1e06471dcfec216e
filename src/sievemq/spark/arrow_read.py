"""Executor side: read one offset range of a stream and yield Arrow record batches.

The filter semantics are the gateway's, reused, never re-implemented: storage's ``FilterSpec``
(Bloom skip per chunk, then the exact any/all per message, match-unfiltered), the SQL dialect
through ``filtering.view.sql_predicate``, and a registered subscription's chunk bits through
``SubscriptionRegistry.chunk_filter``, all handed to storage's ``StreamReader`` exactly as a
consumer does. The reader is bounded by the range's ``until`` (snapshotted at planning), so it
never reads past what the writer had committed then.

Properties and headers are decoded only when their columns are asked for, once per distinct
property bytes (publishers usually repeat them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from sievemq.filtering.properties import BASIC_PROPERTY_NAMES, plain_properties
from sievemq.filtering.sql import compile_filter
from sievemq.filtering.subscriptions import SubscriptionRegistry
from sievemq.filtering.view import sql_predicate
from sievemq.storage import FilterSpec, ReadStats, Record, StorageError, StreamReader
from sievemq.storage.segment import list_segments

BATCH_ROWS = 8192
_CACHE_MAX = 4096

# ReadStats fields shipped back to the driver (metrics accumulator), in this order
STAT_FIELDS: tuple[str, ...] = (
    "chunks_scanned",
    "chunks_skipped",
    "chunks_false_positive",
    "chunks_skipped_extra",
    "records_matched",
    "records_skipped",
    "records_skipped_by_bloom",
    "bytes_read",
)


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
    predicate = sql_predicate(compile_filter(settings.sql)) if settings.sql else None
    chunk_filter = SubscriptionRegistry.chunk_filter(task.slot) if task.slot is not None else None
    spec = settings.spec()
    build = _BatchBuilder(schema, task.vhost, task.stream)
    try:
        reader.seek_offset(start)
        while True:
            records = reader.read(BATCH_ROWS, spec, predicate, 64, chunk_filter)
            if records and records[-1].offset >= until:
                records = [r for r in records if r.offset < until]
            if records:
                yield build(records)
            if reader.at_end or reader.position >= until:
                break
    finally:
        reader.close()
        if stats_out is not None:
            stats_out(reader.stats)


class _BatchBuilder:
    """Records -> one RecordBatch in the requested column order."""

    def __init__(self, schema: Any, vhost: str, stream: str) -> None:
        self.schema = schema
        self.names: list[str] = list(schema.names)
        self.vhost = vhost
        self.stream = stream
        self.want_props = "properties" in self.names or "headers" in self.names
        self._cache: dict[bytes, tuple[tuple[object, ...], list[tuple[str, str | None]]]] = {}

    def _decoded(self, raw: bytes) -> tuple[tuple[object, ...], list[tuple[str, str | None]]]:
        got = self._cache.get(raw)
        if got is None:
            try:
                basic, headers = plain_properties(raw)
            except Exception as error:  # FrameError: stored bytes that are no property list
                raise StorageError(f"cannot decode stored message properties: {error}") from None
            got = (tuple(basic[n] for n in BASIC_PROPERTY_NAMES), headers)
            if len(self._cache) >= _CACHE_MAX:
                self._cache.clear()
            self._cache[raw] = got
        return got

    def __call__(self, records: list[Record]) -> pa.RecordBatch:
        n = len(records)
        # properties/headers: decoded once per distinct bytes, then gathered with take()
        take: Any = None
        distinct: list[tuple[tuple[object, ...], list[tuple[str, str | None]]]] = []
        if self.want_props:
            slots: dict[bytes, int] = {}
            index = [slots.setdefault(r.properties, len(slots)) for r in records]
            distinct = [self._decoded(raw) for raw in slots]
            take = pa.array(index, pa.int32())
        arrays = []
        for name in self.names:
            ftype = self.schema.field(name).type
            if name == "offset":
                arr = pa.array([r.offset for r in records], pa.int64())
            elif name == "timestamp":
                arr = pa.array([r.timestamp_ms * 1000 for r in records], pa.int64()).cast(ftype)
            elif name == "filter_values":
                arr = pa.array([r.filter_values for r in records], ftype)
            elif name == "filter_value":
                arr = pa.array(
                    [r.filter_values[0] if r.filter_values else None for r in records], ftype
                )
            elif name == "exchange":
                arr = pa.array([r.exchange for r in records], ftype)
            elif name == "routing_key":
                arr = pa.array([r.routing_key for r in records], ftype)
            elif name == "body":
                arr = pa.array([r.body for r in records], ftype)
            elif name == "stream":
                arr = pa.array([self.stream] * n, ftype)
            elif name == "vhost":
                arr = pa.array([self.vhost] * n, ftype)
            elif name == "headers":
                arr = pa.array([d[1] for d in distinct], ftype).take(take)
            else:  # properties
                children = [
                    pa.array([d[0][i] for d in distinct], ftype.field(i).type)
                    for i in range(len(BASIC_PROPERTY_NAMES))
                ]
                arr = pa.StructArray.from_arrays(children, fields=list(ftype)).take(take)
            arrays.append(arr)
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)
