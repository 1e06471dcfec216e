"""What a consumer receives, at the byte level: the round-trip, credit and offsets."""

from __future__ import annotations

import struct
import time

import pytest
from pamqp import commands

from sievemq.testing import ServerProcess
from sievemq.testing.raw import RawClient, decode_props, props_bytes

pytestmark = pytest.mark.timeout(120)  # a hang guard, with room for a starved machine

# sizes of fixed-width AMQP field values (RabbitMQ's table dialect)
FIXED = {b"t": 1, b"b": 1, b"B": 1, b"s": 2, b"u": 2, b"I": 4, b"i": 4, b"l": 8, b"f": 4, b"d": 8,
         b"D": 5, b"T": 8, b"V": 0}  # fmt: skip
SHORTSTR_PROPS = {"content_type", "content_encoding", "correlation_id", "reply_to", "expiration",
                  "message_id", "type", "user_id", "app_id", "cluster_id"}  # fmt: skip
PROPERTY_ORDER = ["content_type", "content_encoding", "headers", "delivery_mode", "priority",
                  "correlation_id", "reply_to", "expiration", "message_id", "timestamp", "type",
                  "user_id", "app_id", "cluster_id"]  # fmt: skip


def value_size(buf: bytes, pos: int) -> int:
    """Bytes taken by the typed field value at pos (type octet included)."""
    kind = buf[pos : pos + 1]
    if kind in FIXED:
        return 1 + FIXED[kind]
    if kind in (b"S", b"x", b"F", b"A"):
        return 5 + struct.unpack_from(">I", buf, pos + 1)[0]
    raise AssertionError(f"unknown field type {kind!r}")


def split_table(table: bytes) -> dict[str, bytes]:
    """A field table's entries as name -> raw typed value, exactly as on the wire."""
    out: dict[str, bytes] = {}
    pos = 0
    while pos < len(table):
        n = table[pos]
        name = table[pos + 1 : pos + 1 + n].decode()
        pos += 1 + n
        size = value_size(table, pos)
        assert name not in out, f"duplicate header {name}"
        out[name] = table[pos : pos + size]
        pos += size
    return out


def split_properties(raw: bytes) -> tuple[int, dict[str, bytes]]:
    """(flags, name -> raw value bytes) of a content header's property list."""
    flags = struct.unpack_from(">H", raw)[0]
    pos = 2
    out: dict[str, bytes] = {}
    for bit, name in enumerate(PROPERTY_ORDER):
        if not flags & (1 << (15 - bit)):
            continue
        if name in SHORTSTR_PROPS:
            size = 1 + raw[pos]
        elif name == "headers":
            size = 4 + struct.unpack_from(">I", raw, pos)[0]
        elif name == "timestamp":
            size = 8
        else:
            size = 1
        out[name] = raw[pos : pos + size]
        pos += size
    assert pos == len(raw), "trailing bytes after the property list"
    return flags, out


def shortstr(text: str) -> bytes:
    raw = text.encode()
    return bytes([len(raw)]) + raw


def field(name: str, typed: bytes) -> bytes:
    return shortstr(name) + typed


def lstr(raw: bytes) -> bytes:
    return b"S" + struct.pack(">I", len(raw)) + raw


def table(entries: bytes) -> bytes:
    return b"F" + struct.pack(">I", len(entries)) + entries


def array(values: bytes) -> bytes:
    return b"A" + struct.pack(">I", len(values)) + values


