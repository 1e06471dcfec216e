"""Joining a cluster at start-up: what `sievemq serve --cluster-etcd` adds to a node.

The wiring (serve.py) calls ``join`` before the ready line and ``Membership.leave`` at
shutdown; nothing here is imported by a single node.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sievemq.cluster.coordination import EtcdClient, EtcdUnavailable
from sievemq.cluster.membership import Identity, Membership, node_id_for
from sievemq.cluster.placement import QUEUES, Placement
from sievemq.cluster.replication import Replication
from sievemq.gateway.model.broker import Broker
from sievemq.gateway.runtime.definitions_sync import DefinitionsSync

log = logging.getLogger("sievemq.cluster")

JOIN_WAIT_S = 30.0  # how long a starting node waits for etcd before it gives up (exit 1)


async def join(
    endpoints: list[str],
    name: str,
    data_dir: Path,
    cluster_address: str,
    ttl_s: int,
    stats: Callable[[], dict[str, Any]],
    broker: Broker,
    definitions_sync: DefinitionsSync,
    wait_s: float = JOIN_WAIT_S,
    advertised: dict[str, Any] | None = None,
) -> tuple[Membership, Placement]:
    """Register this node, place its queues and start watching the others (the returned
    ``Placement`` is the broker's directory from then on); raises ``NameTaken`` (another
    live node has the name) or ``EtcdUnavailable`` (no endpoint answered for ``wait_s``:
    an etcd started beside the nodes may need a moment)."""
    client = EtcdClient(endpoints)
    me = Identity(name, node_id_for(data_dir), cluster_address, dict(advertised or {}))
    membership = Membership(client, me, ttl_s, stats)
    placement = Placement(
        client,
        name,
        broker,
        definitions_sync.also_wait,
        membership.amqp_address,
        lambda: membership.records,
    )
    membership.subscribe(QUEUES, placement.apply)
    replication = Replication(placement, broker)
    membership.subscribe(QUEUES, replication.apply)  # after placement: records current
    placement.stopping.append(replication.stop)
    placement.replica_of = replication.queue
    membership.queue_records = lambda: list(placement.records.values())
    membership.queue_members = placement.members
    membership.on_registered_again.append(placement.place_again)
    deadline = time.monotonic() + wait_s
    try:
        while True:
            try:
                await membership.join()
                await placement.place_local_queues()
                # from now on a queue stored here is recorded in etcd before its declare-ok
                broker.store.observer = placement.observe
                broker.directory = placement
                return membership, placement
            except EtcdUnavailable as error:
                if time.monotonic() > deadline:
                    raise
                log.warning("waiting for etcd: %s", error)
                await asyncio.sleep(1.0)
    except BaseException:
        await membership.leave()
        raise
