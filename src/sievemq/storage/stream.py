"""Stream: one writer per stream directory; recovery on open, append, roll-over, retention.

Hot path: ``append`` encodes a batch into one chunk, writes it with one ``os.writev`` and its
index entry with one ``os.write``, then tells the listeners the new committed end.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from itertools import pairwise
from pathlib import Path

from isal.isal_zlib import crc32

from sievemq.storage import bloom as _bloom
from sievemq.storage import handles, layout
from sievemq.storage.chunk import (
    FILE_HEADER_SIZE,
    HEADER_SIZE,
    INDEX_ENTRY,
    INDEX_ENTRY_SIZE,
    INDEX_MAGIC,
    SEGMENT_MAGIC,
    encode_chunk,
    header_ok,
    parse_header,
)
from sievemq.storage.commit_mark import CommitMark
from sievemq.storage.durable import fsync_dir
from sievemq.storage.errors import StorageError
from sievemq.storage.layout import TOMBSTONE_PREFIX
from sievemq.storage.offsets import OffsetStore, read_offsets
from sievemq.storage.reader import StreamReader
from sievemq.storage.retention import SegmentSummary, segments_to_delete
from sievemq.storage.segment import (
    Tail,
    find_tail,
    index_count,
    index_name,
    list_indexes,
    list_segments,
    read_all_entries,
    read_entry,
    read_header,
    segment_name,
)
from sievemq.storage.types import Message

OFFSETS_FILE = "offsets.log"


class Durability(StrEnum):
    ALWAYS = "always"  # fdatasync before append returns
    BATCH = "batch"  # the write reaches the OS; the owner calls sync() every sync_interval_ms
    NEVER = "never"


@dataclass(frozen=True)
class StreamConfig:
    max_segment_bytes: int = 500_000_000
    filter_size_bytes: int = 16  # 16..4096
    compression: str = "none"  # "none" | "zstd"
    max_bytes: int | None = None  # retention by total size
    max_age_ms: int | None = None  # retention by age
    durability: Durability = Durability.BATCH
    sync_interval_ms: int = 200  # BATCH: the owner calls sync() this often

    def __post_init__(self) -> None:
        _bloom.check_size(self.filter_size_bytes)
        if self.compression not in ("none", "zstd"):
            raise ValueError(f"compression must be 'none' or 'zstd': {self.compression!r}")
        if self.max_segment_bytes <= FILE_HEADER_SIZE:
            raise ValueError("max_segment_bytes is too small")


@dataclass(frozen=True)
class StreamStats:
    messages: int
    bytes: int
    segments: int
    chunks: int
    first_offset: int
    last_offset: int | None  # None when the stream holds no message
    first_timestamp_ms: int | None
    last_timestamp_ms: int | None


@dataclass
class _Segment:
    first_offset: int
    end_offset: int
    size: int
    chunks: int
    first_ts: int | None = None
    last_ts: int | None = None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _ensure_file_header(path: Path, magic: bytes) -> None:
    """Create the file, or fix a file too short to hold its 8-byte header."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        head = os.pread(fd, FILE_HEADER_SIZE, 0)
        if len(head) < FILE_HEADER_SIZE:
            os.ftruncate(fd, 0)
            os.pwrite(fd, magic, 0)
        elif head != magic:
            raise StorageError(f"{path} is not a SieveMQ file (header {head.hex()})")
    finally:
        os.close(fd)


def create_files(directory: Path) -> None:
    """Create a new stream's directory with its first (empty) segment and index, and make
    their names durable (the directory and its parent fsynced): what ``Stream.open`` would
    create, done ahead of it (the gateway runs this in a worker thread at a declare, so
    the event loop never waits for the fsyncs). A directory that already holds segments
    is left as it is (``Stream.open`` recovers it)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if not list_segments(directory):
        _ensure_file_header(directory / segment_name(0), SEGMENT_MAGIC)
        _ensure_file_header(directory / index_name(0), INDEX_MAGIC)
    fsync_dir(directory)
    fsync_dir(directory.parent)


class StreamFilesError(OSError):
    """A new stream's files could not be created (``PendingStream.create``)."""


