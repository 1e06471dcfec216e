"""x-stream-filter-sql end to end with pika and aio-pika against a real server."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aio_pika
import pika
import pika.exceptions
import pytest

from sievemq.testing import ServerProcess, running_gateway
from sievemq.testing.pika_client import params, publish_to_stream

ORDERS = [
    (f"o{i}".encode(), {"region": ("emea", "apac", "amer")[i % 3], "amount": i * 10})
    for i in range(30)
]


def _consume(srv: ServerProcess, queue: str, arguments: dict[str, object], n: int) -> list[bytes]:
    conn = pika.BlockingConnection(params(srv))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=10)
    got: list[bytes] = []
    for method, _props, body in ch.consume(queue, arguments=arguments, inactivity_timeout=3):
        if method is None:
            break
        got.append(body)
        ch.basic_ack(method.delivery_tag)
        if len(got) == n:
            break
    ch.cancel()
    conn.close()
    return got


def test_pika_sql_filter_delivers_exactly_the_matches(server: ServerProcess) -> None:
    publish_to_stream(server, "sql-pika", ORDERS)
    got = _consume(
        server,
        "sql-pika",
        {"x-stream-offset": "first", "x-stream-filter-sql": "region = 'apac' AND amount > 100"},
        100,
    )
    expected = [b for b, h in ORDERS if h["region"] == "apac" and int(h["amount"]) > 100]  # type: ignore[call-overload]
    assert got == expected and got


def test_bad_expression_is_406_with_the_position(server: ServerProcess) -> None:
    publish_to_stream(server, "sql-bad", ORDERS[:1])
    conn = pika.BlockingConnection(params(server))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=10)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.basic_consume(
            "sql-bad",
            lambda *a: None,
            arguments={"x-stream-filter-sql": "region = "},
        )
    assert info.value.reply_code == 406
    assert "x-stream-filter-sql" in info.value.reply_text
    assert "position 10" in info.value.reply_text and "expected" in info.value.reply_text
    assert conn.is_open  # a channel error only
    conn.close()


async def test_aio_pika_sql_with_bloom_filter_and_tags(server: ServerProcess) -> None:
    url = f"amqp://guest:guest@{server.host}:{server.amqp_port}/"
    conn = await aio_pika.connect(url)
    async with conn:
        ch = await conn.channel(publisher_confirms=True)
        await ch.set_qos(prefetch_count=50)
        queue = await ch.declare_queue(
            "sql-aio", durable=True, arguments={"x-queue-type": "stream"}
        )
        for i in range(40):
            region = ("emea", "apac")[i % 2]
            await ch.default_exchange.publish(
                aio_pika.Message(
                    f"m{i}".encode(),
                    headers={"x-stream-filter-value": region, "n": i},
                ),
                "sql-aio",
            )
        got: list[bytes] = []
        args = {
            "x-stream-offset": "first",
            "x-stream-filter": "apac",
            "x-stream-filter-sql": "TAGS = 'apac' AND n % 4 = 1",
        }
        async with queue.iterator(arguments=args) as it:
            async for message in it:
                await message.ack()
                got.append(message.body)
                if len(got) == 10:
                    break
        assert got == [f"m{i}".encode() for i in range(40) if i % 4 == 1]


async def test_registered_subscription_skips_chunks_in_statistics(tmp_path: Path) -> None:
    """A named SQL consumer registers its expression: later chunks are skipped by bits."""
    async with running_gateway(tmp_path / "data") as gw:
        node = gw.node
        url = gw.url
        conn = await aio_pika.connect(url)
        async with conn:
            ch = await conn.channel(publisher_confirms=True)
            await ch.set_qos(prefetch_count=50)
            queue = await ch.declare_queue(
                "sql-bits", durable=True, arguments={"x-queue-type": "stream"}
            )

            async def publish_chunk(i: int, region: str) -> None:
                await ch.default_exchange.publish(
                    aio_pika.Message(f"m{i}".encode(), headers={"region": region}), "sql-bits"
                )

            await publish_chunk(0, "apac")  # before registration: evaluated normally
            await publish_chunk(1, "emea")
            args = {
                "x-stream-offset": "first",
                "x-stream-consumer-name": "reporter",
                "x-stream-filter-sql": "region = 'apac'",
            }
            got: list[bytes] = []
            async with queue.iterator(arguments=args) as it:
                async for message in it:
                    await message.ack()
                    got.append(message.body)
                    if len(got) == 1:
                        break
            for i in range(2, 22):  # confirmed one by one: one chunk each
                await publish_chunk(i, "apac" if i == 21 else "emea")
            del args["x-stream-offset"]  # resume after the committed offset
            async with queue.iterator(arguments=args) as it:
                async for message in it:
                    await message.ack()
                    got.append(message.body)
                    if len(got) == 2:
                        break
        assert got == [b"m0", b"m21"]
        stats = node.broker.vhost("/").get_queue("sql-bits").filter_stats
        # chunks 2..20 (emea, written after registration) skipped without evaluation; chunk 1
        # (emea, written before) was read and evaluated: one record rejected by the SQL
        assert stats.chunks_skipped_subscription == 19
        assert stats.records_skipped == 1
        assert stats.sql_errors == 0
        await asyncio.sleep(0)
