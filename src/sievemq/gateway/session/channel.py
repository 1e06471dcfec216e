"""One AMQP channel: content assembly, publishing, confirms, consumers and the cold methods
(the queue methods are ``session.queue_methods``, basic.consume and basic.cancel
``session.consume_methods``).

HOT PATH: Basic.Publish + content header + body frames, Basic.Ack/Nack/Reject are decoded by
the hand codec (no pamqp), a finished message is routed and handed to the stream's group-commit
appender; confirms are settled into a ``ConfirmTracker`` and flushed once per loop tick.
Everything else is decoded by pamqp and delegated to the broker model. Errors are raised as
``sievemq.amqp.errors`` and mapped to the wire by the connection, in one place.

The channel's phase is an ``amqp.states.ChannelState``: every method the hot path does not
take, and every frame out of its phase, goes through that table (open/close handshake, which
methods a phase accepts, the reply code). The hot path performs the table's three content
transitions inline (publish, header, last body frame) so that no frame costs a call;
``tests/unit/test_gateway/test_session/test_state_tables.py`` checks both paths give the same
replies.
"""

from __future__ import annotations

import logging
import struct
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable
from functools import partial
from operator import itemgetter
from typing import Any

import pamqp.commands as spec

from sievemq.amqp import codec, errors, frames, hotcodec, properties, states
from sievemq.amqp.hotcodec import BASIC_CONTENT_CLASS, CONTENT_HEADER_FIELDS
from sievemq.amqp.methods import (
    BASIC_PUBLISH,
    CLASS_BASIC,
    METHOD_ACK,
    METHOD_NACK,
    METHOD_PUBLISH,
    METHOD_REJECT,
)
from sievemq.amqp.states import ChannelPhase, ChannelState, Next
from sievemq.gateway.model.remote import RemoteQueue
from sievemq.gateway.model.stream import dedup
from sievemq.gateway.model.stream.arguments import (
    get_not_supported,
)
from sievemq.gateway.model.stream.queue import StreamQueue
from sievemq.gateway.model.vhost import AnyQueue, RemoteLookup, VirtualHost
from sievemq.gateway.runtime.classic.appender import ClassicAppender
from sievemq.gateway.runtime.definitions_sync import sync_failure, when_synced
from sievemq.gateway.runtime.direct_replies import NAME_PREFIX as REPLY_NAME_PREFIX
from sievemq.gateway.runtime.direct_replies import PSEUDO_BYTES as REPLY_PSEUDO_BYTES
from sievemq.gateway.runtime.stream.appender import StreamAppender
from sievemq.gateway.session import (
    access,
    consume_methods,
    direct_reply,
    publish_cache,
    queue_methods,
    raw_publish,
    remote,
    transactions,
)
from sievemq.gateway.session.classic import consumer as classic_consumer
from sievemq.gateway.session.confirms import ConfirmTracker
from sievemq.gateway.session.ports import ChannelConsumer, ChannelHost
from sievemq.storage import Message
from sievemq.storage.types import KIND_AMQP091

log = logging.getLogger(__name__)

Appender = StreamAppender | ClassicAppender | RemoteQueue  # a queue's writer

_tag_of = itemgetter(0)
_body_size = struct.Struct(">Q").unpack_from
_new_message = tuple.__new__  # Message(...) without the NamedTuple constructor's call
_consumer_of = itemgetter(1)

FILTER_HEADER = publish_cache.FILTER_HEADER
_known_publish = publish_cache.known_publish  # memo hits only: None when not known
_FRAME_HEADER = frames.FRAME_HEADER
_FRAME_BODY = frames.FRAME_BODY
_MIN_CONTENT_HEADER = CONTENT_HEADER_FIELDS + 2  # + the first property flag word
_AMQP091 = KIND_AMQP091  # the record kind of every AMQP publish
_APPENDERS_MAX = 64  # queues whose writers a channel remembers

_OPEN = ChannelPhase.OPEN
_AWAIT_HEADER = ChannelPhase.AWAIT_HEADER
_AWAIT_BODY = ChannelPhase.AWAIT_BODY
_CLOSING = ChannelPhase.CLOSING
_CLOSED = ChannelPhase.CLOSED
_PUBLISH_CLASS = states.CONTENT_METHODS[BASIC_PUBLISH]
# the publish arguments before the first publish: every publish stores a new tuple, so
# ``_pub is not _NOT_PUBLISHED`` tells a publishing channel at no cost per message
_NOT_PUBLISHED: tuple[str, str, bool] = ("", "", False)


