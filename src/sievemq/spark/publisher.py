"""A small AMQP 0-9-1 confirm-mode publisher for the Spark sink (one per task).

Why not aiormq: it writes every publish to the socket on its own and marshals each message
through generic code; in a Spark task that was most of the sink's time (bench/RESULTS.md,
"Spark sink"). This publisher encodes each message's three frames by hand into one buffer,
sends the buffer in large writes, and reads publisher confirms while it sends: up to
``window`` messages wait for their confirm at once. Cold frames (the handshake, channel open,
queue declare, confirm select, close) go through pamqp's codec.

The socket is non-blocking and every wait goes through ``select`` on both directions, so a
gateway that stops reading while its confirms to us are unread (its write buffer is full)
cannot deadlock against a client blocked in ``send``.

Errors raise ``PublishError`` with the broker's reply code and text: a nack, a returned
(unroutable, ``mandatory``) message, a channel or connection closed by the broker, a timeout.
"""

from __future__ import annotations

import select
import socket
import ssl
import struct
import time
from typing import Any, Final
from urllib.parse import unquote, urlsplit

from pamqp import commands, frame
from pamqp import heartbeat as pheartbeat

PROTOCOL_HEADER: Final = b"AMQP\x00\x00\x09\x01"
FRAME_END: Final = b"\xce"
CHANNEL: Final = 1
FRAME_MAX: Final = 131072  # what we offer; the broker's smaller limit wins
FLUSH_BYTES: Final = 256 * 1024  # send once this much is encoded
DEFAULT_WINDOW: Final = 5000  # messages waiting for a confirm at once
DEFAULT_TIMEOUT: Final = 60.0  # seconds without any progress before giving up

# content header property flags: headers, delivery-mode, message-id (AMQP 0-9-1 §4.2.6.1)
_FLAGS: Final = 0x2000 | 0x1000 | 0x0080
_METHOD_FRAME: Final = 1
_HEADER_FRAME: Final = 2
_BODY_FRAME: Final = 3
_HEARTBEAT_FRAME: Final = 8
_BASIC: Final = 60
_ACK: Final = (60, 80)
_NACK: Final = (60, 120)
_RETURN: Final = (60, 50)
_CHANNEL_CLOSE: Final = (20, 40)
_CONNECTION_CLOSE: Final = (10, 50)

_head = struct.Struct(">BHI")
_ids = struct.Struct(">HH")
_content = struct.Struct(">HHQH")


class PublishError(RuntimeError):
    """The broker refused, returned or did not confirm a message, or closed on us
    (``reply_code``: the code of the broker's close or return, when there was one)."""

    def __init__(self, text: str, reply_code: int | None = None) -> None:
        super().__init__(text)
        self.reply_code = reply_code


def _shortstr(value: str) -> bytes:
    raw = value.encode("utf-8")
    if len(raw) > 255:
        raise ValueError(f"{value[:40]!r}...: longer than 255 bytes (an AMQP short string)")
    return bytes((len(raw),)) + raw


def _longstr(value: str) -> bytes:
    raw = value.encode("utf-8")
    return b"S" + struct.pack(">I", len(raw)) + raw


def encode_headers(
    pairs: tuple[tuple[str, str], ...],
    filter_key: str,
    filter_values: tuple[str, ...],
    publisher: tuple[str, str, str, int],
) -> bytes:
    """A field table (size included): string ``pairs``, the filter value(s) (one longstr, or
    an array of them), then the publisher reference (longstr) and publishing id (int64)."""
    parts = [_shortstr(k) + _longstr(v) for k, v in pairs]
    if filter_values:
        if len(filter_values) == 1:
            value = _longstr(filter_values[0])
        else:
            items = b"".join(_longstr(v) for v in filter_values)
            value = b"A" + struct.pack(">I", len(items)) + items
        parts.append(_shortstr(filter_key) + value)
    ref_key, reference, id_key, pid = publisher
    parts.append(_shortstr(ref_key) + _longstr(reference))
    parts.append(_shortstr(id_key) + b"l" + struct.pack(">q", pid))
    table = b"".join(parts)
    return struct.pack(">I", len(table)) + table


