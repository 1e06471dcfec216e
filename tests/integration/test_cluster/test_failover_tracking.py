"""A failover keeps a stream's named-consumer offsets and publisher dedup sequences.

Three real nodes and a real etcd (2 s lease TTL): a stream led by ``a`` with replicas on
``b`` and ``c``. Offsets stored on ``a`` and the ids of a deduplicated AMQP publisher reach
the replicas; ``a`` is SIGKILLed and a replica is elected; the new leader answers the same
QueryOffset and QueryPublisherSequence, and a batch republished to it with old ids is
deduplicated (only the new ids are stored).
"""

from __future__ import annotations

from sievemq.testing import ServerProcess

from .cluster_helpers import (
    declare_replicated,
    end_offset,
    new_leader,
    publish_deduplicated,
    republish_old_ids,
    sequence_on,
    store_offset,
    until,
    until_offset,
)


async def test_the_new_leader_has_the_offsets_and_deduplicates_old_ids(
    fresh_nodes: dict[str, ServerProcess],
) -> None:
    a, b, c = fresh_nodes["a"], fresh_nodes["b"], fresh_nodes["c"]
    declare_replicated(a, b, "kept", ("a", "b", "c"))
    publish_deduplicated(a, "kept", "batch", range(10))
    await store_offset(a, "kept", "reader", 6)
    for replica in (b, c):
        until(lambda r=replica: end_offset(r, "kept") == 10, "the replicas hold all 10")
        await until_offset(replica, "kept", "reader", 6, "the replicas have the offset", 60)
    a.kill()
    now = fresh_nodes[new_leader(b, "kept", ("b", "c"))]
    await until_offset(now, "kept", "reader", 6, "the new leader answers the stored offset", 60)
    assert await sequence_on(now, "kept", "batch") == 9
    await republish_old_ids(now, "kept", "batch")
