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

from sievemq.cluster.commit import Commits
from sievemq.cluster.coordination import EtcdClient, EtcdUnavailable, Event
from sievemq.cluster.definitions_mirror import DEFS, DefinitionsMirror
from sievemq.cluster.exclusive import EXCLUSIVE, ExclusiveQueues
from sievemq.cluster.failover import Failover
from sievemq.cluster.link import Links, heartbeat_for
from sievemq.cluster.membership import MEMBERS, NODES, Identity, Membership, node_id_for
from sievemq.cluster.placement import QUEUES, Placement
from sievemq.cluster.quorum_failover import QuorumCopies
from sievemq.cluster.quorum_replication import QuorumFeeds, QuorumReplication
from sievemq.cluster.reconcile import Reconciler
from sievemq.cluster.replica_ops import QUORUM, ReplicaOps
from sievemq.cluster.replication import HEARTBEAT_S, Replication
from sievemq.cluster.replies import ReplyForwarder
from sievemq.cluster.secret import SECRET_KEY, ClusterSecret
from sievemq.gateway.admin.facade import BrokerFacade
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
    secret: ClusterSecret,
    admin: BrokerFacade,
    wait_s: float = JOIN_WAIT_S,
    advertised: dict[str, Any] | None = None,
    totals: Callable[[], dict[str, Any]] = dict,
    parts: dict[str, Callable[[], Any]] | None = None,
) -> tuple[Membership, Placement]:
    """Register this node, learn the cluster secret (the link's login: ``secret`` is what
    the cluster port checks), place its queues, reconcile its definitions with etcd's and
    start watching the others (the returned ``Placement`` is the broker's directory from
    then on and forwards publishes over the link; every definitions change goes through
    etcd: ``DefinitionsMirror``); raises ``NameTaken`` (another live node has the name) or
    ``EtcdUnavailable`` (no endpoint answered for ``wait_s``: an etcd started beside the
    nodes may need a moment)."""
    client = EtcdClient(endpoints)
    me = Identity(name, node_id_for(data_dir), cluster_address, dict(advertised or {}))
    membership = Membership(client, me, ttl_s, stats, totals=totals, parts=parts)
    placement = Placement(
        client,
        name,
        broker,
        definitions_sync.also_wait,
        lambda: membership.records,
    )
    links = placement.links = Links(
        name, secret.get, membership.cluster_address, heartbeat_s=heartbeat_for(ttl_s)
    )
    placement.replies = ReplyForwarder(name, placement.links, lambda: membership.records)
    membership.subscribe(QUEUES, placement.apply)
    replication = Replication(placement, broker, secret.get)
    failover = Failover(client, membership, placement, replication, broker)
    membership.subscribe(QUEUES, failover.apply_queues)  # hands over what others lead now
    membership.subscribe(QUEUES, replication.apply)  # after placement: records current
    membership.subscribe(NODES, failover.apply_nodes)
    membership.subscribe(NODES, lambda events, _reset: _nodes_changed(links, events))
    placement.stopping.append(failover.stop)
    placement.stopping.append(replication.stop)
    placement.replica_of = replication.queue
    placement.replica_copies = lambda: [f.queue for f in replication.followers.values()]
    broker.counters.replica_reads = replication.read_counts
    commits = Commits(name, broker, lambda: placement.records)
    membership.subscribe(QUEUES, commits.apply)  # after placement: records current
    placement.led = commits.lead
    broker.stream_declared = commits.declared  # a promoted or placed leader: gated at once
    placement.promoted = commits.promoted
    placement.holds = commits.held
    # a feed beats at least every third of the lease (its replicas count a TTL of silence)
    feeds = QuorumFeeds(broker, commits.held, beat_s=min(float(HEARTBEAT_S), ttl_s / 3))
    placement.open_feed = feeds.quorum_feed
    quorum = QuorumReplication(placement, broker, placement.links)
    membership.subscribe(QUEUES, quorum.apply)  # after placement: records current
    placement.stopping.append(quorum.stop)
    # quorum queues' copies: the quorum replication's followers are released before a
    # promoted copy opens
    failover.copies["quorum"] = QuorumCopies(placement, broker, quorum)
    exclusive = ExclusiveQueues(client, name, lambda: _lease_id(membership))
    placement.exclusive = exclusive
    membership.subscribe(EXCLUSIVE, exclusive.apply)
    membership.on_registered_again.append(exclusive.claim_again)
    placement.stopping.append(exclusive.stop)
    membership.subscribe(SECRET_KEY, secret.apply)
    membership.queue_records = lambda: list(placement.records.values())
    membership.queue_members = placement.members
    membership.queue_epoch = placement.epoch
    membership.holds_queue = failover.holds
    membership.link_views = links.describe
    replica_ops = ReplicaOps(
        client, placement, lambda: membership.records, lambda: set(membership.members)
    )
    membership.add_replica, membership.delete_replica = replica_ops.add, replica_ops.delete
    membership.add_member = lambda vhost, name, node: replica_ops.add(vhost, name, node, QUORUM)
    membership.delete_member = lambda vhost, name, node: replica_ops.delete(
        vhost, name, node, QUORUM
    )
    membership.quorum_copy = quorum.copy_view
    reconciler = Reconciler(membership, placement, replica_ops, broker)
    membership.subscribe(MEMBERS, reconciler.apply)  # joins and forgets re-choose replicas
    placement.stopping.append(reconciler.stop)
    membership.on_registered_again.append(placement.place_again)
    membership.on_registered_again.append(secret.restore)
    mirror = DefinitionsMirror(
        client,
        name,
        broker,
        admin,
        definitions_sync.also_wait,
        data_dir,
        placement.observe,
        definitions_sync.flush,
    )
    membership.subscribe(DEFS, mirror.apply)  # after the queues: a binding needs its queue
    membership.on_leave.append(mirror.stop)
    deadline = time.monotonic() + wait_s
    try:
        while True:
            try:
                await secret.ensure(client)
                await membership.join()
                await placement.place_local_queues()
                broker.directory = placement  # (bindings to the queues others lead)
                await mirror.start()
                # from now on a definitions change made here is in etcd before its reply
                broker.store.observer = mirror.observe
                failover.start()
                return membership, placement
            except EtcdUnavailable as error:
                if time.monotonic() > deadline:
                    raise
                log.warning("waiting for etcd: %s", error)
                await asyncio.sleep(1.0)
    except BaseException:
        await membership.leave()
        raise


def _nodes_changed(links: Links, events: list[Event]) -> None:
    """Links to a node whose record went fail at once (``Links.node_gone``); a node whose
    record shows a new run is tried again at once (``Links.node_seen``)."""
    for event in events:
        node = event.kv.key[len(NODES) :]
        if event.kind == "delete":
            links.node_gone(node)
        else:
            try:
                started = event.kv.json().get("started")
            except ValueError:
                continue
            links.node_seen(node, started)


def _lease_id(membership: Membership) -> int:
    """This node's lease now (an exclusive queue's key is held under it)."""
    return 0 if membership.lease is None else membership.lease.id
