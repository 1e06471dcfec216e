"""Stream-protocol publish credits (RabbitMQ's 50,000 / 12,500): the real connection, protocol
and publisher, with a transport and an appender that only record (no sockets, no disk).

Checked: reading stops when the credits reach 0 and resumes only above 12,500; confirms give
credits back only once their frame has left the write buffer; duplicates and rejected ids
take no credit; an alarm and a credit hold are independent reasons not to read."""

from __future__ import annotations

import struct
from types import SimpleNamespace
from typing import Any

import pytest

from sievemq.gateway.model.broker import MessageCounters
from sievemq.gateway.net.stream_protocol import StreamProtocol
from sievemq.gateway.streamproto_session import connection as connection_module
from sievemq.gateway.streamproto_session.connection import StreamConnection
from sievemq.gateway.streamproto_session.publisher import StreamPublisher
from sievemq.streamproto import wire
from sievemq.testing.clock import ManualClock
from tests.unit.test_gateway.fake_transport import FakeTransport


class Transport(FakeTransport):
    def __init__(self) -> None:
        super().__init__()
        self.buffered = 0  # what get_write_buffer_size reports
        self.written: list[bytes] = []

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def write(self, data: bytes) -> None:
        self.written.append(data)


class Node:
    def __init__(self, loop: ManualClock) -> None:
        self.loop = loop  # the connection's timers: they run when the test moves the clock


class SNode:
    frame_max = 1 << 20
    heartbeat = 0

    def __init__(self, loop: ManualClock) -> None:
        self.node = Node(loop)


class Appender:
    """Keeps what is submitted; the test settles it."""

    def __init__(self) -> None:
        self.sinks: list[tuple[Any, int]] = []
        self.stream = SimpleNamespace(gated=False)  # (a cluster's replicated leader: True)

    def submit_many(self, messages: Any, sinks: Any, sink: Any, seqs: list[int]) -> None:
        assert len(messages) == len(sinks) and sum(s is sink for s in sinks) == len(seqs)
        self.sinks.extend((sink, seq) for seq in seqs)


class Sequences:
    def __init__(self, last: int) -> None:
        self.last = last

    def get(self, ref: str) -> int | None:
        return self.last

    def update(self, ref: str, last: int) -> None:
        self.last = last


@pytest.fixture
def wired() -> Any:
    clock = ManualClock()
    conn = StreamConnection(SNode(clock), False)  # type: ignore[arg-type]
    protocol = StreamProtocol(conn, 1 << 20, 1 << 20)
    transport = Transport()
    protocol.transport = transport  # type: ignore[assignment]
    conn.transport = transport  # type: ignore[assignment]
    conn.alive = True
    yield conn, protocol, transport, clock


def _entries(first: int, n: int) -> list[wire.PublishedEntry]:
    return [wire.PublishedEntry(first + i, None, [b"x"], 0) for i in range(n)]


def test_reading_stops_at_zero_and_resumes_above_12500(wired: Any) -> None:
    conn, _, transport, _ = wired
    conn.take_publish_credits(49_999)
    assert transport.reading
    conn.take_publish_credits(1)
    assert not transport.reading and conn.credit_blocked
    conn.take_publish_credits(300)  # frames already read are still handled
    conn.return_publish_credits(12_800)  # back to 12,500: not above it
    assert not transport.reading
    conn.return_publish_credits(1)
    assert transport.reading and not conn.credit_blocked
    assert transport.calls == ["pause", "resume"]


def test_credits_of_a_confirm_still_in_the_write_buffer_wait_for_it_to_drain(
    wired: Any,
) -> None:
    conn, _, transport, clock = wired
    conn.take_publish_credits(connection_module.PUBLISH_CREDITS)
    transport.buffered = 100  # the client does not read: the confirm frame is still here
    conn.return_publish_credits(20_000)
    assert conn.publish_credits == 0 and not transport.reading
    for _ in range(3):  # each poll finds the frame still buffered
        assert clock.advance(connection_module.DRAIN_POLL_S) == 1
    assert conn.publish_credits == 0 and not transport.reading  # still buffered
    transport.buffered = 0
    assert clock.advance(connection_module.DRAIN_POLL_S) == 1
    assert conn.publish_credits == 20_000 and transport.reading
    assert clock.pending() == []  # drained: no more polls


def test_an_alarm_and_a_credit_hold_are_separate_reasons(wired: Any) -> None:
    conn, protocol, transport, _ = wired
    conn.take_publish_credits(connection_module.PUBLISH_CREDITS)
    protocol.hold_reading(True)  # an alarm too
    conn.return_publish_credits(connection_module.PUBLISH_CREDITS)
    assert not transport.reading  # the alarm still holds it
    protocol.hold_reading(False)
    assert transport.reading
    protocol.pause_writing()
    conn.take_publish_credits(connection_module.PUBLISH_CREDITS)
    protocol.resume_writing()  # the write buffer drained, but no credit
    assert not transport.reading


def test_publisher_takes_credits_for_written_ids_only_and_confirms_return_them(
    wired: Any,
) -> None:
    conn, _, transport, _ = wired
    appender = Appender()
    queue: Any = type("Q", (), {"deleted": False, "name": "s"})()
    pub = StreamPublisher(
        conn,  # type: ignore[arg-type]
        0,
        "ref",
        queue,  # type: ignore[arg-type]
        appender,  # type: ignore[arg-type]
        Sequences(9),  # type: ignore[arg-type]
        MessageCounters(),
    )
    entries = _entries(5, 10)  # ids 5..14: 5..9 are duplicates of stored ids
    entries.append(wire.PublishedEntry(15, None, [b"a", b"b", b"c"], 0))  # a sub-batch: 1 id
    entries.append(wire.PublishedEntry(16, None, [], wire.PRECONDITION_FAILED))  # rejected
    pub.publish(entries)
    assert conn.publish_credits == connection_module.PUBLISH_CREDITS - 6  # ids 10..15
    pub.settle_confirms([seq for _, seq in appender.sinks], True)
    assert conn.publish_credits == connection_module.PUBLISH_CREDITS
    answers = []
    for frame in transport.written:
        key, count = struct.unpack_from(">HxxxI", frame, 4)
        step = 8 if key == wire.PUBLISH_CONFIRM else 10
        answers.append(
            (key, [struct.unpack_from(">Q", frame, 13 + step * i)[0] for i in range(count)])
        )
    assert answers == [
        (wire.PUBLISH_CONFIRM, [5, 6, 7, 8, 9]),  # duplicates: confirmed, never written
        (wire.PUBLISH_ERROR, [16]),
        (wire.PUBLISH_CONFIRM, [10, 11, 12, 13, 14, 15]),
    ]
