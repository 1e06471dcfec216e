"""A stream delivery's content header never exceeds the consumer's frame_max.

The server splices ``x-stream-offset`` (up to 29 bytes) into every stream delivery's headers.
A content header is one frame (it cannot be split), so a header the publisher filled to its
frame_max would be over a consumer with the same frame_max. SieveMQ leaves the offset out
when it would not fit, and cancels a consumer whose frame_max cannot hold the header at all.
Publishing goes through pika; the consumer reads raw frames to see every frame's size.
"""

from __future__ import annotations

import struct
import time
from typing import Any

import pika
import pytest
from pamqp import commands

from sievemq.testing import ServerProcess
from sievemq.testing.raw import RawClient

pytestmark = pytest.mark.timeout(120)  # a hang guard, with room for a starved machine

FRAME_MAX = 4096
# a content header frame: 7 bytes of frame head, 12 of class/weight/body size, properties,
# the frame end; pika's properties for headers={"pad": <L chars>}: flags 2, table size 4,
# key 1+3, type 1, string size 4, L  =>  frame = 35 + L
HEADER_FRAME_BASE = 35
SPLICE = 25  # 0x0f "x-stream-offset" 'l' + 8 value bytes


def pad_for(frame_size: int) -> str:
    return "p" * (frame_size - HEADER_FRAME_BASE)


def publish(server: ServerProcess, queue: str, frame_max: int, pads: list[str]) -> None:
    params = pika.ConnectionParameters("127.0.0.1", server.amqp_port, frame_max=frame_max)
    with pika.BlockingConnection(params) as conn:
        ch = conn.channel()
        ch.queue_declare(queue, durable=True, arguments={"x-queue-type": "stream"})
        ch.confirm_delivery()
        for i, pad in enumerate(pads):
            props = pika.BasicProperties(headers={"pad": pad})
            ch.basic_publish("", queue, f"m{i}".encode(), props)


def raw_frames(client: RawClient, want: int, timeout: float = 10.0) -> list[tuple[int, bytes]]:
    """(type, payload) of the next ``want`` frames, straight off the socket."""
    data = client.frames.take_all()
    out: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + timeout
    while len(out) < want:
        if len(data) >= 7:
            ftype, _channel, size = struct.unpack_from(">BHI", data)
            if len(data) >= 8 + size:
                assert data[7 + size] == 0xCE, "frame end missing"
                out.append((ftype, data[7 : 7 + size]))
                data = data[8 + size :]
                continue
        chunk = client.recv_some(max(0.01, deadline - time.monotonic()))
        assert chunk, f"socket closed after {len(out)} frames"
        data += chunk
    client.frames.feed(data)
    return out


def consumer(server: ServerProcess, queue: str, frame_max: int) -> RawClient:
    client = RawClient("127.0.0.1", server.amqp_port)
    tune = client.handshake(frame_max=frame_max)
    assert tune.frame_max >= frame_max
    client.open_channel(1)
    client.start_consumer(1, queue, {"x-stream-offset": "first"})
    return client


def headers_of(header_payload: bytes) -> dict[str, Any]:
    props = commands.Basic.Properties()
    props.unmarshal(struct.unpack_from(">H", header_payload, 12)[0], header_payload[14:])
    return dict(props.headers or {})


def test_header_near_frame_max_is_delivered_within_it(server: ServerProcess, qname: str) -> None:
    # m0: the spliced header fills frame_max exactly; m1: the published header does, so the
    # offset no longer fits; m2: small, spliced as usual
    pads = [pad_for(FRAME_MAX - SPLICE), pad_for(FRAME_MAX), "small"]
    publish(server, qname, FRAME_MAX, pads)
    client = consumer(server, qname, FRAME_MAX)
    frames = raw_frames(client, 9)  # 3 x (deliver, header, body)
    assert [t for t, _ in frames] == [1, 2, 3] * 3
    assert all(8 + len(payload) <= FRAME_MAX for _, payload in frames)
    header_frames = [payload for t, payload in frames if t == 2]
    assert [8 + len(h) for h in header_frames[:2]] == [FRAME_MAX, FRAME_MAX]
    got = [headers_of(h) for h in header_frames]
    assert [h["pad"].decode() if isinstance(h["pad"], bytes) else h["pad"] for h in got] == pads
    assert got[0]["x-stream-offset"] == 0
    assert "x-stream-offset" not in got[1]
    assert got[2]["x-stream-offset"] == 2
    assert [payload for t, payload in frames if t == 3] == [b"m0", b"m1", b"m2"]
    client.close()


def test_pika_consumer_at_small_frame_max_gets_every_message(
    server: ServerProcess, qname: str
) -> None:
    pads = [pad_for(FRAME_MAX), "small"]
    publish(server, qname, FRAME_MAX, pads)
    params = pika.ConnectionParameters("127.0.0.1", server.amqp_port, frame_max=FRAME_MAX)
    with pika.BlockingConnection(params) as conn:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=10)
        got: list[tuple[bytes, dict[str, Any]]] = []
        for _method, props, body in ch.consume(
            qname, arguments={"x-stream-offset": "first"}, inactivity_timeout=5
        ):
            assert body is not None, "a message did not arrive"
            got.append((body, dict(props.headers)))
            if len(got) == 2:
                break
        assert [b for b, _ in got] == [b"m0", b"m1"]
        assert "x-stream-offset" not in got[0][1] and got[1][1]["x-stream-offset"] == 1
        ch.cancel()


def test_header_over_a_smaller_frame_max_cancels_the_consumer(
    server: ServerProcess, qname: str
) -> None:
    # published at 131072, read at 4096: the second header cannot fit in one frame
    pads = ["small", pad_for(FRAME_MAX + 100), "after"]
    publish(server, qname, 131072, pads)
    client = consumer(server, qname, FRAME_MAX)
    frames = raw_frames(client, 4)  # m0's three frames, then basic.cancel
    assert [t for t, _ in frames] == [1, 2, 3, 1]
    assert frames[2][1] == b"m0"
    assert struct.unpack_from(">HH", frames[3][1]) == (60, 30)  # basic.cancel
    # the connection stays usable: a new consumer from offset 2 gets the rest
    client.start_consumer(1, qname, {"x-stream-offset": 2})
    [(method, _props, body)] = client.collect(1, 1)
    assert body == b"m2" and method.routing_key == qname
    client.close()
