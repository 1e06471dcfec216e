"""A failover keeps a stream's named-consumer offsets and publisher dedup sequences.

Three real nodes and a real etcd (2 s lease TTL): a stream led by ``a`` with replicas on
``b`` and ``c``. Offsets stored on ``a`` and the ids of a deduplicated AMQP publisher reach
the replicas; ``a`` is SIGKILLed and a replica is elected; the new leader answers the same
QueryOffset and QueryPublisherSequence, and a batch republished to it with old ids is
deduplicated (only the new ids are stored).
"""

from __future__ import annotations

from sievemq.testing import ServerProcess
from sievemq.testing.stream_client import open_client

from .cluster_helpers import (
    declare_replicated,
    end_offset,
    offset_on,
    publish_deduplicated,
    queues,
    sequence_on,
    until,
    until_async,
)


async def test_the_new_leader_has_the_offsets_and_deduplicates_old_ids(
    fresh_nodes: dict[str, ServerProcess],
) -> None:
    a, b, c = fresh_nodes["a"], fresh_nodes["b"], fresh_nodes["c"]
    declare_replicated(a, b, "kept", ("a", "b", "c"))
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

        await until_async(has_offset, "the replicas have the offset", timeout=60)
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

    await until_async(answers, "the new leader answers the stored offset", timeout=60)
    assert await sequence_on(now, "kept", "batch") == 9
    publish_deduplicated(now, "kept", "batch", range(5, 15))  # 5..9 again, then 10..14
    assert end_offset(now, "kept") == 15
    assert await sequence_on(now, "kept", "batch") == 14
