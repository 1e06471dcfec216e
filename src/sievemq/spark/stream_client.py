"""A small synchronous RabbitMQ Stream protocol client for Spark's network reader.

Spark tasks are plain blocking Python, so this is one socket and request/response calls, no
event loop: PeerProperties, SASL PLAIN, Tune, Open, then Metadata, StreamStats, QueryOffset
and a Subscribe whose Deliver frames are read one chunk at a time with a credit of a few
chunks. It asks SieveMQ for its stored chunks (``sievemq-stored-chunks``): the chunk data is
the record-table layout Spark decodes from disk, so the network mode has no decode of its own.
"""

from __future__ import annotations

import socket
import ssl
import struct
from dataclasses import dataclass
from typing import NamedTuple
from urllib.parse import unquote, urlsplit

from sievemq.streamproto import wire

_OSIRIS_HEADER = struct.Struct(">BBHIqQQIIII")  # docs/stream-protocol.md §3
SCHEMES = {"rabbitmq-stream": 5552, "rabbitmq-stream+tls": 5551}
CREDIT = 8  # chunks in flight per subscription


class StreamProtocolError(RuntimeError):
    """The server refused a request or broke the protocol (the message names which)."""


@dataclass(frozen=True)
class StreamURI:
    """``rabbitmq-stream[+tls]://user:pass@host:port/vhost`` (the vhost URL-encoded)."""

    host: str
    port: int
    user: str
    password: str
    vhost: str
    tls: bool

    @classmethod
    def parse(cls, uri: str) -> StreamURI:
        parts = urlsplit(uri)
        if parts.scheme not in SCHEMES:
            raise ValueError(f"expected rabbitmq-stream:// or rabbitmq-stream+tls://, got {uri!r}")
        if not parts.hostname:
            raise ValueError(f"no host in {uri!r}")
        path = parts.path[1:] if parts.path.startswith("/") else parts.path
        return cls(
            host=parts.hostname,
            port=parts.port or SCHEMES[parts.scheme],
            user=unquote(parts.username or "guest"),
            password=unquote(parts.password or "guest"),
            vhost=unquote(path) if path else "/",
            tls=parts.scheme.endswith("+tls"),
        )

    def at(self, host: str, port: int) -> StreamURI:
        return StreamURI(host, port, self.user, self.password, self.vhost, self.tls)


class Chunk(NamedTuple):
    """One delivered chunk: ``records`` records from offset ``first`` (0 records: a progress
    marker, nothing below ``first`` is left to deliver)."""

    first: int
    records: int
    timestamp_ms: int
    data: bytes


class StreamStats(NamedTuple):
    first: int  # first offset held (its chunk id)
    end: int  # committed end: the offset after the last committed record
    last: int  # first offset of the last chunk (= end when empty)


