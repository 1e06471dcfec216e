"""Segment and index files: naming, listing, reading index entries, validating chunks.

A stream directory holds pairs ``<20-digit first offset>.segment`` / ``.index``; the index has
one 24-byte entry per chunk (first offset, timestamp, file position).
"""

from __future__ import annotations

import os
import re
import zlib
from pathlib import Path
from typing import NamedTuple

from sievemq.storage.chunk import (
    FILE_HEADER_SIZE,
    HEADER_SIZE,
    INDEX_ENTRY,
    INDEX_ENTRY_SIZE,
    ChunkHeader,
    header_ok,
    parse_header,
)

SEGMENT_RE = re.compile(r"^(\d{20})\.segment$")
INDEX_RE = re.compile(r"^(\d{20})\.index$")


class IndexEntry(NamedTuple):
    offset: int
    timestamp_ms: int
    position: int


def segment_name(first_offset: int) -> str:
    return f"{first_offset:020d}.segment"


def index_name(first_offset: int) -> str:
    return f"{first_offset:020d}.index"


def list_segments(directory: Path) -> list[int]:
    """First offsets of the segment files in the directory, oldest first."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(int(m.group(1)) for name in names if (m := SEGMENT_RE.match(name)))


def list_indexes(directory: Path) -> list[int]:
    names = os.listdir(directory)
    return sorted(int(m.group(1)) for name in names if (m := INDEX_RE.match(name)))


def index_count(fd: int) -> int:
    """Number of whole entries in an open index file."""
    return max(0, (os.fstat(fd).st_size - FILE_HEADER_SIZE) // INDEX_ENTRY_SIZE)


def read_entry(fd: int, i: int) -> IndexEntry:
    buf = os.pread(fd, INDEX_ENTRY_SIZE, FILE_HEADER_SIZE + i * INDEX_ENTRY_SIZE)
    return IndexEntry(*INDEX_ENTRY.unpack(buf))


def read_all_entries(fd: int) -> list[IndexEntry]:
    n = index_count(fd)
    buf = os.pread(fd, n * INDEX_ENTRY_SIZE, FILE_HEADER_SIZE)
    return [IndexEntry(*t) for t in INDEX_ENTRY.iter_unpack(buf[: n * INDEX_ENTRY_SIZE])]


def bisect_offset(fd: int, n: int, offset: int) -> int:
    """Index of the last entry whose chunk offset is <= offset (-1 if none); binary search."""
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi) // 2
        if read_entry(fd, mid).offset <= offset:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1


def bisect_timestamp(fd: int, n: int, ts: int) -> int:
    """Index of the first entry whose timestamp is >= ts (n if none); binary search."""
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi) // 2
        if read_entry(fd, mid).timestamp_ms < ts:
            lo = mid + 1
        else:
            hi = mid
    return lo


def read_header(fd: int, position: int) -> tuple[ChunkHeader, bytes] | None:
    """Header and Bloom bytes at a position, or None if short, bad magic or bad header CRC."""
    buf = os.pread(fd, HEADER_SIZE + 256, position)
    header = parse_header(buf)
    if header is None:
        return None
    if len(buf) < HEADER_SIZE + header.meta_size:
        buf += os.pread(fd, HEADER_SIZE + header.meta_size - len(buf), position + len(buf))
    if not header_ok(header, buf):
        return None
    return header, buf[HEADER_SIZE : HEADER_SIZE + header.bloom_size]


def check_chunk(fd: int, position: int, file_size: int) -> ChunkHeader | None:
    """The header of a complete chunk with good header and data CRCs, else None."""
    got = read_header(fd, position)
    if got is None:
        return None
    header = got[0]
    if position + header.total_size > file_size:
        return None
    data = os.pread(fd, header.data_length, position + HEADER_SIZE + header.meta_size)
    if len(data) != header.data_length or zlib.crc32(data) != header.data_crc:
        return None
    return header


class Tail(NamedTuple):
    """Where the valid data of one segment ends."""

    kept_entries: int  # index entries that point at valid chunks
    extra: list[IndexEntry]  # valid chunks after them that the index lacks
    end_position: int  # file position after the last valid chunk
    end_offset: int  # offset after the last valid chunk
    first_timestamp_ms: int | None
    last_timestamp_ms: int | None


def find_tail(seg_fd: int, idx_fd: int | None, first_offset: int) -> Tail:
    """Walk back over index entries to the last valid chunk, then forward over unindexed ones.

    Read-only; ``Stream.open`` applies the result (truncate, add missing index entries).
    """
    size = os.fstat(seg_fd).st_size
    n = index_count(idx_fd) if idx_fd is not None else 0
    kept = 0
    pos = FILE_HEADER_SIZE
    next_offset = first_offset
    last_ts: int | None = None
    first_ts: int | None = None
    for i in range(n - 1, -1, -1):
        entry = read_entry(idx_fd, i) if idx_fd is not None else None
        if entry is None or entry.position < FILE_HEADER_SIZE:
            continue
        header = check_chunk(seg_fd, entry.position, size)
        if header is not None and header.first_offset == entry.offset:
            kept = i + 1
            pos = entry.position + header.total_size
            next_offset = header.first_offset + header.record_count
            last_ts = header.timestamp_ms
            break
    if kept and idx_fd is not None:
        first_ts = read_entry(idx_fd, 0).timestamp_ms
    extra: list[IndexEntry] = []
    while True:
        header = check_chunk(seg_fd, pos, size)
        if header is None or header.first_offset != next_offset:
            break
        extra.append(IndexEntry(header.first_offset, header.timestamp_ms, pos))
        if first_ts is None:
            first_ts = header.timestamp_ms
        last_ts = header.timestamp_ms
        pos += header.total_size
        next_offset += header.record_count
    return Tail(kept, extra, pos, next_offset, first_ts, last_ts)
