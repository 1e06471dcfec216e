"""Streams, classic and quorum queues: list, declare, delete, purge, get messages."""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from sievemq.amqp.errors import NotFound, ResourceLocked
from sievemq.gateway.admin.base import LENGTHS, AdminBase
from sievemq.gateway.admin.codec import decode_properties, jsonable
from sievemq.gateway.admin.views import (
    GET_ACKMODES,
    BadRequest,
    GotMessage,
    QueueView,
    StreamView,
)
from sievemq.gateway.model.classic.queue import ClassicQueue
from sievemq.gateway.model.directory import place_elsewhere
from sievemq.gateway.model.stream.arguments import purge_not_supported
from sievemq.gateway.model.stream.queue import StreamQueue
from sievemq.gateway.model.vhost import VirtualHost


class QueuesAdmin(AdminBase):
    """Streams and classic and quorum queues."""

    def list_streams(self, vhost: str | None = None) -> list[StreamView]:
        return list(self.iter_streams(vhost))

    def iter_streams(self, vhost: str | None = None) -> Iterator[StreamView]:
        """The streams' views one at a time, so that a caller on the event loop can yield
        to it between them. The set of streams is taken when iteration starts; a stream
        deleted before its turn is left out."""
        now = time.time()
        queues = [q for q in self.broker.queues() if vhost is None or q.vhost == vhost]
        subscribed = self._stream_subscribers()
        for q in queues:
            if self._still_declared(q):
                yield self._stream_view(q, now, subscribed)

    def queue_keys(self, vhost: str | None = None) -> list[tuple[str, str, bool]]:
        """(vhost, name, is a stream) of every queue, without building a view: a page of a
        list sorted by name needs the views of its own rows only."""
        keys = [(v.name, n, True) for v in self._vhosts(vhost) for n in v.queues]
        keys += [(v.name, n, False) for v in self._vhosts(vhost) for n in v.classic.queues]
        return keys

    def get_stream(self, vhost: str, name: str) -> StreamView:
        return self._stream_view(self._queue(vhost, name), time.time(), self._stream_subscribers())

    def stream_exists(self, vhost: str, name: str) -> bool:
        v = self.broker.vhosts.get(vhost)
        return v is not None and name in v.queues

    def declare_stream(
        self,
        vhost: str,
        name: str,
        arguments: dict[str, Any] | None = None,
        durable: bool = True,
        auto_delete: bool = False,
        exclusive: bool = False,
    ) -> bool:
        """queue.declare with the AMQP rules and texts; True when it was created."""
        v = self.broker.vhost(vhost)
        existed = name in v.queues
        directory = self.broker.directory
        if directory is not None and not existed and name not in v.classic.queues:
            if directory.leader_elsewhere(vhost, name) is not None:
                return False  # another cluster node leads it (its arguments are its own)
            placed = place_elsewhere(directory, v, name, durable, exclusive, arguments)
            if placed is not None and self.node is not None:
                self.node.definitions_sync.also_wait(placed)  # ``synced`` waits for it
                return True
        v.declare_queue(
            name,
            durable=durable,
            exclusive=exclusive,
            auto_delete=auto_delete,
            arguments=dict(arguments or {}),
        )
        return not existed

    def create_stream(
        self, vhost: str, name: str, arguments: dict[str, Any] | None = None
    ) -> StreamView:
        """Declare (or idempotently redeclare) a stream; ``x-queue-type`` defaults to stream."""
        args = dict(arguments or {})
        args.setdefault("x-queue-type", "stream")
        self.declare_stream(vhost, name, args)
        return self.get_stream(vhost, name)

    def list_queues(self, vhost: str | None = None) -> list[QueueView]:
        """The classic and quorum queues (streams are ``list_streams``)."""
        return list(self.iter_queues(vhost))

    def iter_queues(self, vhost: str | None = None) -> Iterator[QueueView]:
        """``list_queues`` one view at a time (see ``iter_streams``)."""
        now = time.time()
        queues = [
            q
            for v in self._vhosts(vhost)
            for q in sorted(v.classic.queues.values(), key=lambda q: q.name)
        ]
        for q in queues:
            if self._still_declared(q):
                yield self._queue_view(q, now)

    def get_queue(self, vhost: str, name: str) -> QueueView:
        """A classic or quorum queue; 404 for a stream or a missing queue."""
        q = self.broker.vhost(vhost).classic.queues.get(name)
        if q is None:
            raise NotFound(f"no queue '{name}' in vhost '{vhost}'")
        return self._queue_view(q, time.time())

    def get_messages(
        self,
        vhost: str,
        name: str,
        count: int,
        ackmode: str,
        encoding: str = "auto",
        truncate: int | None = None,
    ) -> list[GotMessage]:
        """RabbitMQ's POST .../get on a classic or quorum queue: take up to ``count`` ready
        messages (as basic.get would), then settle them all by ``ackmode``: requeued
        (``ack_requeue_true``, ``reject_requeue_true``: back at their places, redelivered),
        acknowledged (``ack_requeue_false``) or rejected (``reject_requeue_false``:
        dead-lettered when the queue says so). ``encoding`` auto shows a UTF-8 payload as
        a string and anything else as base64; ``truncate`` cuts the shown payload."""
        if ackmode not in GET_ACKMODES:
            raise BadRequest(f"unknown ackmode '{ackmode}'")
        if encoding not in ("auto", "base64"):
            raise BadRequest(f"unknown encoding '{encoding}'")
        q = self._settled_classic(self.broker.vhost(vhost), name)
        taken = []
        out: list[GotMessage] = []
        for _ in range(max(0, count)):
            msg = q.take()
            if msg is None:
                break
            if ackmode == "ack_requeue_false":
                q.got_no_ack += 1  # RabbitMQ takes these with basic.get no-ack
            else:
                q.got += 1
            taken.append(msg)
            body = msg.body if truncate is None else msg.body[: max(0, truncate)]
            text: str | None = None
            if encoding == "auto":
                try:
                    text = body.decode("utf-8")
                except UnicodeDecodeError:
                    text = None
            out.append(
                GotMessage(
                    payload_bytes=len(msg.body),
                    redelivered=msg.redelivered,
                    exchange=msg.exchange,
                    routing_key=msg.routing_key,
                    message_count=q.message_count,
                    properties=decode_properties(msg.properties),
                    payload=text if text is not None else base64.b64encode(body).decode(),
                    payload_encoding="string" if text is not None else "base64",
                )
            )
        if taken:
            if ackmode.endswith("requeue_true"):
                q.requeue(taken)
            elif ackmode == "ack_requeue_false":
                q.ack(taken, client=False)
            else:
                q.reject(taken)
        return out

    def purge_queue(self, vhost: str, name: str) -> int:
        """queue.purge of a classic or quorum queue: drop its ready messages (unacked ones
        stay); how many. A stream is 540 (as on AMQP), a missing queue 404, another
        connection's exclusive queue 405."""
        v = self.broker.vhost(vhost)
        if name in v.queues:
            raise purge_not_supported(name, vhost)
        return self._settled_classic(v, name).purge()

    def _settled_classic(self, v: VirtualHost, name: str) -> ClassicQueue:
        """A classic or quorum queue for an admin get or purge: 404 when missing, 405 when
        another connection's exclusive queue; what publishes left buffered for it is
        enqueued first."""
        q = v.classic.queues.get(name)
        if q is None:
            raise NotFound(f"no queue '{name}' in vhost '{v.name}'")
        if q.owner is not None:
            raise ResourceLocked(
                f"cannot obtain exclusive access to locked queue '{name}' in vhost '{v.name}'"
            )
        if self.node is not None:
            self.node.flush_classic(q)
        return q

    def delete_queue(self, vhost: str, name: str) -> None:
        """Delete a queue of any type; 404 when missing."""
        v = self.broker.vhost(vhost)
        v.find_queue(name)
        v.delete_queue(name)

    def delete_stream(self, vhost: str, name: str) -> int:
        v = self.broker.vhost(vhost)
        v.get_queue(name)  # 404 when missing
        return v.delete_queue(name)

    def _queue_view(self, q: ClassicQueue, now: float) -> QueueView:
        ready = q.message_count
        rates = self._classic_rates(q, now)
        return QueueView(
            vhost=q.vhost,
            name=q.name,
            type=str(q.kind),
            durable=bool(q.durable),
            auto_delete=bool(q.auto_delete),
            exclusive=bool(q.exclusive),
            arguments=jsonable(dict(q.arguments.table)),
            policy=q.policy,
            operator_policy=q.operator_policy,
            effective_policy_definition=dict(q.effective_policy),
            messages=ready + q.outstanding,
            messages_ready=ready,
            messages_unacknowledged=q.outstanding,
            bytes=q.ready_bytes,
            consumers=q.consumer_count,
            messages_ram=q.loaded,
            message_bytes_ram=q.loaded_bytes,
            messages_paged_out=q.paged,
            message_bytes_paged_out=max(0, q.ready_bytes - q.loaded_bytes),
            published=q.published,
            publish_rate=rates["publish"],
            delivered=q.delivered,
            deliver_rate=rates["deliver_get"],
            got=q.got,
            got_no_ack=q.got_no_ack,
            delivered_no_ack=q.delivered_no_ack,
            redelivered=q.redelivered,
            get_empty=q.get_empty,
            acked=q.acked,
            rates=rates,
            length_rates={k: rates[k] for k in LENGTHS},
        )

    def _stream_view(
        self, queue: StreamQueue, now: float, subscribed: dict[int, int]
    ) -> StreamView:
        """``subscribed``: stream-protocol subscriptions by ``id()`` of their queue."""
        stats = queue.stats()  # surveyed, not opened, for an idle stream (storage.survey)
        published = stats.first_offset + stats.messages
        delivered = queue.filter_stats.messages_delivered
        unacked = sum(max(0, c.prefetch - c.credit) for c in queue.consumers)
        rates = self._stream_rates(queue, stats.messages, unacked, now)
        return StreamView(
            vhost=queue.vhost,
            name=queue.name,
            arguments=jsonable(dict(queue.arguments.table)),
            policy=queue.policy,
            operator_policy=queue.operator_policy,
            effective_policy_definition=dict(queue.effective_policy),
            messages=stats.messages,
            bytes=stats.bytes,
            segments=stats.segments,
            chunks=stats.chunks,
            first_offset=stats.first_offset,
            last_offset=stats.last_offset,
            first_timestamp_ms=stats.first_timestamp_ms,
            last_timestamp_ms=stats.last_timestamp_ms,
            consumers=queue.consumer_count + subscribed.get(id(queue), 0),
            published=published,
            publish_rate=rates["publish"],
            delivered=delivered,
            deliver_rate=rates["deliver_get"],
            filter_size_bytes=queue.filter_size_bytes,
            filter_stats=replace(queue.filter_stats),  # a copy: the view is a snapshot
            messages_unacknowledged=unacked,
            acked=queue.acked,
            ack_rate=rates["ack"],
            length_rates={k: rates[k] for k in LENGTHS},
        )
