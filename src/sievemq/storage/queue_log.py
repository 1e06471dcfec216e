"""The durable message log of one classic or quorum queue: segments plus an ack record.

Protocol-free and synchronous. Messages are appended to numbered segment files
(``<first id>.qseg``); every record carries its own id, so recovery needs no index. Acks are a
compact append-only record of 8-byte ids (``acks``). A segment whose every message is acked is
deleted whole; the ack file is rewritten without the ids of deleted segments once it has grown
(write-temp + rename, so a crash leaves the old or the new file). ``delivered`` holds the
highest id ever handed to a consumer, written before the delivery goes out, so after a crash the
messages at or below it come back with the redelivered flag (never twice without it).

Record layout (big-endian): ``u32 length of the rest | u32 crc32 of the rest | rest`` where rest
is ``u64 id | u64 enqueue time ms | u8 len + exchange | u8 len + routing key | u32 len +
properties | body``. A torn or corrupt tail record ends recovery of that segment (it was never
confirmed: the confirm follows the write).
"""

from __future__ import annotations

import contextlib
import errno
import os
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

_HEAD = struct.Struct(">II")
_FIXED = struct.Struct(">QQ")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
SEGMENT_SUFFIX = ".qseg"
ACK_FILE = "acks"
DELIVERED_FILE = "delivered"
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


def _decode_rest(rest: bytes) -> LoggedMessage:
    msg_id, ts = _FIXED.unpack_from(rest)
    pos = 16
    n = rest[pos]
    exchange = rest[pos + 1 : pos + 1 + n].decode()
    pos += 1 + n
    n = rest[pos]
    routing_key = rest[pos + 1 : pos + 1 + n].decode()
    pos += 1 + n
    (plen,) = _U32.unpack_from(rest, pos)
    pos += 4
    props = rest[pos : pos + plen]
    return LoggedMessage(msg_id, ts, exchange, routing_key, props, rest[pos + plen :])


def read_segment(path: Path) -> tuple[list[LoggedMessage], int]:
    """The whole records of a segment file and the byte length they span."""
    data = path.read_bytes()
    out: list[LoggedMessage] = []
    pos = 0
    end = len(data)
    while pos + 8 <= end:
        length, crc = _HEAD.unpack_from(data, pos)
        stop = pos + 8 + length
        if length < 22 or stop > end:
            break
        rest = data[pos + 8 : stop]
        if zlib.crc32(rest) != crc:
            break
        try:
            out.append(_decode_rest(rest))
        except (IndexError, struct.error, UnicodeDecodeError):
            break
        pos = stop
    return out, pos


@dataclass
class _Segment:
    first: int
    path: Path
    live: int = 0  # messages not acked yet
    count: int = 0


