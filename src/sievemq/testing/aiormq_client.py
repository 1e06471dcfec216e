"""An aiormq consumer that collects a stream's deliveries, and a raw publisher for header
bytes no client library emits.

Meant for ``running_gateway`` (the gateway on the test's event loop): a test talks to it
with a real client AND looks at the broker (statistics, advice) without an HTTP layer.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import aiormq
import aiormq.abc
from pamqp import commands

from sievemq.testing.raw import RawClient, props_bytes

FV = "x-stream-filter-value"

__all__ = ["FV", "Collector", "consume", "raw_publish"]


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
        offset = headers["x-stream-offset"]
        assert isinstance(offset, int), f"x-stream-offset is {offset!r}"
        self.got.append((offset, headers.get(FV), message.body))
        if self.ack:
            assert message.delivery_tag is not None
            await self.channel.basic_ack(message.delivery_tag)
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


def _raw_publish(
    port: int, queue: str, header_value: str, replace: tuple[bytes, bytes], body: bytes
) -> Any:
    client = RawClient("127.0.0.1", port, timeout=10)
    try:
        client.handshake()
        client.open_channel(1)
        props = props_bytes(headers={FV: header_value})
        old, new = replace
        assert len(old) == len(new) and old in props
        client.publish(1, "", queue, props.replace(old, new), body)
        while True:
            _, method = client.next_method(timeout=10)
            if isinstance(method, commands.Channel.Close):
                return method
    finally:
        client.close()


async def raw_publish(
    port: int, queue: str, header_value: str, replace: tuple[bytes, bytes], body: bytes = b"x"
) -> Any:
    """Publish one message whose encoded header bytes are patched (``replace`` = old, new,
    same length), e.g. to send a longstr that is not UTF-8, which no client library emits.
    Returns the channel.close the server answers with. The blocking raw client runs in a
    thread: the gateway is on this test's event loop."""
    return await asyncio.to_thread(_raw_publish, port, queue, header_value, replace, body)
