"""StreamReader: seek by offset, timestamp, first/last/next, and read filtered records.

Hot path. A reader walks chunk headers with one small ``pread`` each (header + Bloom) and
reads a chunk's body only when its Bloom filter says the FilterSpec may match and the caller's
``chunk_filter`` does not rule out the chunk's opaque extra blob (version 2 chunks). Each reader has
its own file handles and follows segment roll-over by opening the segment named after the
next chunk's offset.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NamedTuple

from isal.isal_zlib import crc32 as fast_crc32

from sievemq.storage import handles
from sievemq.storage.chunk import (
    FILE_HEADER_SIZE,
    FLAG_OSIRIS,
    FLAG_ZSTD,
    HEADER_SIZE,
    decode_records,
    decompress,
    osiris_to_table,
    unpack_header,
)
from sievemq.storage.errors import StorageError
from sievemq.storage.filter_stats import ReadStats
from sievemq.storage.filters import FilterSpec
from sievemq.storage.handles import CachedFile
from sievemq.storage.segment import (
    IndexEntry,
    bisect_offset,
    bisect_timestamp,
    find_tail,
    index_count,
    index_name,
    list_segments,
    read_entry,
    read_header,
    segment_name,
)
from sievemq.storage.types import Record


class RawChunk(NamedTuple):
    """One chunk's undecoded data (``read_chunks``): decode records ``start`` onwards."""

    first_offset: int
    records: int
    timestamp_ms: int
    start: int
    data: bytes  # uncompressed record table + payloads (docs/storage-format.md)
    # data is in the osiris layout (``read_chunks(osiris=True)``, chunk.FLAG_OSIRIS)
    osiris: bool = False


