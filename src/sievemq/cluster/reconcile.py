"""Replicas re-chosen when nodes join or are forgotten (RabbitMQ 4's quorum-queue membership
reconciliation, for streams and quorum queues).

Each leader looks after the streams and quorum queues it leads, and only on two events:

- **A node joins the cluster** (its ``sievemq/members/NAME`` appears for the first time): every
  stream or quorum queue with fewer members than its target size (a stream's
  ``x-initial-cluster-size``, its policy's ``initial-cluster-size``; a quorum queue's
  ``x-quorum-initial-group-size``; else the default 3) gains a replica on that node, which
  copies it from the start as any added replica does (a stream from its first chunk, a
  quorum queue's log from its first id: ``cluster/quorum_replication.py``'s catch-up).
- **A member node is forgotten** (its ``sievemq/members/NAME`` deleted, RabbitMQ's
  ``forget_cluster_node``): every stream or quorum queue that node replicates gets, in its
  place, the running non-member holding the fewest replicated queues, or loses it when
  there is none.

A node that stops, is killed or is cut off stays a member (its lease lapses, its
``members/`` key stays): its replicas are not moved, and it catches up when it returns.
Each change is the replica operations' compare-and-swap on the stream's record
(``cluster/replica_ops.py``), so it races safely with a hand-made change or a failover.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Coroutine
from typing import Any

from sievemq.amqp.errors import InternalError
from sievemq.cluster.coordination import Event
from sievemq.cluster.membership import MEMBERS, Membership
from sievemq.cluster.placement import CREATING, READY, REPLICATED, Placement, cluster_size
from sievemq.cluster.replica_ops import ReplicaOps
from sievemq.gateway.admin.views import BadRequest, Conflict, NotFound
from sievemq.gateway.model.broker import Broker
from sievemq.gateway.model.definitions import decode_value

log = logging.getLogger("sievemq.cluster")

Queue = tuple[str, str]


class Reconciler:
    """This node's streams' and quorum queues' replicas kept at their target size as nodes
    join and leave."""

    def __init__(
        self, membership: Membership, placement: Placement, ops: ReplicaOps, broker: Broker
    ) -> None:
        self.membership = membership
        self.placement = placement
        self.ops = ops
        self.broker = broker
        self.me = placement.me
        self._tasks: set[asyncio.Future[None]] = set()

    def apply(self, events: list[Event], reset: bool) -> None:
        """``sievemq/members/`` changed (called before the membership folds the events in,
        so ``membership.members`` still holds who was a member before)."""
        if reset:  # a fresh read (a join, etcd restarted): no event to act on
            return
        for event in events:
            name = event.kv.key[len(MEMBERS) :]
            if name == self.me:
                continue
            if event.kind == "put" and name not in self.membership.members:
                self._start(self._joined(name))
            elif event.kind == "delete" and name in self.membership.members:
                self._start(self._forgotten(name))

    def _start(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _led(self) -> list[tuple[Queue, dict[str, Any]]]:
        """The streams and quorum queues this node leads, settled and not being deleted."""
        return [
            (queue, record)
            for queue, record in list(self.placement.records.items())
            if record.get("type", "stream") in REPLICATED
            and record.get("leader") == self.me
            and not record.get("delete")
            and record.get("state", READY) != CREATING
        ]

    def _target(self, queue: Queue, record: dict[str, Any]) -> int:
        kind = str(record.get("type", "stream"))
        arguments = decode_value(record.get("arguments") or {})
        local = self.broker.vhosts.get(queue[0])
        policy = local.policy_definition(kind, queue[1]) if local is not None else None
        return cluster_size(dict(arguments), policy, kind)

    async def _joined(self, node: str) -> None:
        await asyncio.sleep(0)  # the membership folds the join in first
        for queue, record in self._led():
            members = [record.get("leader"), *record.get("replicas", ())]
            if node in members or len(members) >= self._target(queue, record):
                continue
            why = f"adds a replica on {node}, which joined"
            change = self.ops.add(queue[0], queue[1], node, REPLICATED)
            await self._change(queue, record, why, change)

    async def _forgotten(self, node: str) -> None:
        await asyncio.sleep(0)
        for queue, record in self._led():
            if node not in record.get("replicas", ()):
                continue
            instead = self._replacement(queue, record)
            why = f"replaces {node}, forgotten, by {instead or 'none (no other node runs)'}"
            change = self.ops.replace(queue[0], queue[1], node, instead, REPLICATED)
            await self._change(queue, record, why, change)

    def _replacement(self, queue: Queue, record: dict[str, Any]) -> str | None:
        """The running node that is no member of the queue holding the fewest streams and
        quorum queues (as ``Placement.choose_replicas`` counts them)."""
        members = {record.get("leader"), *record.get("replicas", ())}
        live = set(self.membership.records) - members - {self.me}
        if not live:
            return None
        counts = dict.fromkeys(sorted(live), 0)
        for other in self.placement.records.values():
            if other.get("type", "stream") in REPLICATED:
                for n in (other.get("leader"), *other.get("replicas", ())):
                    if n in counts:
                        counts[n] += 1
        return min(counts, key=lambda n: (counts[n], n))

    async def _change(
        self, queue: Queue, record: dict[str, Any], why: str, change: Awaitable[bool]
    ) -> None:
        what = "quorum queue" if record.get("type") == "quorum" else "stream"
        try:
            if await change:
                log.warning("%s '%s' in vhost '%s': %s", what, queue[1], queue[0], why)
        except (NotFound, Conflict, BadRequest, InternalError) as error:
            log.warning(
                "%s '%s' in vhost '%s': %s: not done: %s", what, queue[1], queue[0], why, error
            )

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
