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
import os
import socket
from collections.abc import Callable
from typing import Any, cast
from typing import Protocol as TypingProtocol

from sievemq.streamproto import wire

IOV_MAX = 1024  # buffers per writev (Linux's limit)


class StreamFrameHandler(TypingProtocol):
    """What the protocol drives (``gateway.streamproto_session.connection.StreamConnection``)."""

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
        "_fd",
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
        self._fd = -1  # the socket's descriptor for write_parts on plain TCP (-1: TLS)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        t = cast(asyncio.Transport, transport)
        self.transport = t
        sock = t.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        t.set_write_buffer_limits(high=self._high)
        if sock is not None and t.get_extra_info("sslcontext") is None:
            self._fd = sock.fileno()
        self._conn.on_open(t)

    def write_parts(self, parts: list[bytes | memoryview]) -> None:
        """Write these buffers in order. On plain TCP with nothing queued in the transport
        they go to the socket with ``os.writev`` (no join, no copy into the transport's
        buffer: a turn's Deliver frames are heads and stored chunk bytes); what the socket
        does not take then, and everything on TLS, goes through ``transport.write``."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        fd = self._fd
        if fd < 0 or transport.get_write_buffer_size():
            transport.write(b"".join(parts))
            return
        n = len(parts)
        i = 0
        while i < n:
            group = parts[i : i + IOV_MAX]
            try:
                sent = os.writev(fd, group)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:
                break  # the transport meets the error on its own write and closes
            if sent < sum(map(len, group)):
                for k, part in enumerate(group):  # where the socket stopped
                    if sent < len(part):
                        rest = [part[sent:], *group[k + 1 :], *parts[i + IOV_MAX :]]
                        transport.write(b"".join(rest))
                        return
                    sent -= len(part)
            i += IOV_MAX
        if i < n:
            transport.write(b"".join(parts[i:]))

    def data_received(self, data: bytes) -> None:
        """Frames are cut from ``data`` in place; only a frame cut by the end of a read is
        kept in ``_buffer`` (then completed from the next read's first bytes). A frame body
        is copied once (its slice of ``data``), or twice when a read boundary cuts it."""
        if type(data) is not bytes:
            data = bytes(data)
        buffer = self._buffer
        pos = 0
        frames: list[wire.Frame] = []
        oversized: int | None = None
        if buffer:
            pos, oversized = self._complete(data, frames)
            if pos < 0:
                return  # the frame still is not whole: all of ``data`` is in the buffer
        if oversized is None:
            more, pos, oversized = wire.frames_from(data, pos, self._max_frame)
            if frames:
                frames += more
            else:
                frames = more
            if oversized is None and pos < len(data):
                buffer += memoryview(data)[pos:]  # the start of the next frame
        if frames:
            self._conn.on_frames(frames)
        if oversized is not None:
            self._buffer.clear()
            if oversized < 4:
                self._conn.close(wire.UNKNOWN_FRAME, f"frame of {oversized} bytes")
            else:
                self._conn.on_frame_too_large(oversized)
            self.stop_reading()

    def _complete(self, data: bytes, frames: list[wire.Frame]) -> tuple[int, int | None]:
        """Complete the buffered partial frame from the front of ``data``: (bytes of
        ``data`` used, a bad frame size or None); (-1, None) when ``data`` was not enough
        (then it is all buffered). The whole frame goes to ``frames``."""
        buffer = self._buffer
        view = memoryview(data)
        pos = 0
        if len(buffer) < 4:  # not even the size yet
            pos = min(4 - len(buffer), len(data))
            buffer += view[:pos]
            if len(buffer) < 4:
                return -1, None
        size = int.from_bytes(buffer[:4], "big")
        if size > self._max_frame or size < 4:
            return pos, size
        need = 4 + size - len(buffer)
        if need > len(data) - pos:
            buffer += view[pos:]
            return -1, None
        buffer += view[pos : pos + need]
        key = int.from_bytes(buffer[4:6], "big")
        version = int.from_bytes(buffer[6:8], "big")
        with memoryview(buffer) as whole:
            body = whole[8:].tobytes()
        buffer.clear()
        frames.append(wire.Frame(key, version, body))
        return pos + need, None

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