def disk_end(directory: Path) -> int:
    """Offset after the last valid chunk on disk (for stand-alone readers)."""
    segments = list_segments(directory)
    for first in reversed(segments):
        try:
            seg_fd = os.open(directory / segment_name(first), os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            try:
                idx_fd: int | None = os.open(directory / index_name(first), os.O_RDONLY)
            except FileNotFoundError:
                idx_fd = None
            try:
                tail = find_tail(seg_fd, idx_fd, first)
            finally:
                if idx_fd is not None:
                    os.close(idx_fd)
        finally:
            os.close(seg_fd)
        if tail.end_offset > first or first == segments[0]:
            return tail.end_offset
    return 0


class StreamReader:
    """Reads records below a bound: the stream's committed end, or the valid data on disk."""

    def __init__(self, directory: Path, bound: Callable[[], int] | None = None) -> None:
        self.directory = Path(directory)
        self._live_bound = bound
        self._disk_bound = disk_end(self.directory) if bound is None else 0
        self.stats = ReadStats()
        self.position = 0
        self._file: CachedFile | None = None  # the current segment (storage.handles)
        self._fd = -1  # its descriptor while pinned (inside read and attach)
        self._segment = -1
        self._pos = FILE_HEADER_SIZE
        self._chunk_offset = 0
        self._guess = 16
        self._pending: list[Record] = []
        self._limit = 0  # the bound the last walk read up to
        self.at_end = False
        self.seek_first()

    @classmethod
    def open(cls, directory: Path) -> StreamReader:
        """A stand-alone reader (Spark, CLI) bounded by the valid data on disk."""
        if not Path(directory).is_dir():
            raise StorageError(f"no stream directory at {directory}")
        return cls(directory)

    # -- bounds and files -------------------------------------------------------------------

    def _bound(self) -> int:
        if self._live_bound is not None:
            return self._live_bound()
        return self._disk_bound

    def _open_segment(self, first: int) -> None:
        """Switch to segment ``first`` (FileNotFoundError when retention removed it)."""
        handle = handles.shared.file(self.directory / segment_name(first), os.O_RDONLY)
        handle.acquire()  # opens now: a missing file is seen here, not in the middle of read
        if self._fd >= 0:
            self._unpin()
        if self._file is not None:
            self._file.close()
        self._file, self._fd = handle, handle.fd
        self._segment = first

    def _pin(self) -> int:
        """Pin the current segment's descriptor (reopened if the cache closed it)."""
        if self._fd < 0:
            assert self._file is not None
            try:
                self._fd = self._file.acquire()
            except FileNotFoundError:
                # retention removed the segment while its descriptor was closed: the
                # unread records went with it, as with an open one at the next roll-over
                segments = self._segments()
                self._attach(max(self._chunk_offset, segments[0]))
                self.position = max(self.position, self._chunk_offset)
                self._pin()
        return self._fd

    def _unpin(self) -> None:
        if self._fd >= 0 and self._file is not None:
            self._fd = -1
            self._file.release()

    def _segments(self) -> list[int]:
        segments = list_segments(self.directory)
        if not segments:
            raise StorageError(f"stream {self.directory} has no segments")
        return segments

    def _attach(self, target: int) -> None:
        """Point at the chunk holding ``target`` (or the chunk that will start there).

        Retention may delete the segment we picked between listing and opening it (under
        durability ``always`` it runs in the writer's thread): then list again.
        """
        try:
            for _ in range(3):
                try:
                    self._attach_once(target)
                    return
                except FileNotFoundError:
                    continue
            self._attach_once(target)
        finally:
            self._unpin()

    def _attach_once(self, target: int) -> None:
        self._pending = []
        segments = self._segments()
        first = segments[0]
        for s in segments:
            if s <= target:
                first = s
        self._open_segment(first)
        self._pos = FILE_HEADER_SIZE
        self._chunk_offset = first
        idx = os.open(self.directory / index_name(first), os.O_RDONLY)
        try:
            i = bisect_offset(idx, index_count(idx), target)
            if i >= 0:
                entry = read_entry(idx, i)
                self._pos, self._chunk_offset = entry.position, entry.offset
        finally:
            os.close(idx)
        if self._chunk_offset < target:
            got = read_header(self._fd, self._pos)
            if got is not None and got[0].first_offset + got[0].record_count <= target:
                self._pos += got[0].total_size
                self._chunk_offset += got[0].record_count

    # -- seeking ----------------------------------------------------------------------------

    def _attach_at(self, target: int, position: int | None = None) -> None:
        """Attach at the chunk holding ``target``; records below ``position`` (default
        ``target``) are skipped."""
        self._attach(target)
        self.position = target if position is None else position
        self.at_end = False

    def _attach_found(
        self, segments: Iterable[int], find: Callable[[int], IndexEntry | None]
    ) -> None:
        """Attach at the chunk that ``find`` (given a segment's open index) returns in the
        first of ``segments`` where it finds one; at the end (``next``) when none does."""
        for first in segments:
            idx = os.open(self.directory / index_name(first), os.O_RDONLY)
            try:
                entry = find(idx)
            finally:
                os.close(idx)
            if entry is not None:
                self._attach_at(entry.offset)
                return
        self.seek_next()

    def seek_first(self) -> None:
        """Attach at the first chunk on disk."""
        self._attach_at(self._segments()[0])

    def seek_next(self) -> None:
        """Attach at the end: only records written from now on."""
        self._attach_at(self._bound())

    def seek_last(self) -> None:
        """Attach at the last chunk (delivered whole); ``next`` when the stream is empty."""
        end = self._bound()

        def last(idx: int) -> IndexEntry | None:
            i = bisect_offset(idx, index_count(idx), end - 1)
            return read_entry(idx, i) if i >= 0 else None

        self._attach_found(reversed(self._segments()), last)

    def seek_offset(self, offset: int) -> None:
        """Attach at the chunk holding ``offset``; clamps like osiris.

        Below the first offset means first; past the end means next, but records below
        ``offset`` are still skipped, so the reader waits until ``offset`` exists.
        """
        first = self._segments()[0]
        end = self._bound()
        if offset < first:
            self.seek_first()
            return
        self._attach_at(min(offset, end), offset)

    def seek_timestamp(self, ts_ms: int) -> None:
        """Attach at the first chunk whose timestamp is >= ts_ms (whole chunk delivered)."""
        end = self._bound()

        def at_or_after(idx: int) -> IndexEntry | None:
            n = bisect_offset(idx, index_count(idx), end - 1) + 1
            i = bisect_timestamp(idx, n, ts_ms)
            return read_entry(idx, i) if i < n else None

        self._attach_found(self._segments(), at_or_after)

    # -- reading ----------------------------------------------------------------------------

    def _roll_over(self) -> bool:
        """At the end of a segment: open the one named after the next chunk's offset."""
        try:
            self._open_segment(self._chunk_offset)
        except FileNotFoundError:
            segments = self._segments()
            if segments[0] <= self._chunk_offset:
                return False
            # retention removed what this reader had not read yet: go on at the first
            self._open_segment(segments[0])
            self._chunk_offset = segments[0]
            self.position = max(self.position, segments[0])
        self._pos = FILE_HEADER_SIZE
        return True

    def read(
        self,
        max_records: int,
        spec: FilterSpec | None = None,
        predicate: Callable[[Record], bool] | None = None,
        max_chunks: int = 64,
        chunk_filter: Callable[[bytes], bool] | None = None,
    ) -> list[Record]:
        """Up to ``max_records`` matching records in offset order (see the contract).

        [] with ``at_end`` False means "call again": ``max_chunks`` headers were looked at.
        ``chunk_filter(extra)`` is asked only for chunks that carry an extra blob; False skips
        the chunk without reading its body.
        """
        self._pin()
        try:
            return self._read(max_records, spec, predicate, max_chunks, chunk_filter)
        finally:
            self._unpin()

    def read_chunks(
        self,
        max_records: int,
        spec: FilterSpec | None = None,
        max_chunks: int = 64,
        chunk_filter: Callable[[bytes], bool] | None = None,
        osiris: bool = False,
    ) -> list[RawChunk]:
        """The undecoded data of the next chunks the Bloom filter and ``chunk_filter`` let
        through, until they hold at least ``max_records`` records at or past the position.

        For columnar readers (Spark) that decode a whole chunk at once: the caller decodes
        from ``RawChunk.start``, applies ``spec.matches`` itself and adds the records it keeps
        and rejects to ``stats.records_matched``/``records_skipped``. The position moves past
        every returned chunk. Not to be mixed with ``read`` on one reader (no pending records).
        With ``osiris`` a chunk stored in the osiris layout keeps it (``RawChunk.osiris``: the
        stream protocol's Deliver path); otherwise every chunk comes in the record-table layout.
        """
        out: list[RawChunk] = []
        wanted = [max_records]

        def take(data: bytes, count: int, first: int, ts: int, layout: bool) -> bool:
            start = max(first, self.position)
            out.append(RawChunk(first, count, ts, start, data, layout))
            wanted[0] -= first + count - start
            return False

        self._pin()
        try:
            self._walk(spec, max_chunks, chunk_filter, lambda: wanted[0] > 0, take, osiris)
        finally:
            self._unpin()
        return out

    def read_stored(self, max_chunks: int = 64) -> list[RawChunk]:
        """The next chunks (up to ``max_chunks``) exactly as stored: header, Bloom bits,
        extra blob and data, compressed or not (``RawChunk.data``); for a copy that must be
        byte-identical (a replica's ``Stream.append_stored``). The position moves past them."""
        out: list[RawChunk] = []

        def take(data: bytes, count: int, first: int, ts: int, layout: bool) -> bool:
            out.append(RawChunk(first, count, ts, first, data))
            return False

        self._pin()
        try:
            self._walk(None, max_chunks, None, lambda: True, take, verbatim=True)
        finally:
            self._unpin()
        return out

    def _read(
        self,
        max_records: int,
        spec: FilterSpec | None,
        predicate: Callable[[Record], bool] | None,
        max_chunks: int,
        chunk_filter: Callable[[bytes], bool] | None,
    ) -> list[Record]:
        stats = self.stats
        out: list[Record] = []
        if self._pending:
            out = self._pending[:max_records]
            self._pending = self._pending[max_records:]
            self.position = out[-1].offset + 1
            if self._pending:
                self.at_end = False
                return out

        def decode(data: bytes, count: int, first: int, ts: int, osiris: bool) -> bool:
            records, rejected = decode_records(data, count, first, ts, self.position, spec, osiris)
            if spec is not None and not records:
                stats.chunks_false_positive += 1
            if predicate is not None:
                kept = [r for r in records if predicate(r)]
                rejected += len(records) - len(kept)
                records = kept
            stats.records_skipped += rejected
            room = max_records - len(out)
            if len(records) > room:
                self._pending = records[room:]
                records = records[:room]
            out.extend(records)
            if self._pending:
                self.position = out[-1].offset + 1
                return True
            return False

        self._walk(spec, max_chunks, chunk_filter, lambda: len(out) < max_records, decode, True)
        stats.records_matched += len(out)
        self.at_end = not self._pending and self._chunk_offset >= self._limit
        return out

    def _walk(
        self,
        spec: FilterSpec | None,
        max_chunks: int,
        chunk_filter: Callable[[bytes], bool] | None,
        more: Callable[[], bool],
        body: Callable[[bytes, int, int, int, bool], bool],
        keep_osiris: bool = False,
        verbatim: bool = False,
    ) -> None:
        """Walk chunk headers from the current one while ``more()``; hand the (uncompressed)
        data of each chunk that may match to ``body(data, count, first, timestamp, osiris)``,
        which returns True to stop after it (it then set the position itself). The data is in
        the record-table layout, or with ``keep_osiris`` in the osiris layout when stored so
        (``osiris`` True). With ``verbatim`` the body gets the chunk as stored instead."""
        stats = self.stats
        limit = self._bound()
        if self._chunk_offset >= limit and self._live_bound is None:
            self._disk_bound = limit = disk_end(self.directory)
        self._limit = limit
        looked = 0
        may_match = spec.may_match_bytes if spec is not None else None
        fd_pread = os.pread
        fd, pos, guess = self._fd, self._pos, self._guess
        unpack = unpack_header
        crc32 = fast_crc32
        while looked < max_chunks and self._chunk_offset < limit and more():
            buf = fd_pread(fd, HEADER_SIZE + guess, pos)
            stats.bytes_read += len(buf)
            if len(buf) < HEADER_SIZE:
                self._pos = pos
                if not self._roll_over():
                    raise StorageError(
                        f"{self.directory}: chunk at offset {self._chunk_offset} is missing"
                    )
                fd, pos = self._fd, self._pos
                continue
            fields = unpack(buf)  # None: bad magic or unknown version
            if fields is None or fields[6] != self._chunk_offset:
                raise StorageError(
                    f"{self.directory}: bad chunk header at segment {self._segment} position {pos}"
                )
            _m, _v, _t, flags, _h, bsize, first, count, ts, dlen, rlen, dcrc, xlen, hcrc = fields
            meta = bsize + xlen
            if meta > guess:
                more_bytes = fd_pread(fd, meta - guess, pos + len(buf))
                stats.bytes_read += len(more_bytes)
                buf += more_bytes
                self._guess = guess = meta
            # header_ok's check, inline: bytes 0..43, then Bloom + extra
            if crc32(buf[HEADER_SIZE : HEADER_SIZE + meta], crc32(buf[: HEADER_SIZE - 4])) != hcrc:
                raise StorageError(f"{self.directory}: header CRC mismatch at {pos}")
            looked += 1
            stats.chunks_scanned += 1
            chunk_end = first + count
            body_pos = pos + HEADER_SIZE + meta
            next_pos = body_pos + dlen
            stop = False
            if chunk_end > self.position:
                stats.bytes_unfiltered += HEADER_SIZE + meta + dlen
            if chunk_end <= self.position:
                pass  # entirely before the position (seek_offset into a later chunk)
            elif may_match is not None and not may_match(buf[HEADER_SIZE : HEADER_SIZE + bsize]):
                stats.chunks_skipped += 1
                stats.records_skipped_by_bloom += chunk_end - max(first, self.position)
            elif (
                xlen
                and chunk_filter is not None
                and not chunk_filter(buf[HEADER_SIZE + bsize : HEADER_SIZE + meta])
            ):
                stats.chunks_skipped_subscription += 1
            else:
                data = fd_pread(fd, dlen, body_pos)
                stats.bytes_read += len(data)
                if len(data) != dlen or crc32(data) != dcrc:
                    raise StorageError(f"{self.directory}: data CRC mismatch at {pos}")
                layout = False
                if verbatim:
                    data = buf[: HEADER_SIZE + meta] + data
                elif flags & FLAG_ZSTD:
                    data = decompress(data, rlen)
                elif flags & FLAG_OSIRIS:
                    if keep_osiris:
                        layout = True
                    else:
                        data = osiris_to_table(data, count)
                stop = body(data, count, first, ts, layout)
            self._pos = pos = next_pos
            self._chunk_offset = chunk_end
            if stop:
                break
            if chunk_end > self.position:
                self.position = chunk_end
        self.at_end = self._chunk_offset >= limit

    def close(self) -> None:
        self._unpin()
        if self._file is not None:
            self._file.close()
            self._file = None
