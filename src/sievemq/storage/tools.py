"""`sievemq storage verify|dump`: check and list the chunks of a stream directory.

Both walk every segment chunk by chunk (not through the index), so they also see what the
index does not: junk after the last chunk, unindexed chunks, torn tails.
"""

from __future__ import annotations

import contextlib
import os
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple, TextIO

from sievemq.storage.chunk import (
    FILE_HEADER_SIZE,
    FLAG_ZSTD,
    HEADER_SIZE,
    INDEX_ENTRY_SIZE,
    INDEX_MAGIC,
    SEGMENT_MAGIC,
    ChunkHeader,
    check_record_table,
    decode_records,
    raw_data,
)
from sievemq.storage.segment import (
    IndexEntry,
    index_name,
    list_indexes,
    list_segments,
    read_all_entries,
    read_header,
    segment_name,
)


class _Chunk(NamedTuple):
    position: int
    header: ChunkHeader
    problem: str | None  # None when the data CRC matches


def _walk(fd: int, size: int) -> Iterator[_Chunk | str]:
    """Chunks of a segment in file order; a str describes where the walk had to stop."""
    pos = FILE_HEADER_SIZE
    while pos < size:
        got = read_header(fd, pos)
        if got is None:
            yield f"position {pos}: unreadable chunk header ({size - pos} bytes left)"
            return
        header = got[0]
        if pos + header.total_size > size:
            yield (
                f"position {pos}: chunk at offset {header.first_offset} is cut short "
                f"({size - pos} of {header.total_size} bytes)"
            )
            return
        data = os.pread(fd, header.data_length, pos + HEADER_SIZE + header.meta_size)
        if zlib.crc32(data) != header.data_crc:
            problem: str | None = "data CRC mismatch"
        else:
            problem = check_record_table(raw_data(header, data), header.record_count)
        yield _Chunk(pos, header, problem)
        pos += header.total_size