class ConfirmPublisher:
    """One connection, one channel in confirm mode; ``publish`` buffers, ``wait`` settles."""

    def __init__(
        self,
        uri: str,
        *,
        window: int = DEFAULT_WINDOW,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        parts = urlsplit(uri)
        self._host = parts.hostname or "localhost"
        tls = parts.scheme == "amqps"
        port = parts.port or (5671 if tls else 5672)
        self._user = unquote(parts.username or "guest")
        self._password = unquote(parts.password or "guest")
        path = parts.path[1:] if parts.path.startswith("/") else parts.path
        self._vhost = unquote(path) if path else "/"
        self.window = window
        self.timeout = timeout
        raw = socket.create_connection((self._host, port), timeout=timeout)
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock: socket.socket = raw
        if tls:
            # system trust store (honours SSL_CERT_FILE), host name checked, as aiormq does
            sock = ssl.create_default_context().wrap_socket(raw, server_hostname=self._host)
        sock.setblocking(False)
        self._sock = sock
        self._in = bytearray()
        self._out = bytearray()
        self.frame_max = FRAME_MAX
        self.published = 0  # delivery tags handed out (the last one)
        self._floor = 0  # every tag <= floor is confirmed
        self._singles: set[int] = set()  # tags > floor confirmed one by one
        self._method_cache: dict[tuple[str, str], bytes] = {}
        self._closed = False
        try:
            self._handshake()
        except BaseException:
            self._sock.close()
            self._closed = True
            raise

    # -- state ---------------------------------------------------------------------------
    @property
    def outstanding(self) -> int:
        """Messages published and not confirmed yet."""
        return self.published - self._floor - len(self._singles)

    # -- the handshake and cold methods (pamqp) -------------------------------------------
    def _handshake(self) -> None:
        self._out += PROTOCOL_HEADER
        start = self._expect(0, commands.Connection.Start)
        mechanisms = str(start.mechanisms or "")
        if "PLAIN" not in mechanisms.split():
            raise PublishError(f"broker offers no PLAIN login (offers {mechanisms!r})")
        response = f"\0{self._user}\0{self._password}"
        self._send_method(
            0,
            commands.Connection.StartOk(
                client_properties={
                    "product": "sievemq-spark-sink",
                    "capabilities": {"publisher_confirms": True, "basic.nack": True},
                },
                mechanism="PLAIN",
                response=response,
                locale="en_US",
            ),
        )
        tune = self._expect(0, commands.Connection.Tune)
        self.frame_max = min(FRAME_MAX, tune.frame_max or FRAME_MAX)
        # heartbeat 0: a task that waits on Spark for its rows must not be timed out
        self._send_method(
            0, commands.Connection.TuneOk(channel_max=1, frame_max=self.frame_max, heartbeat=0)
        )
        self._send_method(0, commands.Connection.Open(virtual_host=self._vhost))
        self._expect(0, commands.Connection.OpenOk)
        self._open_channel()

    def _open_channel(self) -> None:
        self._send_method(CHANNEL, commands.Channel.Open())
        self._expect(CHANNEL, commands.Channel.OpenOk)
        self._send_method(CHANNEL, commands.Confirm.Select())
        self._expect(CHANNEL, commands.Confirm.SelectOk)

    def ensure_stream(self, name: str) -> None:
        """Declare ``name`` passively; when it does not exist, declare it as a durable stream."""
        self._send_method(CHANNEL, commands.Queue.Declare(queue=name, passive=True))
        try:
            self._expect(CHANNEL, commands.Queue.DeclareOk)
            return
        except PublishError as error:
            if error.reply_code != 404:
                raise
        self._open_channel()  # the 404 closed the channel (and we answered close-ok)
        self._send_method(
            CHANNEL,
            commands.Queue.Declare(queue=name, durable=True, arguments={"x-queue-type": "stream"}),
        )
        self._expect(CHANNEL, commands.Queue.DeclareOk)

    def _send_method(self, channel: int, method: Any) -> None:
        self._out += frame.marshal(method, channel)

    def _expect(self, channel: int, kind: type[Any]) -> Any:
        """Send what is buffered, then read frames until one of ``kind`` on ``channel``."""
        deadline = time.monotonic() + self.timeout
        while True:
            got = self._next_frame(deadline)
            if got is None:
                continue
            ch, value = got
            if isinstance(value, kind) and ch == channel:
                return value
            self._unexpected(ch, value, kind.__name__)

    def _unexpected(self, channel: int, value: Any, wanted: str) -> None:
        if isinstance(value, commands.Connection.Close):
            self._out += frame.marshal(commands.Connection.CloseOk(), 0)
            self._flush_quietly()
            raise PublishError(
                f"broker closed the connection: {value.reply_code} {value.reply_text}",
                value.reply_code,
            )
        if isinstance(value, commands.Channel.Close):
            self._out += frame.marshal(commands.Channel.CloseOk(), channel)
            raise PublishError(
                f"broker closed the channel: {value.reply_code} {value.reply_text}",
                value.reply_code,
            )
        if isinstance(
            value,
            pheartbeat.Heartbeat | commands.Connection.Blocked | commands.Connection.Unblocked,
        ):
            return  # blocked by an alarm: confirms stop, and the timeout says so
        raise PublishError(f"expected {wanted}, broker sent {type(value).__name__}")

    def _next_frame(self, deadline: float) -> tuple[int, Any] | None:
        """One frame through pamqp (cold path); None when more bytes must be read first."""
        data = self._in
        if len(data) >= 7:
            size = struct.unpack_from(">I", data, 3)[0]
            if len(data) >= 8 + size:
                used, channel, value = frame.unmarshal(bytes(data[: 8 + size]))
                del data[:used]
                return channel, value
        self._pump(deadline)
        return None

    # -- the hot path ---------------------------------------------------------------------
    def publish(
        self, exchange: str, routing_key: str, headers: bytes, message_id: str, body: bytes
    ) -> None:
        """Encode one persistent ``mandatory`` publish (``headers``: an encoded field table)
        into the send buffer; sends when the buffer is large or the window is full."""
        method = self._method_cache.get((exchange, routing_key))
        if method is None:
            payload = (
                _ids.pack(_BASIC, 40)
                + b"\x00\x00"
                + _shortstr(exchange)
                + _shortstr(routing_key)
                + b"\x01"  # mandatory
            )
            method = _head.pack(_METHOD_FRAME, CHANNEL, len(payload)) + payload + FRAME_END
            self._method_cache[(exchange, routing_key)] = method
        header = (
            _content.pack(_BASIC, 0, len(body), _FLAGS)
            + headers
            + b"\x02"  # delivery-mode: persistent
            + _shortstr(message_id)
        )
        if len(header) + 8 > self.frame_max:
            raise PublishError(
                f"a message's headers take {len(header)} bytes, more than a frame "
                f"({self.frame_max}) can carry"
            )
        out = self._out
        out += method
        out += _head.pack(_HEADER_FRAME, CHANNEL, len(header))
        out += header
        out += FRAME_END
        step = self.frame_max - 8
        for at in range(0, len(body), step):
            piece = body[at : at + step]
            out += _head.pack(_BODY_FRAME, CHANNEL, len(piece))
            out += piece
            out += FRAME_END
        self.published += 1
        if len(out) >= FLUSH_BYTES or self.outstanding >= self.window:
            deadline = time.monotonic() + self.timeout
            self._pump(deadline, block=False)
            while self.outstanding >= self.window or len(self._out) >= FLUSH_BYTES:
                self._pump(deadline)

    def wait(self) -> None:
        """Send everything buffered and wait until every message is confirmed."""
        deadline = time.monotonic() + self.timeout
        while self._out or self.outstanding:
            before = (len(self._out), self.outstanding)
            self._pump(deadline)
            if (len(self._out), self.outstanding) != before:
                deadline = time.monotonic() + self.timeout

    def _pump(self, deadline: float, block: bool = True) -> None:
        """One round of I/O: send what the socket takes, read and handle what arrived.
        ``block``: wait (until ``deadline``) for the socket to be ready."""
        sock = self._sock
        wait = max(0.0, deadline - time.monotonic()) if block else 0.0
        readable, writable, _ = select.select([sock], [sock] if self._out else [], [], wait)
        if not readable and not writable:
            if block:
                raise PublishError(
                    f"no progress in {self.timeout:.0f} s ({self.outstanding} messages "
                    "not confirmed)"
                )
            return
        if writable:
            try:
                sent = sock.send(self._out)
            except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
                sent = 0
            del self._out[:sent]
        if readable or (isinstance(sock, ssl.SSLSocket) and sock.pending()):
            self._read()

    def _read(self) -> None:
        sock = self._sock
        while True:
            try:
                chunk = sock.recv(262144)
            except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                break
            except ConnectionError as error:
                raise PublishError(f"connection lost: {error}") from None
            if not chunk:
                raise PublishError(
                    f"broker closed the socket ({self.outstanding} messages not confirmed)"
                )
            self._in += chunk
            if not (isinstance(sock, ssl.SSLSocket) and sock.pending()):
                break
        if self.published:  # past the handshake: confirms and errors
            self._handle_frames()

    def _handle_frames(self) -> None:
        data = self._in
        pos = 0
        end = len(data)
        while end - pos >= 7:
            kind, channel, size = _head.unpack_from(data, pos)
            if end - pos < 8 + size:
                break
            if kind == _METHOD_FRAME:
                ids = _ids.unpack_from(data, pos + 7)
                if ids == _ACK:
                    tag, bits = struct.unpack_from(">QB", data, pos + 11)
                    self._confirm(tag, bool(bits & 1))
                elif ids == _NACK:
                    tag = struct.unpack_from(">Q", data, pos + 11)[0]
                    raise PublishError(f"broker nacked message {tag} (not stored)")
                elif ids == _RETURN:
                    code, length = struct.unpack_from(">HB", data, pos + 11)
                    text = bytes(data[pos + 14 : pos + 14 + length]).decode("utf-8", "replace")
                    raise PublishError(f"message returned as unroutable: {code} {text}", code)
                else:
                    value = frame.unmarshal(bytes(data[pos : pos + 8 + size]))[2]
                    del data[: pos + 8 + size]
                    self._unexpected(channel, value, "a confirm")
                    pos, end = 0, len(data)
                    continue
            # content of a returned message and heartbeats: nothing to do
            pos += 8 + size
        del data[:pos]

    def _confirm(self, tag: int, multiple: bool) -> None:
        if multiple:
            if tag > self._floor:
                self._floor = tag
                self._singles = {t for t in self._singles if t > tag}
        elif tag > self._floor:
            self._singles.add(tag)
        while self._floor + 1 in self._singles:
            self._floor += 1
            self._singles.discard(self._floor)

    # -- closing --------------------------------------------------------------------------
    def _flush_quietly(self) -> None:
        try:
            deadline = time.monotonic() + 1.0
            while self._out and time.monotonic() < deadline:
                _, writable, _ = select.select([], [self._sock], [], 0.1)
                if writable:
                    del self._out[: self._sock.send(self._out)]
        except OSError:
            pass

    def close(self) -> None:
        """Close the connection politely: connection.close, then wait briefly for the
        broker's close-ok (or its end of the socket)."""
        if self._closed:
            return
        self._closed = True
        try:
            self._out += frame.marshal(
                commands.Connection.Close(
                    reply_code=200, reply_text="done", class_id=0, method_id=0
                ),
                0,
            )
            self._flush_quietly()
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline:
                readable, _, _ = select.select([self._sock], [], [], 0.1)
                if readable:
                    try:
                        chunk = self._sock.recv(65536)
                    except (BlockingIOError, ssl.SSLWantReadError):
                        continue
                    if not chunk or b"\x00\x0a\x00\x33" in chunk:  # EOF or close-ok
                        break
        except OSError:
            pass
        finally:
            self._sock.close()

    def __enter__(self) -> ConfirmPublisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