class PendingStream:
    """A stream declared just now whose files ``create`` makes (in a worker thread) while
    the event loop goes on; ``open`` (its first use, on the loop) waits for that if it is
    running, or creates them itself if it has not started, then opens the stream."""

    def __init__(self, directory: Path, config: StreamConfig) -> None:
        self.directory = Path(directory)
        self.config = config
        self._lock = threading.Lock()
        self._created = False

    def create(self) -> None:
        """Create the stream's files durably (``create_files``); once only. An OSError
        comes out as ``StreamFilesError`` naming the directory."""
        with self._lock:
            if not self._created:
                try:
                    create_files(self.directory)
                except OSError as error:
                    raise StreamFilesError(
                        error.errno, f"{error.strerror or error} ({self.directory})"
                    ) from error
                self._created = True

    def open(self) -> Stream:
        self.create()
        return Stream.open(self.directory, self.config)


def _tail_segment(first: int, tail: Tail) -> _Segment:
    """The last segment as recovery leaves it (``find_tail``'s result applied)."""
    return _Segment(
        first,
        tail.end_offset,
        tail.end_position,
        tail.kept_entries + len(tail.extra),
        tail.first_timestamp_ms,
        tail.last_timestamp_ms,
    )


def _repair_segment(directory: Path, first: int) -> _Segment:
    """Truncate a torn tail and add index entries for valid chunks the index lacks."""
    seg_path = directory / segment_name(first)
    idx_path = directory / index_name(first)
    _ensure_file_header(seg_path, SEGMENT_MAGIC)
    try:
        _ensure_file_header(idx_path, INDEX_MAGIC)
    except StorageError:
        idx_path.unlink()  # a damaged index is rebuilt from the segment
        _ensure_file_header(idx_path, INDEX_MAGIC)
    seg_fd = os.open(seg_path, os.O_RDWR)
    idx_fd = os.open(idx_path, os.O_RDWR)
    try:
        tail = find_tail(seg_fd, idx_fd, first)
        idx_end = FILE_HEADER_SIZE + tail.kept_entries * INDEX_ENTRY_SIZE
        changed = False
        if os.fstat(idx_fd).st_size != idx_end or tail.extra:
            os.ftruncate(idx_fd, idx_end)
            if tail.extra:
                os.pwrite(idx_fd, b"".join(INDEX_ENTRY.pack(*e) for e in tail.extra), idx_end)
            changed = True
        if os.fstat(seg_fd).st_size != tail.end_position:
            os.ftruncate(seg_fd, tail.end_position)
            changed = True
        if changed:
            os.fsync(seg_fd)
            os.fsync(idx_fd)
        return _tail_segment(first, tail)
    finally:
        os.close(seg_fd)
        os.close(idx_fd)


def _describe_segment(directory: Path, first: int) -> _Segment:
    """Summary of a closed (not last) segment from its index, trusting it."""
    seg_fd = os.open(directory / segment_name(first), os.O_RDONLY)
    idx_fd = os.open(directory / index_name(first), os.O_RDONLY)
    try:
        n = index_count(idx_fd)
        if n == 0:
            return _Segment(first, first, os.fstat(seg_fd).st_size, 0)
        last = read_entry(idx_fd, n - 1)
        got = read_header(seg_fd, last.position)
        if got is None:
            raise StorageError(f"{directory}: last chunk of segment {first} is unreadable")
        return _Segment(
            first,
            last.offset + got[0].record_count,
            os.fstat(seg_fd).st_size,
            n,
            read_entry(idx_fd, 0).timestamp_ms,
            last.timestamp_ms,
        )
    finally:
        os.close(seg_fd)
        os.close(idx_fd)


def recover(directory: Path) -> list[_Segment]:
    """Bring a stream directory to a consistent state (docs/storage-format.md, "Recovery on open").

    Orphan index files go; a segment without an index gets one rebuilt by scanning it; the
    last segment's torn tail (partial chunk, bad CRC, index entries past the end) is cut
    back to its last valid chunk; empty trailing segments are removed.
    """
    directory.mkdir(parents=True, exist_ok=True)
    segments = list_segments(directory)
    seg_set = set(segments)
    for first in list_indexes(directory):
        if first not in seg_set:
            (directory / index_name(first)).unlink()
    missing = {s for s in segments if not (directory / index_name(s)).exists()}
    infos: list[_Segment] = []
    while segments:
        last = _repair_segment(directory, segments[-1])
        if last.chunks == 0 and len(segments) > 1:
            (directory / segment_name(segments[-1])).unlink()
            (directory / index_name(segments[-1])).unlink()
            segments.pop()
            continue
        infos = [
            _repair_segment(directory, s) if s in missing else _describe_segment(directory, s)
            for s in segments[:-1]
        ]
        infos.append(last)
        break
    for before, after in pairwise(infos):
        if before.end_offset != after.first_offset:
            raise StorageError(
                f"{directory}: segment {after.first_offset} does not follow segment "
                f"{before.first_offset} (ends at {before.end_offset})"
            )
    return infos


