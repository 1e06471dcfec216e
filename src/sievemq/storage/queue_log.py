"""The durable message log of one classic or quorum queue: segments plus an ack record.

Protocol-free and synchronous. Messages are appended to numbered segment files
(``<first id>.qseg``); every record carries its own id, so recovery needs no index. Acks are a
compact append-only record of 8-byte ids (``acks``). A segment whose every message is acked is
deleted whole; the ack file is rewritten without the ids of deleted segments once it has grown
(write-temp + rename, so a crash leaves the old or the new file). ``delivered`` holds the
highest id ever handed to a consumer, written before the delivery goes out, so after a crash the
messages at or below it come back with the redelivered flag (never twice without it).
``floor`` holds the id at or below which every message is gone: a purge writes it before it
deletes the segments, so a crash half way through a purge brings nothing back.
``counts`` (quorum queues) keeps delivery counts: a compact append-only record of
``(id, count, out)`` written when a message is returned to the queue (``out`` false: it waits
ready, returned ``count`` times) and when a message returned before is handed out again
(``out`` true: a consumer holds it). The latest entry of an id wins; the file is rewritten
without the ids that are gone, as the ack record is. ``delivered`` says which messages were
handed out at least once, so a message at or below it with no entry was held by a consumer
when the log was last written: ``QueueLog.returned_count`` turns both into the count a
recovered message comes back with (``x-delivery-count``, ``x-delivery-limit``).

Crash windows (tests/recovery/test_queue_log_recovery.py): a record torn at the tail of a
segment is cut off (never confirmed); an ack entry torn at the end of ``acks`` is ignored (the
message comes back, redelivered); a segment whose every message was acked but that was not
deleted yet is deleted at recovery; ack ids of segments already deleted are dropped when the
ack file is rewritten (temp + rename); ids never go back below ``delivered`` or ``floor``, so
a new message is never taken for one delivered before; a ``counts`` entry torn at the end (or
failing its checksum) is ignored: that message comes back with the count of its previous entry.

A ``counts`` entry (big-endian, 16 bytes): ``u64 id | u32 count << 1 | out | u32 crc32 of the
first 12 bytes``.

Record layout (big-endian): ``u32 length of the rest | u32 crc32 of the rest | rest`` where rest
is ``u64 id | u64 enqueue time ms | u8 len + exchange | u8 len + routing key | u32 len +
properties | body``. A torn or corrupt tail record ends recovery of that segment (it was never
confirmed: the confirm follows the write).

Messages can be read back by id, position and size (``read``): a deep queue keeps only a window
of bodies in memory and reads the rest from the segments when a consumer reaches them. Every
file (the segment written, the ack record, the delivered mark, the segments read back) goes
through the process's LRU descriptor cache (``storage.handles``), so an idle queue holds no
descriptor, and a node's descriptors are bounded whatever the number of durable queues.
"""

from __future__ import annotations

import contextlib
import errno
import os
import struct
import zlib
from bisect import bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Protocol

from sievemq.storage import handles, layout

_HEAD = struct.Struct(">II")
_FIXED = struct.Struct(">QQ")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
SEGMENT_SUFFIX = ".qseg"
ACK_FILE = "acks"
DELIVERED_FILE = "delivered"
FLOOR_FILE = "floor"
COUNTS_FILE = "counts"
COUNT = struct.Struct(">QI")  # a delivery count: u64 id, u32 count << 1 | out (the
# ``counts`` record follows each with its CRC32; the quorum feed ships them bare)
_COUNT_SIZE = COUNT.size + 4
_COMPACT_ENTRIES = 4096  # a record file is rewritten past this many entries (and past
# twice what its last rewrite kept)
DEFAULT_SEGMENT_BYTES = 8 * 1024 * 1024


class LoggedMessage(NamedTuple):
    """One message recovered from the log (not acked)."""

    id: int
    enqueued_ms: int
    exchange: str
    routing_key: str
    properties: bytes
    body: bytes


def encode_record(
    msg_id: int, enqueued_ms: int, exchange: str, routing_key: str, props: bytes, body: bytes
) -> bytes:
    ex = exchange.encode()
    rk = routing_key.encode()
    rest = b"".join(
        (
            _FIXED.pack(msg_id, enqueued_ms),
            bytes((len(ex),)),
            ex,
            bytes((len(rk),)),
            rk,
            _U32.pack(len(props)),
            props,
            body,
        )
    )
    return _HEAD.pack(len(rest), zlib.crc32(rest)) + rest


