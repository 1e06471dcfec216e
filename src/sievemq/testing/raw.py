"""A raw AMQP 0-9-1 client over a plain socket, built on pamqp's frame codec.

Why not a real client library: libraries hide what protocol tests need to see or send —
the exact bytes of a content header, a wrong protocol header, a broken frame, the
connection.close a failed login gets. This client does the handshake and then lets a test
send and read raw frames.

``RawClient`` blocks (for tests whose server is another process or thread);
``AsyncRawClient`` is the same client on asyncio streams (for a server on the test's own
event loop, or a test that publishes and reads confirms concurrently). Both parse frames
with one ``FrameBuffer`` and build the same handshake, so they cannot drift apart.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import time
from typing import Any

from pamqp import body as pbody
from pamqp import commands, frame, header
from pamqp.exceptions import UnmarshalingException

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
FRAME_END = b"\xce"
CLASS_BASIC = 60

__all__ = [
    "FRAME_END",
    "PROTOCOL_HEADER",
    "AsyncRawClient",
    "Closed",
    "FrameBuffer",
    "RawClient",
    "close_leftover_clients",
    "decode_props",
    "props_bytes",
    "raw_content",
    "sasl_response",
]


class Closed(Exception):
    """The server closed the socket."""


class FrameBuffer:
    """Bytes in, frames out (sans-I/O): the frame parsing both clients share."""

    def __init__(self) -> None:
        self.data = b""

    def feed(self, chunk: bytes) -> None:
        self.data += chunk

    def next_frame(self) -> tuple[int, Any] | None:
        """The next complete (channel, frame), or None until more bytes arrive."""
        if len(self.data) < 7:
            return None
        size = struct.unpack_from(">I", self.data, 3)[0]
        if len(self.data) < 8 + size:
            return None
        try:
            used, channel, value = frame.unmarshal(self.data)
        except UnmarshalingException as exc:
            raise AssertionError(f"server sent a bad frame: {exc}") from exc
        self.data = self.data[used:]
        return channel, value

    def next_raw_header(self) -> tuple[bytes, int] | None:
        """The next frame, which must be a content header: (raw property bytes, body size).

        The property bytes are exactly what the server wrote (flags + list), undecoded."""
        if len(self.data) < 7:
            return None
        ftype, _, size = struct.unpack_from(">BHI", self.data)
        assert ftype == 2, f"expected a content header frame, got type {ftype}"
        if len(self.data) < 8 + size:
            return None
        payload = self.data[7 : 7 + size]
        assert self.data[7 + size : 8 + size] == FRAME_END
        self.data = self.data[8 + size :]
        body_size = struct.unpack_from(">Q", payload, 4)[0]
        return payload[12:], body_size

    def take_all(self) -> bytes:
        out, self.data = self.data, b""
        return out


def start_ok(mechanism: str, user: str, password: str) -> Any:
    """connection.start-ok for a login (the client property the server checks included)."""
    return commands.Connection.StartOk(
        client_properties={"capabilities": {"consumer_cancel_notify": True}},
        mechanism=mechanism,
        response=sasl_response(mechanism, user, password),
        locale="en_US",
    )


def raw_content(channel: int, raw_properties: bytes, body: bytes) -> bytes:
    """A content header carrying exactly ``raw_properties`` (flags + list), then the body."""
    payload = struct.pack(">HHQ", CLASS_BASIC, 0, len(body)) + raw_properties
    head = struct.pack(">BHI", 2, channel, len(payload)) + payload + FRAME_END
    return head + (bytes(frame.marshal(pbody.ContentBody(body), channel)) if body else b"")


def publish_frames(method: Any, channel: int, raw_properties: bytes, body: bytes) -> bytes:
    """``method`` (a basic.publish) + content header (raw properties) + body, as one string."""
    return bytes(frame.marshal(method, channel)) + raw_content(channel, raw_properties, body)


_open_clients: set[RawClient] = set()


def close_leftover_clients() -> int:
    """Close every ``RawClient`` not closed yet; returns how many. For a test suite's
    teardown: a protocol test often ends on an assertion with its client still open, and
    the socket would otherwise be left to the garbage collector (a ResourceWarning)."""
    leftovers = list(_open_clients)
    for client in leftovers:
        client.close()
    return len(leftovers)


class RawClient:
    """A blocking raw client: send bytes or frames, read frames, with a timeout on each."""

    def __init__(
        self, host: str, port: int, timeout: float = 5.0, receive_buffer: int | None = None
    ) -> None:
        """Connect; ``receive_buffer`` sets SO_RCVBUF before connecting, so the TCP window
        the server sees is small (a client that reads slowly fills it quickly)."""
        if receive_buffer is None:
            self.sock = socket.create_connection((host, port), timeout=timeout)
        else:
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
            self.sock.settimeout(timeout)
            self.sock.connect((host, port))
        _open_clients.add(self)
        self.frames = FrameBuffer()
        self.server_properties: dict[str, Any] = {}
        self.next_tag = 1

    # -- bytes -------------------------------------------------------------------------
    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_frame(self, value: Any, channel: int = 0) -> None:
        self.send(frame.marshal(value, channel))

    def recv_some(self, timeout: float | None = None) -> bytes:
        """Raw bytes as they arrive; b"" on EOF."""
        if timeout is not None:
            self.sock.settimeout(timeout)
        try:
            return self.sock.recv(65536)
        except ConnectionResetError:
            return b""

    def read_until_eof(self, timeout: float = 5.0) -> bytes:
        """Everything until the server closes the socket (raises TimeoutError if it does not)."""
        deadline = time.monotonic() + timeout
        out = self.frames.take_all()
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"socket still open after {timeout}s; got {out[:200]!r}")
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(65536)
            except ConnectionResetError:
                return out
            if not chunk:
                return out
            out += chunk

    def _fill(self, deadline: float, what: str) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"no {what} from server")
        self.sock.settimeout(remaining)
        try:
            chunk = self.sock.recv(65536)
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            raise Closed(f"server closed the socket; unread {self.frames.data!r}")
        self.frames.feed(chunk)

    # -- frames ------------------------------------------------------------------------
    def read_frame(self, timeout: float = 5.0) -> tuple[int, Any]:
        """Next (channel, frame); heartbeats included. Raises Closed on EOF."""
        deadline = time.monotonic() + timeout
        while (got := self.frames.next_frame()) is None:
            self._fill(deadline, "frame")
        return got

    def expect(self, cls: type, timeout: float = 5.0) -> Any:
        """Read frames (skipping heartbeats) until one arrives; it must be of type cls."""
        while True:
            _, value = self.read_frame(timeout)
            if value.name == "Heartbeat":
                continue
            assert isinstance(value, cls), f"expected {cls.__name__}, got {value!r}"
            return value

    def next_method(self, timeout: float = 5.0) -> tuple[int, Any]:
        """The next frame that is not a heartbeat."""
        while True:
            channel, value = self.read_frame(timeout)
            if value.name != "Heartbeat":
                return channel, value

    # -- handshake ---------------------------------------------------------------------
    def handshake(
        self,
        user: str = "guest",
        password: str = "guest",
        mechanism: str = "PLAIN",
        frame_max: int = 131072,
        heartbeat: int = 0,
    ) -> Any:
        """Up to connection.open-ok; returns the server's connection.tune."""
        self.send(PROTOCOL_HEADER)
        start = self.expect(commands.Connection.Start)
        self.server_properties = start.server_properties
        self.send_frame(start_ok(mechanism, user, password))
        tune = self.expect(commands.Connection.Tune)
        self.send_frame(
            commands.Connection.TuneOk(channel_max=0, frame_max=frame_max, heartbeat=heartbeat)
        )
        self.send_frame(commands.Connection.Open(virtual_host="/"))
        self.expect(commands.Connection.OpenOk)
        return tune

    def open_channel(self, channel: int = 1) -> None:
        self.send_frame(commands.Channel.Open(), channel)
        self.expect(commands.Channel.OpenOk)

    def rpc(self, method: Any, channel: int = 1) -> Any:
        """Send a synchronous method and return the next method frame's value."""
        self.send_frame(method, channel)
        return self.next_method()[1]

    def publish(
        self,
        channel: int,
        exchange: str,
        routing_key: str,
        raw_properties: bytes,
        body: bytes,
        mandatory: bool = False,
        immediate: bool = False,
    ) -> None:
        """basic.publish whose content header carries exactly `raw_properties` (flags+list)."""
        method = commands.Basic.Publish(
            exchange=exchange, routing_key=routing_key, mandatory=mandatory, immediate=immediate
        )
        self.send(publish_frames(method, channel, raw_properties, body))

    def read_message(self, timeout: float = 5.0) -> tuple[Any, bytes, bytes]:
        """(method, raw property bytes, body) of the next deliver/return."""
        _, method = self.next_method(timeout)
        assert method.name in ("Basic.Deliver", "Basic.Return"), method
        raw_props, size = self._read_raw_header(timeout)
        body = b""
        while len(body) < size:
            _, part = self.read_frame(timeout)
            assert isinstance(part, pbody.ContentBody), part
            body += part.value
        return method, raw_props, body

    def _read_raw_header(self, timeout: float) -> tuple[bytes, int]:
        """The content header's property bytes exactly as the server wrote them."""
        deadline = time.monotonic() + timeout
        while (got := self.frames.next_raw_header()) is None:
            self._fill(max(deadline, time.monotonic() + 0.01), "content header")
        return got

    # -- publishing and consuming in bulk -------------------------------------------------
    def confirm_select(self, channel: int = 1) -> None:
        assert isinstance(self.rpc(commands.Confirm.Select(), channel), commands.Confirm.SelectOk)
        self.next_tag = 1

    def publish_confirmed(
        self, channel: int, exchange: str, routing_key: str, items: list[tuple[bytes, bytes]]
    ) -> None:
        """Publish (raw properties, body) items in one write, then wait for all acks.

        Sending them together lets the server put them in one chunk (group commit)."""
        method = commands.Basic.Publish(exchange=exchange, routing_key=routing_key)
        data = b"".join(publish_frames(method, channel, props, body) for props, body in items)
        self.send(data)
        acked = self.next_tag - 1
        last = acked + len(items)
        self.next_tag = last + 1
        while acked < last:
            _, method = self.next_method()
            assert isinstance(method, commands.Basic.Ack), f"expected basic.ack, got {method!r}"
            acked = max(acked, method.delivery_tag)

    def start_consumer(
        self, channel: int, queue: str, arguments: dict[str, Any], prefetch: int = 100
    ) -> str:
        assert isinstance(
            self.rpc(commands.Basic.Qos(prefetch_count=prefetch), channel), commands.Basic.QosOk
        )
        ok = self.rpc(commands.Basic.Consume(queue=queue, arguments=arguments), channel)
        assert isinstance(ok, commands.Basic.ConsumeOk), ok
        return str(ok.consumer_tag)

    def collect(
        self, channel: int, count: int, quiet: float = 0.3, timeout: float = 10.0, ack: bool = True
    ) -> list[tuple[Any, bytes, bytes]]:
        """Deliveries until `count` arrived and then `quiet` seconds passed without more."""
        got: list[tuple[Any, bytes, bytes]] = []
        deadline = time.monotonic() + timeout
        while True:
            wait = quiet if len(got) >= count else deadline - time.monotonic()
            if wait <= 0:
                return got
            try:
                message = self.read_message(timeout=wait)
            except TimeoutError:
                return got
            got.append(message)
            if ack:
                self.send_frame(commands.Basic.Ack(delivery_tag=message[0].delivery_tag), channel)

    def close(self) -> None:
        self.sock.close()
        _open_clients.discard(self)

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class AsyncRawClient:
    """The raw client on asyncio streams: same frames, same handshake, awaitable reads."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.frames = FrameBuffer()

    @classmethod
    async def connect(cls, host: str, port: int) -> AsyncRawClient:
        reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer)

    def send(self, data: bytes) -> None:
        self.writer.write(data)

    def send_frame(self, value: Any, channel: int = 0) -> None:
        self.send(frame.marshal(value, channel))

    async def read_frame(self, timeout: float = 10.0) -> tuple[int, Any]:
        """Next (channel, frame); heartbeats included. Raises Closed on EOF."""
        while (got := self.frames.next_frame()) is None:
            chunk = await asyncio.wait_for(self.reader.read(65536), timeout)
            if not chunk:
                raise Closed(f"server closed the socket; unread {self.frames.data!r}")
            self.frames.feed(chunk)
        return got

    async def next_method(self, timeout: float = 10.0) -> Any:
        """The next frame that is not a heartbeat (its value; the channel is dropped)."""
        while True:
            _, value = await self.read_frame(timeout)
            if value.name != "Heartbeat":
                return value

    async def handshake(self, user: str = "guest", password: str = "guest") -> Any:
        """Up to connection.open-ok (frame_max as the server tunes it); returns the tune."""
        self.send(PROTOCOL_HEADER)
        start = await self.next_method()
        assert isinstance(start, commands.Connection.Start), start
        self.send_frame(start_ok("PLAIN", user, password))
        tune = await self.next_method()
        assert isinstance(tune, commands.Connection.Tune), tune
        self.send_frame(commands.Connection.TuneOk(0, tune.frame_max, 0))
        self.send_frame(commands.Connection.Open("/"))
        ok = await self.next_method()
        assert isinstance(ok, commands.Connection.OpenOk), ok
        return tune

    async def rpc(self, method: Any, channel: int = 1) -> Any:
        """Send a synchronous method and return the next method frame's value."""
        self.send_frame(method, channel)
        return await self.next_method()

    async def open_channel(self, channel: int = 1) -> None:
        ok = await self.rpc(commands.Channel.Open(), channel)
        assert isinstance(ok, commands.Channel.OpenOk), ok

    async def close(self) -> None:
        self.writer.close()
        # the server may have hung up first: closed either way
        with contextlib.suppress(ConnectionError, OSError):
            await self.writer.wait_closed()


def sasl_response(mechanism: str, user: str, password: str) -> str:
    """The start-ok response for PLAIN or AMQPLAIN."""
    if mechanism == "PLAIN":
        return f"\0{user}\0{password}"
    if mechanism == "AMQPLAIN":
        # AMQPLAIN is a field table without its length prefix: LOGIN and PASSWORD longstrs
        def field(name: str, value: str) -> bytes:
            raw = value.encode()
            return bytes([len(name)]) + name.encode() + b"S" + struct.pack(">I", len(raw)) + raw

        return (field("LOGIN", user) + field("PASSWORD", password)).decode("latin-1")
    raise ValueError(mechanism)


def props_bytes(**values: Any) -> bytes:
    """Raw content-header property bytes (flags + list) for basic properties."""
    return bytes(commands.Basic.Properties(**values).marshal())


def decode_props(raw: bytes) -> Any:
    """Decode raw property bytes with pamqp (via a synthetic content header)."""
    payload = struct.pack(">HHQ", CLASS_BASIC, 0, 0) + raw
    value = header.ContentHeader()
    value.unmarshal(payload)
    return value.properties