class QueueLog:
    """Append, ack and recover the persistent messages of one durable queue."""

    def __init__(self, directory: Path, segment_bytes: int = DEFAULT_SEGMENT_BYTES) -> None:
        self.directory = Path(directory)
        self.segment_bytes = segment_bytes
        self.directory.mkdir(parents=True, exist_ok=True)
        self._segments: dict[int, _Segment] = {}  # first id -> segment
        self._order: list[int] = []  # first ids, ascending
        self._fd = -1
        self._current: _Segment | None = None
        self._size = 0
        self._ack_fd = -1
        self._ack_entries = 0
        self._delivered_fd = -1
        self.delivered = 0
        self.last_id = 0
        self.dirty = False

    # ------------------------------------------------------------------ recovery

    def recover(self) -> list[LoggedMessage]:
        """Open the log; the messages not acked, in id order (torn tails are cut off)."""
        acked = self._read_acks()
        survivors: list[LoggedMessage] = []
        firsts = sorted(
            int(p.name[: -len(SEGMENT_SUFFIX)])
            for p in self.directory.glob("*" + SEGMENT_SUFFIX)
            if p.name[: -len(SEGMENT_SUFFIX)].isdigit()
        )
        for first in firsts:
            path = self.directory / f"{first:020d}{SEGMENT_SUFFIX}"
            records, valid = read_segment(path)
            if valid != path.stat().st_size:
                with open(path, "r+b") as handle:  # cut the torn tail: it was never confirmed
                    handle.truncate(valid)
            seg = _Segment(first, path, count=len(records))
            for rec in records:
                self.last_id = max(self.last_id, rec.id)
                if rec.id not in acked:
                    survivors.append(rec)
                    seg.live += 1
            if seg.live == 0:
                path.unlink(missing_ok=True)
                continue
            self._segments[first] = seg
            self._order.append(first)
        self.delivered = self._read_delivered()
        self._rewrite_acks(acked)
        self._delivered_fd = os.open(self.directory / DELIVERED_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        return survivors

    def _read_acks(self) -> set[int]:
        path = self.directory / ACK_FILE
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return set()
        usable = len(data) - len(data) % 8
        return {v for (v,) in _U64.iter_unpack(data[:usable])}

    def _read_delivered(self) -> int:
        try:
            data = (self.directory / DELIVERED_FILE).read_bytes()
        except FileNotFoundError:
            return 0
        return _U64.unpack_from(data)[0] if len(data) >= 8 else 0

    def _rewrite_acks(self, acked: set[int]) -> None:
        """Keep only the acks of segments that still exist (temp + rename)."""
        if self._ack_fd >= 0:
            os.close(self._ack_fd)
        live_ids = [i for i in sorted(acked) if self._segment_of(i) is not None]
        temp = self.directory / (ACK_FILE + ".tmp")
        with open(temp, "wb") as handle:
            handle.write(b"".join(_U64.pack(i) for i in live_ids))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, self.directory / ACK_FILE)
        self._ack_fd = os.open(self.directory / ACK_FILE, os.O_WRONLY | os.O_APPEND)
        self._ack_entries = len(live_ids)

    def _segment_of(self, msg_id: int) -> _Segment | None:
        lo, hi = 0, len(self._order) - 1
        found = None
        while lo <= hi:
            mid = (lo + hi) // 2
            if self._order[mid] <= msg_id:
                found = self._order[mid]
                lo = mid + 1
            else:
                hi = mid - 1
        return None if found is None else self._segments.get(found)

    # ------------------------------------------------------------------ writing

    def next_id(self) -> int:
        self.last_id += 1
        return self.last_id

    def append(self, records: list[tuple[int, int, str, str, bytes, bytes]]) -> None:
        """Write messages (ids increasing, from ``next_id``) with one write per segment."""
        if not records:
            return
        pending: list[bytes] = []
        for msg_id, ts, exchange, routing_key, props, body in records:
            if self._current is None or self._size >= self.segment_bytes:
                self._write(pending)
                pending = []
                self._roll(msg_id)
            data = encode_record(msg_id, ts, exchange, routing_key, props, body)
            pending.append(data)
            self._size += len(data)
            seg = self._current
            assert seg is not None
            seg.live += 1
            seg.count += 1
        self._write(pending)
        self.dirty = True

    def _write(self, parts: list[bytes]) -> None:
        if not parts:
            return
        data = b"".join(parts)
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]

    def _roll(self, first: int) -> None:
        if self._fd >= 0:
            os.fdatasync(self._fd)  # a sealed segment is durable before the next one starts
            os.close(self._fd)
        previous = self._current
        if previous is not None and previous.live <= 0:
            self._drop(previous)
        path = self.directory / f"{first:020d}{SEGMENT_SUFFIX}"
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        seg = _Segment(first, path)
        self._segments[first] = seg
        self._order.append(first)
        self._current = seg
        self._size = 0

    def ack(self, ids: list[int]) -> None:
        """Record acks (written at once); fully acked old segments are deleted."""
        if not ids:
            return
        data = b"".join(_U64.pack(i) for i in ids)
        os.write(self._ack_fd, data)
        self._ack_entries += len(ids)
        emptied = False
        for msg_id in ids:
            seg = self._segment_of(msg_id)
            if seg is None:
                continue
            seg.live -= 1
            if seg.live <= 0 and seg is not self._current:
                self._drop(seg)
                emptied = True
        if emptied and self._ack_entries > 4096:
            self._compact()

    def _drop(self, seg: _Segment) -> None:
        self._segments.pop(seg.first, None)
        self._order.remove(seg.first)
        seg.path.unlink(missing_ok=True)

    def _compact(self) -> None:
        self._rewrite_acks(self._read_acks())

    def mark_delivered(self, msg_id: int) -> None:
        """Record that messages up to ``msg_id`` were handed out (before sending them)."""
        if msg_id > self.delivered:
            self.delivered = msg_id
            os.pwrite(self._delivered_fd, _U64.pack(msg_id), 0)

    def purge(self) -> None:
        """Forget every message: all segments go, the ack record restarts empty."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        for seg in list(self._segments.values()):
            seg.path.unlink(missing_ok=True)
        self._segments.clear()
        self._order.clear()
        self._current = None
        self._rewrite_acks(set())

    def sync(self) -> None:
        """fdatasync the segment being written and the ack record."""
        self.dirty = False
        for fd in (self._fd, self._ack_fd):
            if fd >= 0:
                try:
                    os.fdatasync(fd)
                except OSError as error:  # closed by a segment roll meanwhile: it was synced
                    if error.errno != errno.EBADF:
                        raise

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    def close(self) -> None:
        for attr in ("_fd", "_ack_fd", "_delivered_fd"):
            fd = getattr(self, attr)
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
                setattr(self, attr, -1)

    def delete(self) -> None:
        """Close and remove every file of the log."""
        self.close()
        for path in self.directory.iterdir():
            path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            self.directory.rmdir()

    def records(self) -> Iterator[Path]:
        """The segment files (tests and tools)."""
        return (self._segments[f].path for f in self._order)
