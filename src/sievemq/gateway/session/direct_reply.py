"""Direct reply-to on a channel, as RabbitMQ has it (RPC replies without a reply queue).

A channel consumes the pseudo-queue ``amq.rabbitmq.reply-to`` with no-ack (one such consumer
per channel); a message it publishes with ``reply-to: amq.rabbitmq.reply-to`` leaves with the
channel's own reply name in that property instead (``runtime.direct_replies``), and a reply
published to that name on the default exchange is written straight to the consumer. The
rules and reply texts are RabbitMQ 3.10.8's (checked side by side, docs/compatibility.md):

- ``queue.declare`` of the pseudo-queue (passive or not) answers declare-ok with 0 messages
  and 1 consumer; of a reply name, declare-ok while it is live, else 404;
- ``basic.consume`` with no-ack=false is 406 "reply consumer cannot acknowledge", a second
  reply consumer on the channel 406 "reply consumer already set";
- publishing with the pseudo-queue as reply-to before consuming it is 406 "fast reply
  consumer does not exist".

A reply to a live name is routed: confirmed, never returned. A reply to a name whose
channel or consumer is gone is unroutable (returned when mandatory; RabbitMQ 3.10.8 also
returns a mandatory reply it delivered, which SieveMQ does not). Cold path, except
``is_reply_name``'s prefix test on unroutable publishes and ``PSEUDO_BYTES`` (see channel).
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Any, Protocol

import pamqp.commands as spec

from sievemq.amqp import codec, errors, properties
from sievemq.amqp.methods import BASIC_PUBLISH
from sievemq.gateway.model.replies import rs
from sievemq.gateway.runtime.direct_replies import NAME_PREFIX, PSEUDO_BYTES, PSEUDO_QUEUE
from sievemq.gateway.session.classic.frames import ClassicDeliveryEncoder
from sievemq.gateway.session.ports import ChannelHost


class ReplyChannel(Protocol):
    """What the reply consumer needs of its channel (``session.channel.Channel``)."""

    connection: ChannelHost
    next_delivery_tag: int
    reply_consumer: ReplyConsumer | None

    @property
    def id(self) -> int: ...
    @property
    def closing(self) -> bool: ...
    @property
    def consumers(self) -> Mapping[str, object]: ...


class ReplyConsumer:
    """A channel's consumer of ``amq.rabbitmq.reply-to`` (a ``ReplyTarget``)."""

    __slots__ = ("_channel", "_encoder", "name", "tag")

    def __init__(self, channel: ReplyChannel, tag: str) -> None:
        self._channel = channel
        self.tag = tag
        conn = channel.connection
        self._encoder = ClassicDeliveryEncoder(channel.id, tag, conn.frame_max)
        self.name = conn.node.direct_replies.register(self, conn.id, channel.id)

    def deliver_reply(self, routing_key: str, properties: bytes, body: bytes) -> bool:
        channel = self._channel
        if channel.closing or channel.reply_consumer is not self:
            return False
        tag = channel.next_delivery_tag  # no-ack: nothing to settle, the tag only counts
        channel.next_delivery_tag = tag + 1
        out: list[bytes] = []
        self._encoder.encode(out, tag, False, "", routing_key, properties, body)
        channel.connection.write_frames(out)
        return True

    def retire(self) -> None:
        """The consumer is cancelled or its channel closed: its name is no longer routed."""
        self._channel.connection.node.direct_replies.unregister(self.name)


def is_pseudo(queue: str) -> bool:
    """A queue name the channel answers for itself (the pseudo-queue or a reply name)."""
    return queue == PSEUDO_QUEUE or queue.startswith(NAME_PREFIX)


def declare(channel: ReplyChannel, m: Any) -> None:
    """queue.declare of the pseudo-queue or of a reply name (passive or not, as RabbitMQ)."""
    conn = channel.connection
    name = m.queue
    if name != PSEUDO_QUEUE and conn.node.direct_replies.target(name) is None:
        raise errors.NotFound(f"no {rs('queue', name, conn.vhost_name)}")
    if not m.nowait:
        conn.write_frames([codec.encode_queue_declare_ok(channel.id, name, 0, 1)])


def consume(channel: ReplyChannel, m: Any) -> None:
    """basic.consume of the pseudo-queue: the channel's reply consumer (no-ack, one)."""
    tag = m.consumer_tag or "amq.ctag-" + secrets.token_urlsafe(16)
    if tag in channel.consumers:
        raise errors.NotAllowed(f"attempt to reuse consumer tag '{tag}'")
    if not m.no_ack:
        raise errors.PreconditionFailed("reply consumer cannot acknowledge")
    if channel.reply_consumer is not None:
        raise errors.PreconditionFailed("reply consumer already set")
    channel.reply_consumer = ReplyConsumer(channel, tag)
    if not m.nowait:
        channel.connection.send_method(channel.id, spec.Basic.ConsumeOk(consumer_tag=tag))


def cancel(channel: ReplyChannel, tag: str) -> bool:
    """basic.cancel: True when ``tag`` was the channel's reply consumer (now retired)."""
    consumer = channel.reply_consumer
    if consumer is None or consumer.tag != tag:
        return False
    consumer.retire()
    channel.reply_consumer = None
    return True


def rewrite(channel: ReplyChannel, props: bytes) -> bytes:
    """The property list a publish stores: a reply-to of exactly the pseudo-queue becomes
    the channel's reply name (406 when the channel has no reply consumer)."""
    try:
        if properties.reply_to(props) != PSEUDO_BYTES:
            return props  # the name was elsewhere (a header, another property)
    except errors.FrameError:
        return props  # malformed: the publish path reports it as for any message
    consumer = channel.reply_consumer
    if consumer is None:
        raise errors.PreconditionFailed("fast reply consumer does not exist", *BASIC_PUBLISH)
    return properties.replace_reply_to(props, consumer.name.encode())


def deliver(conn: ChannelHost, routing_key: str, props: bytes, body: bytes) -> bool:
    """A publish to the default exchange that no queue took: True when ``routing_key`` is a
    live reply name and the reply went to its consumer."""
    target = conn.node.direct_replies.target(routing_key)
    return target is not None and target.deliver_reply(routing_key, props, body)
