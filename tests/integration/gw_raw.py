"""A tiny blocking AMQP 0-9-1 client over a plain socket, built on pamqp's frame codec.

Real libraries hide what the protocol tests need to see or send: the exact bytes of a
content header, a wrong protocol header, a broken frame, the connection.close a failed
login gets. This client does the handshake and then lets a test send and read raw frames.
"""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

from pamqp import body as pbody
from pamqp import commands, frame, header
from pamqp.base import Frame
from pamqp.exceptions import UnmarshalingException

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
FRAME_END = b"\xce"


class Closed(Exception):
    """The server closed the socket."""


class RawClient:
    def __init__(self, host: str, port: int, timeout: float = 5.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.buf = b""

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
        out = self.buf
        self.buf = b""
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

    # -- frames ------------------------------------------------------------------------
    def read_frame(self, timeout: float = 5.0) -> tuple[int, Any]:
        """Next (channel, frame); heartbeats included. Raises Closed on EOF."""
        deadline = time.monotonic() + timeout
        while True:
            if len(self.buf) >= 7:
                size = struct.unpack_from(">I", self.buf, 3)[0]
                if len(self.buf) >= 8 + size:
                    try:
                        used, channel, value = frame.unmarshal(self.buf)
                    except UnmarshalingException as exc:
                        raise AssertionError(f"server sent a bad frame: {exc}") from exc
                    self.buf = self.buf[used:]
                    return channel, value
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no frame from server")
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(65536)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                raise Closed(f"server closed the socket; unread {self.buf!r}")
            self.buf += chunk

    def expect(self, cls: type, timeout: float = 5.0) -> Any:
        """Read frames (skipping heartbeats) until one arrives; it must be of type cls."""
        while True:
            _, value = self.read_frame(timeout)
            if value.name == "Heartbeat":
                continue
            assert isinstance(value, cls), f"expected {cls.__name__}, got {value!r}"
            return value

    def next_method(self, timeout: float = 5.0) -> tuple[int, Any]:
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
    ) -> commands.Connection.Tune:
        """Up to connection.open-ok (the caller may stop earlier with a bad login)."""
        self.send(PROTOCOL_HEADER)
        start = self.expect(commands.Connection.Start)
        self.server_properties = start.server_properties
        self.send_frame(
            commands.Connection.StartOk(
                client_properties={"capabilities": {"consumer_cancel_notify": True}},
                mechanism=mechanism,
                response=sasl_response(mechanism, user, password),
                locale="en_US",
            )
        )
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

    def rpc(self, method: Frame, channel: int = 1) -> Any:
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
        method = frame.marshal(
            commands.Basic.Publish(
                exchange=exchange,
                routing_key=routing_key,
                mandatory=mandatory,
                immediate=immediate,
            ),
            channel,
        )
        payload = struct.pack(">HHQ", 60, 0, len(body)) + raw_properties
        head = struct.pack(">BHI", 2, channel, len(payload)) + payload + FRAME_END
        content = frame.marshal(pbody.ContentBody(body), channel) if body else b""
        self.send(method + head + content)

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
        while True:
            if len(self.buf) >= 7:
                ftype, _, size = struct.unpack_from(">BHI", self.buf)
                assert ftype == 2, f"expected a content header frame, got type {ftype}"
                if len(self.buf) >= 8 + size:
                    payload = self.buf[7 : 7 + size]
                    assert self.buf[7 + size : 8 + size] == FRAME_END
                    self.buf = self.buf[8 + size :]
                    body_size = struct.unpack_from(">Q", payload, 4)[0]
                    return payload[12:], body_size
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            chunk = self.sock.recv(65536)
            if not chunk:
                raise Closed("closed while reading a content header")
            self.buf += chunk

    # -- publishing and consuming in bulk -------------------------------------------------
    def confirm_select(self, channel: int = 1) -> None:
        assert isinstance(self.rpc(commands.Confirm.Select(), channel), commands.Confirm.SelectOk)
        self.next_tag = 1

    def publish_confirmed(
        self, channel: int, exchange: str, routing_key: str, items: list[tuple[bytes, bytes]]
    ) -> None:
        """Publish (raw properties, body) items in one write, then wait for all acks.

        Sending them together lets the server put them in one chunk (group commit)."""
        data = b""
        for props, body in items:
            method = frame.marshal(
                commands.Basic.Publish(exchange=exchange, routing_key=routing_key), channel
            )
            payload = struct.pack(">HHQ", 60, 0, len(body)) + props
            head = struct.pack(">BHI", 2, channel, len(payload)) + payload + FRAME_END
            data += (
                method + head + (frame.marshal(pbody.ContentBody(body), channel) if body else b"")
            )
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


def sasl_response(mechanism: str, user: str, password: str) -> str:
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


def decode_props(raw: bytes) -> commands.Basic.Properties:
    """Decode raw property bytes with pamqp (via a synthetic content header)."""
    payload = struct.pack(">HHQ", 60, 0, 0) + raw
    value = header.ContentHeader()
    value.unmarshal(payload)
    return value.properties
