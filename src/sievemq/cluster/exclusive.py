"""Exclusive queues cluster-wide: which node's connection owns each one.

An exclusive queue lives on its owner connection's node, as on a single node; the cluster
only needs to know the name is taken. The node records ``sievemq/exclusive/VHOST/NAME`` =
``{"node": NAME}`` under its own lease when the queue is declared (create-if-absent: the
declare-ok waits for etcd's commit) and deletes it when the queue goes (its connection closed,
auto-delete, queue.delete). A node that dies takes its lease, and so its exclusive queues'
keys, with it. Every node watches the prefix: a declare, consume, get, purge or delete of such
a name through another node is 405 RESOURCE_LOCKED, as RabbitMQ answers any connection but the
owner (``session.queue_methods.locked_elsewhere``). A node registered again (its lease was
lost) writes its exclusive queues' keys back.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Coroutine
from typing import Any
from urllib.parse import quote, unquote

from sievemq.cluster.coordination import EtcdClient, EtcdError, EtcdUnavailable, Event
from sievemq.cluster.membership import ROOT
from sievemq.gateway.runtime.definitions_sync import ReplicationFailed

log = logging.getLogger("sievemq.cluster")

EXCLUSIVE = ROOT + "exclusive/"

Queue = tuple[str, str]  # (vhost, name)


def exclusive_key(vhost: str, name: str) -> str:
    return EXCLUSIVE + quote(vhost, safe="") + "/" + quote(name, safe="")


def exclusive_of(key: str) -> Queue | None:
    vhost, _, name = key[len(EXCLUSIVE) :].partition("/")
    return (unquote(vhost), unquote(name)) if name else None


def _owner(value: bytes) -> str | None:
    try:
        record = json.loads(value)
    except ValueError:
        return None
    node = record.get("node") if isinstance(record, dict) else None
    return node if isinstance(node, str) else None


class ExclusiveQueues:
    """The cluster's exclusive queues as this node sees them, and its writes of its own."""

    def __init__(self, client: EtcdClient, me: str, lease: Callable[[], int]) -> None:
        self.client = client
        self.me = me
        self._lease = lease  # this node's lease id now (0: none)
        self.owners: dict[Queue, str] = {}  # every node's, from the watch
        self._mine: dict[Queue, asyncio.Future[bool]] = {}  # claimed: True once recorded
        self._tasks: set[asyncio.Future[None]] = set()

    def elsewhere(self, vhost: str, name: str) -> str | None:
        """The node whose connection owns exclusive queue ``name``, when another one."""
        owner = self.owners.get((vhost, name))
        return None if owner is None or owner == self.me else owner

    def claim(self, vhost: str, name: str) -> asyncio.Future[None]:
        """Record a new exclusive queue of this node; done once etcd committed it (fails with
        ``ReplicationFailed`` when etcd cannot be reached or another node took the name)."""
        queue = (vhost, name)
        recorded = asyncio.ensure_future(self._record(queue))
        self._mine[queue] = recorded
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def settle(task: asyncio.Future[bool]) -> None:
            if done.done():
                return
            error = None if task.cancelled() else task.exception()
            if task.cancelled() or error is not None:
                done.set_exception(error or ReplicationFailed("cancelled"))
            else:
                done.set_result(None)

        recorded.add_done_callback(settle)
        return done

    async def _record(self, queue: Queue) -> bool:
        vhost, name = queue
        value = json.dumps({"node": self.me})
        try:
            held = await self.client.create(exclusive_key(vhost, name), value, self._lease())
        except (EtcdUnavailable, EtcdError) as error:
            raise ReplicationFailed(
                f"etcd did not record exclusive queue '{name}' in vhost '{vhost}': {error}"
            ) from error
        if held is not None and _owner(held.value) != self.me:
            raise ReplicationFailed(
                f"exclusive queue '{name}' in vhost '{vhost}' is owned on node "
                f"'{_owner(held.value)}'"
            )
        return True

    def release(self, vhost: str, name: str) -> None:
        """This node's exclusive queue is gone: its key goes (once its claim settled)."""
        recorded = self._mine.pop((vhost, name), None)
        if recorded is not None:
            self._track(self._delete(recorded, vhost, name))

    async def _delete(self, recorded: asyncio.Future[bool], vhost: str, name: str) -> None:
        try:
            await recorded
        except (ReplicationFailed, asyncio.CancelledError):
            return  # never recorded (or another node's): nothing of ours to delete
        try:
            await self.client.delete(exclusive_key(vhost, name))
        except (EtcdUnavailable, EtcdError) as error:
            # the key stays until this node's lease ends (at the latest, when it stops)
            log.warning("cannot delete exclusive queue '%s' from etcd: %s", name, error)

    def claim_again(self) -> None:
        """After this node registered again under a new lease: its keys went with the old."""
        for vhost, name in list(self._mine):
            recorded = asyncio.ensure_future(self._record((vhost, name)))
            self._mine[(vhost, name)] = recorded
            self._track(_logged(recorded, name))

    def apply(self, events: list[Event], reset: bool) -> None:
        """Fold the watched ``sievemq/exclusive/`` events into the view."""
        if reset:
            self.owners.clear()
        for event in events:
            queue = exclusive_of(event.kv.key)
            if queue is None:
                continue
            owner = _owner(event.kv.value) if event.kind == "put" else None
            if owner is None:
                self.owners.pop(queue, None)
            else:
                self.owners[queue] = owner

    def _track(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()


async def _logged(recorded: asyncio.Future[bool], name: str) -> None:
    try:
        await recorded
    except ReplicationFailed as error:
        log.error("%s", error)
