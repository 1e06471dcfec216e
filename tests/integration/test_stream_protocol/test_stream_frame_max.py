"""Every Deliver fits the frame_max the consumer tuned to: a stored chunk larger than that goes
out as several osiris chunks, offsets contiguous, each costing a credit. Both delivery paths:
stream-protocol records (sent as stored) and AMQP 0-9-1 records (converted to AMQP 1.0).
A raw consumer, to see each frame's size; rstream and pika publish."""

from __future__ import annotations

import struct

from sievemq.streamproto import wire
from sievemq.testing import ServerProcess
from sievemq.testing.pika_client import connect
from sievemq.testing.stream_client import RawStreamClient, producer, send_confirmed, string

FRAME_MAX = 16 * 1024
BODY = 1000
COUNT = 100  # ~100 KB in one stored chunk: at least 7 Deliver frames of 16 KiB


def _consumer_with_frame_max(server: ServerProcess, frame_max: int) -> RawStreamClient:
    raw = RawStreamClient(server)
    raw.sock.settimeout(30)
    assert raw.open(frame_max=frame_max, heartbeat=0) == wire.OK
    return raw


def _deliveries(raw: RawStreamClient, stream: str, records: int) -> list[tuple[int, int, int]]:
    """Subscribe from first with credit 1, grant one per Deliver: (frame size, chunk id,
    records) per Deliver until ``records`` arrived."""
    body = struct.pack(">B", 1) + string(stream) + struct.pack(">HHi", wire.OFFSET_FIRST, 1, 0)
    raw.request(wire.SUBSCRIBE, body)
    got: list[tuple[int, int, int]] = []
    total = 0
    while total < records:
        key, _, frame = raw.read_frame()
        if key == wire.SUBSCRIBE | wire.RESPONSE:
            assert struct.unpack_from(">H", frame, 4)[0] == wire.OK
            continue
        if key != wire.DELIVER:
            continue
        size = 4 + 4 + len(frame)  # size field + key/version + body, as on the wire
        # body: subscription id (u8), then the 48-byte chunk header
        (n_records,) = struct.unpack_from(">I", frame, 1 + 4)
        (chunk_id,) = struct.unpack_from(">Q", frame, 1 + 24)
        got.append((size, chunk_id, n_records))
        total += n_records
        raw.send(wire.CREDIT, struct.pack(">BH", 1, 1))
    return got


def _check(server: ServerProcess, stream: str, records: int) -> None:
    """With a 1 MiB frame_max each stored chunk is one Deliver; with FRAME_MAX there are
    more Deliver frames (the chunks were cut), each within FRAME_MAX, offsets contiguous."""
    sizes = {}
    for frame_max in (1 << 20, FRAME_MAX):
        raw = _consumer_with_frame_max(server, frame_max)
        try:
            got = _deliveries(raw, stream, records)
        finally:
            raw.close()
        assert all(size - 4 <= frame_max for size, _, _ in got), [s for s, _, _ in got]
        at = 0
        for _size, chunk_id, n in got:  # contiguous, no gap, no repeat
            assert chunk_id == at
            at += n
        assert at == records
        sizes[frame_max] = len(got)
    assert sizes[1 << 20] < records // 4, sizes  # the publish made a few big stored chunks
    assert sizes[FRAME_MAX] > sizes[1 << 20], sizes  # ... which were cut to fit


async def test_stream_records_fit_frame_max(server: ServerProcess, qname: str) -> None:
    async with producer(server) as p:
        await p.create_stream(qname)
        await send_confirmed(p, qname, [bytes([65 + i % 26]) * BODY for i in range(COUNT)])
    _check(server, qname, COUNT)


def test_amqp091_records_fit_frame_max(server: ServerProcess, qname: str) -> None:
    conn = connect(server)
    try:
        ch = conn.channel()
        ch.queue_declare(qname, durable=True, arguments={"x-queue-type": "stream"})
        ch.tx_select()  # one commit: the server stores the batch together
        for i in range(COUNT):
            ch.basic_publish("", qname, bytes([65 + i % 26]) * BODY)
        ch.tx_commit()
    finally:
        conn.close()
    _check(server, qname, COUNT)