EVERY_TYPE = [
    ("bool", b"t\x01"),
    ("i8", b"b\xfe"),
    ("u8", b"B\xfe"),
    ("i16", b"s" + struct.pack(">h", -300)),
    ("u16", b"u" + struct.pack(">H", 60000)),
    ("i32", b"I" + struct.pack(">i", -70000)),
    ("u32", b"i" + struct.pack(">I", 4_000_000_000)),
    ("i64", b"l" + struct.pack(">q", -(2**40))),
    ("float", b"f" + struct.pack(">f", 1.25)),
    ("double", b"d" + struct.pack(">d", -2.5)),
    ("decimal", b"D\x02" + struct.pack(">I", 12345)),
    ("str", lstr("grüße".encode())),
    ("bin-str", lstr(b"\xff\x00\x01")),
    ("bytes", b"x" + struct.pack(">I", 3) + b"\x00\x01\x02"),
    ("ts", b"T" + struct.pack(">Q", 1_700_000_000)),
    ("void", b"V"),
    ("table", table(field("k", lstr(b"v")) + field("n", b"B\x07"))),
    ("array", array(lstr(b"a") + b"I" + struct.pack(">i", 2) + table(b"") + array(b""))),
    ("x-custom", lstr(b"kept")),
]  # fmt: skip


def every_property() -> bytes:
    table = b"".join(field(name, typed) for name, typed in EVERY_TYPE)
    parts = [
        shortstr("application/x-test"),
        shortstr("gzip"),
        struct.pack(">I", len(table)) + table,
        b"\x02",
        b"\x07",
        shortstr("corr"),
        shortstr("reply-q"),
        shortstr("60000"),
        shortstr("msg-1"),
        struct.pack(">Q", 1_700_000_123),
        shortstr("my-type"),
        shortstr("guest"),
        shortstr("my-app"),
        shortstr("cluster-7"),
    ]
    return struct.pack(">H", 0xFFFC) + b"".join(parts)


def client_with_stream(server: ServerProcess, qname: str) -> RawClient:
    client = RawClient(server.host, server.amqp_port)
    client.handshake()
    client.open_channel(1)
    ok = client.rpc(
        commands.Queue.Declare(queue=qname, durable=True, arguments={"x-queue-type": "stream"})
    )
    assert isinstance(ok, commands.Queue.DeclareOk), ok
    client.confirm_select(1)
    return client


def test_every_property_and_header_type_round_trips_byte_exact(
    server: ServerProcess, qname: str
) -> None:
    sent = every_property()
    client = client_with_stream(server, qname)
    client.publish_confirmed(1, "", qname, [(sent, b"payload")])
    client.open_channel(2)
    client.start_consumer(2, qname, {"x-stream-offset": "first"})
    [(method, raw, body)] = client.collect(2, 1)
    assert body == b"payload"
    assert (method.exchange, method.routing_key, method.redelivered) == ("", qname, False)
    sent_flags, sent_props = split_properties(sent)
    got_flags, got_props = split_properties(raw)
    assert got_flags == sent_flags
    sent_headers = split_table(sent_props.pop("headers")[4:])
    got_headers = split_table(got_props.pop("headers")[4:])
    assert got_props == sent_props
    assert got_headers.pop("x-stream-offset") == b"l" + struct.pack(">q", 0)
    assert got_headers == sent_headers
    client.close()


def test_large_message_spans_body_frames(server: ServerProcess, qname: str) -> None:
    body = bytes(range(256)) * 1200  # 300 KiB: several frames at frame_max 131072
    client = client_with_stream(server, qname)
    client.publish(1, "", qname, props_bytes(), b"")  # an empty body is a message too
    client.next_method()
    client.send_frame(commands.Basic.Publish(exchange="", routing_key=qname), 1)
    payload = struct.pack(">HHQ", 60, 0, len(body)) + props_bytes()
    client.send(struct.pack(">BHI", 2, 1, len(payload)) + payload + b"\xce")
    for start in range(0, len(body), 131072 - 8):
        part = body[start : start + 131072 - 8]
        client.send(struct.pack(">BHI", 3, 1, len(part)) + part + b"\xce")
    _, ack = client.next_method()
    assert isinstance(ack, commands.Basic.Ack), ack
    client.open_channel(2)
    client.start_consumer(2, qname, {"x-stream-offset": "first"})
    got = client.collect(2, 2)
    assert [b for _m, _p, b in got] == [b"", body]
    client.close()


