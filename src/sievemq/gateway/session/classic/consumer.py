"""Consume, get, ack/nack/reject, recover and purge on classic and quorum queues.

A ``ClassicConsumer`` sits in the channel's ``consumers`` and ``unacked`` beside stream
consumers (same tag space): it has ``give_credit``, ``wake``, ``stop`` and ``tracker`` (None).
Per channel, ``ClassicDeliveries`` keeps which queue message each outstanding delivery tag is,
so the channel's settle path can ack, requeue or reject it. Per queue, one dispatch runs per
loop tick: it hands ready messages to consumers that have credit, highest ``x-priority``
first, round-robin among equals (only the first consumer with ``x-single-active-consumer``),
and writes each channel's deliveries with one ``writelines``.
"""

from __future__ import annotations

import secrets
import time
from bisect import bisect_right
from typing import Any, Protocol

import pamqp.commands as spec

from sievemq.amqp import errors, properties
from sievemq.gateway.model.classic.arguments import consumer_priority
from sievemq.gateway.model.classic.message import QueueMessage
from sievemq.gateway.model.classic.queue import ClassicQueue
from sievemq.gateway.model.vhost import VirtualHost
from sievemq.gateway.session.classic.frames import ClassicDeliveryEncoder, encode_get_ok
from sievemq.gateway.session.ports import ChannelHost
from sievemq.storage import FilterSpec, FilterStats


class Channel(Protocol):
    """What classic-queue consuming needs of its channel (``session.channel.Channel``)."""

    id: int
    delivery_id: int
    connection: ChannelHost
    prefetch: int
    global_prefetch: int
    flow_active: bool
    next_delivery_tag: int
    unacked: dict[int, Any]
    consumers: dict[str, Any]
    classic: ClassicDeliveries | None

    @property
    def closing(self) -> bool: ...
    @property
    def vhost(self) -> VirtualHost: ...
    def wake_consumers(self) -> None: ...
    def cancel_consumer_by_server(self, consumer: Any) -> None: ...
    def write_deliveries(self, data: bytes) -> None: ...


_BUDGET = 512  # deliveries per dispatch turn before yielding to the loop


class _GetHolder:
    """The ``unacked`` entry of a basic.get delivery: no consumer, no credit."""

    tracker = None

    def give_credit(self, n: int) -> None:
        return None

    def count_acks(self, n: int) -> None:
        return None  # the queue counted them when it settled


GET_HOLDER = _GetHolder()


