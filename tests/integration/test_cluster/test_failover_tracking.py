"""A failover keeps a stream's named-consumer offsets and publisher dedup sequences.

Three real nodes and a real etcd (2 s lease TTL): a stream led by ``a`` with replicas on
``b`` and ``c``. Offsets stored on ``a`` and the ids of a deduplicated AMQP publisher reach
the replicas; ``a`` is SIGKILLed and a replica is elected; the new leader answers the same
QueryOffset and QueryPublisherSequence, and a batch republished to it with old ids is
deduplicated (only the new ids are stored).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest

from sievemq.spark.stream_client import StreamClient, StreamURI
from sievemq.testing import ServerProcess
from sievemq.testing.etcd import EtcdProcess
from sievemq.testing.stream_client import open_client

from .cluster_helpers import channel, queues, started_nodes, until

STREAM = {"x-queue-type": "stream", "x-initial-cluster-size": 3}


@pytest.fixture
def nodes(etcd: EtcdProcess, tmp_path: Path) -> Iterator[dict[str, ServerProcess]]:
    with started_nodes(etcd, tmp_path, ("a", "b", "c")) as procs:
        yield procs


def publish_deduplicated(node: ServerProcess, name: str, reference: str, ids: range) -> None:
    ch = channel(node)
    ch.confirm_delivery()
    for i in ids:
        headers = {"x-sievemq-publisher": reference, "x-sievemq-publishing-id": i}
        ch.basic_publish("", name, b"dedup %d" % i, pika.BasicProperties(headers=headers))


def end_offset(node: ServerProcess, name: str) -> int:
    uri = StreamURI.parse(f"rabbitmq-stream://guest:guest@{node.host}:{node.stream_port}/%2F")
    with StreamClient(uri) as client:
        return int(client.stream_stats(name).end)


async def offset_on(node: ServerProcess, name: str, reference: str) -> int | None:
    client = await open_client(node)
    try:
        return int(await client.query_offset(name, reference))
    except Exception:  # OffsetNotFound, or 6 while no member answers
        return None
    finally:
        await client.close()


async def sequence_on(node: ServerProcess, name: str, reference: str) -> int:
    client = await open_client(node)
    try:
        return int(await client.query_publisher_sequence(name, reference))
    finally:
        await client.close()


async def _eventually(check: Any, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        await asyncio.sleep(0.2)


async def test_the_new_leader_has_the_offsets_and_deduplicates_old_ids(
    nodes: dict[str, ServerProcess],
) -> None:
    a, b, c = nodes["a"], nodes["b"], nodes["c"]
    channel(a).queue_declare("kept", durable=True, arguments=dict(STREAM))
    until(lambda: queues(b).get("kept", {}).get("online") == ["a", "b", "c"], "3 members")
    publish_deduplicated(a, "kept", "batch", range(10))
    leader = await open_client(a)
    try:
        await leader.store_offset("kept", "reader", 6)
    finally:
        await leader.close()
    for replica in (b, c):
        until(lambda r=replica: end_offset(r, "kept") == 10, "the replicas hold all 10")

        async def has_offset(r: ServerProcess = replica) -> bool:
            return await offset_on(r, "kept", "reader") == 6

        await _eventually(has_offset, "the replicas have the offset")
    a.kill()
    new = until(
        lambda: (
            queues(b).get("kept", {}).get("leader") in ("b", "c") and queues(b)["kept"]["leader"]
        ),
        "a replica leads",
        timeout=60,
    )
    now = b if new == "b" else c

    async def answers() -> bool:
        return await offset_on(now, "kept", "reader") == 6

    await _eventually(answers, "the new leader answers the stored offset")
    assert await sequence_on(now, "kept", "batch") == 9
    publish_deduplicated(now, "kept", "batch", range(5, 15))  # 5..9 again, then 10..14
    assert end_offset(now, "kept") == 15
    assert await sequence_on(now, "kept", "batch") == 14
