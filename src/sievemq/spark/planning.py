"""Planning: which streams, which offsets, and chunk-aligned ranges for Spark partitions.

Pure functions over the index files (one 24-byte entry per chunk: first offset, timestamp,
file position), read-only, so planning is safe beside a running server. The end of every
stream is snapshotted once (``disk_end``: the offset after the last valid chunk, i.e. what the
writer has committed) and carried in each range, so an append that lands while Spark reads
never leaks into the result.

A range never splits a chunk and never spans two segments; it holds up to
``maxBytesPerPartition`` bytes of chunks (and ``maxOffsetsPerPartition`` offsets). Offset and
chunk-timestamp bounds (options and pushed-down WHERE) are applied here: chunks outside them
are never read. A record's timestamp is its chunk's, so the timestamp bounds are exact.
``minPartitions`` then splits the largest ranges (Kafka's proportional rule) at chunk
boundaries.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from sievemq.spark.options import OffsetChoice, OptionError, ReadOptions
from sievemq.storage.layout import stream_directory, stream_names
from sievemq.storage.offsets import read_offsets
from sievemq.storage.reader import disk_end
from sievemq.storage.segment import index_name, list_segments, read_all_entries, segment_name
from sievemq.storage.stream import OFFSETS_FILE

NO_LIMIT = 1 << 62


@dataclass(frozen=True)
class StreamRef:
    vhost: str
    name: str
    directory: str


@dataclass(frozen=True)
class ChunkInfo:
    offset: int
    end: int  # offset after the chunk
    timestamp_ms: int
    size: int  # bytes in the segment file
    segment: int


@dataclass(frozen=True)
class OffsetRange:
    """``[start, until)`` of one stream, chunk-aligned except where a bound cuts a chunk."""

    stream: StreamRef
    start: int
    until: int
    size: int  # bytes of the chunks it covers
    chunks: int


@dataclass
class Bounds:
    """Row bounds: offsets ``[lo, hi)``, chunk timestamps in microseconds ``[ts_lo, ts_hi)``."""

    lo: int = 0
    hi: int = NO_LIMIT
    ts_lo: int = -NO_LIMIT
    ts_hi: int = NO_LIMIT

    def narrow(self, other: Bounds) -> Bounds:
        return Bounds(
            max(self.lo, other.lo),
            min(self.hi, other.hi),
            max(self.ts_lo, other.ts_lo),
            min(self.ts_hi, other.ts_hi),
        )


def resolve_streams(options: ReadOptions) -> list[StreamRef]:
    """The streams to read; a named stream that does not exist is an error naming it."""
    if options.stream_pattern is not None:
        pattern = re.compile(options.stream_pattern)
        names = [n for n in stream_names(options.data_dir, options.vhost) if pattern.fullmatch(n)]
    else:
        names = list(options.streams)
    refs = []
    for name in names:
        directory = stream_directory(options.data_dir, options.vhost, name)
        if not directory.is_dir() or not list_segments(directory):
            raise OptionError(
                "stream",
                f"no stream '{name}' in vhost '{options.vhost}' under {options.data_dir}",
            )
        refs.append(StreamRef(options.vhost, name, str(directory)))
    return refs


def stream_chunks(directory: Path, end: int) -> list[ChunkInfo]:
    """Every chunk below ``end`` from the index files, oldest first."""
    segments = list_segments(directory)
    out: list[ChunkInfo] = []
    for i, first in enumerate(segments):
        if first >= end:
            break
        try:
            fd = os.open(directory / index_name(first), os.O_RDONLY)
        except FileNotFoundError:  # retention removed it since the listing
            continue
        try:
            entries = [e for e in read_all_entries(fd) if e.offset < end]
        finally:
            os.close(fd)
        try:
            seg_size = os.stat(directory / segment_name(first)).st_size
        except FileNotFoundError:
            continue
        next_first = segments[i + 1] if i + 1 < len(segments) else end
        for j, e in enumerate(entries):
            if j + 1 < len(entries):
                nxt = entries[j + 1]
                chunk_end, size = nxt.offset, nxt.position - e.position
            else:
                chunk_end, size = min(next_first, end), seg_size - e.position
            out.append(ChunkInfo(e.offset, chunk_end, e.timestamp_ms, max(size, 0), first))
    return out


@dataclass(frozen=True)
class StreamState:
    first: int  # first offset on disk
    end: int  # committed end (next offset to be written)
    last: int  # first offset of the last chunk (= end when empty)


def stream_state(ref: StreamRef) -> StreamState:
    directory = Path(ref.directory)
    end = disk_end(directory)
    segments = list_segments(directory)
    first = segments[0] if segments else 0
    last = end
    if segments:
        for seg in reversed(segments):
            try:
                fd = os.open(directory / index_name(seg), os.O_RDONLY)
            except FileNotFoundError:
                continue
            try:
                entries = [e for e in read_all_entries(fd) if e.offset < end]
            finally:
                os.close(fd)
            if entries:
                last = entries[-1].offset
                break
    return StreamState(min(first, end), end, last)


def _pick(kind: str, value: int, state: StreamState) -> int:
    if kind in ("earliest", "first"):
        return state.first
    if kind in ("latest", "next"):
        return state.end
    if kind == "last":
        return state.last
    return min(max(value, state.first), state.end)  # clamped like a consumer's offset


def start_offset(
    options: ReadOptions, ref: StreamRef, state: StreamState, *, streaming: bool
) -> int:
    """Where a read of this stream starts (consumerName, then startingOffsets, then default)."""
    stored = None
    if options.consumer_name is not None and options.starting is None:
        stored = read_offsets(Path(ref.directory) / OFFSETS_FILE).get(options.consumer_name)
    return choose_start(options, ref, state, stored, streaming=streaming)


def choose_start(
    options: ReadOptions, ref: StreamRef, state: StreamState, stored: int | None, *, streaming: bool
) -> int:
    """``start_offset`` given the consumer's stored offset (from the files or QueryOffset)."""
    if options.consumer_name is not None and options.starting is None and stored is not None:
        return _pick("offset", stored + 1, state)
    default = "latest" if streaming else "earliest"
    choice = options.starting or OffsetChoice(default)
    kind, value = choice.for_stream(ref.vhost, ref.name)
    if kind == "default":
        kind = default
    return _pick(kind, value, state)


