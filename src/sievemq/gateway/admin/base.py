"""The state every admin section shares, and the lookups and rate computations they all use."""

from __future__ import annotations

import asyncio
import contextlib
import platform
import time
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from sievemq.amqp.errors import InternalError
from sievemq.gateway.admin.views import (
    AdminPeersPort,
    ClusterPort,
    FilterAdviceView,
    HistoryPointView,
    ListenerView,
)
from sievemq.gateway.model.broker import Broker
from sievemq.gateway.model.classic.queue import MESSAGE_STATS_KEYS, ClassicQueue
from sievemq.gateway.model.classic.queue import message_stats as classic_message_stats
from sievemq.gateway.model.stream.queue import StreamQueue
from sievemq.gateway.rates import Key, RateSampler
from sievemq.gateway.runtime.alarms import ResourceAlarms
from sievemq.gateway.runtime.definitions_sync import ReplicationFailed, failure_text
from sievemq.gateway.session.connection import Connection
from sievemq.gateway.streamproto_session.connection import StreamConnection
from sievemq.gateway.streamproto_session.node import StreamNode

if TYPE_CHECKING:
    from sievemq.gateway.runtime.node import Node

PRODUCT = "SieveMQ"


def classic_counts_keys() -> tuple[str, ...]:
    return MESSAGE_STATS_KEYS


LENGTHS = ("messages", "messages_ready", "messages_unacknowledged")  # RabbitMQ's queue lengths
# the overview's message_stats counted by the node (not the queues), and where
NODE_COUNTERS = {
    "publish": "received",  # plus stream_received
    "confirm": "confirmed",
    "return_unroutable": "returned_unroutable",
    "drop_unroutable": "dropped_unroutable",
}
NODE_COUNTS = tuple(NODE_COUNTERS)


def split_counts(counts: dict[str, int]) -> tuple[tuple[str, ...], tuple[int, ...]]:
    return tuple(counts), tuple(counts.values())


def queue_key(queue: StreamQueue | ClassicQueue) -> Key:
    """The rate sampler's key of one queue (a queue of the same name declared again after a
    delete starts from its own first sample: the key holds the object's identity)."""
    return ("q", queue.vhost, queue.name, str(id(queue)))


HISTORY_POINTS = 120  # rounds of the rate sampler kept for the overview's history
HISTORY_RATES = ("publish", "confirm", "deliver_get", "ack", "redeliver")


