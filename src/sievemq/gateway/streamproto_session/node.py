"""What every stream-protocol connection of one server shares."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from sievemq.gateway.streamproto_session.sac import DEFAULT_TIMEOUT_S, SacCoordinator
from sievemq.storage import StorageError
from sievemq.storage.publishers import PublisherSequences

if TYPE_CHECKING:
    from sievemq.gateway.model.stream.queue import StreamQueue
    from sievemq.gateway.runtime.node import Node
    from sievemq.gateway.streamproto_session.ports import ConnectionPort

log = logging.getLogger(__name__)

# RabbitMQ-compatible server properties: clients gate features on ``version`` (Java and .NET
# exchange command versions only from 3.11; filtering needs 3.13) and rstream's own tests
# check ``product``
SERVER_PROPERTIES = {
    "product": "RabbitMQ",
    "version": "3.13.7",
    "cluster_name": "sievemq",
    "platform": "SieveMQ (Python)",
    "copyright": "SieveMQ contributors",
    "information": "SieveMQ speaking the RabbitMQ Stream protocol; see docs/compatibility.md",
}


def _no_secret() -> str | None:
    return None  # a single node: no cluster login


class StreamNode:
    """The AMQP node (broker, appenders, limits) plus stream-protocol state."""

    def __init__(
        self,
        node: Node,
        advertised_host: str,
        frame_max: int,
        heartbeat: int,
        consumer_update_timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self.node = node
        self.advertised_host = advertised_host
        self.advertised_port = 0  # set by the wiring once the listener knows its port
        self.advertised_tls_port = 0  # the TLS listener's, when there is one
        self.frame_max = frame_max
        self.heartbeat = heartbeat
        self.connections: set[ConnectionPort] = set()
        # a cluster node's secret (``cluster/secret.py``): other nodes' replicas log in with it
        self.cluster_secret: Callable[[], str | None] = _no_secret
        # single-active-consumer groups
        self.sac = SacCoordinator(consumer_update_timeout_s, node.loop.call_later)
        self._sequences: dict[int, tuple[StreamQueue, PublisherSequences]] = {}

    def sequences(self, queue: StreamQueue) -> PublisherSequences:
        """The publisher sequences of the queue's stream (loaded on first use)."""
        entry = self._sequences.get(id(queue))
        if entry is None or entry[0] is not queue:
            entry = (queue, queue.publisher_sequences())  # shared with AMQP dedup
            self._sequences[id(queue)] = entry
            queue.add_delete_listener(self._forget)
        return entry[1]

    def load_sequences(self, queue: StreamQueue) -> asyncio.Future[None]:
        """The node's off-loop rebuild of the queue's publisher sequences
        (``Node.load_sequences``), shared with deduplicated AMQP publishes."""
        return self.node.load_sequences(queue)

    def _forget(self, queue: StreamQueue) -> None:
        self._sequences.pop(id(queue), None)

    def save_sequences(self) -> None:
        """Shutdown, after every append is written: snapshot the sequences of each stream
        (those stream-protocol publishers and deduplicated AMQP publishes loaded)."""
        for queue in list(self.node.broker.queues()):
            sequences = getattr(queue, "loaded_sequences", None)
            if sequences is None or queue.deleted:
                continue
            try:
                sequences.save(queue.stream.end_offset)
            except (OSError, StorageError) as error:
                log.error("cannot save publisher sequences of %s: %s", queue.name, error)

    def stop_reading(self) -> None:
        for conn in list(self.connections):
            conn.stop_reading()

    def on_alarms(self, reasons: tuple[str, ...]) -> None:
        """A ``ResourceAlarms`` listener: hold or release every publishing connection."""
        for conn in list(self.connections):
            conn.apply_alarms(reasons)

    def close_all(self, reason: str) -> None:
        for conn in list(self.connections):
            conn.close(15, reason)