@dataclass(frozen=True)
class StreamSurvey:
    """What a closed stream directory holds: its statistics and named-consumer offsets."""

    stats: StreamStats
    offsets: dict[str, int]


def survey(directory: Path) -> StreamSurvey | None:
    """What ``Stream.open`` would find in a stream directory, read without changing or
    keeping anything: the numbers a recovery would give, from the same read-only walk
    (``find_tail`` on the last segment, the index of the others), with no file written,
    created or left open. None when recovery would have to rebuild something first (a
    missing or damaged index, a file without its header): then only opening the stream
    can say. Listings of idle streams use it, so that they open none."""
    directory = Path(directory)
    segments = list_segments(directory)
    infos: list[_Segment] = []
    try:
        while segments:
            last = _survey_last(directory, segments[-1])
            if last is None:
                return None
            if last.chunks == 0 and len(segments) > 1:
                segments.pop()  # recovery removes an empty trailing segment
                continue
            for first in segments[:-1]:
                if not (directory / index_name(first)).exists():
                    return None  # recovery rebuilds it by scanning the segment
                infos.append(_describe_segment(directory, first))
            infos.append(last)
            break
    except (OSError, StorageError):
        return None  # opening the stream reports it
    if not infos:
        infos = [_Segment(0, 0, FILE_HEADER_SIZE, 0)]  # what opening would create
    for before, after in pairwise(infos):
        if before.end_offset != after.first_offset:
            return None
    try:
        offsets = read_offsets(directory / OFFSETS_FILE)  # its torn record ignored, as opening does
    except OSError:
        return None
    return StreamSurvey(summarize(infos, infos[-1].end_offset), offsets)


def _survey_last(directory: Path, first: int) -> _Segment | None:
    """``_repair_segment``'s numbers for the last segment, read-only; None if it would
    have to rewrite a file header or rebuild the index."""
    seg_fd = os.open(directory / segment_name(first), os.O_RDONLY)
    try:
        idx_fd = os.open(directory / index_name(first), os.O_RDONLY)
    except FileNotFoundError:
        os.close(seg_fd)
        return None
    try:
        if os.pread(seg_fd, FILE_HEADER_SIZE, 0) != SEGMENT_MAGIC:
            return None
        if os.pread(idx_fd, FILE_HEADER_SIZE, 0) != INDEX_MAGIC:
            return None
        tail = find_tail(seg_fd, idx_fd, first)
        return _tail_segment(first, tail)
    finally:
        os.close(seg_fd)
        os.close(idx_fd)


def summarize(segments: Sequence[_Segment], end_offset: int) -> StreamStats:
    """A stream's statistics from its segments and its end offset."""
    first = segments[0].first_offset
    first_ts = next((s.first_ts for s in segments if s.first_ts is not None), None)
    last_ts = next((s.last_ts for s in reversed(segments) if s.last_ts is not None), None)
    return StreamStats(
        messages=end_offset - first,
        bytes=sum(s.size for s in segments),
        segments=len(segments),
        chunks=sum(s.chunks for s in segments),
        first_offset=first,
        last_offset=end_offset - 1 if end_offset > first else None,
        first_timestamp_ms=first_ts,
        last_timestamp_ms=last_ts,
    )