def end_offset(options: ReadOptions, ref: StreamRef, state: StreamState) -> int:
    kind, value = options.ending.for_stream(ref.vhost, ref.name)
    if kind == "default":
        kind = "latest"
    return _pick(kind, value, state)


def timestamp_bounds(options: ReadOptions) -> Bounds:
    b = Bounds()
    if options.starting_timestamp_ms is not None:
        b.ts_lo = options.starting_timestamp_ms * 1000
    if options.ending_timestamp_ms is not None:
        b.ts_hi = options.ending_timestamp_ms * 1000
    return b


def plan_ranges(
    ref: StreamRef,
    chunks: list[ChunkInfo],
    bounds: Bounds,
    max_bytes: int,
    max_offsets: int | None,
) -> list[tuple[OffsetRange, list[ChunkInfo]]]:
    """Chunk-aligned ranges (with their chunks) holding the rows inside ``bounds``."""
    out: list[tuple[OffsetRange, list[ChunkInfo]]] = []
    group: list[ChunkInfo] = []
    size = 0

    def close() -> None:
        nonlocal group, size
        if group:
            start = max(bounds.lo, group[0].offset)
            until = min(bounds.hi, group[-1].end)
            out.append((OffsetRange(ref, start, until, size, len(group)), group))
        group, size = [], 0

    for c in chunks:
        inside = (
            c.end > bounds.lo
            and c.offset < bounds.hi
            and bounds.ts_lo <= c.timestamp_ms * 1000 < bounds.ts_hi
        )
        if not inside:
            close()
            continue
        if group and (
            c.segment != group[0].segment
            or size + c.size > max_bytes
            or (max_offsets is not None and c.end - group[0].offset > max_offsets)
        ):
            close()
        group.append(c)
        size += c.size
    close()
    return out


def split_for_min_partitions(
    planned: list[tuple[OffsetRange, list[ChunkInfo]]], min_partitions: int | None
) -> list[OffsetRange]:
    """Kafka's rule: with fewer ranges than minPartitions, split each range into
    ``round(size / total * minPartitions)`` parts (at least 1), here at chunk boundaries."""
    if not min_partitions or len(planned) >= min_partitions:
        return [r for r, _ in planned]
    total = sum(r.until - r.start for r, _ in planned) or 1
    out: list[OffsetRange] = []
    for r, chunks in planned:
        parts = max(1, min(len(chunks), round((r.until - r.start) / total * min_partitions)))
        if parts == 1:
            out.append(r)
            continue
        per = len(chunks) / parts
        for k in range(parts):
            group = chunks[round(k * per) : round((k + 1) * per)]
            if not group:
                continue
            out.append(
                OffsetRange(
                    r.stream,
                    max(r.start, group[0].offset),
                    min(r.until, group[-1].end),
                    sum(c.size for c in group),
                    len(group),
                )
            )
    return out
