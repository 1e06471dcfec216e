"""queue.declare, delete, bind, unbind and purge of an AMQP channel (cold methods).

Moved out of ``session.channel`` (the channel keeps publishing, confirms, consumers and the
other cold methods): what a queue method means on a single node is the broker model's
(``VirtualHost``), in a cluster a queue another node leads is declared, deleted and purged
on its leader (``session.remote``) and another node's exclusive queue is locked. ``led_by``,
``locked_elsewhere`` and ``on_classic_queue`` serve the channel's basic.get and basic.consume
as well.

Each handler takes the channel and the decoded method, as the channel's dispatch table
(``channel._COLD``) calls it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import pamqp.commands as spec

from sievemq.amqp import codec
from sievemq.amqp.errors import AMQPError
from sievemq.gateway.model.classic import vhost as classic_vhost
from sievemq.gateway.model.classic.queue import ClassicQueue
from sievemq.gateway.model.directory import Links, QueueDirectory, place_elsewhere
from sievemq.gateway.model.stream.arguments import purge_not_supported
from sievemq.gateway.session import direct_reply, remote
from sievemq.gateway.session.classic import consumer as classic_consumer


class QueueChannel(remote.Channel, classic_consumer.Channel, Protocol):
    """What the queue methods need of their channel (``session.channel.Channel``)."""

    reply_consumer: direct_reply.ReplyConsumer | None
    # while this channel deletes a queue: the basic.cancel of its own consumers on it,
    # sent after the delete-ok (RabbitMQ's order; py-amqp fails the delete otherwise)
    held_cancels: list[Any] | None

    def allow(self, kind: str, resource: str, name: str) -> None: ...


def led_by(channel: QueueChannel, name: str) -> tuple[QueueDirectory, str] | None:
    """The directory and the leader when another cluster node leads queue ``name``
    (None on a single node and for this node's own queues)."""
    directory = channel.connection.node.broker.directory
    if directory is None or not name:
        return None
    local = channel.connection.vhost
    if local is not None and (name in local.queues or name in local.classic.queues):
        return None
    leader = directory.leader_elsewhere(channel.connection.vhost_name, name)
    return None if leader is None else (directory, leader)


def locked_elsewhere(channel: QueueChannel, name: str) -> None:
    """405 RESOURCE_LOCKED for an exclusive queue another cluster node's connection
    owns, as RabbitMQ answers any connection but the owner."""
    directory = channel.connection.node.broker.directory
    if directory is None or not name or name in channel.vhost.classic.queues:
        return
    if directory.exclusive_elsewhere(channel.connection.vhost_name, name) is not None:
        raise classic_vhost.locked(name, channel.connection.vhost_name)


def declare(channel: QueueChannel, m: Any) -> None:
    if direct_reply.is_pseudo(m.queue):
        return direct_reply.declare(channel, m)
    if not m.passive and m.queue:
        channel.allow("configure", "queue", m.queue)
    locked_elsewhere(channel, m.queue)
    if _declared_elsewhere(channel, m) or _placed_elsewhere(channel, m):
        return
    classic_consumer.flush_before_declare(channel, m.queue)
    fresh = m.exclusive and not m.passive and m.queue not in channel.vhost.classic.queues
    queue, messages, consumers = channel.vhost.declare_queue(
        m.queue,
        passive=m.passive,
        durable=m.durable,
        exclusive=m.exclusive,
        auto_delete=m.auto_delete,
        arguments=dict(m.arguments or {}),
        owner=channel.connection,
    )
    node = channel.connection.node
    directory = node.broker.directory
    if fresh and directory is not None:  # the cluster learns the name is taken
        claimed = directory.claim_exclusive(channel.connection.vhost_name, queue.name)
        if claimed is not None:
            node.definitions_sync.also_wait(claimed)
    if not m.nowait:
        channel.connection.write_frames(  # after any queued replies
            [codec.encode_queue_declare_ok(channel.id, queue.name, messages, consumers)]
        )


def _declared_elsewhere(channel: QueueChannel, m: Any) -> bool:
    """A cluster queue another node leads exists: declare-ok (counts of 0: they are
    the leader's), as RabbitMQ answers on any node; nothing is made here. An exclusive
    declare of it is 405: it is nobody's exclusive queue (the cluster's are durable)."""
    if led_by(channel, m.queue) is None:
        return False
    if m.exclusive:
        raise classic_vhost.locked(m.queue, channel.connection.vhost_name)
    if not m.nowait:
        channel.connection.write_frames([codec.encode_queue_declare_ok(channel.id, m.queue, 0, 0)])
    return True


def _placed_elsewhere(channel: QueueChannel, m: Any) -> bool:
    """A new queue the ``balanced`` leader locator places on another cluster node:
    that node makes it, and the declare-ok (counts of 0) waits until it did."""
    if m.passive:
        return False
    args = dict(m.arguments or {})
    node = channel.connection.node
    placed = place_elsewhere(
        node.broker.directory, channel.vhost, m.queue, m.durable, m.exclusive, args
    )
    if placed is None:
        return False
    node.definitions_sync.also_wait(placed)
    if not m.nowait:
        channel.connection.write_frames([codec.encode_queue_declare_ok(channel.id, m.queue, 0, 0)])
    return True


def delete(channel: QueueChannel, m: Any) -> None:
    # the node's delete listener cancels consumers and nacks pending appends
    channel.allow("configure", "queue", m.queue)
    locked_elsewhere(channel, m.queue)
    led = led_by(channel, m.queue)
    if led is not None:  # deleted on its leader
        return remote.delete(channel, *led, m)
    classic_consumer.check_delete(channel, m.queue)
    channel.held_cancels = []
    try:
        count = channel.vhost.delete_queue(m.queue, if_unused=m.if_unused, if_empty=m.if_empty)
    finally:
        held, channel.held_cancels = channel.held_cancels, None
    if not m.nowait:
        channel.connection.send_method(
            channel.id, spec.Queue.DeleteOk(message_count=int(count or 0))
        )
    for cancel in held:
        channel.connection.send_method(channel.id, cancel)


def bind(channel: QueueChannel, m: Any) -> None:
    channel.allow("write", "queue", m.queue)
    channel.allow("read", "exchange", m.exchange)
    channel.vhost.bind("queue", m.queue, m.exchange, m.routing_key, dict(m.arguments or {}))
    if not m.nowait:
        channel.connection.send_method(channel.id, spec.Queue.BindOk())


def unbind(channel: QueueChannel, m: Any) -> None:
    channel.allow("write", "queue", m.queue)
    channel.allow("read", "exchange", m.exchange)
    channel.vhost.unbind("queue", m.queue, m.exchange, m.routing_key, dict(m.arguments or {}))
    channel.connection.send_method(channel.id, spec.Queue.UnbindOk())


def purge(channel: QueueChannel, m: Any) -> None:
    on_classic_queue(channel, m, remote.purge, classic_consumer.purge, purge_not_supported)


def on_classic_queue(
    channel: QueueChannel,
    m: Any,
    through_leader: Callable[[QueueChannel, Links, str, Any], None],
    here: Callable[[QueueChannel, ClassicQueue, Any], None],
    refusal: Callable[[str, str], AMQPError],
) -> None:
    """A method on the messages of a classic or quorum queue ``m.queue`` (queue.purge,
    basic.get): another node's exclusive queue is locked; one another node leads goes to
    its leader (read permission checked here); this node's is ``here``'s; a stream's is
    ``refusal`` (540: not on streams)."""
    locked_elsewhere(channel, m.queue)
    led = led_by(channel, m.queue)
    if led is not None:
        channel.allow("read", "queue", m.queue)
        return through_leader(channel, *led, m)
    queue = channel.vhost.find_queue(m.queue)
    if isinstance(queue, ClassicQueue):
        return here(channel, queue, m)
    raise refusal(queue.name, channel.connection.vhost_name)
