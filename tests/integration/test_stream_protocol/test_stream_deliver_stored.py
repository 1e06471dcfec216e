"""Deliver from stored osiris-layout chunks, through a socket the client reads slowly.

Stream-protocol publishes are stored with their Deliver data section and its CRC
(docs/storage-format.md, "Osiris layout"); a turn's Deliver frames go to the socket with one
``writev`` and what the socket does not take waits in the transport. A client with a small
receive buffer that starts reading late makes the server meet partial writes; every record
must still arrive once, in order, in chunks whose CRC matches, beside 0-9-1 publishes to the
same stream (record-table chunks, converted on the way).
"""

from __future__ import annotations

import asyncio
import struct
import time
import zlib

import pytest

from sievemq.testing import ServerProcess
from sievemq.testing.pika_client import connect
from sievemq.testing.stream_client import RawStreamClient, producer, send_confirmed, string

BATCHES = 80
PER_BATCH = 100


def _payload(i: int) -> bytes:
    return f"m{i:06d}".encode() + bytes([i % 251]) * 1017  # 1 KiB, distinct per message


def _publish(server: ServerProcess, stream: str) -> list[int]:
    """Stream-protocol batches with a 0-9-1 publish after every tenth; returns the offsets
    of the 0-9-1 messages."""
    conn = connect(server)
    ch = conn.channel()
    ch.queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})
    ch.confirm_delivery()
    amqp_offsets: list[int] = []
    offset = 0

    async def run() -> None:
        nonlocal offset
        async with producer(server) as p:
            for b in range(BATCHES):
                batch = [_payload(b * PER_BATCH + j) for j in range(PER_BATCH)]
                await send_confirmed(p, stream, batch)
                offset += PER_BATCH
                if b % 10 == 9:
                    ch.basic_publish("", stream, b"amqp-%d" % offset)
                    amqp_offsets.append(offset)
                    offset += 1

    asyncio.run(run())
    conn.close()
    return amqp_offsets


def _entries(data: bytes) -> list[bytes]:
    out = []
    p = 0
    while p < len(data):
        (n,) = struct.unpack_from(">I", data, p)
        out.append(data[p + 4 : p + 4 + n])
        p += 4 + n
    return out


@pytest.mark.parametrize("credit", [1, 50])
def test_a_slow_reader_gets_every_stored_chunk_once_in_order(
    server: ServerProcess, credit: int
) -> None:
    stream = f"stored-{credit}"
    amqp_offsets = _publish(server, stream)
    total = BATCHES * PER_BATCH + len(amqp_offsets)
    client = RawStreamClient(server, rcvbuf=16 * 1024)  # the server meets partial writes
    try:
        assert client.open() == 1
        client.request(7, struct.pack(">B", 1) + string(stream) + struct.pack(">HHI", 1, credit, 0))
        key, _, body = client.read_frame()
        assert key == 7 | 0x8000 and struct.unpack_from(">H", body, 4)[0] == 1
        time.sleep(1.0)  # let the socket fill up before reading anything
        client.sock.settimeout(30)
        got: list[bytes] = []
        while len(got) < total:
            key, version, body = client.read_frame()
            if key != 8:
                continue
            assert version == 1 and body[0] == 1  # Deliver v1, subscription 1
            head = body[1:49]
            _, ctype, entries, records, _, _, chunk_id, crc, size, _, _ = struct.unpack(
                ">BBHIqQQIIII", head
            )
            data = body[49:]
            assert (ctype, entries, chunk_id, size) == (0, records, len(got), len(data))
            assert zlib.crc32(data) == crc
            got.extend(_entries(data))
            client.send(9, struct.pack(">BH", 1, 1))  # one credit back per Deliver, like rstream
    finally:
        client.close()
    assert len(got) == total
    expected = iter(range(BATCHES * PER_BATCH))
    for offset, payload in enumerate(got):
        if offset in amqp_offsets:  # converted to AMQP 1.0: its body is the data section
            assert payload.endswith(b"amqp-%d" % offset)
        else:  # a stream-protocol payload: byte for byte as published
            assert payload == _payload(next(expected))
