"""OffsetStore: durable named-consumer offsets in an append-only log.

Each record is ``crc32 u32 | offset i64 | name length u16 | name``, the CRC covering the rest;
offset -1 deletes the name. Loading stops at the first torn or bad record (a SIGKILL mid-write
leaves at most one) and cuts it off. When the log holds far more records than live names it
is rewritten to a temporary file and renamed over the old one.

``listeners`` hear every change (name, offset; None for a delete): a cluster leader ships
them to its stream's replicas, which keep their own copy of this log (docs/cluster.md).
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Callable
from pathlib import Path

from sievemq.storage.durable import fsync_dir
from sievemq.storage.handles import CachedFile, shared

_HEAD = struct.Struct(">IqH")
_DELETED = -1
_COMPACT_MIN = 1024

OffsetListener = Callable[[str, "int | None"], None]


def _record(name: str, offset: int) -> bytes:
    raw = name.encode()
    if len(raw) > 0xFFFF:
        raise ValueError("consumer name too long")
    body = struct.pack(">qH", offset, len(raw)) + raw
    return struct.pack(">I", zlib.crc32(body)) + body


def _parse(data: bytes) -> tuple[dict[str, int], int, int]:
    """(live offsets, records read, length of the valid prefix) of an offsets log."""
    offsets: dict[str, int] = {}
    records = 0
    p = 0
    while p + _HEAD.size <= len(data):
        crc, offset, n = _HEAD.unpack_from(data, p)
        end = p + _HEAD.size + n
        if end > len(data) or zlib.crc32(data[p + 4 : end]) != crc:
            break
        name = data[p + _HEAD.size : end].decode()
        if offset == _DELETED:
            offsets.pop(name, None)
        else:
            offsets[name] = offset
        records += 1
        p = end
    return offsets, records, p


def read_offsets(path: Path) -> dict[str, int]:
    """The named-consumer offsets in a log, read-only (safe beside the running server)."""
    try:
        return _parse(path.read_bytes())[0]
    except FileNotFoundError:
        return {}


class OffsetStore:
    """Named-consumer offsets of one stream; ``fsync`` makes every set durable on disk."""

    def __init__(self, path: Path, fsync: bool = False) -> None:
        self.path = path
        self._fsync = fsync
        self._offsets: dict[str, int] = {}
        self._records = 0
        self._dirty = False  # written since the last fsync
        self.listeners: list[OffsetListener] = []  # told of each change, once written
        tmp = path.with_name(path.name + ".tmp")
        if tmp.exists():
            tmp.unlink()  # a compaction that died before its rename
        self._load()
        # opened when first written, closed by the shared descriptor cache when idle
        self._file: CachedFile | None = shared.file(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)

    def _load(self) -> None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        self._offsets, self._records, valid = _parse(data)
        if valid != len(data):
            os.truncate(self.path, valid)  # drop the torn last record

    def get(self, name: str) -> int | None:
        return self._offsets.get(name)

    def set(self, name: str, offset: int) -> None:
        if offset < 0:
            raise ValueError("offsets are >= 0")
        if self._offsets.get(name) == offset:
            return
        # memory first: a compaction triggered by this write rewrites the log from memory
        self._offsets[name] = offset
        self._write(_record(name, offset))
        for listener in self.listeners:
            listener(name, offset)

    def delete(self, name: str) -> None:
        if name not in self._offsets:
            return
        del self._offsets[name]
        self._write(_record(name, _DELETED))
        for listener in self.listeners:
            listener(name, None)

    def replace_all(self, offsets: dict[str, int]) -> None:
        """Make the store hold exactly ``offsets`` (a replica taking its leader's whole
        set): names it lacks are deleted, the others set."""
        for name in [n for n in self._offsets if n not in offsets]:
            self.delete(name)
        for name, offset in offsets.items():
            self.set(name, offset)

    def items(self) -> dict[str, int]:
        return dict(self._offsets)

    def _write(self, record: bytes) -> None:
        if self._file is None:
            raise ValueError(f"offset store {self.path} is closed")
        fd = self._file.acquire()
        try:
            os.write(fd, record)
            if self._fsync:
                os.fdatasync(fd)
            else:
                self._dirty = True
        finally:
            self._file.release()
        self._records += 1
        if self._records > _COMPACT_MIN and self._records > 4 * len(self._offsets):
            self.compact()

    def compact(self) -> None:
        """Rewrite the log with one record per live name (write, fsync, rename)."""
        tmp = self.path.with_name(self.path.name + ".tmp")
        data = b"".join(_record(k, v) for k, v in self._offsets.items())
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        if self._file is not None:
            self._file.close()  # the next write opens the new file
        os.replace(tmp, self.path)
        fsync_dir(self.path.parent)
        self._records = len(self._offsets)

    def sync(self) -> None:
        if self._file is None:
            return
        fd = self._file.acquire()
        try:
            os.fsync(fd)
            self._dirty = False
        finally:
            self._file.release()

    def close(self, sync: bool = True) -> None:
        """Close; ``sync=False`` for a stream being deleted (nothing to keep)."""
        if self._file is not None:
            if self._dirty and sync:
                self.sync()
            self._file.close()
            self._file = None
