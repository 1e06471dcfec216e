"""Hostile input meets a named limit and a clear reply; the server and a canary go on.

A raw client sends what real libraries refuse to build: header tables nested hundreds of
levels deep, tables with more entries and arrays with more elements than the limits allow,
SQL filters nested too deep. Each gets 406 PRECONDITION_FAILED naming the limit's setting
(never 541 INTERNAL_ERROR), and a pika connection opened before keeps publishing with
confirms and consuming.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from pamqp import commands, frame

from sievemq.testing import ServerProcess
from sievemq.testing.pika_client import connect
from sievemq.testing.raw import PROTOCOL_HEADER, RawClient

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(
        tmp_path_factory.mktemp("limited") / "data",
        ("--max-table-entries", "1000", "--max-array-length", "500"),
    ).start()
    yield proc
    assert proc.running, proc.stderr()
    assert "Traceback" not in proc.stderr(), proc.stderr()
    assert proc.stop() == 0


class Canary:
    """A pika connection that publishes with confirms and reads back what it published."""

    def __init__(self, server: ServerProcess) -> None:
        self.conn = connect(server)
        self.ch = self.conn.channel()
        self.ch.confirm_delivery()
        self.queue = f"canary-{uuid.uuid4().hex[:8]}"
        self.ch.queue_declare(self.queue, durable=True, arguments={"x-queue-type": "stream"})
        self.sent = 0

    def check(self) -> list[bytes]:
        """Publish one more canary message; every one so far must come back. Returns all
        bodies in the stream (the tests' own messages too)."""
        body = f"canary-{self.sent}".encode()
        self.ch.basic_publish("", self.queue, body)  # raises if nacked or the channel died
        self.sent += 1
        got: list[bytes] = []
        sub = self.conn.channel()
        sub.basic_qos(prefetch_count=100)
        tag = sub.basic_consume(
            self.queue,
            lambda c, m, p, b: (got.append(b), c.basic_ack(m.delivery_tag)),
            arguments={"x-stream-offset": "first"},
        )

        def mine() -> list[bytes]:
            return [b for b in got if b.startswith(b"canary-")]

        while len(mine()) < self.sent:
            self.conn.process_data_events(time_limit=0.1)
        sub.basic_cancel(tag)
        sub.close()
        assert mine() == [f"canary-{i}".encode() for i in range(self.sent)]
        return got


@pytest.fixture(scope="module")
def canary(limited: ServerProcess) -> Iterator[Canary]:
    c = Canary(limited)
    yield c
    c.conn.close()


def table(entries: bytes) -> bytes:
    return struct.pack(">I", len(entries)) + entries


def nested(depth: int) -> bytes:
    t = table(b"\x01aI\x00\x00\x00\x01")
    for _ in range(depth - 1):
        t = table(b"\x01aF" + t)
    return t


def client(server: ServerProcess) -> RawClient:
    c = RawClient(server.host, server.amqp_port)
    c.handshake()
    c.open_channel()
    return c


def expect_channel_406(c: RawClient, *words: str) -> Any:
    channel, close = c.next_method()
    assert channel == 1, close
    assert isinstance(close, commands.Channel.Close), close
    assert close.reply_code == 406, close.reply_text
    for word in words:
        assert word in close.reply_text
    c.send_frame(commands.Channel.CloseOk(), 1)
    c.open_channel()  # the connection is still usable
    return close


def declare_with_raw_arguments(c: RawClient, raw_table: bytes) -> None:
    queue = f"q-{uuid.uuid4().hex[:8]}"
    payload = (
        struct.pack(">HHH", 50, 10, 0)
        + bytes((len(queue),))
        + queue.encode()
        + b"\x02"  # durable
        + raw_table
    )
    c.send(struct.pack(">BHI", 1, 1, len(payload)) + payload + b"\xce")


def props_with_headers(raw_table: bytes) -> bytes:
    return struct.pack(">H", 0x2000) + raw_table


@pytest.mark.parametrize("depth", [33, 900, 5000])
def test_deeply_nested_headers_get_406_naming_max_table_depth(
    limited: ServerProcess, canary: Canary, depth: int
) -> None:
    c = client(limited)
    c.publish(1, "", canary.queue, props_with_headers(nested(depth)), b"hostile")
    close = expect_channel_406(c, "headers nested deeper than 32 levels", "max_table_depth")
    assert (close.class_id, close.method_id) == (60, 40)
    # just under the limit is stored and delivered
    c.confirm_select()
    c.publish_confirmed(1, "", canary.queue, [(props_with_headers(nested(32)), b"deep-ok")])
    c.close()
    assert b"deep-ok" in canary.check()
    assert b"hostile" not in canary.check()


def test_deep_declare_arguments_get_406_not_541(limited: ServerProcess, canary: Canary) -> None:
    c = client(limited)
    declare_with_raw_arguments(c, nested(900))
    close = expect_channel_406(c, "arguments of queue.declare", "max_table_depth")
    assert (close.class_id, close.method_id) == (50, 10)
    c.close()
    canary.check()


def test_huge_table_gets_406_naming_max_table_entries(
    limited: ServerProcess, canary: Canary
) -> None:
    c = client(limited)
    entries = b"".join(bytes((len(k),)) + k + b"V" for k in (b"k%d" % i for i in range(1001)))
    c.publish(1, "", canary.queue, props_with_headers(table(entries)), b"wide")
    expect_channel_406(c, "more than 1000 entries", "max_table_entries")
    declare_with_raw_arguments(c, table(entries))
    expect_channel_406(c, "arguments of queue.declare", "max_table_entries")
    c.close()
    canary.check()


def test_long_array_gets_406_naming_max_array_length(
    limited: ServerProcess, canary: Canary
) -> None:
    c = client(limited)
    arr = b"V" * 501
    raw = table(b"\x01aA" + struct.pack(">I", len(arr)) + arr)
    c.publish(1, "", canary.queue, props_with_headers(raw), b"long")
    expect_channel_406(c, "more than 500 elements", "max_array_length")
    consume = struct.pack(">HHH", 60, 20, 0) + bytes((len(canary.queue),)) + canary.queue.encode()
    consume += b"\x00\x00" + raw  # empty consumer tag, no flags
    c.send(struct.pack(">BHI", 1, 1, len(consume)) + consume + b"\xce")
    expect_channel_406(c, "arguments of basic.consume", "max_array_length")
    c.close()
    canary.check()


def test_deep_sql_filter_gets_406_naming_max_sql_depth(
    limited: ServerProcess, canary: Canary
) -> None:
    c = client(limited)
    c.send_frame(commands.Basic.Qos(prefetch_count=10), 1)
    c.expect(commands.Basic.QosOk)
    for sql, words in [
        ("(" * 65 + "a = 1" + ")" * 65, ("nested more than 64 levels", "max_sql_depth")),
        ("NOT " * 100 + "a = 1", ("nested more than 64 levels", "max_sql_depth")),
        ("a = 1 OR " * 1000 + "a = 1", ("longer than 4096 characters", "max_sql_length")),
    ]:
        c.send_frame(
            commands.Basic.Consume(
                queue=canary.queue,
                arguments={"x-stream-filter-sql": sql, "x-stream-offset": "first"},
            ),
            1,
        )
        expect_channel_406(c, *words)
        c.send_frame(commands.Basic.Qos(prefetch_count=10), 1)
        c.expect(commands.Basic.QosOk)
    c.close()
    canary.check()


def test_deep_client_properties_close_the_connection_with_406(
    limited: ServerProcess, canary: Canary
) -> None:
    c = RawClient(limited.host, limited.amqp_port)
    c.send(PROTOCOL_HEADER)
    c.expect(commands.Connection.Start)
    response = b"\x00guest\x00guest"
    payload = (
        struct.pack(">HH", 10, 11)
        + nested(900)
        + b"\x05PLAIN"
        + struct.pack(">I", len(response))
        + response
        + b"\x05en_US"
    )
    c.send(struct.pack(">BHI", 1, 0, len(payload)) + payload + b"\xce")
    channel, close = c.next_method()
    assert channel == 0 and isinstance(close, commands.Connection.Close), close
    assert close.reply_code == 406
    assert "client_properties of connection.startok" in close.reply_text
    assert "max_table_depth" in close.reply_text
    c.send(frame.marshal(commands.Connection.CloseOk(), 0))
    c.close()
    canary.check()


def test_deep_amqplain_response_is_refused_with_403(limited: ServerProcess, canary: Canary) -> None:
    c = RawClient(limited.host, limited.amqp_port)
    c.send(PROTOCOL_HEADER)
    c.expect(commands.Connection.Start)
    response = nested(900)[4:]  # AMQPLAIN: a table without its length
    payload = (
        struct.pack(">HH", 10, 11)
        + table(b"")
        + b"\x08AMQPLAIN"
        + struct.pack(">I", len(response))
        + response
        + b"\x05en_US"
    )
    c.send(struct.pack(">BHI", 1, 0, len(payload)) + payload + b"\xce")
    _, close = c.next_method()
    assert isinstance(close, commands.Connection.Close), close
    assert close.reply_code == 403
    assert "malformed AMQPLAIN response" in close.reply_text
    c.close()
    canary.check()


def test_any_utf8_queue_name_gets_its_declare_ok(limited: ServerProcess, canary: Canary) -> None:
    """Found by the fuzzer: pamqp's DeclareOk refuses names outside [a-zA-Z0-9-_.:@#,/+ ],
    RabbitMQ accepts any UTF-8 name (the declare used to close with 541)."""
    c = client(limited)
    for name in ("é ü", "with\ttab", "semi;colon?", "x" * 255):
        payload = (
            struct.pack(">HHH", 50, 10, 0)
            + bytes((len(name.encode()),))
            + name.encode()
            + b"\x02"
            + table(b"\x0cx-queue-typeS\x00\x00\x00\x06stream")
        )
        c.send(struct.pack(">BHI", 1, 1, len(payload)) + payload + b"\xce")
        _, ok = c.next_method()
        assert isinstance(ok, commands.Queue.DeclareOk), ok
        assert ok.queue == name
    c.close()
    canary.check()
