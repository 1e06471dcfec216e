"""Named-consumer offsets and publisher dedup sequences travel with a stream's replicas.

Two real nodes and a real etcd: a stream led by ``a`` with a replica on ``b``. Offsets stored
on the leader (StoreOffset, an AMQP named consumer's acks) and the last publishing ids of
its publishers (rstream's named Producer, AMQP dedup headers) are answered by the replica
itself, through the Stream protocol on ``b``'s own listener; a StoreOffset on ``b`` reaches
the leader; an offset changed while the replica was down is there once it is back; a named
SQL consumer's registered subscription (what the chunks' bits mean) is in the replica's copy
too; and a batch republished with old ids to the leader after it was SIGKILLed and
restarted is still deduplicated.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sievemq.cluster.replication import replica_directory
from sievemq.filtering.subscriptions import FILE
from sievemq.storage.layout import stream_directory
from sievemq.testing import ServerProcess
from sievemq.testing.stream_client import open_client, producer

from .cluster_helpers import (
    channel,
    declare_replicated,
    end_offset,
    offset_on,
    publish_deduplicated,
    queues,
    republish_old_ids,
    sequence_on,
    store_offset,
    until,
    until_offset,
)


def consume_named(
    node: ServerProcess, name: str, consumer_name: str, count: int, **extra: str
) -> None:
    """An AMQP named consumer on ``node`` that takes and acks ``count`` messages."""
    ch = channel(node)
    ch.basic_qos(prefetch_count=100)
    got: list[int] = []

    def on_message(ch: Any, method: Any, props: Any, body: bytes) -> None:
        got.append(props.headers["x-stream-offset"])
        ch.basic_ack(method.delivery_tag)
        if len(got) == count:
            ch.stop_consuming()

    arguments = {"x-stream-offset": "first", "x-stream-consumer-name": consumer_name, **extra}
    ch.basic_consume(name, on_message, arguments=arguments)
    ch.start_consuming()
    assert got == list(range(count))
    ch.close()


async def test_the_replica_answers_the_leader_s_offsets_and_sequences(
    nodes: dict[str, ServerProcess],
) -> None:
    a, b = nodes["a"], nodes["b"]
    declare_replicated(a, b, "tracked", ("a", "b"))
    async with producer(a) as p:  # a named Stream-protocol publisher: ids 1..20
        for i in range(20):
            await p.send_wait("tracked", b"stream %d" % i, publisher_name="rstream-ref")
    publish_deduplicated(a, "tracked", "amqp-ref", range(10))  # ids 0..9
    consume_named(a, "tracked", "amqp-named", 30)  # acks every offset: commit 29
    await store_offset(a, "tracked", "stored", 7)
    until(lambda: end_offset(b, "tracked") == 30, "b holds 30 messages")

    # b answers from its own copy (b does not lead the stream)
    await until_offset(b, "tracked", "stored", 7, "b answers the leader's stored offset")
    await until_offset(b, "tracked", "amqp-named", 29, "b answers the named consumer's offset")
    assert await offset_on(b, "tracked", "nobody") is None  # NO_OFFSET, as on the leader
    assert await sequence_on(b, "tracked", "rstream-ref") == 20
    assert await sequence_on(b, "tracked", "amqp-ref") == 9
    assert await sequence_on(b, "tracked", "unknown") == 0

    # a StoreOffset on the replica's node is stored by the leader and comes back
    await store_offset(b, "tracked", "via-b", 12)
    await until_offset(a, "tracked", "via-b", 12, "the leader stored b's offset")
    await until_offset(b, "tracked", "via-b", 12, "b has the offset it stored")

    # more publishes: the replica's sequences follow what it copies
    publish_deduplicated(a, "tracked", "amqp-ref", range(10, 15))
    until(lambda: end_offset(b, "tracked") == 35, "b holds 35 messages")
    assert await sequence_on(b, "tracked", "amqp-ref") == 14


async def test_a_replica_back_from_a_crash_has_what_changed_meanwhile(
    nodes: dict[str, ServerProcess],
) -> None:
    a, b = nodes["a"], nodes["b"]
    declare_replicated(a, b, "away", ("a", "b"))
    publish_deduplicated(a, "away", "ref", range(5))
    leader = await open_client(a)
    try:
        await leader.store_offset("away", "kept", 1)
        await leader.store_offset("away", "moved", 2)
        await until_offset(b, "away", "moved", 2, "b has the offsets")
        b.kill()
        await leader.store_offset("away", "moved", 4)
        await leader.store_offset("away", "new", 3)
    finally:
        await leader.close()
    b.restart()
    for reference, offset in (("kept", 1), ("moved", 4), ("new", 3)):
        await until_offset(b, "away", reference, offset, f"b has {reference} as it is now")
    assert await sequence_on(b, "away", "ref") == 4


def registries(a: ServerProcess, b: ServerProcess, name: str) -> tuple[bytes, bytes]:
    """The leader's ``subscriptions.json`` of stream ``name`` and the replica's copy of it."""

    def read(path: Path) -> bytes:
        return path.read_bytes() if path.exists() else b""

    return (
        read(stream_directory(a.data_dir, "/", name) / FILE),
        read(replica_directory(b.data_dir, "/", name) / FILE),
    )


def test_registered_sql_subscriptions_are_in_the_replica_s_copy(
    nodes: dict[str, ServerProcess],
) -> None:
    a, b = nodes["a"], nodes["b"]
    declare_replicated(a, b, "subscribed", ("a", "b"))
    publish_deduplicated(a, "subscribed", "ref", range(10))
    sql = {"x-stream-filter-sql": "properties.message_id IS NULL"}
    consume_named(a, "subscribed", "auditor", 10, **sql)
    leader, _ = registries(a, b, "subscribed")
    assert b"auditor" in leader
    until(lambda: registries(a, b, "subscribed")[1] == leader, "b's copy of the registry")
    b.kill()  # a registration while the replica is away reaches it when it is back
    consume_named(a, "subscribed", "second", 10, **sql)
    b.restart()
    until(
        lambda: len(set(registries(a, b, "subscribed"))) == 1,
        "b has the registry changed while it was down",
    )
    assert b"second" in registries(a, b, "subscribed")[1]


async def test_old_ids_republished_after_the_leader_restarts_are_deduplicated(
    nodes: dict[str, ServerProcess],
) -> None:
    a, b = nodes["a"], nodes["b"]
    declare_replicated(a, b, "once", ("a", "b"))
    publish_deduplicated(a, "once", "batch", range(10))
    a.kill()  # SIGKILL: no snapshot of the sequences, they are rebuilt from the data
    a.restart()
    until(lambda: queues(b).get("once", {}).get("online") == ["a", "b"], "a is back")
    await republish_old_ids(a, "once", "batch")
    until(lambda: end_offset(b, "once") == 15, "b holds 15 messages")
    assert await sequence_on(b, "once", "batch") == 14
