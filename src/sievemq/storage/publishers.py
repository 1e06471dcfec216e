"""Publisher sequences: the last publishing id stored per stream-protocol publisher reference.

The truth is in the data: every record a named stream-protocol publisher writes (record
kind ``KIND_STREAM``) carries a *publisher tag* in its properties field, ``u64 publishing id
| reference (UTF-8)``, in the same chunk and under the same CRC as the payload. So the
sequences can never be ahead of the data: a torn tail cut at recovery takes its tags with it.

Rebuilding from the data means a scan, so a snapshot ``publishers.snap`` remembers the
sequences up to an offset (written by ``save``, on clean shutdown):
``crc32 u32 | end offset u64 | count u32 | count × (u16 length | reference | u64 id)``, the
CRC covering what follows it. On load a snapshot whose end is past the stream's end (the
tail it saw was cut) or that fails its CRC is ignored; the records from the snapshot's end
(or the stream's first retained offset) to the stream's end are scanned.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from sievemq.storage.errors import StorageError
from sievemq.storage.types import KIND_STREAM, Message

if TYPE_CHECKING:
    from sievemq.storage.stream import Stream

SNAPSHOT_FILE = "publishers.snap"
_TAG = struct.Struct(">Q")
_HEAD = struct.Struct(">IQI")
_U16 = struct.Struct(">H")


def publisher_tag(reference: str, publishing_id: int) -> bytes:
    """The properties field of a record written by a named publisher."""
    return _TAG.pack(publishing_id) + reference.encode()


def read_tag(properties: bytes) -> tuple[str, int] | None:
    """(reference, publishing id) of a stream record's tag, None for an unnamed publisher."""
    if len(properties) <= _TAG.size:
        return None
    (pid,) = _TAG.unpack_from(properties)
    return properties[_TAG.size :].decode(errors="replace"), pid


TagReader = Callable[[bytes], "tuple[str, int] | None"]


class PublisherSequences:
    """reference -> last stored publishing id, for one stream.

    ``other_tags`` reads the (reference, id) of a record of another kind from its properties
    (the gateway's deduplicated AMQP publishes carry theirs in headers; storage does not parse
    AMQP), or None.
    """

    def __init__(self, stream: Stream, other_tags: TagReader | None = None) -> None:
        self.path = Path(stream.directory) / SNAPSHOT_FILE
        self._last: dict[str, int] = {}
        # reference -> the id it went back to when a publish of it was refused unwritten,
        # until the stream writes again (``refused``, ``written``)
        self._floors: dict[str, int] = {}
        self._other_tags = other_tags
        start = self._load(stream.end_offset)
        self.scanned = self._scan(stream, max(start, stream.first_offset))

    def _load(self, end_offset: int) -> int:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return 0
        try:
            crc, end, count = _HEAD.unpack_from(data)
            if zlib.crc32(data[4:]) != crc or end > end_offset:
                return 0
            pos = _HEAD.size
            last: dict[str, int] = {}
            for _ in range(count):
                (n,) = _U16.unpack_from(data, pos)
                ref = data[pos + 2 : pos + 2 + n].decode()
                (pid,) = _TAG.unpack_from(data, pos + 2 + n)
                last[ref] = pid
                pos += 2 + n + _TAG.size
        except (struct.error, UnicodeDecodeError):
            return 0
        self._last = last
        return int(end)

    def _scan(self, stream: Stream, start: int) -> int:
        if start >= stream.end_offset:
            return stream.end_offset
        reader = stream.reader(tail=True)  # every stored id, committed or not (dedup)
        try:
            reader.seek_offset(start)
            last = self._last
            other = self._other_tags
            while True:
                records = reader.read(4096)
                for r in records:
                    if not r.properties:
                        continue
                    if r.kind == KIND_STREAM:
                        tag = read_tag(r.properties)
                    elif other is not None:
                        tag = other(r.properties)
                    else:
                        continue
                    if tag is not None and tag[1] > last.get(tag[0], -1):
                        last[tag[0]] = tag[1]
                if reader.at_end:
                    return reader.position
        except StorageError:
            return stream.end_offset
        finally:
            reader.close()

    def catch_up(self, stream: Stream) -> None:
        """Read the records appended since this was built (it was built in a worker thread
        while the loop went on appending): usually none or a few."""
        self.scanned = self._scan(stream, max(self.scanned, stream.first_offset))

    def get(self, reference: str) -> int | None:
        return self._last.get(reference)

    def update(self, reference: str, publishing_id: int) -> None:
        if publishing_id > self._last.get(reference, -1):
            self._last[reference] = publishing_id

    def rewind(self, reference: str, publishing_id: int) -> None:
        """A publish from ``publishing_id`` on was refused, not stored (a fenced leader, a
        failed write): the publisher will send those ids again, and they must not be taken
        for duplicates. ``update`` ran when they arrived, so go back below them."""
        last = self._last.get(reference)
        if last is not None and last >= publishing_id:
            self._last[reference] = publishing_id - 1

    def refused(self, messages: Iterable[Message]) -> None:
        """``messages`` were refused unwritten (a fenced leader, a failed write): each
        reference among them goes back below its lowest refused id, and no further refusal
        raises it again until the stream writes (``written``): a publisher that pipelines
        sends later ids before it hears of the refusal, and they are refused in turn, while
        the earlier ones are still to be sent again. Deduplicated AMQP 0-9-1 publishes
        (``other_tags``) and stream-protocol ones alike."""
        lowest: dict[str, int] = {}
        other = self._other_tags
        for message in messages:
            props = message.properties
            if not props:
                continue
            if message.kind == KIND_STREAM:
                tag = read_tag(props)
            elif other is not None:
                tag = other(props)
            else:
                continue
            if tag is not None and tag[1] < lowest.get(tag[0], tag[1] + 1):
                lowest[tag[0]] = tag[1]
        floors = self._floors
        for reference, publishing_id in lowest.items():
            floor = min(publishing_id - 1, floors.get(reference, publishing_id - 1))
            floors[reference] = floor
            last = self._last.get(reference)
            if last is not None and last > floor:
                self._last[reference] = floor

    def written(self) -> None:
        """The stream wrote a batch again: what was refused before is history."""
        self._floors.clear()

    @property
    def refusing(self) -> bool:
        """Whether a refusal was seen since the last write (``written`` then has work)."""
        return bool(self._floors)

    def save(self, end_offset: int) -> None:
        """Write the snapshot (call when everything written so far is on disk)."""
        parts = [_HEAD.pack(0, end_offset, len(self._last))[4:]]
        for ref, pid in self._last.items():
            raw = ref.encode()
            parts.append(_U16.pack(len(raw)) + raw + _TAG.pack(pid))
        body = b"".join(parts)
        tmp = self.path.with_name(SNAPSHOT_FILE + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, struct.pack(">I", zlib.crc32(body)) + body)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