class Channel:
    """Channel state; frames arrive through ``on_frame`` from the connection.

    It is the ``ports.DeliveryTarget`` of its consumers and talks to its connection as a
    ``ports.ChannelHost``."""

    # Slots, not an instance dict: CPython 3.11 keeps an instance's attributes in the
    # class's shared-key table only up to 30 names; past it every ``self.x`` of the publish
    # path takes the slower dict lookup (+15 instructions each; 31 names cost the single
    # node's publish path 2-3 %). A slot is read at a fixed offset, whatever their number.
    # A new attribute goes here (a subclass without slots gets a dict for its own).
    __slots__ = (
        "_appenders",
        "_buffered",
        "_committing",
        "_confirm_flush",
        "_definitions_sync",
        "_known_properties",
        "_max_message_size",
        "_max_pending_content",
        "_may_write",
        "_node",
        "_parts",
        "_props",
        "_pub",
        "_remote",
        "_table_limits",
        "backlog",
        "classic",
        "confirm",
        "connection",
        "consumers",
        "delivery_id",
        "flow_active",
        "global_prefetch",
        "held_cancels",
        "id",
        "next_delivery_tag",
        "prefetch",
        "raw_misses",
        "raw_route",
        "raw_tried",
        "remote",
        "reply_consumer",
        "state",
        "tx",
        "unacked",
    )

    def __init__(self, connection: ChannelHost, state: ChannelState) -> None:
        self.connection = connection
        self.id = state.channel
        self.delivery_id = self.id  # a relay link channel's is its client's (session.peer)
        self.state = state  # the phase (opened by the connection through the same table)
        state.content_class = _PUBLISH_CLASS  # the one content method, published inline
        self.consumers: dict[str, ChannelConsumer] = {}
        self.reply_consumer: direct_reply.ReplyConsumer | None = None  # amq.rabbitmq.reply-to
        # while this channel deletes a queue: the basic.cancel of its own consumers on it,
        # sent after the delete-ok (RabbitMQ's order; py-amqp fails the delete otherwise)
        self.held_cancels: list[Any] | None = None
        self.unacked: dict[int, ChannelConsumer] = {}
        self.classic: classic_consumer.ClassicDeliveries | None = None  # classic-queue deliveries
        self.remote: remote.RemoteDeliveries | None = None  # of queues other nodes lead
        self.tx: transactions.Transaction | None = None  # after tx.select
        self._committing = False  # within tx.commit (its publishes are stored at once)
        self.next_delivery_tag = 1
        self.prefetch = 0  # per-consumer (basic.qos global=false)
        self.global_prefetch = 0
        self.flow_active = True
        self.confirm: ConfirmTracker | None = None
        self._confirm_flush = False
        self._pub = _NOT_PUBLISHED
        self._props = b""
        self._parts: list[bytes] = []
        self._buffered = 0  # body bytes of the unfinished message, counted in pending_content
        self._may_write: set[str] = set()  # exchanges this channel may publish to
        # the node and its limits are fixed for the server's life (``Limits`` is frozen):
        # held here so the publish path reads one attribute, not ``connection.node.limits.x``
        self._node = node = connection.node
        limits = node.limits
        self._max_message_size = limits.max_message_size
        self._max_pending_content = limits.max_pending_content_bytes
        self._table_limits = limits.tables
        # the property memo of these limits (memo hits only: None when not known)
        self._known_properties: Callable[[bytes], tuple[str, ...] | None] = (
            publish_cache.properties_memo(limits.tables).get
        )
        self._appenders: dict[Any, Appender] = {}  # see ``_appender``
        # in a cluster: the queues of this vhost that other nodes lead, for routing (their
        # ``RemoteQueue`` forwards what is routed to them); None on a single node
        directory = getattr(node.broker, "directory", None)  # (test doubles have none)
        self._remote: RemoteLookup | None = (
            partial(directory.remote_queue, connection.vhost_name)
            if directory is not None
            else None
        )
        # in a cluster: this channel's publishes passed to one remote queue's leader as they
        # came (``session.raw_publish``), and the publish method last found not to route so
        self.raw_route: raw_publish.RawRoute | None = None
        self.raw_tried = b""
        self.raw_misses = 0  # publishes found not to route so (tries stop at RAW_TRIES)
        # while a definitions change of this channel is being fdatasynced (in a worker
        # thread): the frames received since, handled once it is on disk (``_cold_method``)
        self.backlog: list[tuple[int, bytes]] | None = None
        self._definitions_sync = node.definitions_sync

    @property
    def forwards(self) -> bool:
        """Whether publishes may go to queues other cluster nodes lead (a cluster link's
        channels turn it off: the node at the other end routed them already)."""
        return self._remote is not None

    @forwards.setter
    def forwards(self, value: bool) -> None:
        if not value:
            self._remote = None

    @property
    def closing(self) -> bool:
        """True once we sent channel.close or the channel is gone: nothing more is sent."""
        phase = self.state.phase
        return phase is _CLOSING or phase is _CLOSED

    @property
    def has_published(self) -> bool:
        """True once a basic.publish arrived on this channel (resource alarms block it)."""
        return self._pub is not _NOT_PUBLISHED

    @property
    def vhost(self) -> VirtualHost:
        vhost = self.connection.vhost
        assert vhost is not None
        return vhost

    # ----------------------------------------------------------------------- frames

    def on_frame(self, ftype: int, payload: bytes) -> None:
        state = self.state
        phase = state.phase
        if ftype == frames.FRAME_METHOD:
            cid, mid = hotcodec.method_id(payload)
            if cid == CLASS_BASIC and phase is _OPEN:
                if mid == METHOD_PUBLISH:
                    self._publish(payload)
                    state.phase = _AWAIT_HEADER  # the table's publish transition, inline
                    return
                if mid == METHOD_ACK:
                    ack = hotcodec.decode_basic_ack(payload)
                    self._settle_deliveries(ack.delivery_tag, ack.multiple)
                    return
                if mid == METHOD_NACK:
                    nack = hotcodec.decode_basic_nack(payload)
                    finished = not nack.requeue
                    self._settle_deliveries(nack.delivery_tag, nack.multiple, finished, mid)
                    return
                if mid == METHOD_REJECT:
                    reject = hotcodec.decode_basic_reject(payload)
                    self._settle_deliveries(reject.delivery_tag, False, not reject.requeue, mid)
                    return
            self._cold_method(cid, mid, payload)
        elif ftype == frames.FRAME_BODY:
            if phase is not _AWAIT_BODY:
                state.out_of_phase(ftype)  # the table: 505, 504, or discard while closing
                return
            size = len(payload)
            remaining = state.remaining - size
            if remaining < 0:
                state.receive_body(size)  # the table's 505: more body than declared
            self._parts.append(payload)
            conn = self.connection
            if remaining:
                state.remaining = remaining
                self._buffered += size
                conn.pending_content += size
                if conn.pending_content > self._max_pending_content:
                    raise _pending_content_error(self._max_pending_content)
                return
            conn.pending_content -= self._buffered
            self._buffered = 0
            state.phase = _OPEN  # the table's last-body-frame transition, inline
            parts = self._parts
            self._parts = []
            self._complete(parts[0] if len(parts) == 1 else b"".join(parts))
            self.connection.counters.received += 1  # (the fast path counts its own)
        elif phase is _AWAIT_HEADER:
            self._content_header(payload)
        else:
            state.out_of_phase(ftype)  # a header out of phase: 505, 504, or discard

    def _cold_method(self, cid: int, mid: int, payload: bytes) -> None:
        """Every method but the hot publish/ack/nack/reject: the channel table decides first."""
        self.connection.route_stamp += 1  # it may change routing (``session.raw_publish``)
        if self.state.receive_method((cid, mid)) is Next.DISCARD:
            return  # we closed the channel and wait for close-ok
        method = codec.decode_method(payload, self._table_limits)
        definitions = self._definitions_sync
        began = definitions.begin()
        conn = self.connection
        mark = conn.begin_capture()
        done = False
        try:
            _COLD[type(method)](self, method)  # one handler per method the table dispatches
            done = True
        except errors.AMQPError as error:
            if not error.class_id:
                error.class_id, error.method_id = cid, mid
            raise
        finally:
            pending = definitions.end(began)
            held = conn.end_capture(mark, done and pending is not None)
            if done and pending is not None:
                self._hold(pending, held)

    def _reply_elsewhere(self, name: str, props: bytes, body: bytes) -> bool:
        """A direct reply whose requester is on another cluster node: forwarded there."""
        directory = self._node.broker.directory
        if directory is None or not self.forwards:
            return False  # (a reply that came over the link is not sent on again)
        return directory.forward_reply(self.connection.vhost_name, name, props, body)

    def _hold(self, pending: Any, held: list[bytes]) -> None:
        """The method changed durable definitions: its reply (``held``) and every frame of
        this channel after it wait until the change is on disk, fdatasynced in a worker
        thread; the event loop and the other channels go on meanwhile."""
        self.backlog = []

        def synced(error: BaseException | None) -> None:
            backlog, self.backlog = self.backlog or [], None
            if error is not None:
                self.connection.close(sync_failure(error))
                self.connection.flush()
                return
            self.connection.resume_channel(self, held, backlog)

        when_synced(pending, synced)

    # ----------------------------------------------------------------------- publishing

    def _publish(self, payload: bytes) -> None:
        publish = hotcodec.decode_basic_publish(payload)
        if publish.immediate:
            raise errors.NotImplemented_("immediate=true", *BASIC_PUBLISH)
        self._pub = (publish.exchange, publish.routing_key, publish.mandatory)

    def _content_header(self, payload: bytes) -> None:
        try:
            class_id, size, props = hotcodec.decode_content_header(payload, self._table_limits)
        except errors.PreconditionFailed as error:  # a headers table past a limit
            error.class_id, error.method_id = BASIC_PUBLISH  # nothing of this message is stored
            raise
        state = self.state
        if class_id != _PUBLISH_CLASS or size > self._max_message_size:
            state.receive_header(class_id, size)  # the table's 505 / 406
        if REPLY_PSEUDO_BYTES in props:  # maybe reply-to: amq.rabbitmq.reply-to (never memoised)
            props = direct_reply.rewrite(self, props)
        self._props = props
        if size == 0:
            state.phase = _OPEN  # the table's header transitions, inline
            self._complete(b"")
            self.connection.counters.received += 1
        else:
            state.remaining = size
            state.phase = _AWAIT_BODY

    def publish_fast(self, method: bytes, header: frames.Frame, body: frames.Frame) -> bool:
        """Publish + header + one body frame in one call (the common case).

        Returns False, having changed nothing, when anything is unusual; the connection
        then feeds the three frames through ``on_frame`` one by one as usual.
        """
        if self.state.phase is not _OPEN:
            return False
        htype, hchannel, hpayload = header
        btype, bchannel, bpayload = body
        if (
            htype != _FRAME_HEADER
            or btype != _FRAME_BODY
            or hchannel != self.id
            or bchannel != self.id
        ):
            return False
        size = len(bpayload)
        if (
            len(hpayload) < _MIN_CONTENT_HEADER
            or hpayload[:2] != BASIC_CONTENT_CLASS
            or _body_size(hpayload, 4)[0] != size
        ):
            return False  # not class 60, several body frames, or a size mismatch to report
        if size > self._max_message_size:
            return False
        # the memo lookups inline (a repeated publish or property list costs a dict get,
        # not a call); a miss decodes and checks, and None sends us the slow way
        pub = _known_publish(method) or publish_cache.publish_args(method)
        if pub is None:
            return False
        props = hpayload[CONTENT_HEADER_FIELDS:]
        values = self._known_properties(props)
        if values is None:
            values = publish_cache.new_property_filter_values(props, self._table_limits)
            if values is None:
                return False
        self._pub = pub
        self._props = props
        self._complete(bpayload, values)
        remote_lookup = self._remote
        if remote_lookup is not None and self.raw_route is None and method != self.raw_tried:
            self._try_raw(method, pub, remote_lookup)
        return True

    def _try_raw(self, method: bytes, pub: tuple[str, str, bool], remote: RemoteLookup) -> None:
        """In a cluster, after an ordinary publish of new method bytes: may the next ones go
        raw (``session.raw_publish``)? A channel stops asking after ``RAW_TRIES`` publishes
        that did not route so (a publisher of ever new routing keys to local queues would
        route each one twice), and asks once per method bytes."""
        if self.raw_misses < raw_publish.RAW_TRIES:
            self.raw_tried = method
            self.raw_route = raw_publish.enter(self, method, pub, remote)
            if self.raw_route is None:
                self.raw_misses += 1

    def _complete(self, body: bytes, values: tuple[str, ...] | None = None) -> None:
        """Route and store a whole message (the channel is back in the open phase)."""
        if self.tx is not None:  # held until tx.commit
            self.tx.publishes.append((self._pub, self._props, body))
            return
        exchange, routing_key, mandatory = self._pub
        if exchange not in self._may_write:  # RabbitMQ checks write before the lookup
            self._allow_write(exchange)
        props = self._props
        if values is None:
            try:
                values = publish_cache.filter_values(props)
            except errors.PreconditionFailed as error:
                error.class_id, error.method_id = BASIC_PUBLISH  # nothing of it is stored
                raise
        vhost = self.connection.vhost
        assert vhost is not None
        try:
            queues = vhost.route(exchange, routing_key, lambda: headers_of(props), self._remote)
        except errors.AMQPError as error:  # missing or internal exchange: basic.publish failed
            error.class_id, error.method_id = BASIC_PUBLISH
            raise
        confirm = self.confirm
        if not queues:
            if (
                not exchange
                and routing_key.startswith(REPLY_NAME_PREFIX)
                and (
                    direct_reply.deliver(self.connection, routing_key, props, body)
                    or self._reply_elsewhere(routing_key, props, body)
                )
            ):  # a direct reply went straight to its requester: routed, never returned
                if confirm is not None:
                    confirm.take(0)
                    self._schedule_confirms()
                return
            counters = self.connection.counters
            if mandatory:
                counters.returned_unroutable += 1
                conn = self.connection
                conn.write_frames(
                    hotcodec.encode_return(
                        self.id,
                        312,
                        "NO_ROUTE",
                        exchange,
                        routing_key,
                        props,
                        body,
                        conn.frame_max,
                    )
                )
            else:
                counters.dropped_unroutable += 1
            if confirm is not None:
                confirm.take(0)
                self._schedule_confirms()
            return
        self.store(queues, body, values)

    def store(self, queues: list[Any], body: bytes, values: tuple[str, ...]) -> None:
        """Store this publish (``_pub``, ``_props``) into ``queues``, every one of them this
        node's, none left: dedup, the message, its confirm's number, each queue's writer. A
        client's publish routed here and a link channel's (``session.peer``) end the same."""
        props = self._props
        if dedup.MARKER in props:  # a deduplicated publish (gateway/model/stream/dedup.py)
            kept = self.deduplicated(queues, body, values)
            if kept is None:
                return
            queues = kept
        exchange, routing_key, _ = self._pub
        message = _new_message(Message, (values, exchange, routing_key, props, body, _AMQP091))
        appenders = self._appenders
        confirm = self.confirm
        if confirm is None:
            for queue in queues:
                (appenders.get(queue) or self._appender(queue)).submit(message, None, 0)
            return
        if len(queues) == 1:  # ConfirmTracker.take(1) inline: one append reports for it
            seq = confirm.next_seq
            confirm.next_seq = seq + 1
        else:
            seq = confirm.take(len(queues))
        for queue in queues:
            (appenders.get(queue) or self._appender(queue)).submit(message, self, seq)

    def _appender(self, queue: AnyQueue | RemoteQueue) -> Appender:
        """The node's writer of ``queue``, remembered by this channel (a dict get per
        publish instead of a call). A deleted queue is never routed to again, so what is
        remembered of it is only dropped (with everything, past ``_APPENDERS_MAX`` queues)."""
        appenders = self._appenders
        if len(appenders) >= _APPENDERS_MAX:
            appenders.clear()
        appender = appenders[queue] = self._node.appender(queue)
        return appender

    def deduplicated(self, queues: list[Any], body: bytes, values: Any) -> list[Any] | None:
        """A publish that carries a publisher id: the routed queues that do not hold it yet,
        or None when it is handled here (it waits for a stream's sequences and is handled
        again then, or it is a duplicate everywhere: confirmed, stored nowhere)."""
        if self._wait_for_sequences(queues, body, values):
            return None
        kept = self._not_duplicate(queues, self._props)
        if not kept:
            confirm = self.confirm
            if confirm is not None:
                # a replicated stream's leader confirms a duplicate once its first copy is
                # committed (cluster.md, commit by majority); any other stream at once
                gated = [q for q in queues if isinstance(q, StreamQueue) and q.stream.gated]
                seq = confirm.take(len(gated))
                for queue in gated:
                    appender = self._appender(queue)
                    assert isinstance(appender, StreamAppender)
                    appender.confirm_duplicates(self, [seq])
                if not gated:
                    self._schedule_confirms()
            return None
        return kept

    def _wait_for_sequences(self, queues: list[Any], body: bytes, values: Any) -> bool:
        """The first deduplicated publish to a stream since the start needs its publisher
        sequences, rebuilt by a scan of the stream: in a worker thread (``Node.
        load_sequences``). Meanwhile this channel holds: the publish and every later frame
        of the channel wait, in order (``backlog``), then the publish is handled again."""
        loading = next(
            (q for q in queues if isinstance(q, StreamQueue) and q.loaded_sequences is None),
            None,
        )
        if loading is None or self._committing:
            return False  # (a tx.commit's publishes are stored in order, at once: on the loop)
        pub, props = self._pub, self._props
        self.backlog = []

        def again() -> None:
            self._pub, self._props = pub, props
            self._complete(body, values)

        def loaded(error: BaseException | None) -> None:
            backlog, self.backlog = self.backlog or [], None
            self.connection.resume_held(self, again if error is None else error, backlog)

        when_synced(self._node.load_sequences(loading), loaded)
        return True

    def _not_duplicate(self, queues: list[Any], props: bytes) -> list[Any]:
        """The routed queues minus the streams that already hold this publisher id."""
        try:
            tag = dedup.publisher_of(props)
        except errors.PreconditionFailed as error:
            error.class_id, error.method_id = BASIC_PUBLISH  # nothing of it is stored
            raise
        if tag is None:
            return queues
        return [q for q in queues if not isinstance(q, StreamQueue) or q.admit(*tag)]

    def settle_confirms(self, seqs: list[int], ok: bool) -> None:
        """From the appender: messages ``seqs`` were stored (or not)."""
        confirm = self.confirm
        if confirm is None or self.closing:
            return
        confirm.settle_many(seqs, ok)
        self._schedule_confirms()

    def _schedule_confirms(self) -> None:
        if not self._confirm_flush:
            self._confirm_flush = True
            self.connection.node.loop.call_soon(self._flush_confirms)

    def _flush_confirms(self) -> None:
        self._confirm_flush = False
        if self.confirm is None or self.closing:
            return
        confirm = self.confirm
        before = confirm.released
        out = confirm.drain()
        if out:
            self.connection.counters.confirmed += confirm.released - before
            self.connection.write_frames(out)

    # ----------------------------------------------------------------------- consuming

    def _settle_deliveries(
        self, tag: int, multiple: bool, finished: bool = True, method_id: int = METHOD_ACK
    ) -> None:
        """Ack, nack, reject: each settled delivery gives its consumer one credit back.

        ``finished`` is False for nack / reject with requeue=true and for recover: the client
        wants the message again, so a named consumer's committed offset stays before it
        and a consumer resuming by name gets it again (streams redeliver nothing within
        one consume). A tag that is not outstanding is 406 (also with multiple=true, as in
        RabbitMQ; tag 0 with multiple means "everything"), naming the method that sent it.
        """
        if self.tx is not None:  # held until tx.commit
            self.tx.settles.append((tag, multiple, finished, method_id))
            return
        if self.remote is not None and self.remote.direct is not None:  # the leader's tags
            return self.remote.direct.settle_direct(tag, multiple, finished, method_id)
        unacked = self.unacked
        if not multiple:
            consumer = unacked.pop(tag, None)
            if consumer is None:
                raise errors.PreconditionFailed(
                    f"unknown delivery tag {tag}", CLASS_BASIC, method_id
                )
            if self.classic is not None:
                self.classic.settle(tag, False, finished, method_id)
            if self.remote is not None:
                self.remote.settle(tag, False, finished, method_id)
            if method_id == METHOD_ACK:
                consumer.count_acks(1)
            consumer.give_credit(1)
            if consumer.tracker is not None:
                consumer.tracker.settled(tag, finished)
            return
        # tags are inserted in increasing order: everything up to ``tag`` is a prefix,
        # found and removed with C-level list/dict operations rather than a loop per tag
        if tag and tag not in unacked:
            raise errors.PreconditionFailed(f"unknown delivery tag {tag}", CLASS_BASIC, method_id)
        if self.classic is not None:
            self.classic.settle(tag, True, finished, method_id)
        if self.remote is not None:
            self.remote.settle(tag, True, finished, method_id)
        items = list(unacked.items())
        count = len(items) if not tag else bisect_right(items, tag, key=_tag_of)
        done = items[:count]
        unacked.clear()
        unacked.update(items[count:])
        credit = Counter(map(_consumer_of, done))
        if any(consumer.tracker is not None for consumer in credit):
            for key, consumer in done:
                if consumer.tracker is not None:
                    consumer.tracker.settled(key, finished)
        acked = method_id == METHOD_ACK
        for consumer, n in credit.items():
            if acked:
                consumer.count_acks(n)  # once per consumer and frame, not per message
            consumer.give_credit(n)

    def wake_consumers(self) -> None:
        for consumer in self.consumers.values():
            consumer.wake()

    # ports.DeliveryTarget: once per delivery turn of a consumer, never per message

    @property
    def connection_id(self) -> int:
        return self.connection.id

    @property
    def frame_max(self) -> int:
        return self.connection.frame_max

    def can_deliver(self) -> bool:
        connection = self.connection
        if connection.writing_paused or not self.flow_active:
            return False
        transport = connection.transport
        return transport is not None and not transport.is_closing()

    def take_delivery_tags(self, consumer: ChannelConsumer, n: int) -> int:
        first = self.next_delivery_tag
        self.next_delivery_tag = first + n
        if n == 1:
            self.unacked[first] = consumer
        else:
            self.unacked.update(dict.fromkeys(range(first, first + n), consumer))
        return first

    def write_deliveries(self, data: bytes) -> None:
        self.connection.write_joined(data)

    def cancel_consumer_by_server(self, consumer: ChannelConsumer) -> None:
        """The queue went away, its reader failed or a newer consumer took its name: stop
        and tell the client if it asked (its unacked deliveries can still be acked)."""
        consumer.stop()
        if self.consumers.get(consumer.tag) is consumer:
            del self.consumers[consumer.tag]
            consumer.queue.consumers.discard(consumer)
            if self.connection.cancel_notify and not self.closing:
                cancel = spec.Basic.Cancel(consumer_tag=consumer.tag, nowait=True)
                if self.held_cancels is not None:
                    self.held_cancels.append(cancel)
                else:
                    self.connection.send_method(self.id, cancel)

    # ----------------------------------------------------------------------- closing

    def close_by_server(self, error: errors.AMQPError) -> None:
        """A channel error: send channel.close and drop frames until close-ok."""
        log.info("channel %s/%s: closing: %s", self.connection.id, self.id, error.reply_text)
        self.teardown()  # the table: closing, waiting for close-ok
        self.connection.send_method(
            self.id,
            spec.Channel.Close(
                reply_code=error.reply_code,
                reply_text=error.reply_text,
                class_id=error.class_id,
                method_id=error.method_id,
            ),
        )

    def teardown(self) -> None:
        """Stop consumers and free state; unconfirmed publishes are never confirmed (the
        channel is gone: appends still running settle into a closing channel, ignored)."""
        for consumer in list(self.consumers.values()):
            consumer.stop()
            consumer.queue.consumers.discard(consumer)
        self.consumers.clear()
        if self.reply_consumer is not None:
            direct_reply.cancel(self, self.reply_consumer.tag)
        if self.classic is not None:
            self.classic.release()  # unacked classic deliveries go back to their queues
        if self.remote is not None:
            self.remote.release()  # the link channels close: their leaders requeue
        if self.raw_route is not None:
            self.raw_route.end()
        self.unacked.clear()
        self.connection.pending_content -= self._buffered
        self._buffered = 0
        self._parts = []
        self.state.send_close()  # nothing is dispatched from now on (no-op once closed)

    # ----------------------------------------------------------------------- cold methods

    # the table accepted the method in the current phase before any of these runs

    def _channel_close(self, method: Any) -> None:
        """The client closes (or both sides closed at once): answer and forget the channel."""
        self.teardown()
        self.connection.send_method(self.id, spec.Channel.CloseOk())
        self.connection.channel_closed(self)

    def _channel_close_ok(self, method: Any) -> None:
        """The answer to our channel.close."""
        self.connection.channel_closed(self)

    def _channel_flow(self, method: Any) -> None:
        """channel.flow: RabbitMQ answers active=false with 540 NOT_IMPLEMENTED (clients
        stop deliveries with prefetch instead), and so do we; active=true is flow-ok."""
        if not method.active:
            raise errors.NotImplemented_("active=false")  # RabbitMQ's reply
        self.flow_active = bool(method.active)
        self.connection.send_method(self.id, spec.Channel.FlowOk(active=self.flow_active))
        if self.flow_active:
            self.wake_consumers()

    def _allow_write(self, exchange: str) -> None:
        """basic.publish: write on the exchange, remembered for the channel's life (as
        RabbitMQ's per-channel permission cache)."""
        try:
            self.allow("write", "exchange", exchange)
        except errors.AMQPError as error:
            error.class_id, error.method_id = BASIC_PUBLISH
            raise
        self._may_write.add(exchange)

    def allow(self, kind: str, resource: str, name: str) -> None:
        conn = self.connection
        access.check(conn.user, conn.vhost_name, kind, resource, name)

    def _exchange_declare(self, m: Any) -> None:
        if not m.passive:
            self.allow("configure", "exchange", m.exchange)
        self.vhost.declare_exchange(
            m.exchange,
            m.exchange_type,
            passive=m.passive,
            durable=m.durable,
            auto_delete=m.auto_delete,
            internal=m.internal,
            arguments=dict(m.arguments or {}),
        )
        if not m.nowait:
            self.connection.send_method(self.id, spec.Exchange.DeclareOk())

    def _exchange_delete(self, m: Any) -> None:
        self.allow("configure", "exchange", m.exchange)
        self.vhost.delete_exchange(m.exchange, if_unused=m.if_unused)
        if not m.nowait:
            self.connection.send_method(self.id, spec.Exchange.DeleteOk())

    def _exchange_bind(self, m: Any) -> None:
        self.allow("write", "exchange", m.destination)
        self.allow("read", "exchange", m.source)
        self.vhost.bind("exchange", m.destination, m.source, m.routing_key, dict(m.arguments or {}))
        if not m.nowait:
            self.connection.send_method(self.id, spec.Exchange.BindOk())

    def _exchange_unbind(self, m: Any) -> None:
        self.allow("write", "exchange", m.destination)
        self.allow("read", "exchange", m.source)
        self.vhost.unbind(
            "exchange", m.destination, m.source, m.routing_key, dict(m.arguments or {})
        )
        if not m.nowait:
            self.connection.send_method(self.id, spec.Exchange.UnbindOk())

    def _basic_get(self, m: Any) -> None:
        if self.remote is not None:  # a remote consumer's tags stop being the leader's
            self.remote.leave_direct()
        queue_methods.on_classic_queue(self, m, remote.get, classic_consumer.get, get_not_supported)

    def _basic_qos(self, m: Any) -> None:
        if m.global_:
            self.global_prefetch = int(m.prefetch_count)
        else:
            self.prefetch = int(m.prefetch_count)
        self.connection.send_method(self.id, spec.Basic.QosOk())

    def _basic_recover(self, m: Any) -> None:
        if not m.requeue and self.classic is not None:
            raise errors.NotImplemented_("requeue=false")  # RabbitMQ's reply
        self._recover_all()
        self.connection.send_method(self.id, spec.Basic.RecoverOk())

    def _basic_recover_async(self, m: Any) -> None:
        self._recover_all()

    def _recover_all(self) -> None:
        """basic.recover on a stream: credit back for every unacked delivery, no redelivery."""
        if self.remote is not None and self.remote.direct is not None:
            self._settle_deliveries(0, True, finished=False)  # the leader's "everything"
        elif self.unacked:
            tag = next(reversed(self.unacked))
            self._settle_deliveries(tag, True, finished=False)

    def _confirm_select(self, m: Any) -> None:
        transactions.refuse_confirms(self.tx)
        if self.confirm is None:
            self.confirm = ConfirmTracker(self.id)
        if not m.nowait:
            self.connection.send_method(self.id, spec.Confirm.SelectOk())

    def _tx_select(self, m: Any) -> None:
        self.tx = transactions.select(self.tx, self.confirm is not None)
        self.connection.send_method(self.id, spec.Tx.SelectOk())

    def _tx_commit(self, m: Any) -> None:
        """Store the held messages, then settle the held acks, in the order they came."""
        tx = transactions.require(self.tx, 20)
        publishes, settles = tx.publishes, tx.settles
        tx.clear()
        self.tx = None
        self._committing = True
        try:
            for pub, props, body in publishes:
                self._pub, self._props = pub, props
                self._complete(body)
            for tag, multiple, finished, method_id in settles:
                self._settle_deliveries(tag, multiple, finished, method_id)
        finally:
            self.tx = tx
            self._committing = False
        self.connection.send_method(self.id, spec.Tx.CommitOk())

    def _tx_rollback(self, m: Any) -> None:
        tx = transactions.require(self.tx, 30)
        self.connection.counters.received -= len(tx.publishes)  # never received
        tx.clear()
        self.connection.send_method(self.id, spec.Tx.RollbackOk())

    def _answer(self, m: Any) -> None:
        """channel.flow-ok, basic.cancel-ok: answers to what we sent, nothing to do."""


