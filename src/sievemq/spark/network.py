"""The network mode: plan and read streams through the RabbitMQ Stream protocol (``uri``).

Planning (driver) asks the node of the URI, for each stream, Metadata (which node holds it),
then that node StreamStats (first offset, committed end, last chunk) and, with
``consumerName``, QueryOffset: the same ``StreamState`` file mode reads from the index files,
so offsets and their options mean the same (``planning.choose_start``/``end_offset``). The
end is snapshotted once and carried in every task, as in file mode.

Reading (executor): each task opens its own connection to the node Metadata names, subscribes
at its start with the filter values as ``filter.N``/``match-unfiltered`` (the server skips
chunks by their Bloom filter) and ``sievemq-stored-chunks`` (the chunks as stored), and hands
the chunks to ``columnar.ChunkDecoder``, which applies the exact filter and SQL as in file
mode. It stops at the first chunk (or progress marker) at or past its end.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from sievemq.spark.arrow_read import BATCH_ROWS, DataLossError, ReadSettings, decoder
from sievemq.spark.options import OptionError, ReadOptions
from sievemq.spark.planning import NO_LIMIT, StreamRef, StreamState
from sievemq.spark.stream_client import StreamProtocolError, StreamURI, connect
from sievemq.storage import ReadStats
from sievemq.storage.reader import RawChunk

# offsets per partition when maxOffsetsPerPartition is not given (chunk sizes are unknown)
NET_OFFSETS_PER_PARTITION = 1 << 20


@dataclass(frozen=True)
class NetTask:
    """One partition's work over the network: ``[start, until)`` of one stream, with the
    chunk-timestamp bounds in microseconds."""

    uri: str
    vhost: str
    stream: str
    start: int
    until: int
    ts_lo: int = -NO_LIMIT
    ts_hi: int = NO_LIMIT


@dataclass(frozen=True)
class NetStream:
    """What planning learnt of one stream."""

    ref: StreamRef
    state: StreamState
    stored: int | None  # consumerName's stored offset


def _uri(options: ReadOptions) -> StreamURI:
    assert options.uri is not None
    return StreamURI.parse(options.uri)


def net_streams(options: ReadOptions) -> list[NetStream]:
    """Each named stream's state from the node that holds it (an error names a missing one)."""
    uri = _uri(options)
    out = []
    for name in options.streams:
        try:
            with connect(uri, name) as client:
                state = client.stream_stats(name)
                stored = None
                if options.consumer_name is not None and options.starting is None:
                    stored = client.query_offset(options.consumer_name, name)
        except StreamProtocolError as error:
            raise OptionError("stream", f"{name}: {error}") from None
        except OSError as error:
            raise OptionError("uri", f"cannot reach {uri.host}:{uri.port}: {error}") from None
        first, end, last = state
        ref = StreamRef(options.vhost, name, "")
        out.append(NetStream(ref, StreamState(min(first, end), end, min(last, end)), stored))
    return out


def offsets_at(options: ReadOptions, stream: str, ts_lo: int, ts_hi: int) -> tuple[int, int]:
    """Chunk-timestamp bounds (microseconds) as an offset range ``[lo, hi)`` that holds every
    row inside them (ResolveOffsetSpec on the node holding the stream), so tasks never fetch
    the chunks before or after; the rows are still checked against the timestamps."""
    lo, hi = 0, NO_LIMIT
    with connect(_uri(options), stream) as client:
        if ts_lo > -NO_LIMIT:
            lo = client.offset_at(stream, -(-ts_lo // 1000))
        if ts_hi < NO_LIMIT:
            hi = client.offset_at(stream, -(-ts_hi // 1000))
    return lo, hi


def net_tasks(
    options: ReadOptions, spans: list[tuple[StreamRef, int, int]], ts_lo: int, ts_hi: int
) -> list[NetTask]:
    """``[lo, hi)`` of each stream cut into tasks of ``maxOffsetsPerPartition`` offsets (or
    ``NET_OFFSETS_PER_PARTITION``), more where ``minPartitions`` asks for more."""
    assert options.uri is not None
    per = options.max_offsets_per_partition or NET_OFFSETS_PER_PARTITION
    total = sum(hi - lo for _, lo, hi in spans if hi > lo) or 1
    tasks: list[NetTask] = []
    for ref, lo, hi in spans:
        size = hi - lo
        if size <= 0:
            continue
        parts = -(-size // per)
        if options.min_partitions:
            parts = max(parts, round(size / total * options.min_partitions))
        parts = max(1, min(parts, size))
        for k in range(parts):
            a, b = lo + size * k // parts, lo + size * (k + 1) // parts
            tasks.append(NetTask(options.uri, ref.vhost, ref.name, a, b, ts_lo, ts_hi))
    return tasks


def read_net_range(
    task: NetTask,
    settings: ReadSettings,
    schema: Any,
    stats_out: Callable[[ReadStats], None] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Record batches of the matching rows of a task, read from the node holding the stream."""
    if task.start >= task.until:
        return
    properties = {f"filter.{i}": v for i, v in enumerate(settings.filter_values)}
    if settings.filter_values:
        properties["match-unfiltered"] = "true" if settings.match_unfiltered else "false"
    decode = decoder(settings, schema, task.vhost, task.stream)
    stats = ReadStats()
    pending: list[RawChunk] = []
    rows = 0
    checked = bool(settings.filter_values)  # with a filter a gap is a skipped chunk, no loss
    try:
        with connect(StreamURI.parse(task.uri), task.stream) as client:
            client.subscribe(task.stream, task.start, properties)
            while True:
                chunk = client.next_chunk()
                first, end = chunk.first, chunk.first + chunk.records
                if not checked and (chunk.records or first >= task.until):
                    checked = True
                    if first > task.start and settings.fail_on_data_loss:
                        raise DataLossError(
                            f"{task.vhost}/{task.stream}: offsets {task.start}.."
                            f"{min(first, task.until) - 1} were deleted by retention "
                            "(set failOnDataLoss=false to skip them)"
                        )
                if first >= task.until or chunk.timestamp_ms * 1000 >= task.ts_hi:
                    break
                if not chunk.records or end <= task.start:
                    continue  # a progress marker, or before the start
                stats.chunks_scanned += 1
                stats.bytes_read += len(chunk.data)
                if chunk.timestamp_ms * 1000 >= task.ts_lo:
                    start = max(first, task.start)
                    pending.append(
                        RawChunk(first, chunk.records, chunk.timestamp_ms, start, chunk.data)
                    )
                    rows += end - start
                if end >= task.until:
                    break
                if rows >= BATCH_ROWS:
                    batch = decode(pending, task.until)
                    pending, rows = [], 0
                    if batch is not None:
                        yield batch
            if pending:
                batch = decode(pending, task.until)
                if batch is not None:
                    yield batch
    finally:
        stats.records_matched += decode.kept
        stats.records_skipped += decode.rejected
        if stats_out is not None:
            stats_out(stats)