def _ts(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds")


def verify(path: str | os.PathLike[str], out: TextIO) -> int:
    """Check every chunk's CRCs, offsets and index entry; 0 when sound, 1 when corrupt."""
    directory = Path(path)
    if not directory.is_dir():
        print(f"{directory}: not a directory", file=out)
        return 1
    problems: list[str] = []
    segments = list_segments(directory)
    for first in sorted(set(list_indexes(directory)) - set(segments)):
        problems.append(f"{index_name(first)}: index without a segment")
    if not segments:
        problems.append("no segment files")
    expected: int | None = None
    chunks = records = 0
    for first in segments:
        name = segment_name(first)
        seg_path = directory / name
        idx_path = directory / index_name(first)
        seg_fd = os.open(seg_path, os.O_RDONLY)
        try:
            size = os.fstat(seg_fd).st_size
            if os.pread(seg_fd, FILE_HEADER_SIZE, 0) != SEGMENT_MAGIC:
                problems.append(f"{name}: bad segment file header")
                continue
            entries: list[IndexEntry] = []
            if not idx_path.exists():
                problems.append(f"{name}: index file missing")
            else:
                idx_fd = os.open(idx_path, os.O_RDONLY)
                try:
                    if os.pread(idx_fd, FILE_HEADER_SIZE, 0) != INDEX_MAGIC:
                        problems.append(f"{idx_path.name}: bad index file header")
                    elif (os.fstat(idx_fd).st_size - FILE_HEADER_SIZE) % INDEX_ENTRY_SIZE:
                        problems.append(f"{idx_path.name}: torn last index entry")
                    entries = read_all_entries(idx_fd)
                finally:
                    os.close(idx_fd)
            if expected is not None and first != expected:
                problems.append(f"{name}: starts at offset {first}, expected {expected}")
            expected = first
            i = 0
            for item in _walk(seg_fd, size):
                if isinstance(item, str):
                    problems.append(f"{name}: {item}")
                    break
                h = item.header
                where = f"{name}: chunk at offset {h.first_offset} (position {item.position})"
                if item.problem:
                    problems.append(f"{where}: {item.problem}")
                if h.first_offset != expected:
                    problems.append(f"{where}: expected offset {expected}")
                if i < len(entries):
                    e = entries[i]
                    if (e.offset, e.timestamp_ms, e.position) != (
                        h.first_offset,
                        h.timestamp_ms,
                        item.position,
                    ):
                        problems.append(f"{where}: index entry {i} says {tuple(e)}")
                elif entries or idx_path.exists():
                    problems.append(f"{where}: no index entry")
                i += 1
                chunks += 1
                records += h.record_count
                expected = h.first_offset + h.record_count
            if i < len(entries):
                problems.append(
                    f"{idx_path.name}: {len(entries) - i} index entries point past the last chunk"
                )
        finally:
            os.close(seg_fd)
    for p in problems:
        print(f"CORRUPT {p}", file=out)
    if problems:
        print(f"{directory}: {len(problems)} problem(s)", file=out)
        return 1
    print(
        f"{directory}: OK, {len(segments)} segment(s), {chunks} chunk(s), {records} record(s)",
        file=out,
    )
    return 0


def dump(path: str | os.PathLike[str], out: TextIO, records: bool = False) -> int:
    """List every chunk (and with ``records`` every record); 1 if a chunk is unreadable."""
    directory = Path(path)
    if not directory.is_dir():
        print(f"{directory}: not a directory", file=out)
        return 1
    status = 0
    for first in list_segments(directory):
        name = segment_name(first)
        print(f"segment {name}", file=out)
        fd = os.open(directory / name, os.O_RDONLY)
        try:
            for item in _walk(fd, os.fstat(fd).st_size):
                if isinstance(item, str):
                    print(f"  ! {item}", file=out)
                    status = 1
                    break
                h = item.header
                size = h.total_size
                compression = "zstd" if h.flags & FLAG_ZSTD else "none"
                print(
                    f"  chunk offset={h.first_offset} count={h.record_count} "
                    f"timestamp={h.timestamp_ms} ({_ts(h.timestamp_ms)}) size={size} "
                    f"bloom={h.bloom_size} compression={compression} position={item.position}"
                    + (f" extra={h.extra_size}" if h.extra_size else "")
                    + (f" ! {item.problem}" if item.problem else ""),
                    file=out,
                )
                if item.problem:
                    status = 1
                    continue
                if records:
                    data = os.pread(fd, h.data_length, item.position + HEADER_SIZE + h.meta_size)
                    recs, _ = decode_records(
                        raw_data(h, data), h.record_count, h.first_offset, h.timestamp_ms, 0, None
                    )
                    for r in recs:
                        values = ",".join(r.filter_values) or "-"
                        print(
                            f"    record offset={r.offset} filter={values} "
                            f"routing_key={r.routing_key!r} body={len(r.body)}B",
                            file=out,
                        )
        finally:
            os.close(fd)
    return status


class StreamSummary(NamedTuple):
    """What `sievemq streams` shows for one stream, read from its index files only."""

    messages: int
    bytes: int
    segments: int
    chunks: int
    first_offset: int | None
    last_offset: int | None
    last_timestamp_ms: int | None


def summarize(directory: str | os.PathLike[str]) -> StreamSummary:
    """Counts of a stream directory without opening it for writing.

    Unlike `Stream.open`, this never repairs anything, so it is safe beside a running server;
    a chunk the index does not know yet (written a moment ago) is not counted.
    """
    path = Path(directory)
    segments = list_segments(path)
    size = 0
    for s in segments:
        with contextlib.suppress(FileNotFoundError):  # retention may delete it meanwhile
            size += (path / segment_name(s)).stat().st_size
    chunks = 0
    first: int | None = None
    end: int | None = None
    last_ts: int | None = None
    for s in segments:
        try:
            idx = os.open(path / index_name(s), os.O_RDONLY)
            try:
                entries = read_all_entries(idx)
            finally:
                os.close(idx)
            if not entries:
                continue
            seg = os.open(path / segment_name(s), os.O_RDONLY)
            try:
                got = read_header(seg, entries[-1].position)
            finally:
                os.close(seg)
        except FileNotFoundError:  # retention deleted this segment while we looked
            continue
        chunks += len(entries)
        first = entries[0].offset if first is None else first
        if got is not None:
            end = got[0].first_offset + got[0].record_count
            last_ts = got[0].timestamp_ms
    if first is None or end is None:
        return StreamSummary(0, size, len(segments), 0, None, None, None)
    return StreamSummary(end - first, size, len(segments), chunks, first, end - 1, last_ts)
