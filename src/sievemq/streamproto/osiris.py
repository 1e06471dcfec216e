"""The chunk a Deliver carries, in osiris's layout (docs/storage-format.md, "Osiris layout").

``u32 size | u16 8 | u16 version | u8 subscription id | [v2: u64 committed chunk id] |
48-byte chunk header | data``, where data is one simple entry (``u32 length | payload``)
per record. Offsets in one chunk are contiguous from its chunk id. The Bloom bytes and the
trailer never go on the wire, so trailer length and Bloom size are 0.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from isal.isal_zlib import crc32

from sievemq.streamproto.wire import DELIVER

MAGIC_VERSION = 0x50
CHUNK_TYPE_USER = 0
EPOCH = 1
HEADER_SIZE = 48
# frame size field (4) is not counted in the frame's size
FRAME_OVERHEAD_V1 = 4 + 2 + 2 + 1
FRAME_OVERHEAD_V2 = FRAME_OVERHEAD_V1 + 8

_FRAME_V1 = struct.Struct(">IHHB")
_FRAME_V2 = struct.Struct(">IHHBQ")
# magic+version, chunk type, entries, records, timestamp, epoch, chunk id, crc, data length,
# trailer length, bloom size + reserved
_HEADER = struct.Struct(">BBHIqQQIIII")
_U32 = struct.Struct(">I")


def entries(payloads: Sequence[bytes]) -> bytes:
    """The data section: one simple entry per payload."""
    pack = _U32.pack
    parts: list[bytes] = []
    add = parts.append
    for p in payloads:
        add(pack(len(p)))
        add(p)
    return b"".join(parts)


def chunk_header(first_offset: int, count: int, timestamp_ms: int, data: bytes) -> bytes:
    # ISA-L's CRC-32 (zlib's checksum, several times faster)
    return header(first_offset, count, timestamp_ms, crc32(data), len(data))


def header(first_offset: int, count: int, timestamp_ms: int, crc: int, data_length: int) -> bytes:
    """The 48-byte chunk header of a data section whose CRC-32 is known (stored with it)."""
    return _HEADER.pack(
        MAGIC_VERSION,
        CHUNK_TYPE_USER,
        min(count, 0xFFFF),  # entries (u16): a replica's whole stored chunk may hold more
        count,
        timestamp_ms,
        EPOCH,
        first_offset,
        crc,
        data_length,
        0,
        0,
    )


def deliver_prefix(
    subscription_id: int, chunk_bytes: int, version: int = 1, committed_chunk_id: int = 0
) -> bytes:
    """The frame head before a chunk of ``chunk_bytes`` (header + data)."""
    if version >= 2:
        return _FRAME_V2.pack(
            FRAME_OVERHEAD_V2 - 4 + chunk_bytes, DELIVER, 2, subscription_id, committed_chunk_id
        )
    return _FRAME_V1.pack(FRAME_OVERHEAD_V1 - 4 + chunk_bytes, DELIVER, 1, subscription_id)


def chunk(first_offset: int, count: int, timestamp_ms: int, data: bytes) -> bytes:
    """Header + data of a chunk whose data section (``entries``) is already built: the part
    of a Deliver frame that is the same for every subscriber."""
    return chunk_header(first_offset, count, timestamp_ms, data) + data


def deliver(
    subscription_id: int,
    first_offset: int,
    timestamp_ms: int,
    payloads: Sequence[bytes],
    version: int = 1,
    committed_chunk_id: int = 0,
) -> bytes:
    """A whole Deliver frame for records ``first_offset ..`` with these payloads."""
    data = entries(payloads)
    head = chunk_header(first_offset, len(payloads), timestamp_ms, data)
    prefix = deliver_prefix(subscription_id, len(head) + len(data), version, committed_chunk_id)
    return b"".join((prefix, head, data))