RecordParts = tuple[int, int, str, str, bytes, bytes]  # a LoggedMessage's fields


def _decode_at(data: bytes, pos: int, stop: int) -> RecordParts:
    """The fields of a record's rest, ``data[pos:stop]`` (only the strings, properties and
    body are copied out)."""
    msg_id, ts = _FIXED.unpack_from(data, pos)
    pos += 16
    n = data[pos]
    exchange = data[pos + 1 : pos + 1 + n].decode()
    pos += 1 + n
    n = data[pos]
    routing_key = data[pos + 1 : pos + 1 + n].decode()
    pos += 1 + n
    (plen,) = _U32.unpack_from(data, pos)
    pos += 4
    if pos + plen > stop:
        raise IndexError("properties run past the record")
    return msg_id, ts, exchange, routing_key, data[pos : pos + plen], data[pos + plen : stop]


def decode_parts(data: bytes | memoryview, pos: int = 0) -> RecordParts | None:
    """The fields of the record at ``pos`` of ``data``, or None when it is torn or corrupt."""
    if pos + 8 > len(data):
        return None
    length, crc = _HEAD.unpack_from(data, pos)
    start = pos + 8
    stop = start + length
    if length < 22 or stop > len(data):
        return None
    if isinstance(data, memoryview):
        data, start, stop = bytes(data[start:stop]), 0, length
    with memoryview(data) as view:  # the checksum without copying the record
        if zlib.crc32(view[start:stop]) != crc:
            return None
    try:
        return _decode_at(data, start, stop)
    except (IndexError, struct.error, UnicodeDecodeError):
        return None


def checked_record_id(data: bytes) -> int | None:
    """The id of ``data`` when it is exactly one whole record whose checksum holds (a
    replica stores a record it was sent as it came: ``QueueLog.stage_record``), else None."""
    if len(data) < 30:
        return None
    length, crc = _HEAD.unpack_from(data)
    if length != len(data) - 8:
        return None
    with memoryview(data) as view:
        if zlib.crc32(view[8:]) != crc:
            return None
    return int(_U64.unpack_from(data, 8)[0])


def decode_record(data: bytes | memoryview, pos: int = 0) -> LoggedMessage | None:
    """The record at ``pos`` of ``data``, or None when it is torn or corrupt."""
    parts = decode_parts(data, pos)
    return None if parts is None else LoggedMessage(*parts)


class LogObserver(Protocol):
    """Told of every change a ``QueueLog`` makes, after it is written (a replicated quorum
    queue's leader ships them to its replicas in the same order: ``cluster/
    quorum_replication.py``)."""

    def records_written(self, records: list[bytes]) -> None:
        """Encoded records (``encode_record``), exactly as just written to the segment."""
        ...

    def acked(self, ids: list[int]) -> None: ...
    def delivered(self, msg_id: int) -> None: ...
    def purged(self, floor: int) -> None: ...
    def counted(self, entries: list[tuple[int, int, bool]]) -> None:
        """Delivery-count entries (id, count, out), as just written to ``counts``."""
        ...


class Located(NamedTuple):
    """A recovered message and where its record sits in its segment."""

    message: LoggedMessage
    position: int
    size: int


def _iter_segment(data: bytes) -> Iterator[Located]:
    """The whole records of a segment's bytes, up to the first torn or corrupt one."""
    pos = 0
    while True:
        rec = decode_record(data, pos)
        if rec is None:
            return
        size = 8 + _HEAD.unpack_from(data, pos)[0]
        yield Located(rec, pos, size)
        pos += size


@dataclass
class _Segment:
    first: int
    path: Path
    live: int = 0  # messages not acked yet
    count: int = 0
    reader: handles.CachedFile | None = None  # for reading bodies back (opened on demand)


