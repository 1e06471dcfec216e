"""Replica changes race through etcd's compare-and-swap (``cluster/replica_ops.py``), on a
real etcd: two nodes changing one stream's replicas at once both land, none is lost."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import cast

import pytest

from sievemq.cluster.coordination import EtcdClient
from sievemq.cluster.placement import Placement, queue_key
from sievemq.cluster.replica_ops import ReplicaOps
from sievemq.gateway.admin.views import Conflict, NotFound
from sievemq.testing.etcd import EtcdProcess

LIVE = {"a": {}, "b": {}, "c": {}, "d": {}}


def ops(client: EtcdClient, me: str) -> ReplicaOps:
    placement = cast(Placement, SimpleNamespace(me=me, records={}))
    return ReplicaOps(client, placement, lambda: LIVE, lambda: set(LIVE))


async def test_concurrent_changes_all_land(etcd: EtcdProcess) -> None:
    clients = [EtcdClient([etcd.url]) for _ in range(3)]
    try:
        key = queue_key("/", "raced")
        record = {"vhost": "/", "name": "raced", "leader": "a", "replicas": [], "epoch": 1}
        await clients[0].put(key, json.dumps({**record, "type": "stream"}))
        nodes = [ops(c, me) for c, me in zip(clients, ("a", "b", "c"), strict=True)]
        added = await asyncio.gather(
            *(n.add("/", "raced", new) for n, new in zip(nodes, ("b", "c", "d"), strict=True))
        )
        assert added == [True, True, True]
        stored = await clients[0].get(key)
        assert stored is not None
        assert sorted(json.loads(stored.value)["replicas"]) == ["b", "c", "d"]
        assert await nodes[0].add("/", "raced", "b") is False  # a member already

        await asyncio.gather(nodes[1].delete("/", "raced", "b"), nodes[2].delete("/", "raced", "d"))
        stored = await clients[0].get(key)
        assert stored is not None and json.loads(stored.value)["replicas"] == ["c"]
        with pytest.raises(Conflict, match="the leader cannot be removed"):
            await nodes[0].delete("/", "raced", "a")
        with pytest.raises(NotFound, match="'b' holds no replica"):
            await nodes[0].delete("/", "raced", "b")
        with pytest.raises(NotFound, match="no stream 'other'"):
            await nodes[0].add("/", "other", "b")
    finally:
        for client in clients:
            await client.close()
