"""queue.declare (passive or not) and queue.delete of a durable classic queue count every
message published before them on the connection, confirmed or not: the publishes of the
same read are enqueued before the count is taken (RabbitMQ counts them too)."""

from __future__ import annotations

import asyncio

import aiormq
import pika

from sievemq.testing import ServerProcess
from sievemq.testing.pika_client import connect

N = 500
BODY = b"m" * 1024
PERSISTENT = pika.BasicProperties(delivery_mode=2)


def test_passive_declare_and_delete_count_unconfirmed_publishes(
    server: ServerProcess, qname: str
) -> None:
    conn = connect(server)
    ch, other = conn.channel(), conn.channel()
    for round_ in range(3):
        name = f"{qname}-{round_}"
        ch.queue_declare(name, durable=True)
        for _ in range(N):
            ch.basic_publish("", name, BODY, PERSISTENT)
        assert ch.queue_declare(name, passive=True).method.message_count == N
        for _ in range(N):
            ch.basic_publish("", name, BODY, PERSISTENT)
        # another channel of the connection, after the publishes: counted too
        assert other.queue_declare(name, passive=True).method.message_count == 2 * N
        for _ in range(N):
            ch.basic_publish("", name, BODY, PERSISTENT)
        # a non-passive declare of the existing queue answers the count as well
        assert ch.queue_declare(name, durable=True).method.message_count == 3 * N
        for _ in range(N):
            ch.basic_publish("", name, BODY, PERSISTENT)
        assert ch.queue_delete(name).method.message_count == 4 * N
    conn.close()


def test_passive_declare_counts_publishes_not_yet_confirmed(
    server: ServerProcess, qname: str
) -> None:
    async def run() -> tuple[int, int]:
        conn = await aiormq.connect(server.url)
        ch = await conn.channel(publisher_confirms=True)
        await ch.queue_declare(qname, durable=True)
        props = aiormq.spec.Basic.Properties(delivery_mode=2)
        confirms = [
            asyncio.ensure_future(ch.basic_publish(BODY, routing_key=qname, properties=props))
            for _ in range(N)
        ]
        await asyncio.sleep(0)  # the publishes are written; their confirms not awaited
        declared = await ch.queue_declare(qname, passive=True)
        await asyncio.gather(*confirms)
        after = await ch.queue_declare(qname, passive=True)
        await conn.close()
        return int(declared.message_count or 0), int(after.message_count or 0)

    assert asyncio.run(run()) == (N, N)