class AdminBase:
    """The broker, the node and their listeners, and the admin plane's own state (rate
    samples, cached filter advice); the sections (``QueuesAdmin``, ...) build on it."""

    def __init__(
        self,
        broker: Broker,
        version: str = "0.1.0",
        alarms: ResourceAlarms | None = None,
        node: Node | None = None,
    ) -> None:
        self.broker = broker
        self.version = version
        self.started = time.time()
        self.alarms = alarms
        self.node = node
        self.listeners: list[ListenerView] = []
        self.stream_node: StreamNode | None = None  # the stream-protocol listener's state
        self.node_name = "sievemq@" + (platform.node() or "localhost")
        self.cluster: ClusterPort | None = None  # set by `serve --cluster-etcd`
        # the other nodes' admin APIs, for cluster-wide connection/channel/consumer lists
        self.peers: AdminPeersPort | None = None
        self._rates = RateSampler()
        self.sampler: asyncio.Task[None] | None = None
        # the sampler's last round: the queues' rates summed, node-wide and per vhost (the
        # rate of a sum is the sum of the rates; an idle stream, not open, adds 0)
        self._summed_rates: dict[str, float] = {}
        self._vhost_rates: dict[str, dict[str, float]] = {}
        # one point per round, node-wide, for the dashboard's charts (10 minutes at 5 s)
        self.history: deque[HistoryPointView] = deque(maxlen=HISTORY_POINTS)
        # filter advice per (vhost, stream, target, chunks): (computed at, its queue, view)
        self._advice: dict[tuple[str, str, float, int], tuple[float, Any, FilterAdviceView]] = {}

    def vhost_exists(self, vhost: str) -> bool:
        return vhost in self.broker.vhosts

    def active_alarms(self) -> list[str]:
        if self.alarms is None:
            return []
        return list(self.alarms.snapshot().get("active", []))

    def _queue(self, vhost: str, name: str) -> StreamQueue:
        return self.broker.vhost(vhost).get_queue(name)

    def _held(self, vhost: str, name: str) -> tuple[StreamQueue, str] | None:
        """The stream as this node holds it: its own (``writer``) or a replica's copy
        (``replica``, ``QueueDirectory.replica_queue``); None when it holds neither."""
        v = self.broker.vhosts.get(vhost)
        queue: StreamQueue | None = None if v is None else v.queues.get(name)
        if queue is not None:
            return queue, "writer"
        if self.broker.directory is not None:
            copy = self.broker.directory.replica_queue(vhost, name)
            if copy is not None:
                return copy, "replica"
        return None

    def _readable(self, vhost: str, name: str) -> StreamQueue:
        """The stream or this node's replica of it, for reading committed chunks; 404 when
        it holds neither."""
        held = self._held(vhost, name)
        return self._queue(vhost, name) if held is None else held[0]

    def _vhosts(self, vhost: str | None) -> list[Any]:
        if vhost is None:
            return list(self.broker.vhosts.values())
        return [self.broker.vhost(vhost)]

    def _still_declared(self, queue: Any) -> bool:
        v = self.broker.vhosts.get(queue.vhost)
        if v is None:
            return False
        return v.queues.get(queue.name) is queue or v.classic.queues.get(queue.name) is queue

    def _connections(self) -> list[Connection]:
        if self.node is None:
            return []
        return sorted(
            (
                c
                for c in self.node.connections
                if isinstance(c, Connection) and c.opened and not c.internal
            ),
            key=lambda c: c.id,
        )

    def _stream_connections(self) -> list[StreamConnection]:
        """Open stream-protocol connections (past Open), oldest first; not another cluster
        node's replica (``trusted``: internal, as the inter-node link)."""
        if self.stream_node is None:
            return []
        return sorted(
            (
                c
                for c in self.stream_node.connections
                if isinstance(c, StreamConnection)
                and c.alive
                and c.vhost is not None
                and not c.trusted
            ),
            key=lambda c: c.id,
        )

    def _stream_subscribers(self) -> dict[int, int]:
        """Stream-protocol subscriptions per stream, keyed by ``id()`` of the stream's queue
        (a stream deleted and declared again is a new queue; its old subscriptions are
        closed). They count in a stream's ``consumers``, as RabbitMQ's stream plugin
        registers its consumers with the queue."""
        counts: dict[int, int] = {}
        for conn in self._stream_connections():
            for sub in list(conn.subscriptions.values()):
                if sub.active:
                    counts[id(sub.queue)] = counts.get(id(sub.queue), 0) + 1
        return counts

    def _classic_rates(self, q: ClassicQueue, now: float) -> dict[str, float]:
        """A classic or quorum queue's message_stats and lengths' rates, by RabbitMQ's names."""
        outstanding = q.outstanding
        return self._with_lengths(
            queue_key(q), classic_message_stats(q), q.message_count + outstanding, outstanding, now
        )

    def _stream_rates(
        self, queue: StreamQueue, messages: int, unacked: int, now: float
    ) -> dict[str, float]:
        """A stream's publish, deliver and ack rates (``publish``, ``deliver_get``, ``ack``)
        and its lengths'."""
        counts = {
            "publish": queue.end_offset,
            "deliver_get": queue.filter_stats.messages_delivered,
            "ack": queue.acked,
        }
        return self._with_lengths(queue_key(queue), counts, messages, unacked, now)

    def _with_lengths(
        self, key: Key, counts: dict[str, int], messages: int, unacked: int, now: float
    ) -> dict[str, float]:
        """The rates of ``counts`` and of RabbitMQ's three lengths (``messages``,
        ``messages_ready``, ``messages_unacknowledged``: negative while they shrink)."""
        names = (*counts, *LENGTHS)
        values = (*counts.values(), messages, messages - unacked, unacked)
        return self._rates.rates(key, names, values, now, len(counts))

    @contextlib.contextmanager
    def unsynced(self) -> Iterator[None]:
        """Definitions changes inside the block are written, but their fdatasync is left
        to ``synced()`` (to run in a worker thread, not on the event loop)."""
        store = self.broker.store
        store.defer_sync = True
        try:
            yield
        finally:
            store.defer_sync = False

    async def synced(self) -> None:
        """Wait until every definitions change so far is on disk (fdatasync in a thread,
        group-committed with the AMQP channels' changes when a node runs)."""
        if self.node is not None:
            pending = self.node.definitions_sync.wait()
            if pending is not None:
                try:
                    await asyncio.shield(pending)
                except ReplicationFailed as error:  # a cluster's etcd did not commit it
                    raise InternalError(failure_text(error)) from error
            return
        sync = self.broker.store.take_sync()
        if sync is not None:
            await asyncio.to_thread(sync)