def _pending_content_error(limit: int) -> errors.ResourceError:
    return errors.ResourceError(
        f"unfinished message bodies on this connection exceed max_pending_content_bytes "
        f"({limit} bytes)"
    )


def headers_of(props: bytes) -> dict[str, Any]:
    headers = properties.decode_properties(props).headers
    return dict(headers) if headers else {}


# the handler of every method the channel table dispatches, except the hot publish and
# settles in ``on_frame`` (tests/unit/test_gateway/test_session/test_state_tables.py checks
# none is missing)
_COLD: dict[type[Any], Any] = {
    spec.Channel.Close: Channel._channel_close,
    spec.Channel.CloseOk: Channel._channel_close_ok,
    spec.Channel.Flow: Channel._channel_flow,
    spec.Channel.FlowOk: Channel._answer,
    spec.Basic.CancelOk: Channel._answer,
    spec.Exchange.Declare: Channel._exchange_declare,
    spec.Exchange.Delete: Channel._exchange_delete,
    spec.Exchange.Bind: Channel._exchange_bind,
    spec.Exchange.Unbind: Channel._exchange_unbind,
    spec.Queue.Declare: queue_methods.declare,
    spec.Queue.Delete: queue_methods.delete,
    spec.Queue.Bind: queue_methods.bind,
    spec.Queue.Unbind: queue_methods.unbind,
    spec.Queue.Purge: queue_methods.purge,
    spec.Basic.Get: Channel._basic_get,
    spec.Basic.Qos: Channel._basic_qos,
    spec.Basic.Consume: consume_methods.consume,
    spec.Basic.Cancel: consume_methods.cancel,
    spec.Basic.Recover: Channel._basic_recover,
    spec.Basic.RecoverAsync: Channel._basic_recover_async,
    spec.Confirm.Select: Channel._confirm_select,
    spec.Tx.Select: Channel._tx_select,
    spec.Tx.Commit: Channel._tx_commit,
    spec.Tx.Rollback: Channel._tx_rollback,
}
