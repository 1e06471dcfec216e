"""The RabbitMQ Stream protocol under test: rstream clients (a test dependency) on a
``ServerProcess``, a raw socket client for frames rstream cannot send, and a stream listener
started in-process beside a ``running_gateway``."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import AsyncIterator
from typing import Any

from rstream import Consumer, EventContext, OffsetSpecification, OffsetType, Producer
from rstream.client import Client

from sievemq.gateway.net.stream_protocol import stream_protocol_factory
from sievemq.gateway.streamproto_session.connection import StreamConnection
from sievemq.gateway.streamproto_session.node import StreamNode
from sievemq.testing.gateway import RunningGateway
from sievemq.testing.process import ServerProcess
from sievemq.testing.wait import eventually

__all__ = [
    "RawStreamClient",
    "consumer",
    "from_first",
    "in_process_stream_client",
    "in_process_stream_listener",
    "open_client",
    "producer",
    "sac",
    "send_confirmed",
    "string",
]


def producer(server: ServerProcess, **kwargs: Any) -> Producer:
    return Producer(server.host, server.stream_port, username="guest", password="guest", **kwargs)


def consumer(server: ServerProcess, **kwargs: Any) -> Consumer:
    return Consumer(server.host, server.stream_port, username="guest", password="guest", **kwargs)


async def open_client(server: ServerProcess) -> Client:
    """A low-level rstream client, authenticated on the default vhost."""
    client = Client(server.host, server.stream_port, frame_max=1024 * 1024, heartbeat=60)
    await client.start()
    await client.authenticate(vhost="/", username="guest", password="guest")
    return client


def sac(name: str, **extra: str) -> dict[str, str]:
    """Subscription properties of a member of the single-active-consumer group ``name``."""
    return {"single-active-consumer": "true", "name": name, **extra}


async def from_first(active: bool, ctx: EventContext) -> OffsetSpecification:
    """A consumer-update listener: an activated consumer starts from the first message."""
    return OffsetSpecification(OffsetType.FIRST, 0)


def string(value: str) -> bytes:
    """A protocol string: its UTF-8 bytes after their 16-bit length."""
    raw = value.encode()
    return struct.pack(">H", len(raw)) + raw


class RawStreamClient:
    """A blocking socket speaking just enough of the protocol to send odd frames."""

    def __init__(self, server: ServerProcess, rcvbuf: int = 0) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:  # before connect, so that the window stays small
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(5)
        self.sock.connect((server.host, server.stream_port))
        self.corr = 0

    def send(self, key: int, body: bytes, version: int = 1) -> None:
        self.sock.sendall(struct.pack(">IHH", len(body) + 4, key, version) + body)

    def request(self, key: int, body: bytes) -> None:
        self.corr += 1
        self.send(key, struct.pack(">I", self.corr) + body)

    def read_frame(self) -> tuple[int, int, bytes]:
        head = self._exact(4)
        (size,) = struct.unpack(">I", head)
        data = self._exact(size)
        key, version = struct.unpack_from(">HH", data)
        return key, version, data[4:]

    def _exact(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise EOFError("connection closed")
            out += chunk
        return out

    def open(
        self,
        user: str = "guest",
        password: str = "guest",
        vhost: str = "/",
        frame_max: int | None = None,
        heartbeat: int | None = None,
    ) -> int:
        """Handshake up to Open; returns Open's response code. The client's Tune repeats the
        server's unless ``frame_max`` / ``heartbeat`` say otherwise."""
        self.request(17, struct.pack(">i", 0))
        self.read_frame()
        self.request(18, b"")
        self.read_frame()
        data = f"\0{user}\0{password}".encode()
        self.request(19, string("PLAIN") + struct.pack(">i", len(data)) + data)
        _, _, body = self.read_frame()
        code = struct.unpack_from(">H", body, 4)[0]
        if code != 1:
            return int(code)
        key, _, tune = self.read_frame()
        assert key == 20
        server_frame_max, server_heartbeat = struct.unpack(">II", tune)
        self.send(
            20,
            struct.pack(
                ">II",
                server_frame_max if frame_max is None else frame_max,
                server_heartbeat if heartbeat is None else heartbeat,
            ),
        )
        self.request(21, string(vhost))
        _, _, body = self.read_frame()
        return int(struct.unpack_from(">H", body, 4)[0])

    def close(self) -> None:
        self.sock.close()


async def send_confirmed(p: Producer, stream: str, messages: list[Any]) -> None:
    """One Publish frame, then wait until every message of it is confirmed (rstream's
    ``send_batch`` returns before the confirms, so two calls can land in one chunk)."""
    confirmed: list[int] = []

    def on_confirm(status: Any) -> None:
        confirmed.append(status.message_id)

    await p.send_batch(stream, messages, on_publish_confirm=on_confirm)
    await eventually(lambda: len(confirmed) >= len(messages))


@contextlib.asynccontextmanager
async def in_process_stream_listener(gw: RunningGateway) -> AsyncIterator[int]:
    """A stream-protocol listener started in this process beside ``gw`` (its node, so tests
    can patch the loop's world); yields its port, closed on exit."""
    snode = StreamNode(gw.node, gw.host, 1024 * 1024, 60, 5.0)
    factory = stream_protocol_factory(lambda: StreamConnection(snode), 1024 * 1024, 1 << 20)
    server = await asyncio.get_running_loop().create_server(factory, gw.host, 0)
    port = server.sockets[0].getsockname()[1]
    snode.advertised_port = port
    try:
        yield port
    finally:
        for conn in list(snode.connections):
            if isinstance(conn, StreamConnection):
                conn.abort()
        server.close()


@contextlib.asynccontextmanager
async def in_process_stream_client(gw: RunningGateway) -> AsyncIterator[Client]:
    """An rstream client of an ``in_process_stream_listener``; closed on exit."""
    async with in_process_stream_listener(gw) as port:
        client = Client(gw.host, port, frame_max=1024 * 1024, heartbeat=60)
        await client.start()
        await client.authenticate(vhost="/", username="guest", password="guest")
        try:
            yield client
        finally:
            await client.close()