class QueueLog:
    """Append, ack and recover the persistent messages of one durable queue."""

    def __init__(self, directory: Path, segment_bytes: int = DEFAULT_SEGMENT_BYTES) -> None:
        self.directory = Path(directory)
        self.segment_bytes = segment_bytes
        self.directory.mkdir(parents=True, exist_ok=True)
        self._segments: dict[int, _Segment] = {}  # first id -> segment
        self._order: list[int] = []  # first ids, ascending
        self._seg_file: handles.CachedFile | None = None  # the segment being written
        self._current: _Segment | None = None
        self._size = 0
        self._ack_file: handles.CachedFile | None = None
        self._ack_entries = 0
        self._delivered_file: handles.CachedFile | None = None
        self.delivered = 0
        self._delivered_written = 0
        self.recovered_delivered = 0  # ``delivered`` as recovery found it
        self.floor = 0
        self.last_id = 0
        self.dirty = False
        self._staged: list[bytes] = []  # encoded records not written yet (``stage``)
        self.counts: dict[int, tuple[int, bool]] = {}  # recovered: id -> (count, out)
        self._counts_file: handles.CachedFile | None = None
        self._counts_staged: list[bytes] = []
        self._count_entries = 0
        self._counts_kept = 0  # entries the last rewrite kept
        self.observer: LogObserver | None = None  # told of each change once written

    # ------------------------------------------------------------------ recovery

    def recover(self) -> list[LoggedMessage]:
        """Open the log; the messages not acked, in id order (torn tails are cut off)."""
        return [found.message for found in self.scan()]

    def scan(self) -> Iterator[Located]:
        """Open the log: the messages not acked, in id order, with their record positions.

        One segment's bytes are in memory at a time. ``delivered`` is set before this
        returns; the log is ready for writing once the iterator is exhausted."""
        acked = self._read_acks()
        self.delivered = self._read_mark(DELIVERED_FILE)
        self._delivered_written = self.recovered_delivered = self.delivered
        self.floor = self._read_mark(FLOOR_FILE)
        self.last_id = max(self.last_id, self.delivered, self.floor)
        self.counts = {i: got for i, got in read_counts(self.directory).items() if i not in acked}
        return self._scan(acked)

    def _scan(self, acked: set[int]) -> Iterator[Located]:
        firsts = sorted(
            int(p.name[: -len(SEGMENT_SUFFIX)])
            for p in self.directory.glob("*" + SEGMENT_SUFFIX)
            if p.name[: -len(SEGMENT_SUFFIX)].isdigit()
        )
        for first in firsts:
            path = self.directory / f"{first:020d}{SEGMENT_SUFFIX}"
            data = path.read_bytes()
            seg = _Segment(first, path)
            valid = 0
            survivors: list[Located] = []
            for found in _iter_segment(data):
                valid = found.position + found.size
                seg.count += 1
                self.last_id = max(self.last_id, found.message.id)
                if found.message.id not in acked and found.message.id > self.floor:
                    survivors.append(found)
            del data
            if valid != path.stat().st_size:
                with open(path, "r+b") as handle:  # cut the torn tail: it was never confirmed
                    handle.truncate(valid)
            seg.live = len(survivors)
            if seg.live == 0:
                path.unlink(missing_ok=True)
                continue
            self._segments[first] = seg
            self._order.append(first)
            yield from survivors
        self._rewrite_acks(acked)
        if self.counts or (self.directory / COUNTS_FILE).exists():
            self._rewrite_counts(self.counts)
        self._delivered_file = _cached(self.directory / DELIVERED_FILE, os.O_WRONLY)

    def _read_acks(self) -> set[int]:
        return _read_acks(self.directory)

    def _read_mark(self, name: str) -> int:
        return _read_mark(self.directory, name)

    def _rewrite_acks(self, acked: set[int]) -> None:
        """Keep only the acks of segments that still exist (temp + rename)."""
        if self._ack_file is not None:
            self._ack_file.close()  # (the next acquire opens the new file)
        live_ids = [i for i in sorted(acked) if self._segment_of(i) is not None]
        temp = self.directory / (ACK_FILE + ".tmp")
        with open(temp, "wb") as handle:
            handle.write(b"".join(_U64.pack(i) for i in live_ids))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, self.directory / ACK_FILE)
        self._ack_file = _cached(self.directory / ACK_FILE, os.O_WRONLY | os.O_APPEND)
        self._ack_entries = len(live_ids)

    def _segment_of(self, msg_id: int) -> _Segment | None:
        i = bisect_right(self._order, msg_id)
        return self._segments.get(self._order[i - 1]) if i else None

    def _segment_span(self, msg_id: int) -> tuple[_Segment | None, int]:
        """The segment holding ``msg_id`` and the first id of the next one (or a bound
        above every id): ids below that bound are in the same segment."""
        order = self._order
        i = bisect_right(order, msg_id)
        upper = order[i] if i < len(order) else 1 << 64
        return (self._segments.get(order[i - 1]) if i else None), upper

    # ------------------------------------------------------------------ writing

    def next_id(self) -> int:
        self.last_id += 1
        return self.last_id

    def append(self, records: list[tuple[int, int, str, str, bytes, bytes]]) -> None:
        """Write messages (ids increasing, from ``next_id``) with one write per segment."""
        for record in records:
            self.stage(*record)
        self.write_staged()

    def stage(
        self, msg_id: int, ts: int, exchange: str, routing_key: str, props: bytes, body: bytes
    ) -> tuple[int, int]:
        """Add one message (ids increasing) to the next write; its (position, size) in its
        segment. ``write_staged`` writes what is staged (a segment roll writes it too)."""
        return self.stage_record(
            msg_id, encode_record(msg_id, ts, exchange, routing_key, props, body)
        )

    def stage_record(self, msg_id: int, data: bytes) -> tuple[int, int]:
        """``stage`` of a record already encoded (``encode_record``) with id ``msg_id``: a
        replica's copy stores what its leader wrote as it came, byte for byte."""
        if self._current is None or self._size >= self.segment_bytes:
            self.write_staged()
            self._roll(msg_id)
        self._staged.append(data)
        position = self._size
        self._size += len(data)
        seg = self._current
        assert seg is not None
        seg.live += 1
        seg.count += 1
        return position, len(data)

    def write_staged(self) -> None:
        """One write of the staged records to the current segment."""
        parts = self._staged
        if not parts:
            return
        self._staged = []
        self.dirty = True
        data = b"".join(parts)
        assert self._seg_file is not None
        with self._seg_file.pinned() as fd:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
        if self.observer is not None:
            self.observer.records_written(parts)

    def read(self, wanted: list[tuple[int, int, int]]) -> list[LoggedMessage | None]:
        """Messages read back by (id, position, size), in the order given; adjacent records
        of one segment are read with one pread. None for a record that cannot be read back
        (its segment is gone or the bytes are corrupt)."""
        return [None if p is None else LoggedMessage(*p) for p in self.read_parts(wanted)]

    def read_parts(self, wanted: list[tuple[int, int, int]]) -> list[RecordParts | None]:
        """``read`` as plain tuples of the fields (the queue's read-back path)."""
        self.write_staged()
        out: list[RecordParts | None] = []
        i = 0
        n = len(wanted)
        while i < n:
            msg_id, start, size = wanted[i]
            seg, upper = self._segment_span(msg_id)
            j = i + 1
            end = start + size
            while j < n and wanted[j][1] == end and msg_id < wanted[j][0] < upper:
                end += wanted[j][2]
                j += 1
            data = b"" if seg is None else self._pread(seg, start, end - start)
            pos = 0
            for k in range(i, j):
                rec = decode_parts(data, pos)
                out.append(rec if rec is not None and rec[0] == wanted[k][0] else None)
                pos += wanted[k][2]
            i = j
        return out

    def _pread(self, seg: _Segment, start: int, size: int) -> bytes:
        reader = seg.reader
        if reader is None:
            reader = seg.reader = handles.shared.file(seg.path, os.O_RDONLY)
        fd = reader.acquire()
        try:
            return os.pread(fd, size, start)
        finally:
            reader.release()

    def _roll(self, first: int) -> None:
        if self._seg_file is not None:
            with self._seg_file.pinned() as fd:
                os.fdatasync(fd)  # a sealed segment is durable before the next one starts
            self._seg_file.close()
        previous = self._current
        if previous is not None and previous.live <= 0:
            self._drop(previous)
        path = self.directory / f"{first:020d}{SEGMENT_SUFFIX}"
        self._seg_file = _cached(path, os.O_WRONLY | os.O_APPEND)
        seg = _Segment(first, path)
        self._segments[first] = seg
        self._order.append(first)
        self._current = seg
        self._size = 0

    def ack(self, ids: list[int]) -> None:
        """Record acks (written at once); fully acked old segments are deleted."""
        if not ids:
            return
        assert self._ack_file is not None
        with self._ack_file.pinned() as fd:
            os.write(fd, struct.pack(f">{len(ids)}Q", *ids))
        self._ack_entries += len(ids)
        if self.observer is not None:
            self.observer.acked(ids)
        emptied = False
        # ids mostly come in runs of one segment: look the segment up once per run
        seg: _Segment | None = None
        lower = upper = 0
        for msg_id in ids:
            if not lower <= msg_id < upper:
                seg, upper = self._segment_span(msg_id)
                lower = seg.first if seg is not None else upper
                if seg is None:
                    lower, upper = 0, 0
                    continue
            if seg is None:
                continue
            seg.live -= 1
            if seg.live <= 0 and seg is not self._current:
                self._drop(seg)
                emptied = True
                seg, lower, upper = None, 0, 0
        if emptied and self._ack_entries > 4096:
            self._compact()

    def _drop(self, seg: _Segment) -> None:
        self._segments.pop(seg.first, None)
        self._order.remove(seg.first)
        if seg.reader is not None:
            seg.reader.close()
        seg.path.unlink(missing_ok=True)

    def _compact(self) -> None:
        self._rewrite_acks(self._read_acks())

    def mark_delivered(self, msg_id: int) -> None:
        """Record that messages up to ``msg_id`` were handed out (before sending them)."""
        self.note_delivered(msg_id)
        self.flush_delivered()

    def note_delivered(self, msg_id: int) -> None:
        """Like ``mark_delivered`` without the write: ``flush_delivered`` must run before
        the deliveries are sent (one write for a whole dispatch turn)."""
        if msg_id > self.delivered:
            self.delivered = msg_id

    def flush_delivered(self) -> None:
        """Write the delivered mark if it moved since the last write (and the count entries
        noted with it)."""
        self.write_counts()
        if self.delivered > self._delivered_written:
            self._delivered_written = self.delivered
            assert self._delivered_file is not None
            with self._delivered_file.pinned() as fd:
                os.pwrite(fd, _U64.pack(self.delivered), 0)
            if self.observer is not None:
                self.observer.delivered(self.delivered)

    # ------------------------------------------------------------------ delivery counts

    def returned_count(self, msg_id: int) -> int:
        """How many times a recovered message was returned to the queue: its last entry's
        count, plus one when a consumer held it then (its consumer is gone with the
        process, as a closed channel returns what it held); with no entry, one when it was
        handed out (at or below the ``delivered`` recovery found: held when the log was last
        written), else none."""
        got = self.counts.get(msg_id)
        if got is None:
            return 1 if msg_id <= self.recovered_delivered else 0
        count, out = got
        return count + 1 if out else count

    def record_counts(self, entries: list[tuple[int, int, bool]]) -> None:
        """Record (id, count, out) entries now (messages returned: ``out`` false)."""
        self.note_counts(entries)
        self.write_counts()

    def note_counts(self, entries: list[tuple[int, int, bool]]) -> None:
        """Like ``record_counts`` without the write: ``write_counts`` (or
        ``flush_delivered``) writes them before the deliveries they describe are sent."""
        self._counts_staged.extend(_count_entry(*entry) for entry in entries)

    def write_counts(self) -> None:
        """One write of the noted count entries (the record is rewritten once it grew)."""
        staged = self._counts_staged
        if not staged:
            return
        self._counts_staged = []
        self.dirty = True
        if self._counts_file is None:  # the first entry of this queue's life
            self._counts_file = _cached(self.directory / COUNTS_FILE, os.O_WRONLY | os.O_APPEND)
        with self._counts_file.pinned() as fd:
            os.write(fd, b"".join(staged))
        if self.observer is not None:
            self.observer.counted([unpack_count(entry) for entry in staged])
        self._count_entries += len(staged)
        if self._count_entries > max(_COMPACT_ENTRIES, 2 * self._counts_kept):
            acked = self._read_acks()
            self._rewrite_counts(
                {i: c for i, c in read_counts(self.directory).items() if i not in acked}
            )

    def _rewrite_counts(self, counts: dict[int, tuple[int, bool]]) -> None:
        """Keep the latest entry of the ids still in a segment (temp + rename)."""
        if self._counts_file is not None:
            self._counts_file.close()
        parts = [
            _count_entry(msg_id, *counts[msg_id])
            for msg_id in sorted(counts)
            if msg_id > self.floor and self._segment_of(msg_id) is not None
        ]
        temp = self.directory / (COUNTS_FILE + ".tmp")
        with open(temp, "wb") as handle:
            handle.write(b"".join(parts))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, self.directory / COUNTS_FILE)
        self._counts_file = _cached(self.directory / COUNTS_FILE, os.O_WRONLY | os.O_APPEND)
        self._count_entries = self._counts_kept = len(parts)

    def purge(self) -> None:
        """Forget every message: all segments go, the ack record restarts empty. The floor
        is written first: a crash half way through brings none of them back."""
        self.write_staged()
        self.floor = self.last_id
        fd = os.open(self.directory / FLOOR_FILE, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.pwrite(fd, _U64.pack(self.floor), 0)
        finally:
            os.close(fd)
        if self._seg_file is not None:
            self._seg_file.close()
            self._seg_file = None
        for seg in list(self._segments.values()):
            if seg.reader is not None:
                seg.reader.close()
            seg.path.unlink(missing_ok=True)
        self._segments.clear()
        self._order.clear()
        self._current = None
        self._rewrite_acks(set())
        self._counts_staged = []
        self.counts = {}
        if self._counts_file is not None or (self.directory / COUNTS_FILE).exists():
            self._rewrite_counts({})
        if self.observer is not None:
            self.observer.purged(self.floor)

    def sync(self) -> None:
        """fdatasync the segment being written and the ack record."""
        self.dirty = False
        self.write_counts()
        for handle in (self._seg_file, self._ack_file, self._counts_file):
            if handle is not None:
                try:
                    with handle.pinned() as fd:
                        os.fdatasync(fd)
                except OSError as error:  # closed by a roll meanwhile (it was synced), or
                    if error.errno not in (errno.EBADF, errno.ENOENT):  # a purge removed it
                        raise

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    @property
    def live_count(self) -> int:
        """Records not settled (acked or purged) yet: what a quorum queue's members compare."""
        return sum(seg.live for seg in self._segments.values())

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.write_staged()
            self.write_counts()
        for seg in self._segments.values():
            if seg.reader is not None:
                seg.reader.close()
        for handle in (self._seg_file, self._ack_file, self._delivered_file, self._counts_file):
            if handle is not None:
                with contextlib.suppress(OSError):
                    handle.close()
        self._seg_file = self._ack_file = self._delivered_file = self._counts_file = None

    def delete(self, release: Callable[[Path], None] = layout.remove_later) -> None:
        """Close the log and remove its files without waiting for them: what is staged is
        dropped, the directory is renamed to a tombstone (the name is free at once) and
        given to ``release`` (by default a background thread removes it; the gateway first
        waits for the delete to be durable): a queue.delete, or the exclusive queues of a
        closing connection, never unlink segments on the event loop."""
        self._staged = []
        self._counts_staged = []
        self.close()
        tombstone = layout.bury(self.directory)
        if tombstone is not None:
            release(tombstone)

    def records(self) -> Iterator[Path]:
        """The segment files (tests and tools)."""
        return (self._segments[f].path for f in self._order)


def last_id_of(directory: Path) -> int:
    """The highest id a log holds or held (its last whole record, its delivered mark, its
    purge floor), read without opening it for writing: a failover compares copies that
    their followers may still hold open."""
    directory = Path(directory)
    found = max(_read_mark(directory, DELIVERED_FILE), _read_mark(directory, FLOOR_FILE))
    firsts = sorted(
        (
            int(p.name[: -len(SEGMENT_SUFFIX)])
            for p in directory.glob("*" + SEGMENT_SUFFIX)
            if p.name[: -len(SEGMENT_SUFFIX)].isdigit()
        ),
        reverse=True,
    )
    for first in firsts:
        path = directory / f"{first:020d}{SEGMENT_SUFFIX}"
        try:
            data = path.read_bytes()
        except FileNotFoundError:  # dropped meanwhile (acked whole)
            continue
        last = 0
        for found_record in _iter_segment(data):
            last = found_record.message.id
        if last:
            return max(found, last)
    return found


class Snapshot:
    """A read-only look at a queue's log while its writer goes on (a replica catching up:
    ``cluster/quorum_replication.py``), taken in a worker thread, one segment at a time.

    ``open`` reads the floor, the delivered mark and the acks (in that order, before any
    segment: an ack file compacted later only loses acks of segments deleted by then, and a
    deleted segment's ids are settled), then lists the segments; ``segment`` reads one and
    returns its live ids at or below ``after`` (as runs) and the encoded records of its live
    ids in (``after``, ``through``]. What changes after ``open`` may or may not show: the
    caller sends the changes made since it began as well, and the replica applies each
    change once."""

    def __init__(self, directory: Path, after: int, through: int) -> None:
        self.directory = Path(directory)
        self.after = after
        self.through = through
        self.floor = 0
        self.delivered = 0
        self.firsts: list[int] = []
        self._acked: set[int] = set()

    def open(self) -> None:
        self.floor = _read_mark(self.directory, FLOOR_FILE)
        self.delivered = _read_mark(self.directory, DELIVERED_FILE)
        self._acked = _read_acks(self.directory)
        self.firsts = sorted(
            int(p.name[: -len(SEGMENT_SUFFIX)])
            for p in self.directory.glob("*" + SEGMENT_SUFFIX)
            if p.name[: -len(SEGMENT_SUFFIX)].isdigit()
        )

    def segment(self, first: int) -> tuple[list[tuple[int, int]], list[bytes]]:
        """(runs [first id, last id] of live ids at or below ``after``, encoded records of
        live ids above it up to ``through``) of one segment; nothing for one deleted
        meanwhile (every id in it was settled)."""
        runs: list[tuple[int, int]] = []
        records: list[bytes] = []
        if first > self.through:
            return runs, records
        try:
            data = (self.directory / f"{first:020d}{SEGMENT_SUFFIX}").read_bytes()
        except FileNotFoundError:
            return runs, records
        acked, floor, after = self._acked, self.floor, self.after
        for found in _iter_segment(data):
            msg_id = found.message.id
            if msg_id > self.through:
                break
            if msg_id in acked or msg_id <= floor:
                continue
            if msg_id <= after:
                if runs and runs[-1][1] == msg_id - 1:
                    runs[-1] = (runs[-1][0], msg_id)
                else:
                    runs.append((msg_id, msg_id))
            else:
                records.append(data[found.position : found.position + found.size])
        return runs, records


def _read_acks(directory: Path) -> set[int]:
    """The acked ids of the ack record (a torn last entry ignored)."""
    try:
        data = (directory / ACK_FILE).read_bytes()
    except FileNotFoundError:
        return set()
    usable = len(data) - len(data) % 8
    return {v for (v,) in _U64.iter_unpack(data[:usable])}


def _read_mark(directory: Path, name: str) -> int:
    try:
        data = (directory / name).read_bytes()
    except FileNotFoundError:
        return 0
    return _U64.unpack_from(data)[0] if len(data) >= 8 else 0


def pack_count(msg_id: int, count: int, out: bool) -> bytes:
    """A delivery count in ``COUNT``'s layout."""
    return COUNT.pack(msg_id, count << 1 | out)


def unpack_count(data: bytes, pos: int = 0) -> tuple[int, int, bool]:
    """(id, count, out) of the ``COUNT`` at ``pos`` of ``data``."""
    msg_id, word = COUNT.unpack_from(data, pos)
    return msg_id, word >> 1, bool(word & 1)


def _count_entry(msg_id: int, count: int, out: bool) -> bytes:
    head = pack_count(msg_id, count, out)
    return head + _U32.pack(zlib.crc32(head))


def read_counts(directory: Path) -> dict[int, tuple[int, bool]]:
    """A ``counts`` record: the latest (count, out) of each id; a torn tail or an entry
    failing its checksum is left out."""
    try:
        data = (Path(directory) / COUNTS_FILE).read_bytes()
    except FileNotFoundError:
        return {}
    out: dict[int, tuple[int, bool]] = {}
    for pos in range(0, len(data) - _COUNT_SIZE + 1, _COUNT_SIZE):
        (crc,) = _U32.unpack_from(data, pos + COUNT.size)
        if zlib.crc32(data[pos : pos + COUNT.size]) != crc:
            continue
        msg_id, count, was_out = unpack_count(data, pos)
        out[msg_id] = (count, was_out)
    return out


def _cached(path: Path, flags: int) -> handles.CachedFile:
    """The file at ``path``, created if missing, as a handle of the descriptor cache (which
    reopens it without ``O_CREAT``: a file removed meanwhile is never made again)."""
    os.close(handles.retrying(lambda: os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)))
    return handles.shared.file(path, flags)
