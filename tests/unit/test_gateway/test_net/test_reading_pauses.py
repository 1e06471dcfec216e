"""The protocol keeps the two reasons to stop reading apart: write backpressure and alarms."""

from __future__ import annotations

import asyncio

import pytest

from sievemq.amqp import errors
from sievemq.gateway.net.protocol import AMQPProtocol
from tests.unit.test_gateway.fake_transport import FakeTransport


class Handler:
    def on_open(self, transport: asyncio.Transport) -> None: ...
    def on_frames(self, frames: list[tuple[int, int, bytes]]) -> None: ...
    def on_frame_error(self, error: errors.AMQPError) -> None: ...
    def on_lost(self) -> None: ...
    def on_pause_writing(self) -> None: ...
    def on_resume_writing(self) -> None: ...


class Registry:
    def admit(self) -> bool:
        return True

    def release(self) -> None: ...


@pytest.fixture
def wired() -> tuple[AMQPProtocol, FakeTransport]:
    protocol = AMQPProtocol(Handler(), Registry(), 131072, 1 << 20, 1 << 20)
    transport = FakeTransport()
    protocol.connection_made(transport)  # type: ignore[arg-type]
    return protocol, transport


def test_write_buffer_drain_does_not_resume_a_connection_held_by_an_alarm(
    wired: tuple[AMQPProtocol, FakeTransport],
) -> None:
    protocol, transport = wired
    protocol.hold_reading(True)
    protocol.pause_writing()
    protocol.resume_writing()
    assert not transport.reading and protocol.reading_paused
    protocol.hold_reading(False)
    assert transport.reading and transport.calls == ["pause", "resume"]


def test_alarm_clearing_does_not_resume_a_connection_with_a_full_write_buffer(
    wired: tuple[AMQPProtocol, FakeTransport],
) -> None:
    protocol, transport = wired
    protocol.pause_writing()
    protocol.hold_reading(True)
    protocol.hold_reading(False)
    assert not transport.reading
    protocol.resume_writing()
    assert transport.reading and transport.calls == ["pause", "resume"]


def test_each_reason_alone_pauses_and_resumes(wired: tuple[AMQPProtocol, FakeTransport]) -> None:
    protocol, transport = wired
    protocol.pause_writing()
    protocol.resume_writing()
    protocol.hold_reading(True)
    protocol.hold_reading(True)  # idempotent
    protocol.hold_reading(False)
    assert transport.calls == ["pause", "resume", "pause", "resume"] and transport.reading