def test_credit_is_exact(server: ServerProcess, qname: str) -> None:
    client = client_with_stream(server, qname)
    client.publish_confirmed(1, "", qname, [(props_bytes(), f"m{i}".encode()) for i in range(12)])
    client.open_channel(2)
    client.start_consumer(2, qname, {"x-stream-offset": "first"}, prefetch=3)
    seen = client.collect(2, 3, ack=False)
    assert [b for _m, _p, b in seen] == [b"m0", b"m1", b"m2"]
    tags = [m.delivery_tag for m, _p, _b in seen]

    def settle_then_expect(frame: object, bodies: list[bytes]) -> None:
        client.send_frame(frame, 2)
        got = client.collect(2, len(bodies), ack=False)
        assert [b for _m, _p, b in got] == bodies
        assert all(m.redelivered is False for m, _p, _b in got)
        tags.extend(m.delivery_tag for m, _p, _b in got)

    settle_then_expect(commands.Basic.Ack(delivery_tag=tags[0]), [b"m3"])
    # acks t1 and t2 (t0 is already acked): two credits
    settle_then_expect(commands.Basic.Ack(delivery_tag=tags[2], multiple=True), [b"m4", b"m5"])
    # nack and reject settle like acks: credit back, nothing redelivered
    settle_then_expect(commands.Basic.Nack(delivery_tag=tags[3], requeue=True), [b"m6"])
    settle_then_expect(commands.Basic.Reject(delivery_tag=tags[4], requeue=True), [b"m7"])
    # recover gives all outstanding credit back without redelivering anything
    client.send_frame(commands.Basic.Recover(requeue=True), 2)
    got = []
    deadline = time.monotonic() + 10
    while True:
        # the three expected deliveries (however late), then 0.5 s in which nothing more comes
        wait = 0.5 if len(got) >= 3 else max(0.01, deadline - time.monotonic())
        try:
            _, value = client.next_method(timeout=wait)
        except TimeoutError:
            break
        if isinstance(value, commands.Basic.RecoverOk):
            continue
        assert isinstance(value, commands.Basic.Deliver), value
        _raw_props, size = client._read_raw_header(2)
        body = b""
        while len(body) < size:
            body += client.read_frame()[1].value
        got.append(body)
    assert got == [b"m8", b"m9", b"m10"]
    client.close()


def test_offset_beyond_end_waits_for_it(server: ServerProcess, qname: str) -> None:
    client = client_with_stream(server, qname)
    client.publish_confirmed(1, "", qname, [(props_bytes(), f"m{i}".encode()) for i in range(3)])
    client.open_channel(2)
    client.start_consumer(2, qname, {"x-stream-offset": 6})
    assert client.collect(2, 0) == []
    publisher = client_with_stream(server, qname)
    publisher.publish_confirmed(
        1, "", qname, [(props_bytes(), f"m{i}".encode()) for i in range(3, 9)]
    )
    publisher.close()
    got = client.collect(2, 3)
    assert [b for _m, _p, b in got] == [b"m6", b"m7", b"m8"]
    assert [decode_props(p).headers["x-stream-offset"] for _m, p, _b in got] == [6, 7, 8]
    client.close()


def test_consumers_see_new_messages_promptly(server: ServerProcess, qname: str) -> None:
    client = client_with_stream(server, qname)
    client.open_channel(2)
    client.start_consumer(2, qname, {"x-stream-offset": "next"})
    latencies = []
    for i in range(5):
        start = time.monotonic()
        client.publish(1, "", qname, props_bytes(), f"m{i}".encode())
        delivered = confirmed = False
        while not (delivered and confirmed):
            _, value = client.next_method()
            if isinstance(value, commands.Basic.Ack):
                confirmed = True
                continue
            assert isinstance(value, commands.Basic.Deliver), value
            client._read_raw_header(2)
            assert client.read_frame()[1].value == f"m{i}".encode()
            latencies.append(time.monotonic() - start)
            client.send_frame(commands.Basic.Ack(delivery_tag=value.delivery_tag), 2)
            delivered = True
    # no polling: the typical delivery is a round trip; one may be late on a loaded machine
    assert sorted(latencies)[len(latencies) // 2] < 0.2, latencies
    assert max(latencies) < 1.0, latencies
    client.close()