class ClassicConsumer:
    """One basic.consume on a classic or quorum queue."""

    __slots__ = (
        "_encoder",
        "active",
        "channel",
        "credit",
        "delivered",
        "exclusive",
        "no_ack",
        "prefetch",
        "priority",
        "queue",
        "tag",
        "tracker",
    )

    def __init__(
        self,
        channel: Channel,
        tag: str,
        queue: ClassicQueue,
        prefetch: int,
        no_ack: bool,
        exclusive: bool,
        priority: int,
    ) -> None:
        self.channel = channel
        self.tag = tag
        self.queue = queue
        self.prefetch = prefetch
        self.credit = prefetch
        self.no_ack = no_ack
        self.exclusive = exclusive
        self.priority = priority
        self.active = True
        self.delivered = 0
        self.tracker = None
        self._encoder: ClassicDeliveryEncoder | None = None

    # model.stream.queue.ConsumerInfo (what the node and the admin views see)

    @property
    def connection_id(self) -> int:
        return self.channel.connection.id

    @property
    def channel_id(self) -> int:
        return self.channel.id

    @property
    def spec(self) -> FilterSpec | None:
        return None

    def filter_stats(self) -> FilterStats:
        return FilterStats(messages_delivered=self.delivered)

    def cancel_by_server(self) -> None:
        self.channel.cancel_consumer_by_server(self)

    def count_acks(self, n: int) -> None:
        return None  # the queue counted them when it settled

    def give_credit(self, n: int) -> None:
        if self.prefetch:
            self.credit = min(self.prefetch, self.credit + n)
        self.wake()

    def wake(self) -> None:
        if self.active:
            self.queue.on_ready()

    def can_take(self) -> bool:
        if not self.active:
            return False
        channel = self.channel
        if channel.closing or not channel.flow_active:
            return False
        conn = channel.connection
        if conn.writing_paused or not conn.can_write():
            return False
        if self.no_ack:
            return True
        if self.prefetch and self.credit <= 0:
            return False
        limit = channel.global_prefetch
        return not (limit and deliveries_of(channel).count >= limit)

    def room(self, most: int) -> int:
        """How many deliveries in a row this consumer may take now (``can_take`` was true),
        at most ``most``."""
        if self.no_ack:
            return most
        if self.prefetch:
            most = min(most, self.credit)
        limit = self.channel.global_prefetch
        if limit:
            most = min(most, limit - deliveries_of(self.channel).count)
        return max(most, 1)

    def deliver(
        self, msg: QueueMessage, out: list[bytes], settled: list[QueueMessage] | None = None
    ) -> None:
        """Encode one delivery into ``out``. Without acks the message is done: it goes to
        ``settled`` (the caller settles them together) or is settled at once."""
        channel = self.channel
        tag = channel.next_delivery_tag
        channel.next_delivery_tag = tag + 1
        encoder = self._encoder
        frame_max = channel.connection.frame_max
        if encoder is None or encoder.frame_max != frame_max:
            encoder = self._encoder = ClassicDeliveryEncoder(
                channel.delivery_id, self.tag, frame_max
            )
        props = msg.properties
        if self.queue.kind == "quorum" and msg.delivery_count:
            props = _with_delivery_count(props, msg.delivery_count)
        encoder.encode(out, tag, msg.redelivered, msg.exchange, msg.routing_key, props, msg.body)
        self.delivered += 1
        if self.no_ack:
            self.queue.delivered_no_ack += 1
            if settled is not None:
                settled.append(msg)
            else:
                self.queue.ack([msg], client=False)
            return
        channel.unacked[tag] = self
        classic = channel.classic
        if classic is None:
            classic = deliveries_of(channel)
        classic.pending[tag] = (self.queue, msg)
        if self.prefetch:
            self.credit -= 1

    def stop(self) -> None:
        if not self.active:
            return
        self.active = False
        queue = self.queue
        queue.consumers.discard(self)
        queue.consumer_removed()
        if queue.consumers:
            queue.on_ready()  # a single active consumer's successor, or the others


def _with_delivery_count(props: bytes, count: int) -> bytes:
    return properties.splice_long_header(props, "x-delivery-count", count)


class ClassicDeliveries:
    """The outstanding classic-queue deliveries of one channel, by delivery tag."""

    __slots__ = ("channel", "pending")

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.pending: dict[int, tuple[ClassicQueue, QueueMessage]] = {}

    @property
    def count(self) -> int:
        return len(self.pending)

    def settle(self, tag: int, multiple: bool, finished: bool, method_id: int) -> None:
        """Ack (80), reject/nack without requeue (dead-letter), or requeue (not finished)."""
        pending = self.pending
        if not pending:
            return
        if multiple:
            if not tag:
                taken = list(pending.values())
                pending.clear()
            else:  # tags were added in increasing order: the settled ones are a prefix
                keys = list(pending)
                taken = [pending.pop(key) for key in keys[: bisect_right(keys, tag)]]
        else:
            got = pending.pop(tag, None)
            if got is None:
                return
            taken = [got]
        if not taken:
            return
        by_queue: dict[ClassicQueue, list[QueueMessage]] = {}
        first = taken[0][0]
        if all(queue is first for queue, _ in taken):
            by_queue[first] = [msg for _, msg in taken]
        else:
            for queue, msg in taken:
                by_queue.setdefault(queue, []).append(msg)
        for queue, msgs in by_queue.items():
            if not finished:
                queue.requeue(msgs)
            elif method_id == 80:
                queue.ack(msgs)
            else:
                queue.reject(msgs)
        if self.channel.global_prefetch:
            self.channel.wake_consumers()

    def release(self) -> None:
        """The channel closed: every outstanding delivery goes back to its queue."""
        if self.pending:
            last = next(reversed(self.pending))
            self.settle(last, True, False, 0)


