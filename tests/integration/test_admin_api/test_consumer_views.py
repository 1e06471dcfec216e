"""The admin facade's view of live consumers: who they are, where, and their credit.

The queue holds consumers as ``model.stream.queue.ConsumerInfo``; the facade reads them through it.
A real aiormq client consumes on its SECOND channel so that the channel number in the view
cannot be right by accident.
"""

from __future__ import annotations

import asyncio

import aiormq
from pamqp import commands

from sievemq.testing import running_gateway

FV = "x-stream-filter-value"


async def test_list_consumers_names_connection_channel_prefetch_and_credit() -> None:
    async with running_gateway() as gw:
        conn = await aiormq.connect(gw.url)
        try:
            publisher = await conn.channel()
            consumer = await conn.channel()
            await consumer.queue_declare(
                "views", durable=True, arguments={"x-queue-type": "stream"}
            )
            await consumer.basic_qos(prefetch_count=5)
            got: list[bytes] = []
            three = asyncio.Event()

            async def keep(message: aiormq.abc.DeliveredMessage) -> None:
                got.append(message.body)  # never acked: each delivery holds one credit
                if len(got) == 3:
                    three.set()

            await consumer.basic_consume(
                "views",
                keep,
                consumer_tag="viewer",
                arguments={"x-stream-offset": "first", "x-stream-filter": ["a"]},
            )
            for body in (b"1", b"2", b"3"):
                await publisher.basic_publish(
                    body,
                    routing_key="views",
                    properties=commands.Basic.Properties(headers={FV: "a"}),
                )
            await asyncio.wait_for(three.wait(), 10)

            (server_side,) = gw.node.connections
            (view,) = gw.facade.list_consumers("/", "views")
            assert view.consumer_tag == "viewer"
            assert view.connection_name.startswith(server_side.peer + " -> ")
            assert view.channel_number == consumer.number == 2
            assert (view.prefetch_count, view.credit) == (5, 2)
            assert view.filter is not None
            assert (view.filter.values, view.filter.match_unfiltered) == (["a"], False)
            assert view.filter.match_type == "any"
            assert view.filter_stats.messages_delivered == 3
        finally:
            await conn.close()
