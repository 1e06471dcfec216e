"""The stream protocol with a second, independent client: RbFly (PyPI `rbfly`, its own Cython
codec and AMQP 1.0 encoder; rstream is tested in test_stream_protocol.py). The Java, Go, .NET
and Rust stream clients are not in the registries this project can reach (docs/compatibility.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import aclosing, asynccontextmanager
from typing import Any

import httpx
import pika
import pytest
from rbfly.streams import (
    MessageCtx,
    MessageFilter,
    Offset,
    StreamsClient,
    get_message_ctx,
    streams_client,
)

from sievemq.testing import ServerProcess
from sievemq.testing.pika_client import connect

pytestmark = pytest.mark.timeout(120)

WAIT_S = 15.0  # a subscription that sees nothing for this long fails the test


@asynccontextmanager
async def _client(server: ServerProcess) -> AsyncIterator[StreamsClient]:
    client = streams_client(f"rabbitmq-stream://guest:guest@{server.host}:{server.stream_port}/")
    try:
        yield client
    finally:
        await client.disconnect()


async def _read(
    client: StreamsClient, stream: str, offset: Offset, n: int, filt: MessageFilter | None = None
) -> list[tuple[int, Any]]:
    """The first ``n`` messages from ``offset`` with their stream offsets."""
    out: list[tuple[int, Any]] = []
    # aclosing: the subscription ends (Unsubscribe answered) before this returns
    async with aclosing(client.subscribe(stream, offset=offset, filter=filt, timeout=WAIT_S)) as it:
        async for body in it:
            out.append((get_message_ctx().stream_offset, body))
            if len(out) >= n:
                break
    return out


async def _until_consumers(server: ServerProcess, stream: str, n: int) -> None:
    """Wait until the stream counts ``n`` consumers (stream subscriptions count there)."""
    url = f"{server.admin_url}/api/queues/%2F/{stream}"
    async with httpx.AsyncClient(auth=("guest", "guest"), timeout=10) as http:
        for _ in range(int(WAIT_S / 0.05)):
            if (await http.get(url)).json().get("consumers") == n:
                return
            await asyncio.sleep(0.05)
    raise AssertionError(f"{stream} never had {n} consumers")


def _colour(message: MessageCtx) -> str:
    value = (message.app_properties or {}).get("colour", "")
    return value if isinstance(value, str) else ""


async def test_publish_dedup_and_offset_specifications(server: ServerProcess, qname: str) -> None:
    async with _client(server) as client:
        await client.create_stream(qname)
        async with client.publisher(qname, name="rb-pub") as pub:
            for i in range(5):
                await pub.send(f"m{i}")
        # a publisher of the same reference resumes after the last stored publishing id
        # (QueryPublisherSequence)
        async with client.publisher(qname, name="rb-pub") as pub:
            assert pub.message_id == 6
            await pub.send("m5")
        first = await _read(client, qname, Offset.FIRST, 6)
        assert first == [(i, f"m{i}") for i in range(6)]
        assert await _read(client, qname, Offset.offset(3), 3) == [(3, "m3"), (4, "m4"), (5, "m5")]
        # one message per Publish frame, so the last chunk is the last message
        assert await _read(client, qname, Offset.LAST, 1) == [(5, "m5")]

        # StoreOffset has no reply; the QueryOffset that follows on the same connection is
        # answered after it, and a reference resumes after the stored offset
        await client.write_offset(qname, "rb-ref", 2)
        assert await _read(client, qname, Offset.reference("rb-ref"), 2) == [(3, "m3"), (4, "m4")]

        async def next_one() -> list[tuple[int, Any]]:
            return await _read(client, qname, Offset.NEXT, 1)

        reader = asyncio.create_task(next_one())
        await _until_consumers(server, qname, 1)  # subscribed before the publish
        async with client.publisher(qname) as pub:
            await pub.send("after")
        assert await reader == [(6, "after")]


async def test_filtered_subscription_gets_only_its_values(
    server: ServerProcess, qname: str
) -> None:
    async with _client(server) as client:
        await client.create_stream(qname)
        async with client.publisher(qname, filter_extract=_colour) as pub:
            for i, colour in enumerate(["red", "blue", "red", "green", "red"]):
                await pub.send(
                    MessageCtx(f"f{i}", None, None, None, None, {"colour": colour}, None)
                )
        red = await _read(client, qname, Offset.FIRST, 3, MessageFilter(_colour, {"red"}))
        assert red == [(0, "f0"), (2, "f2"), (4, "f4")]


async def test_amqp10_from_rbfly_reaches_amqp091_and_back(
    server: ServerProcess, qname: str
) -> None:
    async with _client(server) as client:
        await client.create_stream(qname)
        async with client.publisher(qname) as pub:
            await pub.send(
                MessageCtx(b"from-rbfly", None, None, None, None, {"colour": "red", "n": 7}, None)
            )

        def amqp091() -> tuple[bytes, dict[str, Any]]:
            conn = connect(server)
            try:
                ch = conn.channel()
                ch.basic_qos(prefetch_count=10)
                for _method, props, body in ch.consume(
                    qname, arguments={"x-stream-offset": "first"}, inactivity_timeout=WAIT_S
                ):
                    assert body is not None, "nothing delivered over AMQP 0-9-1"
                    ch.basic_publish(
                        "", qname, b"from-pika", pika.BasicProperties(headers={"colour": "blue"})
                    )
                    return body, dict(props.headers or {})
                raise AssertionError("unreachable")
            finally:
                conn.close()

        body, headers = await asyncio.to_thread(amqp091)
        assert body == b"from-rbfly"
        assert headers["colour"] in ("red", b"red") and headers["n"] == 7
        [(offset, back)] = await _read(client, qname, Offset.offset(1), 1)
        ctx = get_message_ctx()
        assert (offset, back) == (1, b"from-pika")
        assert ctx.app_properties == {"colour": "blue"}
        annotations = {str(k): v for k, v in ctx.annotations.items()}  # keys are Symbols
        assert annotations == {"x-exchange": "", "x-routing-key": qname}