class Stream:
    """A stream directory with its single writer; readers come from ``reader()``."""

    def __init__(self, directory: Path, config: StreamConfig, segments: list[_Segment]) -> None:
        self.directory = directory
        self.config = config
        self._segments = segments
        self._listeners: list[Callable[[int], None]] = []
        # a replicated stream's leader (``gate``): readers and ``_listeners`` see only what
        # ``commit`` allows; ``_tail_listeners`` hear of every append (its replicas' feed)
        self.gated = False
        self._tail_listeners: list[Callable[[int], None]] = []
        self._mark: CommitMark | None = None  # a gated stream's committed offset, kept
        self._seg: handles.CachedFile | None = None  # the last segment and its index, for appending
        self._idx: handles.CachedFile | None = None
        self._closed = False
        # delete() from the loop while an append runs in a worker thread (durability
        # always): the files are closed and removed by that thread when its append ends
        self._state = threading.Lock()
        self._writing = 0
        self._remove_pending = False
        self._release: Callable[[Path], None] = layout.remove_later  # (``delete``)
        self._always = config.durability is Durability.ALWAYS
        # written since the last sync() (not under always, where each append syncs): close()
        # syncs only then, so a shutdown does not reopen and fsync every idle stream's files
        self._unsynced = False
        self._compress: Callable[[bytes], bytes] | None = None
        if config.compression == "zstd":
            import zstandard

            self._compress = zstandard.ZstdCompressor(level=3).compress
        last = segments[-1]
        self.end_offset = last.end_offset
        # what readers may read below: the end, or on a gated stream what ``commit`` allowed
        self.committed_offset = self.end_offset
        self._last_chunk: int | None = None  # first offset of the newest chunk (lazy)
        self._last_ts = last.last_ts if last.last_ts is not None else 0
        self._open_files(last.first_offset)
        self.offsets = OffsetStore(directory / OFFSETS_FILE, fsync=self._always)

    @classmethod
    def open(cls, directory: Path, config: StreamConfig) -> Stream:
        """Create the stream or recover it from what is on disk."""
        directory = Path(directory)
        segments = recover(directory)
        if not segments:
            _ensure_file_header(directory / segment_name(0), SEGMENT_MAGIC)
            _ensure_file_header(directory / index_name(0), INDEX_MAGIC)
            fsync_dir(directory)
            segments = [_Segment(0, 0, FILE_HEADER_SIZE, 0)]
        return cls(directory, config, segments)

    @property
    def first_offset(self) -> int:
        """Lowest retained offset."""
        return self._segments[0].first_offset

    @property
    def last_chunk_id(self) -> int:
        """First offset of the newest chunk (osiris's chunk id); -1 when the stream is empty.
        Known from the last append; after recovery read once from the index."""
        if self._last_chunk is None:
            if self.end_offset <= self.first_offset:
                return -1
            reader = self.reader(tail=True)
            try:
                reader.seek_last()
                self._last_chunk = reader.position
            finally:
                reader.close()
        return self._last_chunk

    def _open_files(self, first: int) -> None:
        """Handles on the last segment and index: opened (at their end) when first used,
        closed by the shared descriptor cache when idle (``storage.handles``)."""
        self._seg = handles.shared.file(self.directory / segment_name(first), os.O_WRONLY, True)
        self._idx = handles.shared.file(self.directory / index_name(first), os.O_WRONLY, True)

    def _close_files(self) -> None:
        for handle in (self._seg, self._idx):
            if handle is not None:
                handle.close()
        self._seg = self._idx = None

    def _roll(self) -> None:
        """Start a new segment named after the next offset, then apply retention."""
        if self.config.durability is not Durability.NEVER:
            self.sync()
        self._close_files()
        first = self.end_offset
        _ensure_file_header(self.directory / segment_name(first), SEGMENT_MAGIC)
        _ensure_file_header(self.directory / index_name(first), INDEX_MAGIC)
        if self.config.durability is not Durability.NEVER:
            fsync_dir(self.directory)
        self._segments.append(_Segment(first, first, FILE_HEADER_SIZE, 0))
        self._open_files(first)
        self.apply_retention()

    def append(
        self, messages: Sequence[Message], timestamp_ms: int | None = None, extra: bytes = b""
    ) -> int:
        """Write the batch as ONE chunk and return its first offset (see ``_write``).

        May run in a worker thread while ``delete()`` runs on another: the files stay
        open until the append ends, then this thread removes them."""
        state = self._state
        with state:
            if self._closed:
                raise StorageError(f"stream {self.directory} is closed")
            self._writing += 1
        try:
            return self._write(messages, timestamp_ms, extra)
        finally:
            with state:
                self._writing -= 1
                remove = self._remove_pending and not self._writing
                if remove:
                    self._remove_pending = False
            if remove:
                self._remove_files()

    def _write(self, messages: Sequence[Message], timestamp_ms: int | None, extra: bytes) -> int:
        """Write the batch as ONE chunk and return its first offset.

        ``extra`` is an opaque blob stored in the chunk header (readers see it through
        ``StreamReader.read(chunk_filter=...)``); empty writes a version 1 chunk.

        Chunk timestamps never go backwards (a smaller one is raised to the previous), so
        seeking by timestamp can binary-search the index. Raises StorageError and commits
        nothing when the write fails.
        """
        if not messages:
            raise ValueError("append needs at least one message")
        seg = self._segments[-1]
        if seg.chunks and seg.size >= self.config.max_segment_bytes:
            self._roll()
            seg = self._segments[-1]
        ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        if ts < self._last_ts:
            ts = self._last_ts
        first = self.end_offset
        buffers = encode_chunk(
            messages, first, ts, self.config.filter_size_bytes, self._compress, extra
        )
        return self._commit(seg, buffers, first, ts, len(messages))

    def append_stored(self, chunk: bytes) -> int:
        """Write a chunk exactly as another copy of this stream stored it (a replica: its
        files stay byte-identical to the leader's); returns its first offset.

        The chunk must start at this stream's end and its header CRC must hold (the Bloom
        bits and extra blob are covered by it, the data by its own CRC); StorageError
        otherwise, and nothing is written."""
        header = parse_header(chunk)
        if header is None or not header_ok(header, chunk):
            raise StorageError(f"{self.directory}: not a whole stored chunk (bad header)")
        body = chunk[HEADER_SIZE + header.meta_size :]
        if header.total_size != len(chunk) or crc32(body) != header.data_crc:
            raise StorageError(f"{self.directory}: stored chunk's data does not match its header")
        if header.first_offset != self.end_offset or not header.record_count:
            raise StorageError(
                f"{self.directory}: stored chunk at offset {header.first_offset}, "
                f"the stream ends at {self.end_offset}"
            )
        with self._state:
            if self._closed:
                raise StorageError(f"stream {self.directory} is closed")
            self._writing += 1
        try:
            seg = self._segments[-1]
            if seg.chunks and seg.size >= self.config.max_segment_bytes:
                self._roll()
                seg = self._segments[-1]
            ts = header.timestamp_ms
            return self._commit(seg, [chunk], header.first_offset, ts, header.record_count)
        finally:
            with self._state:
                self._writing -= 1

    def _commit(
        self, seg: _Segment, buffers: Sequence[bytes], first: int, ts: int, count: int
    ) -> int:
        """Write one encoded chunk at the end of segment ``seg`` and its index entry."""
        size = sum(map(len, buffers))
        pos = seg.size
        seg_file, idx_file = self._seg, self._idx
        assert seg_file is not None and idx_file is not None
        try:
            seg_fd = seg_file.acquire()
        except OSError as exc:
            raise StorageError(f"append to {self.directory} failed: {exc}") from exc
        try:
            idx_fd = idx_file.acquire()
        except OSError as exc:
            seg_file.release()
            raise StorageError(f"append to {self.directory} failed: {exc}") from exc
        try:
            written = os.writev(seg_fd, buffers)
            if written != size:
                _write_all(seg_fd, b"".join(buffers)[written:])
            os.write(idx_fd, INDEX_ENTRY.pack(first, ts, pos))
            if self._always:
                os.fdatasync(seg_fd)
            else:
                self._unsynced = True
        except OSError as exc:
            self._undo(seg_fd, idx_fd, pos, seg.chunks)
            raise StorageError(f"append to {self.directory} failed: {exc}") from exc
        finally:
            seg_file.release()
            idx_file.release()
        seg.size = pos + size
        seg.chunks += 1
        if seg.first_ts is None:
            seg.first_ts = ts
        seg.last_ts = self._last_ts = ts
        end = self.end_offset = first + count
        seg.end_offset = end
        self._last_chunk = first
        if self.gated:
            for cb in self._tail_listeners:
                cb(end)
        else:
            self.committed_offset = end
            for cb in self._listeners:
                cb(end)
        return first

    def _undo(self, seg_fd: int, idx_fd: int, pos: int, chunks: int) -> None:
        """Cut a failed write back so the files hold only committed chunks."""
        try:
            os.ftruncate(seg_fd, pos)
            os.lseek(seg_fd, pos, os.SEEK_SET)
            idx_end = FILE_HEADER_SIZE + chunks * INDEX_ENTRY_SIZE
            os.ftruncate(idx_fd, idx_end)
            os.lseek(idx_fd, idx_end, os.SEEK_SET)
        except OSError:
            pass  # recovery on the next open cuts the tail anyway

    def truncate(self, offset: int) -> int:
        """Drop every chunk from ``offset`` on (the first offset of one of its chunks), index
        entries and segment files with them, durably; returns how many messages went. A
        copy of a replicated stream that returns after a failover keeps only the history
        it shares with the new leader (``cluster.failover``). An offset at or past the end
        drops nothing; one inside a chunk, or before the first retained offset, is refused
        (StorageError) and nothing changes. No append may run meanwhile (the caller owns
        the writer); readers past the new end see it once appends reach their position."""
        if offset >= self.end_offset:
            return 0
        if self._closed:
            raise StorageError(f"stream {self.directory} is closed")
        if offset < self.first_offset:
            raise StorageError(
                f"{self.directory}: cannot truncate to offset {offset}, before the first "
                f"retained offset {self.first_offset}"
            )
        at = max(i for i, s in enumerate(self._segments) if s.first_offset <= offset)
        seg = self._segments[at]
        idx_path = self.directory / index_name(seg.first_offset)
        idx_fd = os.open(idx_path, os.O_RDWR)
        try:
            entries = read_all_entries(idx_fd)
            keep = next((i for i, e in enumerate(entries) if e.offset == offset), None)
            if keep is None:
                raise StorageError(
                    f"{self.directory}: offset {offset} is not the first offset of a chunk"
                )
            dropped = self.end_offset - offset
            self._close_files()
            for gone in self._segments[at + 1 :]:
                (self.directory / segment_name(gone.first_offset)).unlink(missing_ok=True)
                (self.directory / index_name(gone.first_offset)).unlink(missing_ok=True)
            del self._segments[at + 1 :]
            if keep == 0 and at > 0:  # the whole segment goes: the one before is the last
                (self.directory / segment_name(seg.first_offset)).unlink(missing_ok=True)
                idx_path.unlink(missing_ok=True)
                del self._segments[at:]
            else:
                os.ftruncate(idx_fd, FILE_HEADER_SIZE + keep * INDEX_ENTRY_SIZE)
                os.fsync(idx_fd)
                seg_fd = os.open(self.directory / segment_name(seg.first_offset), os.O_RDWR)
                try:
                    os.ftruncate(seg_fd, entries[keep].position)
                    os.fsync(seg_fd)
                finally:
                    os.close(seg_fd)
                seg.size, seg.chunks, seg.end_offset = entries[keep].position, keep, offset
                seg.last_ts = entries[keep - 1].timestamp_ms if keep else None
                seg.first_ts = seg.first_ts if keep else None
        finally:
            os.close(idx_fd)
        fsync_dir(self.directory)
        last = self._segments[-1]
        self.end_offset = offset
        self.committed_offset = min(self.committed_offset, offset)  # (what went was not)
        if self._mark is not None:
            self._mark.write(self.committed_offset)
        self._last_chunk = None
        self._last_ts = next((s.last_ts for s in reversed(self._segments) if s.last_ts), 0)
        self._open_files(last.first_offset)
        return dropped

    def sync(self) -> None:
        """fdatasync the current segment and index now.

        A file the descriptor cache closed since its last write is reopened for it: its
        written pages are still the kernel's to flush (closing does not drop them)."""
        for handle in (self._seg, self._idx):
            if handle is not None:
                fd = handle.acquire()
                try:
                    os.fdatasync(fd)
                finally:
                    handle.release()
        self._unsynced = False

    def sync_handles(self) -> list[int]:
        """Duplicates of the current segment and index descriptors, for an fdatasync in
        another thread that a roll-over or close on the writer's thread cannot disturb.
        The caller closes them."""
        if self._seg is None or self._idx is None:
            return []
        return [self._seg.dup(), self._idx.dup()]

    def add_listener(self, cb: Callable[[int], None], tail: bool = False) -> None:
        """cb(new committed offset) is called after every commit, on the appending thread
        (on a gated stream: in ``commit``'s thread). With ``tail``, cb(new end offset) after
        every append even on a gated stream (what a replica's feed reads)."""
        self._listeners = [*self._listeners, cb]
        if tail:
            self._tail_listeners = [*self._tail_listeners, cb]

    def remove_listener(self, cb: Callable[[int], None]) -> None:
        self._listeners = [c for c in self._listeners if c != cb]
        self._tail_listeners = [c for c in self._tail_listeners if c != cb]

    def gate(self, committed: int | None = None) -> None:
        """From now on readers and commit listeners see only what ``commit`` allows: a
        replicated stream's leader, where a chunk is committed once a majority holds it
        (``cluster/commit.py``), or a replica's copy. What is stored now stays readable,
        unless the copy was gated when it last ran (a restart: only what it had committed,
        kept beside it, ``storage/commit_mark.py``), or with ``committed`` only what is below
        it (a copy that just became the leader: a majority may not hold its last chunks yet).
        Call it before anything reads the stream."""
        self.gated = True
        if self._mark is None:
            self._mark, self.committed_offset = CommitMark.resume(
                self.directory, self.end_offset, committed
            )
        else:
            if committed is not None:
                self.committed_offset = min(committed, self.end_offset)
            self._mark.write(self.committed_offset)

    def ungate(self) -> None:
        """Back to every append being committed at once (a stream without replicas); a
        later start counts all it holds as committed."""
        self.gated = False
        CommitMark.drop(self._mark, self.directory)
        self._mark = None
        self.commit(self.end_offset)

    def commit(self, offset: int) -> None:
        """Let readers read below ``offset`` (at most the end; never backwards) and wake
        the commit listeners."""
        offset = min(offset, self.end_offset)
        if offset <= self.committed_offset:
            return
        self.committed_offset = offset
        if self._mark is not None:
            self._mark.write(offset)
        for cb in self._listeners:
            cb(offset)

    def reader(self, tail: bool = False) -> StreamReader:
        """A reader with its own file handles, bounded by this stream's committed offset
        (with ``tail``: by its end, committed or not: a replica's feed)."""
        if tail:
            return StreamReader(self.directory, bound=lambda: self.end_offset)
        return StreamReader(self.directory, bound=lambda: self.committed_offset)

    def apply_retention(self, now_ms: int | None = None) -> int:
        """Delete whole old segments by max_bytes / max_age_ms; returns how many went."""
        cfg = self.config
        if cfg.max_bytes is None and cfg.max_age_ms is None:
            return 0
        now = int(time.time() * 1000) if now_ms is None else now_ms
        summaries = [SegmentSummary(s.first_offset, s.size, s.last_ts) for s in self._segments]
        drop = segments_to_delete(summaries, cfg.max_bytes, cfg.max_age_ms, now)
        for seg in self._segments[:drop]:
            (self.directory / segment_name(seg.first_offset)).unlink(missing_ok=True)
            (self.directory / index_name(seg.first_offset)).unlink(missing_ok=True)
        del self._segments[:drop]
        return drop

    def stats(self) -> StreamStats:
        return summarize(self._segments, self.end_offset)

    def close(self) -> None:
        """Sync what was written since the last sync, and close (idempotent)."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._unsynced:
                self.sync()
        finally:
            self._close_files()
            self.offsets.close()
            if self._mark is not None:
                self._mark.close()

    def delete(self, release: Callable[[Path], None] = layout.remove_later) -> None:
        """Remove the stream, without syncing what is going away (idempotent).

        Never waits for the disk or for an append running in another thread: the directory
        is renamed to a tombstone at once (the name is free again; ``layout.tombstone_of``),
        the files are closed now, or by that thread when its append ends, and then the
        tombstone goes to ``release`` (by default a background thread removes it; the
        gateway first waits for the delete to be durable in its definitions)."""
        with self._state:
            if self._remove_pending or (self._closed and not self.directory.exists()):
                return
            self._closed = True
            self._release = release
            tombstone = layout.tombstone_of(self.directory)
            try:
                os.rename(self.directory, tombstone)
            except FileNotFoundError:
                pass
            else:
                self.directory = tombstone
            if self._writing:
                self._remove_pending = True
                return
        self._remove_files()

    def _remove_files(self) -> None:
        self._close_files()
        if self._mark is not None:
            self._mark.close()
        self.offsets.close(sync=False)
        if self.directory.name.startswith(TOMBSTONE_PREFIX):
            self._release(self.directory)
        else:  # never renamed (it was gone already): nothing of it should be left
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
