"""Two nodes' definitions meeting in a real etcd, in one process (deterministic: each
node's watch is fed by hand): a node joining with data offers it and keeps the cluster's
version of what differs (logged); two nodes declaring one exchange differently at the same
time: the second is told, and takes the first's."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from sievemq.cluster.coordination import EtcdClient, Event
from sievemq.cluster.definitions_mirror import DEFS, DefinitionsMirror
from sievemq.gateway.admin.facade import BrokerFacade
from sievemq.gateway.model.broker import Broker
from sievemq.gateway.runtime.definitions_sync import ReplicationFailed
from sievemq.testing.etcd import EtcdProcess


@dataclass
class Node:
    broker: Broker
    mirror: DefinitionsMirror
    client: EtcdClient
    waits: list[asyncio.Future[None]] = field(default_factory=list)

    async def catch_up(self) -> None:
        """What the watch would bring: every key under sievemq/defs/ as it is now."""
        kvs, _ = await self.client.get_prefix(DEFS)
        self.mirror.apply([Event("put", kv) for kv in kvs], reset=False)


def make_node(etcd: EtcdProcess, data_dir: Path, name: str) -> Node:
    broker = Broker(data_dir)
    client = EtcdClient([etcd.url])
    waits: list[asyncio.Future[None]] = []
    mirror = DefinitionsMirror(
        client, name, broker, BrokerFacade(broker), waits.append, data_dir, lambda *c: None
    )
    return Node(broker, mirror, client, waits)


async def join(node: Node) -> None:
    await node.mirror.start()
    node.broker.store.observer = node.mirror.observe


@pytest.fixture
async def two(etcd: EtcdProcess, tmp_path: Path) -> AsyncIterator[tuple[Node, Node]]:
    a, b = make_node(etcd, tmp_path / "a", "a"), make_node(etcd, tmp_path / "b", "b")
    await a.client.delete(DEFS + "exchanges/%2F/x")  # (the module's etcd is shared)
    yield a, b
    for node in (a, b):
        await node.mirror.stop()
        await node.client.close()
        node.broker.close()


async def test_a_node_joining_with_data_offers_it_and_keeps_the_clusters_version(
    two: tuple[Node, Node], caplog: pytest.LogCaptureFixture
) -> None:
    a, b = two
    a.broker.users.add("carol", "pw", tags=("management",), vhosts={"/"})
    a.broker.save_definitions()
    await join(a)
    b.broker.users.add("carol", "other", tags=("administrator",), vhosts={"/"})
    b.broker.add_vhost("only-on-b")
    with caplog.at_level(logging.WARNING, logger="sievemq.cluster"):
        await join(b)
    conflicts = [r.getMessage() for r in caplog.records if "definitions conflict" in r.message]
    assert len(conflicts) == 1, conflicts  # carol; the default user differs by its salt only
    assert (
        "user 'carol' differs on node b from the cluster's; the cluster's is kept" in (conflicts[0])
    )
    carol = b.broker.users.get("carol")
    assert carol is not None and carol.tags == ("management",)
    await a.catch_up()
    assert "only-on-b" in a.broker.vhosts  # offered


async def test_one_exchange_declared_differently_on_two_nodes_at_once(
    two: tuple[Node, Node],
) -> None:
    a, b = two
    await join(a)
    await join(b)
    a.broker.vhost("/").declare_exchange("x", "direct")
    await asyncio.gather(*a.waits)
    b.broker.vhost("/").declare_exchange("x", "fanout")  # b has not seen a's yet
    with pytest.raises(ReplicationFailed, match="exchange 'x' in vhost '/' was changed at the"):
        await asyncio.gather(*b.waits)
    await b.catch_up()  # the watch brings a's: the cluster's version replaces b's
    assert b.broker.vhost("/").exchanges["x"].type == "direct"
    # the same declare on both is no conflict
    a.broker.vhost("/").declare_exchange("y", "topic")
    b.broker.vhost("/").declare_exchange("y", "topic")
    await asyncio.gather(*a.waits[1:], *b.waits[1:])
