"""A read of many frames reaches the connection handler in slices, the event loop running between.

Why it matters: what one slice's publishes scheduled (the appender's chunk write, and the
confirms that write schedules in turn) must run before the next slice is handled, so the
client hears of its first messages while the server still works on the rest of the read.
The frames must arrive complete, in order, and exactly as one unsliced read would give them.
"""

from __future__ import annotations

import asyncio

from pamqp import body as pbody
from pamqp import commands
from pamqp import frame as pframe
from pamqp import header as pheader

from sievemq.amqp import errors, frames
from sievemq.gateway.net.protocol import READ_SLICE, AMQPProtocol
from tests.unit.test_gateway.fake_transport import FakeTransport


class Handler:
    """Records each ``on_frames`` call; the first one schedules a callback that schedules
    another (as a publish schedules the appender's write, which schedules the confirms)."""

    def __init__(self) -> None:
        self.calls: list[list[frames.Frame]] = []
        self.events: list[str] = []

    def on_open(self, transport: asyncio.Transport) -> None: ...

    def on_frames(self, got: list[frames.Frame]) -> None:
        self.calls.append(got)
        self.events.append("frames")
        if len(self.calls) == 1:
            loop = asyncio.get_running_loop()
            loop.call_soon(self._write_chunk, loop)

    def _write_chunk(self, loop: asyncio.AbstractEventLoop) -> None:
        self.events.append("chunk")
        loop.call_soon(self.events.append, "confirms")

    def on_frame_error(self, error: errors.AMQPError) -> None:
        self.events.append(f"error {error.reply_code}")

    def on_lost(self) -> None: ...
    def on_pause_writing(self) -> None: ...
    def on_resume_writing(self) -> None: ...


class Registry:
    def admit(self) -> bool:
        return True

    def release(self) -> None: ...


def publishes(count: int, body_size: int = 100) -> bytes:
    """``count`` publish + header + body frame triples, as a client writes them."""
    one = (
        pframe.marshal(commands.Basic.Publish(exchange="", routing_key="q"), 1)
        + pframe.marshal(pheader.ContentHeader(0, body_size, commands.Basic.Properties()), 1)
        + pframe.marshal(pbody.ContentBody(b"x" * body_size), 1)
    )
    return b"".join(
        one.replace(b"x" * 8, i.to_bytes(8, "big"), 1) for i in range(count)
    )  # each body its own, so order is visible


def wired() -> tuple[AMQPProtocol, FakeTransport, Handler]:
    handler = Handler()
    protocol = AMQPProtocol(handler, Registry(), 131072, 1 << 22)  # type: ignore[arg-type]
    transport = FakeTransport()
    protocol.connection_made(transport)  # type: ignore[arg-type]
    protocol.data_received(frames.PROTOCOL_HEADER)
    return protocol, transport, handler


async def settle() -> None:
    for _ in range(50):
        await asyncio.sleep(0)


async def test_a_large_read_is_handled_in_slices_with_the_loop_running_between() -> None:
    protocol, transport, handler = wired()
    data = publishes(1000)  # 3000 frames (about 150 KB), as a client's window: five slices
    protocol.data_received(data)
    assert len(handler.calls) == 1 and not transport.reading  # the rest waits, reading paused
    assert len(handler.calls[0]) == READ_SLICE
    await settle()
    # what the first slice scheduled, and what that scheduled, ran before the second slice
    assert handler.events[:4] == ["frames", "chunk", "confirms", "frames"]
    assert len(handler.calls) == -(-3000 // READ_SLICE)
    got = [f for call in handler.calls for f in call]
    assert got == frames.FrameReader(131072, 1 << 22).feed(data)  # whole, in order
    assert transport.reading and transport.calls == ["pause", "resume"]


async def test_data_arriving_during_the_slices_is_handled_after_them() -> None:
    protocol, transport, handler = wired()
    first, second = publishes(1000), publishes(3)
    protocol.data_received(first)
    protocol.data_received(second)  # a read already on its way when reading was paused
    await settle()
    got = [f for call in handler.calls for f in call]
    assert got == frames.FrameReader(131072, 1 << 22).feed(first + second)
    assert transport.reading


async def test_a_read_up_to_the_slice_size_is_handled_at_once() -> None:
    protocol, transport, handler = wired()
    data = publishes(READ_SLICE // 3)
    protocol.data_received(data)
    assert len(handler.calls) == 1 and transport.calls == []


async def test_nothing_is_handled_after_the_connection_is_lost() -> None:
    protocol, _, handler = wired()
    protocol.data_received(publishes(2000))
    protocol.connection_lost(None)
    await settle()
    assert len(handler.calls) == 1


async def test_a_framing_error_anywhere_in_the_read_is_reported_before_any_slice() -> None:
    """The whole read is split into frames first, as without slicing: a bad frame behind
    good ones fails the connection and none of that read's frames is handled."""
    protocol, _, handler = wired()
    unknown = b"\x09\x00\x01\x00\x00\x00\x00\xce"  # frame type 9
    protocol.data_received(publishes(600) + unknown + publishes(400))
    await settle()
    assert handler.events == ["error 501"]
    protocol.data_received(publishes(1))  # ignored after a framing error
    await settle()
    assert handler.calls == []


async def test_slices_not_handled_yet_are_dropped_when_the_server_stops_reading() -> None:
    """Shutdown confirms what was stored and then closes: the rest of a sliced read must
    not be stored after that (it would never be confirmed)."""
    protocol, transport, handler = wired()
    protocol.data_received(publishes(2000))
    protocol.stop_reading()
    await settle()
    assert len(handler.calls) == 1 and not transport.reading
