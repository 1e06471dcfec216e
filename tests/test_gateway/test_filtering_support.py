"""Helpers for the filtering tests: an in-process server, an aiormq consumer, a raw publisher.

The in-process server is the real AMQP listener and connection handler on the test's event
loop, so a test can talk to it with a real client AND look at the broker through the admin
facade (statistics, advice) without an HTTP layer. No tests here.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiormq
import aiormq.abc
from pamqp import body as _body
from pamqp import commands, frame, header
from pamqp import heartbeat as _hb

from sievemq.gateway.facade import BrokerFacade
from sievemq.gateway.model.broker import Broker, BrokerSettings
from sievemq.gateway.net.listener import start_amqp_listener
from sievemq.gateway.runtime.node import Limits, Node
from sievemq.serve import protocol_factory
from sievemq.storage import Durability

FV = "x-stream-filter-value"

__all__ = ["FV", "Collector", "InProc", "inproc_server", "raw_publish"]


@dataclass
class InProc:
    broker: Broker
    node: Node
    facade: BrokerFacade
    port: int

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/"

    def queue(self, name: str, vhost: str = "/") -> Any:
        return self.broker.vhost(vhost).get_queue(name)


@contextlib.asynccontextmanager
async def inproc_server(data_dir: Path, **limits: Any) -> AsyncIterator[InProc]:
    """Broker + node + AMQP listener on the running loop (fsync=never: tests, not disks)."""
    loop = asyncio.get_running_loop()
    broker = Broker(data_dir, BrokerSettings(durability=Durability.NEVER))
    node = Node(broker, Limits(**limits), loop)
    server, port = await start_amqp_listener(lambda: protocol_factory(node), "127.0.0.1", 0)
    try:
        yield InProc(broker, node, BrokerFacade(broker), port)
    finally:
        server.close()
        for conn in list(node.connections):
            if conn.transport is not None:
                conn.transport.abort()
        await asyncio.sleep(0)
        node.flush_all()
        broker.close()
        node.executor.shutdown(wait=True)


@dataclass
class Collector:
    """Deliveries of one consumer: (offset, filter value header, body), acked as they come."""

    channel: aiormq.abc.AbstractChannel
    ack: bool = True
    got: list[tuple[int, Any, bytes]] = field(default_factory=list)
    event: asyncio.Event = field(default_factory=asyncio.Event)
    want: int = 0

    async def __call__(self, message: aiormq.abc.DeliveredMessage) -> None:
        headers = message.header.properties.headers or {}
        self.got.append((int(headers["x-stream-offset"]), headers.get(FV), message.body))
        if self.ack:
            await self.channel.basic_ack(message.delivery.delivery_tag)
        if self.want and len(self.got) >= self.want:
            self.event.set()

    async def wait_for(self, n: int, timeout: float = 10.0) -> None:
        self.want = n
        if len(self.got) >= n:
            return
        self.event.clear()
        await asyncio.wait_for(self.event.wait(), timeout)

    @property
    def bodies(self) -> list[bytes]:
        return [g[2] for g in self.got]

    @property
    def offsets(self) -> list[int]:
        return [g[0] for g in self.got]


async def consume(
    url: str, queue: str, arguments: dict[str, Any], prefetch: int = 1000, ack: bool = True
) -> tuple[aiormq.abc.AbstractConnection, Collector]:
    """A consumer on its own connection (so one test can close it without the others)."""
    conn = await aiormq.connect(url)
    ch = await conn.channel()
    await ch.basic_qos(prefetch_count=prefetch)
    collector = Collector(ch, ack=ack)
    await ch.basic_consume(queue, collector, arguments=arguments)
    return conn, collector


# ------------------------------------------------------------------------- raw publisher


async def _read_frame(reader: asyncio.StreamReader, buf: bytearray) -> tuple[int, Any]:
    while True:
        if len(buf) >= 7:
            size = int.from_bytes(buf[3:7], "big")
            if len(buf) >= size + 8:
                used, channel, value = frame.unmarshal(bytes(buf[: size + 8]))
                del buf[:used]
                if isinstance(value, _hb.Heartbeat):
                    continue
                return channel, value
        data = await asyncio.wait_for(reader.read(65536), 10)
        if not data:
            raise ConnectionError("server closed the socket")
        buf += data


async def raw_publish(
    port: int, queue: str, header_value: str, replace: tuple[bytes, bytes], body: bytes = b"x"
) -> commands.Channel.Close:
    """Publish one message whose encoded header bytes are patched (``replace`` = old, new,
    same length), e.g. to send a longstr that is not UTF-8, which no client library emits.
    Returns the channel.close the server answers with."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    buf = bytearray()
    try:
        writer.write(b"AMQP\x00\x00\x09\x01")
        await _read_frame(reader, buf)  # connection.start
        writer.write(
            frame.marshal(
                commands.Connection.StartOk(
                    client_properties={}, mechanism="PLAIN", response="\0guest\0guest"
                ),
                0,
            )
        )
        _, tune = await _read_frame(reader, buf)
        writer.write(frame.marshal(commands.Connection.TuneOk(0, tune.frame_max, 0), 0))
        writer.write(frame.marshal(commands.Connection.Open("/"), 0))
        await _read_frame(reader, buf)  # open-ok
        writer.write(frame.marshal(commands.Channel.Open(), 1))
        await _read_frame(reader, buf)  # channel open-ok
        props = commands.Basic.Properties(headers={FV: header_value})
        content = frame.marshal(header.ContentHeader(0, len(body), props), 1)
        old, new = replace
        assert len(old) == len(new) and old in content
        writer.write(frame.marshal(commands.Basic.Publish(exchange="", routing_key=queue), 1))
        writer.write(content.replace(old, new))
        writer.write(frame.marshal(_body.ContentBody(body), 1))
        while True:
            _, method = await _read_frame(reader, buf)
            if isinstance(method, commands.Channel.Close):
                return method
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