def deliveries_of(channel: Channel) -> ClassicDeliveries:
    got = channel.classic
    if got is None:
        got = channel.classic = ClassicDeliveries(channel)
    return got


# ---------------------------------------------------------------------------- dispatch


def hook(queue: ClassicQueue, channel: Channel) -> None:
    """Give the queue its dispatch scheduler on this event loop (once)."""
    if getattr(queue.on_ready, "__self__", None) is not None:
        return
    loop = channel.connection.node.loop
    queue.on_ready = _Dispatcher(queue, loop).schedule


class _Dispatcher:
    __slots__ = ("_loop", "_scheduled", "_timer", "queue")

    def __init__(self, queue: ClassicQueue, loop: Any) -> None:
        self.queue = queue
        self._loop = loop
        self._scheduled = False
        self._timer: Any = None

    def schedule(self) -> None:
        if not self._scheduled and not self.queue.deleted:
            self._scheduled = True
            self._loop.call_soon(self.run)

    def run(self) -> None:
        self._scheduled = False
        queue = self.queue
        if queue.deleted or not queue.consumers:
            return
        outs: dict[Channel, list[bytes]] = {}
        budget = _BUDGET
        items = queue.consumers.items
        if queue.arguments.single_active_consumer:
            candidates = items[:1]
        else:
            candidates = sorted(items, key=_neg_priority) if _mixed(items) else items
        alone = len(candidates) == 1
        take = queue.take
        settled: list[QueueMessage] = []  # deliveries without acks: one ack record write
        while budget and queue.has_ready:
            consumer = _pick(queue, candidates)
            if consumer is None:
                break
            channel = consumer.channel
            out = outs.get(channel)
            if out is None:
                out = outs[channel] = []
            # round-robin is per message; a lone consumer takes what its credit allows
            n = consumer.room(budget) if alone else 1
            deliver = consumer.deliver
            for _ in range(n):
                msg = take(True)
                if msg is None:
                    break
                deliver(msg, out, settled)
            else:
                budget -= n
                continue
            break
        if outs:
            queue.flush_delivered()  # the delivered mark is on disk before anything is sent
        if settled:
            queue.ack(settled, client=False)
        for channel, out in outs.items():
            if out:
                channel.write_deliveries(b"".join(out))
        if not budget:
            self.schedule()
        self._arm_expiry()

    def _arm_expiry(self) -> None:
        """Messages with a TTL wait at the head: come back when the first one expires."""
        expiry = self.queue.next_expiry()
        if expiry is None or self._timer is not None:
            return
        delay = max(0.0, expiry / 1000 - time.time()) + 0.001
        self._timer = self._loop.call_later(delay, self._expire)

    def _expire(self) -> None:
        self._timer = None
        if self.queue.deleted:
            return
        self.queue.expire()
        self._arm_expiry()


def _neg_priority(consumer: ClassicConsumer) -> int:
    return -consumer.priority


def _mixed(items: list[ClassicConsumer]) -> bool:
    return any(c.priority != items[0].priority for c in items)


def _pick(queue: ClassicQueue, candidates: list[ClassicConsumer]) -> ClassicConsumer | None:
    """The next consumer with room: the highest priority group first, round-robin inside."""
    n = len(candidates)
    if not n:
        return None
    consumers = queue.consumers
    start = consumers.cursor
    best: ClassicConsumer | None = None
    best_i = 0
    for step in range(n):
        i = (start + step) % n
        c = candidates[i]
        if (best is None or c.priority > best.priority) and c.can_take():
            best, best_i = c, i
            if c.priority == candidates[0].priority:
                break
    if best is not None:
        consumers.cursor = best_i + 1
    return best


