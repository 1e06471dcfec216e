"""What every connection of one server shares: the broker, limits, live connections, appenders."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from sievemq.amqp.errors import AMQPError
from sievemq.amqp.tables import DEFAULT_LIMITS as DEFAULT_TABLE_LIMITS
from sievemq.amqp.tables import TableLimits
from sievemq.gateway.model.broker import Broker
from sievemq.gateway.model.classic.queue import ClassicQueue
from sievemq.gateway.model.remote import RemoteQueue
from sievemq.gateway.model.stream.queue import StreamQueue
from sievemq.gateway.model.vhost import VirtualHost
from sievemq.gateway.runtime.classic import queue_expiry
from sievemq.gateway.runtime.classic.appender import ClassicAppender
from sievemq.gateway.runtime.definitions_sync import DefinitionsSync
from sievemq.gateway.runtime.direct_replies import DirectReplies
from sievemq.gateway.runtime.gc_tuning import GcFreezer
from sievemq.gateway.runtime.latency import WriteLatencies
from sievemq.gateway.runtime.stream.appender import StreamAppender
from sievemq.storage import Message, StorageError
from sievemq.storage.publishers import PublisherSequences


class AlarmTarget(Protocol):
    """Told when the set of resource alarms that are on changes (a client connection)."""

    def apply_alarms(self, reasons: tuple[str, ...]) -> None: ...


class ClientConnection(AlarmTarget, Protocol):
    """A live client connection as the node holds it (``session.connection.Connection``):
    an alarm target the shutdown can also stop, close and drop."""

    def stop_reading(self) -> None: ...
    def close(self, error: AMQPError) -> None: ...
    def abort(self) -> None: ...


class LinkFlow(Protocol):
    """In a cluster, the inter-node links' flow control (``cluster.link.Links``): a client
    connection whose read wrote to a link over its high-water mark stops reading until the
    link drained."""

    pressed: list[Any]  # links written to over their mark since the last look

    def unpress(self) -> None:
        """Forget ``pressed`` (written to by something else than the next read)."""
        ...

    def hold(self, resume: Callable[[], None]) -> bool:
        """True: stop reading; ``resume`` is called once the links drained (or failed)."""
        ...


@dataclass(frozen=True)
class Limits:
    """The connection-level settings (built from ``sievemq.settings.Settings`` at the edge)."""

    channel_max: int = 2047
    frame_max: int = 131072
    heartbeat: int = 60
    max_connections: int = 4096
    max_message_size: int = 128 * 1024 * 1024
    max_unparsed_bytes: int = 4 * 1024 * 1024
    max_pending_content_bytes: int = 256 * 1024 * 1024
    delivery_batch: int = 256
    handshake_timeout_s: float = 10.0
    sync_interval_ms: int = 200
    write_buffer_high: int = 1024 * 1024
    tables: TableLimits = DEFAULT_TABLE_LIMITS  # field tables from the wire
    max_sql_length: int = 4096
    max_sql_depth: int = 64


class Node:
    """Server-wide state on the event loop."""

    def __init__(
        self,
        broker: Broker,
        limits: Limits,
        loop: asyncio.AbstractEventLoop,
        gc_freeze: bool = False,
    ) -> None:
        self.broker = broker
        self.limits = limits
        self.loop = loop
        self.connections: set[ClientConnection] = set()
        # connections of either protocol past their open -> (vhost, user): what the vhost and
        # user max-connections limits count
        self.opened: dict[object, tuple[str, str]] = {}
        self._count = 0
        self._ids = itertools.count(1)
        self._appenders: dict[int, StreamAppender | ClassicAppender] = {}  # id(queue) -> writer
        self._watched: set[int] = set()
        # one worker per core is plenty: each stream has at most one fsync in flight
        self.executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="sievemq-fsync")
        self.accepting = True
        self.direct_replies = DirectReplies()  # amq.rabbitmq.reply-to names -> their channels
        # the resource alarms that are on (runtime.alarms), memory before disk; empty: none
        self.alarm_reasons: tuple[str, ...] = ()
        self.link_flow: LinkFlow | None = None  # in a cluster: the links' flow control
        self.exhaustion_listeners: list[Callable[[OSError], None]] = []
        self.latencies = WriteLatencies()  # append and fsync histograms (admin /metrics)
        # the definitions log's fdatasync in a worker thread (AMQP and HTTP changes wait on it)
        self.definitions_sync = DefinitionsSync(broker.store, loop)
        queue_expiry.start(broker, loop)  # x-expires of classic queues
        broker.stream_writer = self._write_stream  # dead-letters routed into a stream
        # `sievemq serve` freezes (``gc_freeze``; it calls ``gc.start`` once it is ready);
        # in-process test gateways share their interpreter with the tests, so they leave
        # the collector alone unless asked
        self.gc = GcFreezer(broker, enabled=gc_freeze)
        # publisher-sequence rebuilds in worker threads, one per stream (``load_sequences``)
        self._loading: dict[int, tuple[StreamQueue, asyncio.Future[None]]] = {}

    def _write_stream(self, queue: StreamQueue, message: Message) -> None:
        """One dead-lettered message into a stream: the same writer (and record) as a
        publish; unconfirmed, as RabbitMQ's at-most-once dead-lettering."""
        self.appender(queue).submit(message, None, 0)

    def next_id(self) -> int:
        return next(self._ids)

    # net.protocol.ConnectionRegistry
    def admit(self) -> bool:
        if not self.accepting or self._count >= self.limits.max_connections:
            return False
        self._count += 1
        return True

    def release(self) -> None:
        self._count -= 1

    @property
    def connection_count(self) -> int:
        """Client sockets admitted and not yet closed (AMQP 0-9-1 and stream protocol)."""
        return self._count

    def connection_refusal(self, vhost: VirtualHost, username: str) -> str | None:
        """RabbitMQ's vhost and user ``max-connections`` over the open connections of both
        protocols (AMQP 0-9-1 and stream): the refusal text (RabbitMQ's), or None."""
        limit = vhost.limits.get("max-connections", -1)
        if limit >= 0 and sum(1 for v, _ in self.opened.values() if v == vhost.name) >= limit:
            return (
                f"access to vhost '{vhost.name}' refused for user '{username}': "
                f"connection limit ({limit}) is reached"
            )
        live = self.broker.users.get(username)
        limit = live.limits.get("max-connections", -1) if live is not None else -1
        if limit >= 0 and sum(1 for _, u in self.opened.values() if u == username) >= limit:
            return (
                f"connection refused for user '{username}': "
                f"user connection limit ({limit}) is reached"
            )
        return None

    def note_opened(self, conn: object, vhost: str, username: str) -> None:
        self.opened[conn] = (vhost, username)

    def note_gone(self, conn: object) -> None:
        self.opened.pop(conn, None)

    def storage_exhausted(self, error: OSError) -> None:
        """An append failed with ENOSPC/EDQUOT/EMFILE/ENFILE (its publishers were nacked):
        tell the listeners (the resource alarms raise the disk alarm for a full disk)."""
        for listener in list(self.exhaustion_listeners):
            listener(error)

    def on_alarms(self, reasons: tuple[str, ...]) -> None:
        """A ``ResourceAlarms`` listener: block or unblock every publishing connection."""
        self.alarm_reasons = reasons
        for conn in list(self.connections):
            conn.apply_alarms(reasons)

    def appender(
        self, queue: StreamQueue | ClassicQueue | RemoteQueue
    ) -> StreamAppender | ClassicAppender | RemoteQueue:
        """The one writer of the queue (created on first publish); a queue another cluster
        node leads is its own writer (it forwards)."""
        if not isinstance(queue, (StreamQueue, ClassicQueue)):
            return queue
        appender = self._appenders.get(id(queue))
        if appender is None:
            if isinstance(queue, ClassicQueue):
                appender = ClassicAppender(
                    queue,
                    self.loop,
                    self.broker.settings.durability,
                    self.limits.sync_interval_ms,
                    self.executor,
                )
            else:
                fenced = queue  # (a replicated stream's leader may be fenced: failover)
                appender = StreamAppender(
                    queue.stream,
                    self.loop,
                    self.executor,
                    self.limits.sync_interval_ms,
                    self.latencies,
                    self.storage_exhausted,
                    lambda: fenced.fenced,
                    lambda: fenced.loaded_sequences,
                )
            self._appenders[id(queue)] = appender
            self.watch(queue)
        return appender

    def load_sequences(self, queue: StreamQueue) -> asyncio.Future[None]:
        """Rebuild the queue's publisher sequences in a worker thread (a stream with no
        snapshot after a crash is scanned whole): done once ``queue.loaded_sequences`` is
        set. One load per queue, shared by every connection that waits for it."""
        loading = self._loading.get(id(queue))
        if loading is not None and loading[0] is queue:
            return loading[1]
        loop = self.loop
        done: asyncio.Future[None] = loop.create_future()
        self._loading[id(queue)] = (queue, done)
        try:
            build = queue.sequences_builder()
        except (OSError, StorageError) as error:
            self._loading.pop(id(queue), None)
            done.set_exception(error)
            return done
        work = loop.run_in_executor(None, build)

        def built(w: asyncio.Future[PublisherSequences]) -> None:
            self._loading.pop(id(queue), None)
            error = asyncio.CancelledError() if w.cancelled() else w.exception()
            if error is None and not queue.deleted:
                try:
                    queue.adopt_sequences(w.result())
                except (OSError, StorageError) as caught:
                    error = caught
            if done.done():
                return
            if error is None:
                done.set_result(None)
            else:
                done.set_exception(error)
                done.exception()  # retrieved: a waiter that went away logs nothing

        work.add_done_callback(built)
        return done

    def flush_classic(self, queue: ClassicQueue) -> None:
        """Enqueue what this tick's publishes left buffered for ``queue`` now, so a basic.get
        or queue.purge after a publish on the same channel sees it (as in RabbitMQ)."""
        appender = self._appenders.get(id(queue))
        if isinstance(appender, ClassicAppender) and appender.pending:
            appender.flush()

    def watch(self, queue: StreamQueue | ClassicQueue) -> None:
        """Make sure a queue.delete (from anywhere) cancels consumers and nacks pending."""
        if id(queue) not in self._watched:
            self._watched.add(id(queue))
            queue.add_delete_listener(self._queue_deleted)

    def _queue_deleted(self, queue: StreamQueue | ClassicQueue) -> None:
        self._watched.discard(id(queue))
        for consumer in list(queue.consumers):
            consumer.cancel_by_server()
        appender = self._appenders.pop(id(queue), None)
        if appender is not None:
            appender.close()

    def flush_all(self) -> None:
        """Shutdown, after the connections are gone: per stream, wait for the append in
        flight, write what is buffered, fsync (the broker closes the streams next)."""
        for appender in list(self._appenders.values()):
            appender.flush_now()