class StreamClient:
    """One connection to one node (``connect``: open; use as a context manager)."""

    def __init__(self, uri: StreamURI, timeout: float = 120.0) -> None:
        self.uri = uri
        raw = socket.create_connection((uri.host, uri.port), timeout=timeout)
        if uri.tls:
            context = ssl.create_default_context()
            raw = context.wrap_socket(raw, server_hostname=uri.host)
        self._sock = raw
        self._buf = bytearray()
        self._corr = 0
        self._chunks: list[Chunk] = []
        self.frame_max = 0
        try:
            self._handshake()
        except BaseException:
            self._sock.close()
            raise

    def __enter__(self) -> StreamClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- framing -----------------------------------------------------------------------

    def _send(self, key: int, body: bytes) -> None:
        self._sock.sendall(wire.frame(key, body))

    def _frame(self) -> wire.Frame:
        while True:
            if len(self._buf) >= 4:
                (size,) = struct.unpack_from(">I", self._buf)
                if len(self._buf) >= 4 + size:
                    key, version = struct.unpack_from(">HH", self._buf, 4)
                    body = bytes(self._buf[8 : 4 + size])
                    del self._buf[: 4 + size]
                    return wire.Frame(key, version, body)
            data = self._sock.recv(1 << 20)
            if not data:
                raise StreamProtocolError(f"{self.uri.host}:{self.uri.port} closed the connection")
            self._buf += data

    def _handle(self, f: wire.Frame) -> None:
        """A frame that is no awaited response: Deliver is queued, the rest checked."""
        if f.key == wire.DELIVER:
            cur = wire.Cursor(f.body)
            cur.u8()  # subscription id: one subscription per client
            if f.version >= 2:
                cur.u64()
            (_, _, _, records, ts, _, first, _, length, _, _) = _OSIRIS_HEADER.unpack_from(
                f.body, cur.pos
            )
            start = cur.pos + _OSIRIS_HEADER.size
            self._chunks.append(Chunk(first, records, ts, f.body[start : start + length]))
        elif f.key == wire.CLOSE:
            cur = wire.Cursor(f.body)
            cur.u32()
            code = cur.u16()
            raise StreamProtocolError(f"server closed the connection: {code} {cur.string()}")
        elif f.key == wire.METADATA_UPDATE:
            cur = wire.Cursor(f.body)
            code = cur.u16()
            raise StreamProtocolError(f"stream {cur.string()!r} is no longer available ({code})")
        elif f.key == wire.CREDIT | wire.RESPONSE:
            raise StreamProtocolError(f"credit refused: {wire.Cursor(f.body).u16()}")
        # heartbeats and anything else informative are ignored

    def _request(self, key: int, body: bytes) -> wire.Cursor:
        """Send a request with the next correlation id; the cursor of its response after the
        correlation id (``_ok`` reads and checks the code)."""
        self._corr += 1
        corr = self._corr
        self._send(key, struct.pack(">I", corr) + body)
        while True:
            f = self._frame()
            if f.key == key | wire.RESPONSE:
                cur = wire.Cursor(f.body)
                if cur.u32() == corr:
                    return cur
            self._handle(f)

    def _ok(self, cur: wire.Cursor, what: str) -> wire.Cursor:
        code = cur.u16()
        if code != wire.OK:
            raise StreamProtocolError(f"{what}: response code {code}")
        return cur

    def _handshake(self) -> None:
        props = {"product": "sievemq-spark", "connection_name": "sievemq-spark"}
        self._ok(
            self._request(wire.PEER_PROPERTIES, wire.enc_properties(props)),
            "PeerProperties",
        )
        self._ok(self._request(wire.SASL_HANDSHAKE, b""), "SaslHandshake")
        secret = b"\0" + self.uri.user.encode() + b"\0" + self.uri.password.encode()
        auth = wire.enc_string("PLAIN") + struct.pack(">i", len(secret)) + secret
        self._ok(
            self._request(wire.SASL_AUTHENTICATE, auth),
            f"authentication of user {self.uri.user!r}",
        )
        tune = self._frame()
        while tune.key != wire.TUNE:
            self._handle(tune)
            tune = self._frame()
        frame_max, _heartbeat = struct.unpack_from(">II", tune.body)
        self.frame_max = frame_max
        self._send(wire.TUNE, struct.pack(">II", frame_max, 0))  # no heartbeats: short tasks
        self._ok(
            self._request(wire.OPEN, wire.enc_string(self.uri.vhost)),
            f"opening vhost {self.uri.vhost!r}",
        )

    # -- requests ------------------------------------------------------------------------

    def metadata(self, stream: str) -> list[tuple[str, int]]:
        """The nodes that hold ``stream``: replicas first (RabbitMQ clients read from them),
        then the leader; raises when the stream does not exist."""
        cur = self._request(wire.METADATA, struct.pack(">i", 1) + wire.enc_string(stream))
        brokers: dict[int, tuple[str, int]] = {}
        for _ in range(cur.count()):
            ref = cur.u16()
            host = cur.string()
            brokers[ref] = (host, cur.u32())
        for _ in range(cur.count()):
            name = cur.string()
            code = cur.u16()
            leader = cur.u16()
            replicas = [cur.u16() for _ in range(cur.count())]
            if name != stream:
                continue
            if code != wire.OK:
                raise StreamProtocolError(
                    f"no stream {stream!r} in vhost {self.uri.vhost!r} (code {code})"
                )
            return [brokers[r] for r in (*replicas, leader) if r in brokers]
        raise StreamProtocolError(f"Metadata did not answer for stream {stream!r}")

    def stream_stats(self, stream: str) -> StreamStats:
        cur = self._ok(
            self._request(wire.STREAM_STATS, wire.enc_string(stream)),
            f"StreamStats of {stream!r}",
        )
        stats: dict[str, int] = {}
        for _ in range(cur.count()):
            key = cur.string()
            stats[key] = cur.i64()
        committed = stats.get("committed_offset", -1)
        first = max(0, stats.get("first_chunk_id", -1))
        end = committed + 1 if committed >= 0 else first
        last = stats.get("last_chunk_id", -1)
        return StreamStats(first, end, last if last >= 0 else end)

    def query_offset(self, reference: str, stream: str) -> int | None:
        """A named consumer's stored offset, None when it has none."""
        cur = self._request(wire.QUERY_OFFSET, wire.enc_string(reference) + wire.enc_string(stream))
        code = cur.u16()
        if code == wire.NO_OFFSET:
            return None
        if code != wire.OK:
            raise StreamProtocolError(f"QueryOffset of {reference!r} on {stream!r}: code {code}")
        return cur.u64()

    def offset_at(self, stream: str, timestamp_ms: int) -> int:
        """The first offset of the first chunk stamped at or after ``timestamp_ms`` (the
        committed end when there is none): ResolveOffsetSpec with a timestamp."""
        body = (
            wire.enc_string(stream)
            + struct.pack(">Hq", wire.OFFSET_TIMESTAMP, timestamp_ms)
            + wire.enc_properties({})
        )
        cur = self._ok(
            self._request(wire.RESOLVE_OFFSET_SPEC, body), f"ResolveOffsetSpec on {stream!r}"
        )
        cur.u16()  # the offset type: always 4 (an offset)
        return cur.u64()

    def subscribe(self, stream: str, offset: int, properties: dict[str, str]) -> None:
        """Subscription 0 from ``offset`` (stored chunks, ``CREDIT`` chunks of credit)."""
        props = {"sievemq-stored-chunks": "true", **properties}
        body = (
            struct.pack(">B", 0)
            + wire.enc_string(stream)
            + struct.pack(">HQH", wire.OFFSET_OFFSET, offset, CREDIT)
            + wire.enc_properties(props)
        )
        self._ok(self._request(wire.SUBSCRIBE, body), f"Subscribe to {stream!r}")

    def next_chunk(self) -> Chunk:
        """The next delivered chunk (blocking); each one taken is credited back."""
        while not self._chunks:
            self._handle(self._frame())
        chunk = self._chunks.pop(0)
        self._send(wire.CREDIT, struct.pack(">BH", 0, 1))
        return chunk

    def close(self) -> None:
        try:
            self._corr += 1
            reason = wire.enc_string("done")
            self._send(wire.CLOSE, struct.pack(">IH", self._corr, wire.OK) + reason)
        except OSError:
            pass
        finally:
            self._sock.close()


def connect(uri: StreamURI, stream: str | None = None) -> StreamClient:
    """A client of the node that holds ``stream`` (Metadata's replica or leader), reached
    through the node of ``uri``; without a stream, that node itself."""
    client = StreamClient(uri)
    if stream is None:
        return client
    try:
        nodes = client.metadata(stream)
    except BaseException:
        client.close()
        raise
    if not nodes or (uri.host, uri.port) in nodes:
        return client
    client.close()
    host, port = nodes[0]
    return StreamClient(uri.at(host, port))