# ---------------------------------------------------------------------------- methods


def consume(channel: Channel, queue: ClassicQueue, m: Any) -> None:
    """basic.consume on a classic/quorum queue."""
    vhost = channel.vhost
    vhost.classic.check_owner(queue, channel.connection)
    arguments = dict(m.arguments or {})
    priority = consumer_priority(arguments, queue.name, vhost.name)
    vhost.classic.check_exclusive_consumer(queue, bool(m.exclusive))
    tag = m.consumer_tag or "amq.ctag-" + secrets.token_urlsafe(16)
    if tag in channel.consumers:
        raise errors.NotAllowed(f"attempt to reuse consumer tag '{tag}'")
    consumer = ClassicConsumer(
        channel, tag, queue, channel.prefetch, bool(m.no_ack), bool(m.exclusive), priority
    )
    channel.consumers[tag] = consumer
    queue.consumers.add(consumer)
    queue.consumer_added()
    channel.connection.node.watch(queue)
    hook(queue, channel)
    if not m.nowait:
        channel.connection.send_method(channel.id, spec.Basic.ConsumeOk(consumer_tag=tag))
    queue.on_ready()


def get(channel: Channel, queue: ClassicQueue, m: Any) -> None:
    """basic.get: get-ok with the ready count left, or get-empty."""
    channel.vhost.classic.check_owner(queue, channel.connection)
    channel.connection.node.flush_classic(queue)
    queue.last_used_ms = _now_ms()
    msg = queue.take()
    conn = channel.connection
    if msg is None:
        queue.get_empty += 1
        conn.send_method(channel.id, spec.Basic.GetEmpty())
        return
    if m.no_ack:
        queue.got_no_ack += 1
    else:
        queue.got += 1
    tag = channel.next_delivery_tag
    channel.next_delivery_tag = tag + 1
    props = msg.properties
    if queue.kind == "quorum" and msg.delivery_count:
        props = _with_delivery_count(props, msg.delivery_count)
    frames = encode_get_ok(
        channel.id,
        tag,
        msg.redelivered,
        msg.exchange,
        msg.routing_key,
        queue.message_count,
        props,
        msg.body,
        conn.frame_max,
    )
    if m.no_ack:
        queue.ack([msg], client=False)
    else:
        channel.unacked[tag] = GET_HOLDER
        deliveries_of(channel).pending[tag] = (queue, msg)
    conn.write_frames(frames)


def purge(channel: Channel, queue: ClassicQueue, m: Any) -> None:
    channel.vhost.classic.check_owner(queue, channel.connection)
    channel.connection.node.flush_classic(queue)
    count = queue.purge()
    if not m.nowait:
        channel.connection.send_method(channel.id, spec.Queue.PurgeOk(message_count=count))


def check_delete(channel: Channel, name: str) -> None:
    """queue.delete of an exclusive queue from another connection: 405. Otherwise what
    this tick's publishes left buffered for the queue is enqueued first, so the delete-ok's
    message count includes them (as in RabbitMQ)."""
    queue = channel.vhost.classic.queues.get(name)
    if queue is not None:
        channel.vhost.classic.check_owner(queue, channel.connection)
        channel.connection.node.flush_classic(queue)


def flush_before_declare(channel: Channel, name: str) -> None:
    """queue.declare of an existing classic or quorum queue (passive or not): what this
    tick's publishes left buffered for it is enqueued first, so the declare-ok's message
    count includes every publish the channels sent before it."""
    queue = channel.vhost.classic.queues.get(name)
    if queue is not None:
        channel.connection.node.flush_classic(queue)


def _now_ms() -> int:
    return int(time.time() * 1000)
