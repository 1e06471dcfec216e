"""basic.consume and basic.cancel of an AMQP channel (cold methods).

Moved out of ``session.channel`` (the channel keeps publishing, confirms, deliveries'
settlement and the other cold methods): a consume goes to the direct reply-to pseudo-queue
(``session.direct_reply``), to a queue another cluster node leads (through its leader,
``session.remote``, or the copy of a replica this node holds), to a classic or quorum queue
(``session.classic.consumer``) or to a stream, whose consumer is set up here: its arguments,
its SQL filter and name (``stream.consume_setup``), its reader positioned before the
consume-ok, and the older consumers of its name retired once it is.

Each handler takes the channel and the decoded method, as the channel's dispatch table
(``channel._COLD``) calls it.
"""

from __future__ import annotations

import logging
import secrets
from typing import Any, Protocol

import pamqp.commands as spec

from sievemq.amqp import errors
from sievemq.gateway.model.classic.queue import ClassicQueue
from sievemq.gateway.model.stream.arguments import (
    auto_ack_not_supported,
    global_qos_not_supported,
    parse_consumer_arguments,
    prefetch_not_set,
)
from sievemq.gateway.model.stream.queue import StreamQueue
from sievemq.gateway.runtime.direct_replies import PSEUDO_QUEUE as REPLY_PSEUDO_QUEUE
from sievemq.gateway.session import direct_reply, queue_methods, remote
from sievemq.gateway.session.classic import consumer as classic_consumer
from sievemq.gateway.session.ports import DeliveryTarget
from sievemq.gateway.session.stream import named_consumers
from sievemq.gateway.session.stream.consume_setup import consumer_extras
from sievemq.gateway.session.stream.consumer import StreamConsumer, filter_spec, position_reader

log = logging.getLogger("sievemq.gateway.session.channel")  # (where these lived)


class ConsumeChannel(queue_methods.QueueChannel, DeliveryTarget, Protocol):
    """What consuming needs of its channel (``session.channel.Channel``)."""


def consume(channel: ConsumeChannel, m: Any) -> None:
    """basic.consume: to the queue's kind (above); a stream's consumer is made here."""
    if channel.remote is not None:  # a remote consumer's tags stop being the leader's
        channel.remote.leave_direct()
    if m.queue == REPLY_PSEUDO_QUEUE:  # before the read check, as RabbitMQ
        return direct_reply.consume(channel, m)
    vhost_name = channel.connection.vhost_name
    channel.allow("read", "queue", m.queue)
    queue_methods.locked_elsewhere(channel, m.queue)
    led = queue_methods.led_by(channel, m.queue)
    copy = None if led is None else remote.local_copy(led[0], vhost_name, m.queue, m.arguments)
    if led is not None and copy is None:
        return remote.consume(channel, *led, m)
    found = copy or channel.vhost.find_queue(m.queue)  # a replica's copy: read here
    if isinstance(found, ClassicQueue):
        return classic_consumer.consume(channel, found, m)
    return _consume_stream(channel, found, m)


def _consume_stream(channel: ConsumeChannel, queue: StreamQueue, m: Any) -> None:
    vhost_name = channel.connection.vhost_name
    options = parse_consumer_arguments(dict(m.arguments or {}), queue.name, vhost_name)
    if channel.prefetch <= 0:
        raise prefetch_not_set(queue.name, vhost_name)
    if m.no_ack:
        raise auto_ack_not_supported(queue.name, vhost_name)
    if channel.global_prefetch > 0:
        raise global_qos_not_supported(queue.name, vhost_name)
    tag = m.consumer_tag or "amq.ctag-" + secrets.token_urlsafe(16)
    if tag in channel.consumers:
        raise errors.NotAllowed(f"attempt to reuse consumer tag '{tag}'")
    stream = queue.stream
    node = channel.connection.node
    extras = consumer_extras(  # 406 on bad SQL
        options, stream, node.loop, (node.limits.max_sql_length, node.limits.max_sql_depth)
    )
    # newest wins, but only once the new consumer is positioned: a consume that fails
    # leaves the old one delivering. Its progress is saved first (resume reads it).
    previous: list[StreamConsumer] = []
    if options.consumer_name is not None:
        ours = [c for c in queue.consumers if isinstance(c, StreamConsumer)]
        previous = named_consumers.holders(ours, options.consumer_name)
        for old in previous:
            if old.tracker is not None:
                old.tracker.flush()
    reader = stream.reader()
    try:
        position_reader(reader, extras.start(options.offset))
    except BaseException:
        reader.close()
        raise
    _take_over_name(previous)
    consumer = StreamConsumer(
        channel,
        tag,
        queue,
        stream,
        reader,
        channel.prefetch,
        filter_spec(options),
        node.limits.delivery_batch,
        sql=extras.sql,
        predicate=extras.predicate,
        chunk_filter=extras.chunk_filter,
        tracker=extras.tracker(reader),
    )
    channel.consumers[tag] = consumer
    queue.consumers.add(consumer)
    node.watch(queue)
    if not m.nowait:
        channel.connection.send_method(channel.id, spec.Basic.ConsumeOk(consumer_tag=tag))
    consumer.start()


def _take_over_name(previous: list[StreamConsumer]) -> None:
    """Newest wins, once the new consumer is positioned (at their saved commit when it
    resumes): the older consumers of the name retire and are cancelled."""
    for old in previous:
        tracker = old.tracker
        if tracker is not None:
            log.info("consumer %s: name %r taken over by a new consume", old.tag, tracker.name)
            tracker.retire()
        old.cancel_by_server()


def cancel(channel: ConsumeChannel, m: Any) -> None:
    """basic.cancel: the channel's consumer of that tag stops (or its reply consumer)."""
    consumer = channel.consumers.pop(m.consumer_tag, None)
    if consumer is None:
        direct_reply.cancel(channel, m.consumer_tag)
    else:
        consumer.stop()
        consumer.queue.consumers.discard(consumer)
    if not m.nowait:
        channel.connection.send_method(channel.id, spec.Basic.CancelOk(consumer_tag=m.consumer_tag))
