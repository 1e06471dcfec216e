"""The asyncio Protocol of one stream-protocol connection (port 5552): framing, flow control.

HOT PATH: ``data_received`` splits the bytes into frames (``streamproto.wire``) and hands the
whole list to the connection handler in one call. When the transport's write buffer passes
``write_buffer_high`` the handler's subscriptions stop delivering and the protocol stops
reading from the socket until it drains (a client that publishes but never reads its
confirms is held back by TCP). Reading is also held, each for its own reason, while a
resource alarm blocks the connection's publishers (``hold_reading``) and while they are out
of publish credit (``hold_for_credit``: RabbitMQ's 50,000 unconfirmed messages per
connection).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable
from typing import Any, cast
from typing import Protocol as TypingProtocol

from sievemq.streamproto import wire


class StreamFrameHandler(TypingProtocol):
    """What the protocol drives (``gateway.stream_session.connection.StreamConnection``)."""

    read_control: Any

    def on_open(self, transport: asyncio.Transport) -> None: ...
    def on_frames(self, frames: list[wire.Frame]) -> None: ...
    def on_frame_too_large(self, size: int) -> None: ...
    def close(self, code: int, reason: str) -> None: ...
    def on_lost(self) -> None: ...
    def on_pause_writing(self) -> None: ...
    def on_resume_writing(self) -> None: ...


class StreamProtocol(asyncio.Protocol):
    __slots__ = (
        "_buffer",
        "_conn",
        "_held",
        "_high",
        "_loading",
        "_max_frame",
        "_paused",
        "_starved",
        "_stopped",
        "transport",
    )

    def __init__(self, handler: StreamFrameHandler, frame_max: int, write_buffer_high: int) -> None:
        self._conn = handler
        self._conn.read_control = self
        self._buffer = bytearray()
        self._max_frame = frame_max
        self._paused = False
        self._held = False  # a resource alarm: the handler's publishers wait in TCP
        self._starved = False  # the handler's publishers are out of publish credit
        self._loading = False  # the handler waits for a load in a worker thread
        self._stopped = False
        self._high = write_buffer_high
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        t = cast(asyncio.Transport, transport)
        self.transport = t
        sock = t.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        t.set_write_buffer_limits(high=self._high)
        self._conn.on_open(t)

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        frames, oversized = wire.split_frames(buffer, self._max_frame)
        if frames:
            self._conn.on_frames(frames)
        if oversized is not None:
            self._buffer.clear()
            if oversized < 4:
                self._conn.close(wire.UNKNOWN_FRAME, f"frame of {oversized} bytes")
            else:
                self._conn.on_frame_too_large(oversized)
            self.stop_reading()

    def eof_received(self) -> bool | None:
        return None  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self._conn.on_lost()
        self.transport = None

    def pause_writing(self) -> None:
        self._conn.on_pause_writing()
        if self.transport is not None and not self._paused:
            self._paused = True
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.transport is not None and self._paused and not self._stopped:
            self._paused = False
            if not self._held and not self._starved and not self._loading:
                self.transport.resume_reading()
        self._conn.on_resume_writing()

    def hold_reading(self, held: bool) -> None:
        """Stop (or restart) reading for a resource alarm, independently of write pauses."""
        if held != self._held:
            self._held = held
            self._apply_holds()

    def hold_for_credit(self, held: bool) -> None:
        """Stop (or restart) reading while the publishers are out of publish credit."""
        if held != self._starved:
            self._starved = held
            self._apply_holds()

    def hold_for_load(self, held: bool) -> None:
        """Stop (or restart) reading while a command waits for a load in a worker thread
        (the frames after it wait in TCP, in order)."""
        if held != self._loading:
            self._loading = held
            self._apply_holds()

    def _apply_holds(self) -> None:
        transport = self.transport
        if transport is None or transport.is_closing() or self._stopped:
            return
        with contextlib.suppress(RuntimeError):
            if self._held or self._starved or self._paused or self._loading:
                transport.pause_reading()
            else:
                transport.resume_reading()

    def stop_reading(self) -> None:
        """For good: shutdown, or after a frame error."""
        self._stopped = True
        if self.transport is not None and not self.transport.is_closing():
            with contextlib.suppress(RuntimeError):
                self.transport.pause_reading()


def stream_protocol_factory(
    handler_factory: Callable[[], StreamFrameHandler], frame_max: int, write_buffer_high: int
) -> Callable[[], StreamProtocol]:
    """The loop's protocol factory for stream-protocol clients (serve it with
    ``listener.serve_on``; with TLS the loop does the handshake before the protocol sees
    a byte)."""
    return lambda: StreamProtocol(handler_factory(), frame_max, write_buffer_high)
